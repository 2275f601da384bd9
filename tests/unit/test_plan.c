/* test_plan.c — unit tests of the plans (shim/plan/plan.h): which algorithm
 * a call runs and the exact steps each issues, over node maps built the way
 * the settings check builds them (topo.h), contiguous or not.
 *
 * Must not: touch NCCL, MPI or a GPU. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "plan.h"
#include "topo.h"

/* Settings a, b (and c); launches cost `lb` link bytes. */
static nsc_config cfg_lb(const char *a, const char *b, const char *c, const char *lb) {
  nsc_config cfg;
  char err[256], l[64];
  snprintf(l, sizeof l, "NCCLSHIM_LAUNCH_BYTES=%s", lb);
  char *env[5] = {l, (char *)a, (char *)b, (char *)c, NULL};
  if (!b) env[2] = NULL;
  assert_int_equal(nsc_config_parse(env, &cfg, err, sizeof err), 0);
  return cfg;
}

/* The plans' shapes: with free launches (NCCLSHIM_LAUNCH_BYTES=0) the cost
 * rule leaves auto's preferences as they were before launches counted. */
static nsc_config cfg_of(const char *a, const char *b) { return cfg_lb(a, b, NULL, "0"); }

/* Rank `rank`'s map of nodes named by ids[i] (1..): as the check builds it. */
static nsc_topo topo_of(const int *ids, int n, int rank) {
  int64_t keys[64];
  for (int i = 0; i < n; i++) keys[i] = ids[i];
  nsc_topo t;
  memset(&t, 0, sizeof t);
  int *node = calloc((size_t)n, sizeof *node);
  assert_non_null(node);
  assert_int_equal(nsc_topo_build(&t, keys, n, rank, node), 0);
  return t;
}

static nsc_plan plan_in(const nsc_config *cfg, const nsc_topo *t, int rs, size_t count, int hier, int host, int in) {
  nsc_plan p;
  nsc_plan_call call = {rs, count, 0, 1, t, hier, nsc_cost_rule_of(nsc_cost_launch(cfg, 0, 0), host), in};
  nsc_plan_make(&p, cfg, &call);
  return p;
}

static nsc_plan plan_host(const nsc_config *cfg, const nsc_topo *t, int rs, size_t count, int hier, int host) {
  return plan_in(cfg, t, rs, count, hier, host, NSC_IN_F32);
}

static nsc_plan plan_of(const nsc_config *cfg, const nsc_topo *t, int rs, size_t count, int hier) {
  return plan_host(cfg, t, rs, count, hier, 0);
}

static size_t no_round(size_t b) { return b; }

/* Not compressed: the call itself. Below two-phase's thresholds: fp16 the
 * ring (cast, wire all-reduce, cast back), int8 and reduce-scatters plain. */
static void test_plan_plain_and_ring(void **state) {
  (void)state;
  static const int ids[4] = {1, 1, 1, 1};
  nsc_topo t = topo_of(ids, 4, 2);
  nsc_config fp16 = cfg_of("NCCLSHIM_COMPRESS=fp16", NULL), int8 = cfg_of("NCCLSHIM_COMPRESS=int8", NULL);
  nsc_plan p;
  nsc_plan_call off = {0, 1 << 20, 1, 0, &t, 0, nsc_cost_rule_of(0, 0), NSC_IN_F32};
  nsc_plan_make(&p, &fp16, &off);
  assert_int_equal(p.alg, NSC_ALG_PLAIN);
  assert_int_equal(p.nsteps, 1);
  assert_int_equal(p.step[0].kind, NSC_STEP_ALLREDUCE);
  assert_int_equal(p.step[0].avg, 1);
  p = plan_of(&fp16, &t, 0, 1000, 0); /* 250 elements per rank < 16384 */
  assert_int_equal(p.alg, NSC_ALG_RING);
  assert_int_equal(p.nsteps, 3);
  assert_int_equal(p.step[0].kind, NSC_STEP_CAST_IN);
  assert_int_equal(p.step[1].kind, NSC_STEP_ALLREDUCE);
  assert_true(p.step[1].flags & NSC_STEP_WIRE);
  assert_int_equal(p.step[2].kind, NSC_STEP_CAST_OUT);
  assert_int_equal(nsc_plan_staging(&p, no_round), 2000);
  p = plan_of(&int8, &t, 0, 1, 0); /* two phases do not fit one element */
  assert_int_equal(p.alg, NSC_ALG_PLAIN);
  p = plan_of(&int8, &t, 0, 1 << 20, 0);
  assert_int_equal(p.alg, NSC_ALG_TWOPHASE);
  assert_int_equal(p.nsteps, 1);
  assert_int_equal(p.step[0].on, NSC_ON_ALL);
  nsc_tp_plan tp;
  nsc_plan_tp(&p, &p.step[0], &int8, &t, &tp);
  assert_int_equal(tp.n, 4);
  assert_int_equal(tp.rank, 2);
  assert_int_equal(nsc_plan_staging(&p, no_round), nsc_tp_staging_bytes(&tp, 0));
  nsc_topo_free(&t);
}

/* hier's all-reduce on 2 nodes x 4 ranks: reduce-scatter of count/4 inside
 * the node into this rank's shard, two-phase of it between nodes, all-gather,
 * and the count % 4 tail in one fp32 all-reduce of everyone; the same steps
 * on every rank but for the shard's offset. */
static void test_plan_hier_allreduce(void **state) {
  (void)state;
  static const int ids[8] = {1, 1, 1, 1, 2, 2, 2, 2};
  nsc_config cfg = cfg_of("NCCLSHIM_COMPRESS=fp16", "NCCLSHIM_ALGO=hier");
  for (int rank = 0; rank < 8; rank++) {
    nsc_topo t = topo_of(ids, 8, rank);
    nsc_plan p = plan_of(&cfg, &t, 0, 1003, 1);
    assert_int_equal(p.alg, NSC_ALG_HIER);
    assert_int_equal(p.nsteps, 4);
    size_t mine = (size_t)(rank % 4) * 250;
    const nsc_step *s = p.step;
    assert_int_equal(s[0].kind, NSC_STEP_REDUCESCATTER);
    assert_int_equal(s[0].on, NSC_ON_NODE);
    assert_int_equal(s[0].count, 250);
    assert_int_equal(s[0].dst_off, mine);
    assert_int_equal(s[1].kind, NSC_STEP_TWOPHASE);
    assert_int_equal(s[1].on, NSC_ON_CROSS);
    assert_int_equal(s[1].src, NSC_BUF_RECV);
    assert_int_equal(s[1].src_off, mine);
    assert_int_equal(s[2].kind, NSC_STEP_ALLGATHER);
    assert_int_equal(s[2].dst_off, 0);
    assert_int_equal(s[3].kind, NSC_STEP_ALLREDUCE);
    assert_int_equal(s[3].on, NSC_ON_ALL);
    assert_int_equal(s[3].count, 3);
    assert_int_equal(s[3].src_off, 1000);
    nsc_tp_plan tp;
    nsc_plan_tp(&p, &s[1], &cfg, &t, &tp);
    assert_int_equal(tp.n, 2); /* one rank per node */
    assert_int_equal(tp.rank, rank / 4);
    assert_int_equal(tp.count, 250);
    int size, idx;
    nsc_plan_group(&t, NSC_ON_NODE, &size, &idx);
    assert_int_equal(size, 4);
    assert_int_equal(idx, rank % 4);
    /* without the sub-communicators on every rank: auto's choice. Flat two
     * phases would be preferred from 16384 elements per rank, but on two
     * nodes each of a node's 4 ranks sends 4 off-node messages per phase
     * through the node's one NIC (plan.c: nic_tp): 4 MiB of fp16 costs
     * 2 x 16 x 512 KiB there against the ring's 2 x 7/8 x 2 MiB, so the ring
     * (not within 10 % of the cheapest, the two phases are passed over) */
    p = plan_of(&cfg, &t, 0, 1003, 0);
    assert_int_equal(p.alg, NSC_ALG_RING);
    p = plan_of(&cfg, &t, 0, 1 << 20, 0);
    assert_int_equal(p.alg, NSC_ALG_RING);
    assert_true(p.cost < p.plain_cost);
    nsc_topo_free(&t);
  }
}

/* auto on a communicator that adopted hier: hierarchical from
 * NCCLSHIM_HIER_MIN_BYTES of fp32 per call (a reduce-scatter's whole buffer),
 * flat two-phase (or the ring) below; ALGO=hier ignores the threshold. */
static void test_plan_hier_min_bytes(void **state) {
  (void)state;
  static const int ids[4] = {1, 1, 2, 2};
  nsc_topo t = topo_of(ids, 4, 1);
  nsc_config a = cfg_of("NCCLSHIM_COMPRESS=int8", "NCCLSHIM_HIER_MIN_BYTES=1M");
  nsc_config h = cfg_of("NCCLSHIM_COMPRESS=int8", "NCCLSHIM_ALGO=hier");
  assert_int_equal(plan_of(&a, &t, 0, 262144, 1).alg, NSC_ALG_HIER);      /* 1 MiB */
  assert_int_equal(plan_of(&a, &t, 0, 262143, 1).alg, NSC_ALG_TWOPHASE);  /* 4 bytes less */
  assert_int_equal(plan_of(&a, &t, 1, 65536, 1).alg, NSC_ALG_HIER);       /* 4 x 64K per rank */
  assert_int_equal(plan_of(&a, &t, 1, 65535, 1).alg, NSC_ALG_TWOPHASE);
  assert_int_equal(plan_of(&h, &t, 0, 1000, 1).alg, NSC_ALG_HIER);         /* hier: any size two phases fit */
  nsc_config d = cfg_of("NCCLSHIM_COMPRESS=fp16", NULL);                   /* the default: 4M */
  assert_int_equal(d.hier_min_bytes, 4 << 20);
  assert_int_equal(plan_of(&d, &t, 0, 1 << 20, 1).alg, NSC_ALG_HIER);
  /* below it fp16's flat two phases cross the node's one NIC with 2 x 2 x 2
   * messages of 512 KiB against the ring's 2 x 3/4 x 2 MiB: the ring */
  assert_int_equal(plan_of(&d, &t, 0, (1 << 20) - 1, 1).alg, NSC_ALG_RING);
  nsc_topo_free(&t);
}

/* hier's reduce-scatter: on consecutive nodes one reduce-scatter per node,
 * this rank's node first, node j's blocks from its first rank's into TMP
 * slot j; on nodes of ranks 0,2 and 1,3 one reduce per block, root l, block
 * of node j's l-th rank. Then the slots' two-phase reduce-scatter. */
static void test_plan_hier_reducescatter(void **state) {
  (void)state;
  nsc_config cfg = cfg_of("NCCLSHIM_COMPRESS=int8", "NCCLSHIM_ALGO=hier");
  static const int contiguous[6] = {1, 1, 2, 2, 3, 3}, strided[4] = {1, 2, 1, 2};
  nsc_topo t = topo_of(contiguous, 6, 3); /* node 1, local rank 1 */
  nsc_plan p = plan_of(&cfg, &t, 1, 100, 1);
  assert_int_equal(p.alg, NSC_ALG_HIER);
  assert_int_equal(p.tmp_elems, 300);
  assert_int_equal(p.nsteps, 2);
  assert_int_equal(p.step[0].kind, NSC_STEP_REDUCESCATTER);
  assert_true(p.step[0].flags & NSC_STEP_EACH_NODE);
  static const int order[3] = {1, 0, 2};
  for (int q = 0; q < 3; q++) {
    int j = nsc_plan_node_order(&t, q);
    assert_int_equal(j, order[q]);
    nsc_step at = nsc_plan_step_at(&p, &t, &p.step[0], j, 0);
    assert_int_equal(at.src_off, (size_t)(2 * j) * 100);
    assert_int_equal(at.dst_off, (size_t)j * 100);
    assert_int_equal(at.dst, NSC_BUF_TMP);
  }
  assert_int_equal(p.step[1].kind, NSC_STEP_TWOPHASE);
  assert_int_equal(p.step[1].rs, 1);
  assert_int_equal(p.step[1].src, NSC_BUF_TMP);
  nsc_tp_plan tp;
  nsc_plan_tp(&p, &p.step[1], &cfg, &t, &tp);
  assert_int_equal(tp.n, 3);
  assert_int_equal(tp.rank, 1);
  assert_int_equal(nsc_plan_staging(&p, no_round), 1200 + nsc_tp_staging_bytes(&tp, 1));
  nsc_topo_free(&t);

  t = topo_of(strided, 4, 3); /* node 1 (ranks 1, 3), local rank 1 */
  assert_int_equal(t.contiguous, 0);
  p = plan_of(&cfg, &t, 1, 100, 1);
  assert_int_equal(p.alg, NSC_ALG_HIER);
  assert_int_equal(p.step[0].kind, NSC_STEP_REDUCE);
  assert_int_equal(p.step[0].flags, NSC_STEP_EACH_NODE | NSC_STEP_EACH_LOCAL);
  static const int block[2][2] = {{0, 2}, {1, 3}}; /* node j's l-th rank */
  for (int j = 0; j < 2; j++)
    for (int l = 0; l < 2; l++) {
      nsc_step at = nsc_plan_step_at(&p, &t, &p.step[0], j, l);
      assert_int_equal(at.src_off, (size_t)block[j][l] * 100);
      assert_int_equal(at.dst_off, (size_t)j * 100);
      assert_int_equal(at.root, l);
      assert_int_equal(nsc_plan_node_rank(&t, j, l), block[j][l]);
    }
  assert_int_equal(nsc_plan_node_rank(&t, 1, 2), -1);
  assert_int_equal(nsc_plan_node_order(&t, 0), 1);
  nsc_topo_free(&t);
}

/* Launches and the cost rule (issue 33), 64 MiB of fp32 on 4 ranks of one
 * node: the plans of 16ee431 issued 32 groups for two-phase int8 (1 MiB
 * pieces); now, on device memory at the default 4 MiB launch cost, one piece
 * per phase (2 launches), the second phase an all-gather; under the host
 * rule with free launches the old 16 pieces (32 launches). The ring is one
 * launch; the plain call one. auto: two-phase (fp32 sums) from 4 ranks where
 * it gains 10 %, else the ring, else the call untouched: a 64 KiB call at
 * 4 MiB per launch gains nothing; at 256 KiB per launch the ring gains.
 * The costs are exact link bytes. */
static void test_plan_launches(void **state) {
  (void)state;
  static const int ids[4] = {1, 1, 1, 1};
  nsc_topo t = topo_of(ids, 4, 0);
  size_t n64 = 1u << 24; /* 64 MiB */
  nsc_config i8 = cfg_lb("NCCLSHIM_COMPRESS=int8", "NCCLSHIM_ALGO=twophase", NULL, "4M");
  nsc_plan p = plan_of(&i8, &t, 0, n64, 0);
  assert_int_equal(p.alg, NSC_ALG_TWOPHASE);
  assert_int_equal(p.launches, 2);
  nsc_tp_plan tp;
  nsc_plan_tp(&p, &p.step[0], &i8, &t, &tp);
  assert_int_equal(tp.npieces, 1);
  assert_true(tp.gather);
  /* plain: 4M + 2 * 3/4 * 64M; two-phase: 2 launches + 3 chunks out and 3 slots gathered in */
  assert_int_equal(p.plain_cost, (4u << 20) + 3 * (n64 * 4 / 4) * 2);
  uint64_t chunk = nsc_tp_chunk_bytes(&tp, 1);
  assert_int_equal(p.cost, 2 * (4u << 20) + 3 * chunk + 3 * tp.slot);
  nsc_config i8h = cfg_lb("NCCLSHIM_COMPRESS=int8", "NCCLSHIM_ALGO=twophase", NULL, "0");
  p = plan_host(&i8h, &t, 0, n64, 0, 1);
  assert_int_equal(p.launches, 32);
  p = plan_host(&i8h, &t, 0, n64, 0, 0);
  assert_int_equal(p.launches, 2);

  nsc_config a = cfg_lb("NCCLSHIM_COMPRESS=fp16", NULL, NULL, "4M");
  p = plan_of(&a, &t, 0, n64, 0);
  assert_int_equal(p.alg, NSC_ALG_TWOPHASE);
  assert_int_equal(p.launches, 2);
  p = plan_of(&a, &t, 0, 16384, 0); /* 64 KiB: 4M + 96K against the ring's 4M + 48K */
  assert_int_equal(p.alg, NSC_ALG_PLAIN);
  assert_int_equal(p.launches, 1);
  nsc_config a256 = cfg_lb("NCCLSHIM_COMPRESS=fp16", NULL, NULL, "256K");
  p = plan_of(&a256, &t, 0, 65536, 0); /* 256 KiB per rank: two-phase below 4 ranks x 64 KiB? no: exactly 64 KiB */
  assert_int_equal(p.alg, NSC_ALG_RING); /* two-phase: 2 launches = 512K + 192K > 0.9 x (256K + 384K) */
  assert_int_equal(p.launches, 1);
  p = plan_of(&a256, &t, 0, 8192, 0); /* 32 KiB: 256K + 24K against 256K + 48K: less than 10 % */
  assert_int_equal(p.alg, NSC_ALG_PLAIN);
  /* an explicit algorithm is not second-guessed */
  nsc_config r = cfg_lb("NCCLSHIM_COMPRESS=fp16", "NCCLSHIM_ALGO=ring", NULL, "4M");
  p = plan_of(&r, &t, 0, 8192, 0);
  assert_int_equal(p.alg, NSC_ALG_RING);
  /* the ring's chunks: device memory one; host rule with free launches the
   * old 32 MiB chunks; host at 1 MiB per launch: 4M/k + 1M k is least at 2 */
  assert_int_equal(nsc_plan_ring_chunk(&r, &(nsc_cost_rule){4u << 20, 0}, n64 * 2), 0);
  nsc_config r0 = cfg_lb("NCCLSHIM_COMPRESS=fp16", "NCCLSHIM_ALGO=ring", NULL, "0");
  assert_int_equal(nsc_plan_ring_chunk(&r0, &(nsc_cost_rule){0, 1}, n64 * 2), 1u << 23);
  nsc_config r1 = cfg_lb("NCCLSHIM_COMPRESS=fp16", "NCCLSHIM_ALGO=ring", NULL, "1M");
  assert_int_equal(nsc_plan_ring_chunk(&r1, &(nsc_cost_rule){1u << 20, 1}, n64), n64 / 2);
  p = plan_host(&r1, &t, 0, n64, 0, 1);
  assert_int_equal(p.launches, 2);
  nsc_config rc = cfg_lb("NCCLSHIM_COMPRESS=fp16", "NCCLSHIM_ALGO=ring", "NCCLSHIM_CHUNK_BYTES=1M", "4M");
  assert_int_equal(nsc_plan_ring_chunk(&rc, &(nsc_cost_rule){4u << 20, 0}, n64), 1u << 18); /* an explicit chunk is kept */
  nsc_topo_free(&t);

  /* hier's reduce-scatter on nodes of scattered ranks: N x L reduces, one group */
  static const int strided[4] = {1, 2, 1, 2};
  t = topo_of(strided, 4, 1);
  nsc_config h = cfg_lb("NCCLSHIM_COMPRESS=int8", "NCCLSHIM_ALGO=hier", NULL, "4M");
  p = plan_of(&h, &t, 1, 1u << 20, 1);
  assert_int_equal(p.alg, NSC_ALG_HIER);
  assert_int_equal(p.launches, 1 + 1); /* one group of 4 reduces, one piece of the two-phase reduce-scatter */
  nsc_topo_free(&t);
  static const int two[8] = {1, 1, 1, 1, 2, 2, 2, 2};
  t = topo_of(two, 8, 5);
  p = plan_of(&h, &t, 0, n64 + 3, 1); /* reduce-scatter, two-phase (2), all-gather, the 3-element tail */
  assert_int_equal(p.launches, 5);
  nsc_topo_free(&t);
}

/* A 16-bit input's plan: the input found by its datatype from the format
 * rows, its own type as the wire for COMPRESS=fp16/bf16 (bf16 on a bf16
 * input, fp16 on an fp16 one, whichever of the two is set), the block-scaled
 * formats as they are; its staging holds the fp32 copy; plain costs 2 bytes
 * an element, which its own wire matches byte for byte (so only the launch
 * it adds separates them). */
static void test_plan_input16(void **state) {
  (void)state;
  assert_int_equal(nsc_policy_input(ncclFloat32), NSC_IN_F32);
  assert_int_equal(nsc_policy_input(ncclBfloat16), 1 + NSC_FMT_BF16);
  assert_int_equal(nsc_policy_input(ncclFloat16), 1 + NSC_FMT_FP16);
  assert_int_equal(nsc_policy_input(ncclFloat64), -1);
  assert_int_equal(nsc_policy_input(ncclInt8), -1);
  assert_int_equal(nsc_policy_input(ncclFloat8e4m3), -1);
  static const int ids[4] = {1, 1, 1, 1};
  nsc_topo t = topo_of(ids, 4, 3);
  static const struct {
    const char *compress;
    int in, rs;
    nsc_fmt_t wire;
    int wdt, idt;
  } rows[] = {
      {"NCCLSHIM_COMPRESS=fp16", 1 + NSC_FMT_BF16, 0, NSC_FMT_BF16, ncclBfloat16, ncclBfloat16},
      {"NCCLSHIM_COMPRESS=bf16", 1 + NSC_FMT_BF16, 1, NSC_FMT_BF16, ncclBfloat16, ncclBfloat16},
      {"NCCLSHIM_COMPRESS=bf16", 1 + NSC_FMT_FP16, 0, NSC_FMT_FP16, ncclFloat16, ncclFloat16},
      {"NCCLSHIM_COMPRESS=int8", 1 + NSC_FMT_BF16, 0, NSC_FMT_INT8, ncclInt8, ncclBfloat16},
      {"NCCLSHIM_COMPRESS=int4", 1 + NSC_FMT_FP16, 1, NSC_FMT_INT4, ncclUint8, ncclFloat16},
      {"NCCLSHIM_COMPRESS=fp16s", 1 + NSC_FMT_BF16, 0, NSC_FMT_FP16S, ncclFloat16, ncclBfloat16},
  };
  size_t count = 1 << 20;
  for (size_t i = 0; i < sizeof rows / sizeof *rows; i++) {
    nsc_config cfg = cfg_of(rows[i].compress, "NCCLSHIM_ALGO=twophase");
    nsc_plan p = plan_in(&cfg, &t, rows[i].rs, count, 0, 0, rows[i].in);
    assert_int_equal(p.alg, NSC_ALG_TWOPHASE);
    assert_int_equal(p.in, rows[i].in);
    assert_int_equal(p.idt, rows[i].idt);
    assert_int_equal(p.fmt, rows[i].wire);
    assert_int_equal(p.wdt, rows[i].wdt);
    assert_int_equal(p.tp.in, rows[i].in);
    assert_int_equal(p.tp.fmt, rows[i].wire);
    size_t total = rows[i].rs ? 4 * count : count;
    assert_int_equal(p.tp.count, total);
    assert_int_equal(nsc_tp_staging_bytes(&p.tp, rows[i].rs), nsc_tp_regions_bytes(&p.tp, rows[i].rs) + 4 * total);
    assert_int_equal(nsc_plan_staging(&p, no_round), nsc_tp_staging_bytes(&p.tp, rows[i].rs));
    /* plain: (rs ? 1 : 2) * (n-1)/n of 2 bytes an element, at free launches */
    assert_int_equal(p.plain_cost, (rows[i].rs ? 1 : 2) * 2 * total / 4 * 3);
    if (!nsc_fmt_blocked(rows[i].wire)) assert_int_equal(p.cost, p.plain_cost); /* the same bytes */
    else assert_true(nsc_fmt_code_bits(rows[i].wire) == 16 || nsc_cost_gains(p.cost, p.plain_cost));
  }
  /* its own wire at 4 MB a launch: one launch more than plain (two: a reduce-scatter's one) */
  nsc_config bf = cfg_lb("NCCLSHIM_COMPRESS=bf16", "NCCLSHIM_ALGO=twophase", NULL, "4M");
  nsc_plan p = plan_in(&bf, &t, 0, count, 0, 0, 1 + NSC_FMT_BF16);
  assert_int_equal(p.launches, 2);
  assert_int_equal(p.cost - p.plain_cost, 4u << 20);
  /* fits: the largest encoded chunk in the 2-byte receive buffer */
  nsc_config i8 = cfg_of("NCCLSHIM_COMPRESS=int8", NULL);
  for (size_t c = 1; c < 300; c++) {
    size_t len = c / 4 + (c % 4 != 0);
    int want = (nsc_fmt_bytes(NSC_FMT_INT8, len, (size_t)i8.block_elems) + 15) / 16 * 16 <= 2 * c;
    assert_int_equal(nsc_tp_fits_in(&i8, 4, c, 0, 1 + NSC_FMT_BF16), want);
  }
  nsc_topo_free(&t);
}

/* Names, for logs and the cost model. */

/* The decision (nsc_decide) as a table: settings, the call's kind and size,
 * its group depth, capture and the learner's answer -> the plan's algorithm,
 * whether it settles the staging and whether it waits for the group end
 * (a fused member is packed there, a grouped two-phase call runs after it).
 * One node of 4 ranks; launches free unless a row says otherwise. */
static void test_decide_table(void **state) {
  (void)state;
  static const int ids[4] = {1, 1, 1, 1}, two[4] = {1, 1, 2, 2};
  nsc_topo t = topo_of(ids, 4, 1), t2 = topo_of(two, 4, 1);
  enum { AR = 0, RS = 1 };
  static const struct {
    const char *a, *b, *lb;
    int rs;
    size_t arg; /* the count argument (a reduce-scatter's per rank) */
    int dt, op, in_group, capturing, local, nodes2, hier;
    int alg, settles, deferred;
    int why; /* the plan's reason (policy.h), a forwarded call's too */
  } rows[] = {
      /* not compressible: forwarded, nothing settled */
      {"NCCLSHIM_COMPRESS=off", NULL, "0", AR, 1 << 20, ncclFloat32, ncclSum, 0, 0, 0, 0, 0, NSC_ALG_PLAIN, 0, 0, NSC_WHY_OFF},
      {"NCCLSHIM_COMPRESS=fp16", NULL, "0", AR, 1 << 20, ncclInt32, ncclSum, 0, 0, 0, 0, 0, NSC_ALG_PLAIN, 0, 0, NSC_WHY_DTYPE},
      {"NCCLSHIM_COMPRESS=fp16", NULL, "0", AR, 1 << 20, ncclFloat32, ncclMax, 0, 0, 0, 0, 0, NSC_ALG_PLAIN, 0, 0, NSC_WHY_OP},
      {"NCCLSHIM_COMPRESS=fp16", NULL, "0", AR, 100, ncclFloat32, ncclSum, 0, 0, 0, 0, 0, NSC_ALG_PLAIN, 0, 0, NSC_WHY_MIN_BYTES},
      /* fp16: the ring below two-phase's threshold (64 KiB per rank at 4 ranks), two phases above */
      {"NCCLSHIM_COMPRESS=fp16", NULL, "0", AR, 32768, ncclFloat32, ncclSum, 0, 0, 0, 0, 0, NSC_ALG_RING, 1, 0, NSC_WHY_RING_GAINS},
      {"NCCLSHIM_COMPRESS=fp16", NULL, "0", AR, 1 << 20, ncclFloat32, ncclAvg, 0, 0, 0, 0, 0, NSC_ALG_TWOPHASE, 1, 0, NSC_WHY_TP_GAINS},
      /* in a group: two phases after the group end; below it, fused */
      {"NCCLSHIM_COMPRESS=fp16", NULL, "0", AR, 1 << 20, ncclFloat32, ncclSum, 1, 0, 0, 0, 0, NSC_ALG_TWOPHASE, 1, 1, NSC_WHY_TP_GAINS},
      {"NCCLSHIM_COMPRESS=fp16", NULL, "0", AR, 32768, ncclFloat32, ncclSum, 1, 0, 0, 0, 0, NSC_ALG_FUSE, 1, 1, NSC_WHY_FUSED},
      {"NCCLSHIM_COMPRESS=fp16", NULL, "0", AR, 100, ncclFloat32, ncclSum, 1, 0, 0, 0, 0, NSC_ALG_FUSE, 1, 1, NSC_WHY_FUSED},
      {"NCCLSHIM_COMPRESS=fp16", "NCCLSHIM_FUSE_BYTES=0", "0", AR, 32768, ncclFloat32, ncclSum, 1, 0, 0, 0, 0,
       NSC_ALG_RING, 1, 0, NSC_WHY_RING_GAINS},
      /* int8: two phases or untouched (NCCL cannot reduce block-scaled runs), never fused */
      {"NCCLSHIM_COMPRESS=int8", NULL, "0", AR, 1 << 20, ncclFloat32, ncclSum, 1, 0, 0, 0, 0, NSC_ALG_TWOPHASE, 1, 1, NSC_WHY_TP_GAINS},
      {"NCCLSHIM_COMPRESS=int8", NULL, "0", AR, 100, ncclFloat32, ncclSum, 1, 0, 0, 0, 0, NSC_ALG_PLAIN, 0, 0, NSC_WHY_MIN_BYTES},
      /* capture: forwarded, nothing settled */
      {"NCCLSHIM_COMPRESS=int8", NULL, "0", AR, 1 << 20, ncclFloat32, ncclSum, 0, 1, 0, 0, 0, NSC_ALG_PLAIN, 0, 0, NSC_WHY_CAPTURED},
      /* the learner's answer: answered locally (staging settled as the call's kind says) */
      {"NCCLSHIM_COMPRESS=off", NULL, "0", AR, 1 << 20, ncclFloat32, ncclSum, 0, 0, 1, 0, 0, NSC_ALG_LOCAL, 0, 0, NSC_WHY_LOCAL},
      {"NCCLSHIM_COMPRESS=fp16", NULL, "0", AR, 1 << 20, ncclFloat32, ncclSum, 0, 0, 1, 0, 0, NSC_ALG_LOCAL, 1, 0, NSC_WHY_LOCAL},
      /* reduce-scatters: two phases (the whole buffer against MIN_BYTES), deferred in a group */
      {"NCCLSHIM_COMPRESS=fp16", NULL, "0", RS, 1 << 18, ncclFloat32, ncclSum, 0, 0, 0, 0, 0, NSC_ALG_TWOPHASE, 1, 0, NSC_WHY_TP_GAINS},
      {"NCCLSHIM_COMPRESS=fp16", NULL, "0", RS, 1 << 18, ncclFloat32, ncclSum, 1, 0, 0, 0, 0, NSC_ALG_TWOPHASE, 1, 1, NSC_WHY_TP_GAINS},
      {"NCCLSHIM_COMPRESS=fp16", NULL, "0", RS, 4096, ncclFloat32, ncclSum, 0, 0, 0, 0, 0, NSC_ALG_TWOPHASE, 1, 0, NSC_WHY_TP_GAINS},
      {"NCCLSHIM_COMPRESS=fp16", NULL, "0", RS, 16, ncclFloat32, ncclSum, 0, 0, 0, 0, 0, NSC_ALG_PLAIN, 0, 0, NSC_WHY_MIN_BYTES},
      /* two nodes of two ranks, hier adopted: hierarchical from HIER_MIN_BYTES */
      {"NCCLSHIM_COMPRESS=int8", NULL, "0", AR, 1 << 22, ncclFloat32, ncclSum, 0, 0, 0, 1, 1, NSC_ALG_HIER, 1, 0, NSC_WHY_HIER_NODES},
      {"NCCLSHIM_COMPRESS=int8", NULL, "0", RS, 1 << 20, ncclFloat32, ncclSum, 1, 0, 0, 1, 1, NSC_ALG_HIER, 1, 1, NSC_WHY_HIER_NODES},
      {"NCCLSHIM_COMPRESS=int8", NULL, "0", AR, 1 << 16, ncclFloat32, ncclSum, 0, 0, 0, 1, 1, NSC_ALG_TWOPHASE, 1, 0, NSC_WHY_HIER_FLAT},
      /* launches priced at 4 MB: a 256 KiB call gains nothing, so it goes untouched (and settles nothing);
       * in a group it is still fused (one launch for the group's members) */
      {"NCCLSHIM_COMPRESS=fp16", NULL, "4M", AR, 65536, ncclFloat32, ncclSum, 0, 0, 0, 0, 0, NSC_ALG_PLAIN, 0, 0, NSC_WHY_NO_GAIN},
      {"NCCLSHIM_COMPRESS=fp16", NULL, "4M", AR, 65536, ncclFloat32, ncclSum, 1, 0, 0, 0, 0, NSC_ALG_FUSE, 1, 1, NSC_WHY_FUSED},
      {"NCCLSHIM_COMPRESS=int8", NULL, "4M", AR, 65536, ncclFloat32, ncclSum, 0, 0, 0, 0, 0, NSC_ALG_PLAIN, 0, 0, NSC_WHY_NO_GAIN},
      /* 16-bit inputs: two phases with fp32 sums or untouched, never the ring, hier or fusion. Their own
       * wire (COMPRESS=fp16/bf16) moves plain's bytes, so auto never takes it (no gain even at free
       * launches); ALGO=twophase asks for it; 8- and 4-bit wires gain */
      {"NCCLSHIM_COMPRESS=fp16", NULL, "0", AR, 1 << 20, ncclBfloat16, ncclSum, 0, 0, 0, 0, 0, NSC_ALG_PLAIN, 0, 0, NSC_WHY_NO_GAIN},
      {"NCCLSHIM_COMPRESS=bf16", NULL, "0", AR, 1 << 20, ncclFloat16, ncclAvg, 0, 0, 0, 0, 0, NSC_ALG_PLAIN, 0, 0, NSC_WHY_NO_GAIN},
      {"NCCLSHIM_COMPRESS=bf16", "NCCLSHIM_ALGO=twophase", "4M", AR, 1 << 20, ncclBfloat16, ncclSum, 0, 0, 0, 0, 0,
       NSC_ALG_TWOPHASE, 1, 0, NSC_WHY_ASKED_TP},
      {"NCCLSHIM_COMPRESS=fp16", "NCCLSHIM_ALGO=twophase", "0", RS, 1 << 18, ncclFloat16, ncclAvg, 0, 0, 0, 0, 0,
       NSC_ALG_TWOPHASE, 1, 0, NSC_WHY_ASKED_TP},
      {"NCCLSHIM_COMPRESS=fp16", "NCCLSHIM_ALGO=ring", "0", AR, 1 << 20, ncclBfloat16, ncclSum, 0, 0, 0, 0, 0, NSC_ALG_PLAIN, 0, 0, NSC_WHY_NO_GAIN},
      {"NCCLSHIM_COMPRESS=int8", "NCCLSHIM_ALGO=ring", "0", AR, 1 << 20, ncclBfloat16, ncclSum, 0, 0, 0, 0, 0, NSC_ALG_TWOPHASE, 1, 0, NSC_WHY_TP_GAINS},
      {"NCCLSHIM_COMPRESS=int8", NULL, "0", AR, 1 << 20, ncclBfloat16, ncclSum, 0, 0, 0, 0, 0, NSC_ALG_TWOPHASE, 1, 0, NSC_WHY_TP_GAINS},
      {"NCCLSHIM_COMPRESS=fp8", NULL, "0", RS, 1 << 18, ncclFloat16, ncclAvg, 0, 0, 0, 0, 0, NSC_ALG_TWOPHASE, 1, 0, NSC_WHY_TP_GAINS},
      {"NCCLSHIM_COMPRESS=int4", NULL, "0", RS, 1 << 18, ncclBfloat16, ncclSum, 1, 0, 0, 0, 0, NSC_ALG_TWOPHASE, 1, 1, NSC_WHY_TP_GAINS},
      {"NCCLSHIM_COMPRESS=int8", NULL, "0", AR, 1 << 20, ncclFloat16, ncclSum, 1, 0, 0, 0, 0, NSC_ALG_TWOPHASE, 1, 1, NSC_WHY_TP_GAINS},
      /* MIN_BYTES counts the input's own bytes: 32768 bf16 elements are 64 KiB */
      {"NCCLSHIM_COMPRESS=int8", NULL, "0", AR, 32768, ncclBfloat16, ncclSum, 0, 0, 0, 0, 0, NSC_ALG_TWOPHASE, 1, 0, NSC_WHY_TP_GAINS},
      {"NCCLSHIM_COMPRESS=int8", NULL, "0", AR, 32767, ncclBfloat16, ncclSum, 0, 0, 0, 0, 0, NSC_ALG_PLAIN, 0, 0, NSC_WHY_MIN_BYTES},
      /* never fused: in a group below two-phase's gain, untouched */
      {"NCCLSHIM_COMPRESS=fp16", NULL, "0", AR, 32768, ncclBfloat16, ncclSum, 1, 0, 0, 0, 0, NSC_ALG_PLAIN, 0, 0, NSC_WHY_NO_GAIN},
      {"NCCLSHIM_COMPRESS=fp16", "NCCLSHIM_ALGO=twophase", "0", AR, 32768, ncclBfloat16, ncclSum, 1, 0, 0, 0, 0,
       NSC_ALG_TWOPHASE, 1, 1, NSC_WHY_ASKED_TP},
      /* hier adopted: flat two phases for a 16-bit input */
      {"NCCLSHIM_COMPRESS=int8", NULL, "0", AR, 1 << 22, ncclBfloat16, ncclSum, 0, 0, 0, 1, 1, NSC_ALG_TWOPHASE, 1, 0, NSC_WHY_TP_GAINS},
      {"NCCLSHIM_COMPRESS=int8", "NCCLSHIM_ALGO=hier", "0", RS, 1 << 20, ncclBfloat16, ncclSum, 0, 0, 0, 1, 1,
       NSC_ALG_TWOPHASE, 1, 0, NSC_WHY_ASKED_TP},
      /* captured, accumulated, other datatypes: as before */
      {"NCCLSHIM_COMPRESS=int8", NULL, "0", AR, 1 << 20, ncclBfloat16, ncclSum, 0, 1, 0, 0, 0, NSC_ALG_PLAIN, 0, 0, NSC_WHY_CAPTURED},
      {"NCCLSHIM_COMPRESS=int8", NULL, "0", AR, 1 << 20, ncclBfloat16, ncclSum, 0, 0, 1, 0, 0, NSC_ALG_LOCAL, 1, 0, NSC_WHY_LOCAL},
      {"NCCLSHIM_COMPRESS=int8", NULL, "0", AR, 1 << 20, ncclFloat64, ncclSum, 0, 0, 0, 0, 0, NSC_ALG_PLAIN, 0, 0, NSC_WHY_DTYPE},
      {"NCCLSHIM_COMPRESS=int8", NULL, "0", AR, 1 << 20, ncclFloat8e4m3, ncclSum, 0, 0, 0, 0, 0, NSC_ALG_PLAIN, 0, 0, NSC_WHY_DTYPE},
      {"NCCLSHIM_COMPRESS=int8", NULL, "0", AR, 1 << 20, ncclBfloat16, ncclMax, 0, 0, 0, 0, 0, NSC_ALG_PLAIN, 0, 0, NSC_WHY_OP},
  };
  for (size_t i = 0; i < sizeof rows / sizeof *rows; i++) {
    nsc_config cfg = cfg_lb(rows[i].a, rows[i].b, NULL, rows[i].lb);
    const nsc_topo *tp = rows[i].nodes2 ? &t2 : &t;
    nsc_call k = {.count = rows[i].rs ? rows[i].arg * 4 : rows[i].arg, .dt = (ncclDataType_t)rows[i].dt,
                  .op = (ncclRedOp_t)rows[i].op, .has_buffers = 1, .in_group = rows[i].in_group,
                  .capturing = rows[i].capturing, .rs = rows[i].rs, .arg = rows[i].arg};
    nsc_agreed ag = {.topo = tp, .hier = rows[i].hier};
    nsc_plan p;
    nsc_policy_ask(&cfg, &k);
    nsc_decide(&p, &cfg, &k, &ag, rows[i].local);
    if ((int)p.alg != rows[i].alg || p.settles != rows[i].settles || p.deferred != rows[i].deferred ||
        (int)p.why != rows[i].why)
      fail_msg("row %zu (%s %s lb=%s %s %zu%s%s%s): %s settles %d deferred %d; want %s %d %d (why %s, want %s)", i, rows[i].a,
               rows[i].b ? rows[i].b : "", rows[i].lb, rows[i].rs ? "rs" : "ar", rows[i].arg,
               rows[i].in_group ? " grouped" : "", rows[i].capturing ? " captured" : "",
               rows[i].local ? " local" : "", nsc_alg_name(p.alg), p.settles, p.deferred,
               nsc_alg_name((nsc_alg)rows[i].alg), rows[i].settles, rows[i].deferred,
               nsc_why_key(p.why), nsc_why_key((nsc_why)rows[i].why));
    /* the layout of its two-phase step is the plan's, made with it */
    if (p.alg == NSC_ALG_TWOPHASE) {
      assert_int_equal(p.tp.n, 4);
      assert_int_equal(p.tp.rank, 1);
      assert_true(p.staging >= nsc_tp_staging_bytes(&p.tp, rows[i].rs));
    }
    if (p.alg == NSC_ALG_HIER) assert_int_equal(p.tp.n, 2); /* between the two nodes */
    if (p.alg == NSC_ALG_PLAIN) assert_int_equal(p.launches, 1);
  }
  nsc_topo_free(&t);
  nsc_topo_free(&t2);
}

/* The forwarded path's rule is the decision's: for every call the decision's
 * first question (nsc_decide_untouched) forwards without a plan, nsc_decide
 * makes the PLAIN plan with the same reason, settling nothing and waiting for
 * nothing; a communicator some rank of which cannot run the kernels
 * forwards every call ("kernels"). Over types, ops, sizes, groups,
 * reduce-scatters, NULL buffers and the settings that change the answer. */
static void test_decide_untouched(void **state) {
  (void)state;
  static const int ids[4] = {1, 1, 1, 1};
  nsc_topo t = topo_of(ids, 4, 0);
  static const char *sets[][2] = {{"NCCLSHIM_COMPRESS=off", NULL},
                                  {"NCCLSHIM_COMPRESS=fp16", NULL},
                                  {"NCCLSHIM_COMPRESS=int8", NULL},
                                  {"NCCLSHIM_COMPRESS=fp16", "NCCLSHIM_ACCUM_STEPS=2"},
                                  {"NCCLSHIM_COMPRESS=bf16", "NCCLSHIM_FUSE_BYTES=0"}};
  static const ncclDataType_t dts[] = {ncclFloat32, ncclFloat16, ncclInt32, ncclFloat64};
  static const ncclRedOp_t ops[] = {ncclSum, ncclAvg, ncclMax, (ncclRedOp_t)ncclNumOps};
  static const size_t counts[] = {0, 1, 16383, 16384, 1 << 20};
  int forwarded = 0, planned = 0;
  for (size_t si = 0; si < sizeof sets / sizeof *sets; si++) {
    nsc_config cfg = cfg_lb(sets[si][0], sets[si][1], NULL, "0");
    for (size_t d = 0; d < 4; d++)
      for (size_t o = 0; o < 4; o++)
        for (size_t n = 0; n < 5; n++)
          for (int g = 0; g < 2; g++)
            for (int rs = 0; rs < 2; rs++)
              for (int buf = 0; buf < 2; buf++) {
                nsc_call k = {.count = rs ? counts[n] * 4 : counts[n], .dt = dts[d], .op = ops[o], .has_buffers = buf,
                              .in_group = g, .rs = rs, .arg = counts[n]};
                nsc_policy_ask(&cfg, &k);
                for (int un = 0; un < 2; un++) {
                  nsc_agreed ag = {.topo = &t, .untouched = un};
                  nsc_why why = nsc_decide_untouched(&k, &ag);
                  if (why == NSC_WHY_NONE) {
                    planned++;
                    continue;
                  }
                  forwarded++;
                  nsc_plan p;
                  nsc_decide(&p, &cfg, &k, &ag, 0);
                  assert_int_equal(p.alg, NSC_ALG_PLAIN);
                  assert_int_equal(p.why, why);
                  assert_int_equal(p.settles, 0);
                  assert_int_equal(p.deferred, 0);
                  assert_int_equal(p.step[0].flags, NSC_STEP_CALL);
                  if (un) assert_int_equal(why, NSC_WHY_KERNELS);
                }
              }
  }
  assert_true(forwarded > 0 && planned > 0);
  nsc_topo_free(&t);
}

/* What a plan carries for its steps, from the settings: the format and the
 * wire datatype of its row, the codec's options, its two-phase layout
 * (computed once, with the plan: the same as a fresh one), its staging
 * (whole for the ring and flat two-phase, in stages for hier, bounded by
 * NCCLSHIM_MAX_STAGING_BYTES), and the ring's pipelining (chunks outside a
 * group only). */
static void test_plan_carries(void **state) {
  (void)state;
  static const int ids[4] = {1, 1, 1, 1}, two[4] = {1, 1, 2, 2};
  nsc_topo t = topo_of(ids, 4, 2), t2 = topo_of(two, 4, 3);
  nsc_config bf = cfg_lb("NCCLSHIM_COMPRESS=bf16", "NCCLSHIM_ALGO=ring", "NCCLSHIM_CHUNK_BYTES=64K", "0");
  bf.prescale = 4;
  nsc_call k = {.count = 1 << 20, .dt = ncclFloat32, .op = ncclSum, .has_buffers = 1, .arg = 1 << 20};
  nsc_agreed ag = {.topo = &t};
  nsc_plan p;
  nsc_policy_ask(&bf, &k);
  nsc_decide(&p, &bf, &k, &ag, 0);
  assert_int_equal(p.alg, NSC_ALG_RING);
  assert_int_equal(p.fmt, NSC_FMT_BF16);
  assert_int_equal(p.wdt, ncclBfloat16);
  assert_true(p.codec.prescale == 4.0);
  assert_int_equal(p.chunk, 16384);
  assert_int_equal(p.pipelined, 1);
  assert_int_equal(p.limited, 1);
  assert_int_equal(p.stages, 0);
  assert_int_equal(p.staging, 2u << 20);
  k.in_group = 1;
  bf.fuse_bytes = 0;
  nsc_policy_ask(&bf, &k);
  nsc_decide(&p, &bf, &k, &ag, 0);
  assert_int_equal(p.alg, NSC_ALG_RING);
  assert_int_equal(p.pipelined, 0); /* in a group: its chunks after one cast */
  nsc_config i8 = cfg_lb("NCCLSHIM_COMPRESS=int8", "NCCLSHIM_ERROR_FEEDBACK=1", "NCCLSHIM_ROUNDING=stochastic", "0");
  k.in_group = 0;
  nsc_policy_ask(&i8, &k);
  nsc_decide(&p, &i8, &k, &ag, 0);
  assert_int_equal(p.alg, NSC_ALG_TWOPHASE);
  assert_int_equal(p.wdt, ncclInt8);
  assert_int_equal(p.codec.ef, 1);
  assert_int_equal(p.codec.stochastic, 1);
  nsc_tp_plan fresh;
  nsc_plan_tp(&p, &p.step[0], &i8, &t, &fresh);
  assert_memory_equal(&p.tp, &fresh, sizeof fresh);
  assert_int_equal(p.staging, nsc_plan_round(nsc_tp_staging_bytes(&fresh, 0)));
  nsc_config h = cfg_lb("NCCLSHIM_COMPRESS=int4", "NCCLSHIM_ALGO=hier", NULL, "0");
  ag = (nsc_agreed){.topo = &t2, .hier = 1};
  k.rs = 1;
  k.arg = 1 << 16;
  k.count = 1 << 18;
  nsc_policy_ask(&h, &k);
  nsc_decide(&p, &h, &k, &ag, 0);
  assert_int_equal(p.alg, NSC_ALG_HIER);
  assert_int_equal(p.stages, 1);
  nsc_plan_tp(&p, &p.step[1], &h, &t2, &fresh);
  assert_memory_equal(&p.tp, &fresh, sizeof fresh);
  assert_int_equal(fresh.n, 2);
  assert_int_equal(fresh.rank, 1);
  nsc_topo_free(&t);
  nsc_topo_free(&t2);
}

/* The group's plan (group.c): buckets per (communicator, op, memory kind) in
 * order of first appearance, at most FUSE_BYTES of fp32 each (a larger
 * member alone), each on its communicator's first member's stream, issued
 * a key's buckets at a time; a bucket below MIN_BYTES is its members
 * forwarded (PLAIN, MIN_BYTES). Stream handles never change the buckets. */
static void test_decide_group(void **state) {
  (void)state;
  nsc_config cfg = cfg_lb("NCCLSHIM_COMPRESS=fp16", "NCCLSHIM_FUSE_BYTES=16K", NULL, "0"); /* 4096 floats */
  static int ca, cb, kind;
  static const struct {
    const void *comm;
    int op;
    size_t count;
    uintptr_t stream;
  } in[] = {
      {&ca, ncclSum, 1000, 11}, /* 0: bucket A1 (home 11) */
      {&cb, ncclSum, 2000, 21}, /* 1: bucket B1 (home 21) */
      {&ca, ncclSum, 1000, 12}, /* 2: A1 */
      {&ca, ncclAvg, 500, 13},  /* 3: its own key: bucket A2 (home 11: the communicator's first member's) */
      {&ca, ncclSum, 3000, 14}, /* 4: 2000 + 3000 > 4096: bucket A3 */
      {&ca, ncclSum, 9000, 15}, /* 5: larger than the cap: bucket A4, alone */
      {&cb, ncclSum, 100, 22},  /* 6: B1 */
  };
  enum { N = sizeof in / sizeof *in };
  nsc_member m[N];
  for (int i = 0; i < N; i++)
    m[i] = (nsc_member){.comm = in[i].comm, .kind = &kind, .op = in[i].op, .count = in[i].count,
                        .stream = in[i].stream, .next = i + 1 < N ? &m[i + 1] : NULL};
  nsc_member *b = nsc_decide_group(&m[0], &cfg);
  static const struct {
    int first, nb;
    size_t total;
    uintptr_t home;
    int members[3];
  } want[] = {{0, 2, 2000, 11, {0, 2, -1}}, {4, 1, 3000, 11, {4, -1, -1}}, {5, 1, 9000, 11, {5, -1, -1}},
              {1, 2, 2100, 21, {1, 6, -1}}, {3, 1, 500, 11, {3, -1, -1}}};
  for (size_t i = 0; i < sizeof want / sizeof *want; i++, b = b->bucket_next) {
    assert_non_null(b);
    assert_ptr_equal(b, &m[want[i].first]);
    assert_int_equal(b->nb, want[i].nb);
    assert_int_equal(b->total, want[i].total);
    assert_int_equal(b->home, want[i].home);
    const nsc_member *x = b;
    for (int j = 0; j < want[i].nb; j++, x = x->bnext) assert_ptr_equal(x, &m[want[i].members[j]]);
    assert_null(x);
    nsc_plan p;
    nsc_plan_bucket(&p, &cfg, b);
    if (b->total * 4 < 65536) { /* below MIN_BYTES (64K): the members as they are */
      assert_int_equal(p.alg, NSC_ALG_PLAIN);
      assert_int_equal(p.why, NSC_WHY_MIN_BYTES);
      assert_int_equal(p.launches, b->nb);
      assert_int_equal(p.staging, 0);
    }
  }
  assert_null(b);
  /* the same members on other streams: the same buckets */
  for (int i = 0; i < N; i++) m[i].stream = 100 + (uintptr_t)(N - i);
  b = nsc_decide_group(&m[0], &cfg);
  assert_ptr_equal(b, &m[0]);
  assert_int_equal(b->home, m[0].stream);
  assert_ptr_equal(b->bnext, &m[2]);
  /* a fused bucket's plan: segmented cast, one wire all-reduce, segmented cast back */
  nsc_config big = cfg_lb("NCCLSHIM_COMPRESS=bf16", "NCCLSHIM_MIN_BYTES=0", NULL, "0");
  b = nsc_decide_group(&m[0], &big);
  nsc_plan p;
  nsc_plan_bucket(&p, &big, b);
  assert_int_equal(p.alg, NSC_ALG_FUSE);
  assert_int_equal(p.nsteps, 3);
  assert_int_equal(p.step[0].kind, NSC_STEP_SEG_CAST_IN);
  assert_int_equal(p.step[1].kind, NSC_STEP_ALLREDUCE);
  assert_true(p.step[1].flags & NSC_STEP_WIRE);
  assert_int_equal(p.step[2].kind, NSC_STEP_SEG_CAST_OUT);
  assert_int_equal(p.count, b->total);
  assert_int_equal(p.launches, 1);
  assert_int_equal(p.staging, nsc_plan_round(2 * b->total));
  assert_int_equal(p.limited, 0); /* NCCLSHIM_MAX_STAGING_BYTES bounds a user's call, not a bucket */
  assert_int_equal(p.wdt, ncclBfloat16);
}

/* The learner's inputs (coll/learn.c): before the agreement a call at
 * LAUNCH_BYTES=auto is decided at the unknown price, as a pinned 4M would
 * decide it (no call is forwarded only to be measured; an accumulated one
 * stays local); the agreed price replaces the unknown one only at auto, and
 * decides as a pinned price would. */
static void test_decide_learned(void **state) {
  (void)state;
  static const int ids[4] = {1, 1, 1, 1};
  nsc_topo t = topo_of(ids, 4, 1);
  nsc_config au = cfg_lb("NCCLSHIM_COMPRESS=int8", NULL, NULL, "auto");
  nsc_config pin = cfg_lb("NCCLSHIM_COMPRESS=int8", NULL, NULL, "0");
  nsc_config four = cfg_lb("NCCLSHIM_COMPRESS=int8", NULL, NULL, "4M");
  nsc_call k = {.count = 1 << 20, .dt = ncclFloat32, .op = ncclSum, .has_buffers = 1, .arg = 1 << 20};
  nsc_plan p, q;
  nsc_policy_ask(&au, &k);
  nsc_agreed ag = {.topo = &t};
  nsc_decide(&p, &au, &k, &ag, 1);
  assert_int_equal(p.alg, NSC_ALG_LOCAL);
  /* 4 MiB of int8 on 4 ranks: at the unknown price (4 MB) no gain; learned free: two phases */
  nsc_decide(&p, &au, &k, &ag, 0);
  nsc_decide(&q, &four, &k, &ag, 0);
  assert_int_equal(p.alg, q.alg);
  assert_int_equal(p.why, q.why);
  assert_int_equal(p.alg, NSC_ALG_PLAIN);
  assert_int_equal(p.why, NSC_WHY_NO_GAIN);
  ag.learned = 1;
  ag.launch = 0;
  nsc_decide(&p, &au, &k, &ag, 0);
  nsc_decide(&q, &pin, &k, &(nsc_agreed){.topo = &t}, 0);
  assert_int_equal(p.alg, NSC_ALG_TWOPHASE);
  assert_int_equal(p.alg, q.alg);
  assert_int_equal(p.cost, q.cost);
  assert_int_equal(p.tp.npieces, q.tp.npieces);
  /* a pinned price wins over a learned one */
  nsc_decide(&q, &four, &k, &ag, 0);
  assert_int_equal(q.alg, NSC_ALG_PLAIN);
  nsc_topo_free(&t);
}

static void test_plan_names(void **state) {
  (void)state;
  assert_string_equal(nsc_alg_name(NSC_ALG_HIER), "hier");
  assert_string_equal(nsc_plan_step_name(NSC_STEP_REDUCE), "reduce");
  assert_string_equal(nsc_plan_on_name(NSC_ON_CROSS), "cross");
  assert_string_equal(nsc_alg_name((nsc_alg)9), "?");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_plan_plain_and_ring),
      cmocka_unit_test(test_plan_hier_allreduce),
      cmocka_unit_test(test_plan_hier_min_bytes),
      cmocka_unit_test(test_plan_hier_reducescatter),
      cmocka_unit_test(test_plan_launches),
      cmocka_unit_test(test_decide_table),
      cmocka_unit_test(test_plan_input16),
      cmocka_unit_test(test_decide_untouched),
      cmocka_unit_test(test_plan_carries),
      cmocka_unit_test(test_decide_group),
      cmocka_unit_test(test_decide_learned),
      cmocka_unit_test(test_plan_names),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
