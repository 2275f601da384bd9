/* test_algo.c — unit tests of the two-phase layout (shim/plan/tp_plan.h)
 * and of the algorithm a plan chooses (plan.h): pure functions of count,
 * rank count and configuration, so every rank reaches the same answer.
 *
 * Must not: touch NCCL, MPI or a GPU. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "config.h"
#include "plan.h"
#include "topo.h"
#include "tp_plan.h"

static nsc_config cfg_of3(const char *a, const char *b, const char *c) {
  nsc_config cfg;
  char err[256];
  char *env[4] = {(char *)a, (char *)b, (char *)c, NULL};
  assert_int_equal(nsc_config_parse(env, &cfg, err, sizeof err), 0);
  return cfg;
}

static nsc_config cfg_of(const char *a, const char *b) { return cfg_of3(a, b, NULL); }
/* The cost rule a communicator with configuration c plans by before it
 * learned anything (cost.h: the unknown price at LAUNCH_BYTES=auto). */
static const nsc_cost_rule *rule_of(const nsc_config *c, int host) {
  static nsc_cost_rule r;
  r = nsc_cost_rule_of(nsc_cost_launch(c, 0, 0), host);
  return &r;
}

/* Chunks tile the count in order, the largest first, each fits its slot. */
static void test_plan_layout(void **state) {
  (void)state;
  static const size_t counts[] = {1, 2, 3, 7, 255, 256, 257, 1000, 65537, 300001};
  static const char *fmts[] = {"NCCLSHIM_COMPRESS=fp16", "NCCLSHIM_COMPRESS=int8", "NCCLSHIM_COMPRESS=fp8"};
  for (int f = 0; f < 3; f++) {
    nsc_config cfg = cfg_of(fmts[f], "NCCLSHIM_BLOCK_ELEMS=100");
    for (int n = 2; n <= 9; n++)
      for (size_t k = 0; k < sizeof counts / sizeof counts[0]; k++)
        for (int rs = 0; rs < 2; rs++) {
          nsc_tp_plan p;
          nsc_tp_plan_init(&p, &cfg, n, n - 1, counts[k], rs, rule_of(&cfg, 1));
          assert_int_equal(p.count, rs ? counts[k] * (size_t)n : counts[k]);
          assert_int_equal(p.slot % 16, 0);
          size_t next = 0;
          for (int c = 0; c < n; c++) {
            size_t off, len;
            nsc_tp_chunk(&p, c, &off, &len);
            assert_int_equal(off, next);
            if (rs) assert_int_equal(len, counts[k]);
            if (p.npieces == 1) assert_true(nsc_tp_chunk_bytes(&p, c) <= p.slot);
            next = off + len;
          }
          assert_int_equal(next, p.count);
          assert_int_equal(nsc_tp_staging_bytes(&p, rs), (size_t)(rs ? 2 : 3) * n * p.npieces * p.slot);
        }
  }
}

/* Pieces tile every chunk in order; all but a chunk's last non-empty piece
 * hold whole blocks (8-bit) or 64-element units; each fits its slot; the
 * counts and caps are exact. */
static void test_plan_pieces(void **state) {
  (void)state;
  static const char *fmts[] = {"NCCLSHIM_COMPRESS=fp16", "NCCLSHIM_COMPRESS=int8", "NCCLSHIM_COMPRESS=fp8"};
  static const char *pbs[] = {"NCCLSHIM_TWOPHASE_PIECE_BYTES=4096", "NCCLSHIM_TWOPHASE_PIECE_BYTES=10000",
                              "NCCLSHIM_TWOPHASE_PIECE_BYTES=0"};
  static const size_t counts[] = {1, 1000, 65537, 300001, 1u << 22};
  for (int f = 0; f < 3; f++)
    for (int b = 0; b < 3; b++) {
      nsc_config cfg = cfg_of(fmts[f], pbs[b]);
      cfg.block_elems = 100;
      size_t unit = f ? 100 : 64;
      for (int n = 2; n <= 9; n += 3)
        for (size_t q = 0; q < sizeof counts / sizeof counts[0]; q++)
          for (int rs = 0; rs < 2; rs++) {
            nsc_tp_plan p;
            nsc_tp_plan_init(&p, &cfg, n, 0, counts[q], rs, rule_of(&cfg, 1));
            assert_true(p.npieces >= 1 && p.npieces <= NSC_TP_MAX_PIECES);
            assert_true(p.npieces == 1 || p.npieces * n <= NSC_TP_MAX_PIECE_SLOTS);
            if (b == 2) assert_int_equal(p.npieces, 1);
            for (int c = 0; c < n; c++) {
              size_t coff, clen, next;
              nsc_tp_chunk(&p, c, &coff, &clen);
              next = coff;
              for (int k = 0; k < p.npieces; k++) {
                size_t off, len;
                nsc_tp_piece(&p, c, k, &off, &len);
                assert_int_equal(off, next);
                assert_true(nsc_tp_piece_bytes(&p, c, k) <= p.slot);
                if (p.npieces > 1 && off + len < coff + clen) assert_int_equal(len % unit, 0);
                next = off + len;
              }
              assert_int_equal(next, coff + clen);
            }
          }
    }
  /* exact values, 64 MiB of fp32 on 4 ranks (chunks of 2^22 elements), the
   * default NCCLSHIM_TWOPHASE_PIECE_BYTES=auto (issue 33): the codec's
   * 2 x 64 MiB cost 4 MiB of link time under the host rule (1/32), nothing
   * on device memory; a piece costs 2 launches. Device: one piece whatever
   * the launch cost. Host at the default 4 MiB: 4M/k + 8M k: one piece; at
   * 1 MiB, 4M/k + 2M k, k = 1 and 2 tie: one. Host at 256 KiB: 4M/k + 0.5M k
   * is least at k = 3 (pieces of whole 256-element blocks, the last
   * shorter). Host with free launches: the old cap, 1 MiB pieces (16). */
  nsc_config d = cfg_of("NCCLSHIM_COMPRESS=int8", "NCCLSHIM_ALGO=twophase");
  nsc_tp_plan p;
  nsc_tp_plan_init(&p, &d, 4, 1, 1u << 24, 0, rule_of(&d, 0));
  assert_int_equal(p.npieces, 1);
  assert_int_equal(p.piece, 1u << 22);
  nsc_tp_plan_init(&p, &d, 4, 1, 1u << 24, 0, rule_of(&d, 1));
  assert_int_equal(p.npieces, 1);
  nsc_config d1 = cfg_of3("NCCLSHIM_COMPRESS=int8", "NCCLSHIM_ALGO=twophase", "NCCLSHIM_LAUNCH_BYTES=1M");
  nsc_tp_plan_init(&p, &d1, 4, 1, 1u << 24, 0, rule_of(&d1, 1));
  assert_int_equal(p.npieces, 1);
  d1 = cfg_of3("NCCLSHIM_COMPRESS=int8", "NCCLSHIM_ALGO=twophase", "NCCLSHIM_LAUNCH_BYTES=256K");
  nsc_tp_plan_init(&p, &d1, 4, 1, 1u << 24, 0, rule_of(&d1, 1));
  assert_int_equal(p.npieces, 3);
  assert_int_equal(p.piece, ((1u << 22) / 3 + 1 + 255) / 256 * 256);
  nsc_tp_plan_init(&p, &d1, 4, 1, 1u << 24, 0, rule_of(&d1, 0));
  assert_int_equal(p.npieces, 1);
  nsc_config d0 = cfg_of3("NCCLSHIM_COMPRESS=int8", "NCCLSHIM_ALGO=twophase", "NCCLSHIM_LAUNCH_BYTES=0");
  nsc_tp_plan_init(&p, &d0, 4, 1, 1u << 24, 0, rule_of(&d0, 1));
  assert_int_equal(p.piece, 1u << 18);
  assert_int_equal(p.npieces, 16);
  assert_int_equal(p.slot, (2 * ((1u << 18) / 256) + (1u << 18) + 15) / 16 * 16);
  /* the launches: a group per piece and phase; a reduce-scatter has one phase */
  assert_int_equal(nsc_tp_launches(&p, 0), 32);
  assert_int_equal(nsc_tp_launches(&p, 1), 16);
  /* the second phase as one ncclAllGather per piece where the receive buffer
   * holds the n slots: auto on device memory (not under the host rule) and
   * allgather; never for a reduce-scatter */
  assert_false(p.gather); /* host rule, auto */
  nsc_tp_plan_init(&p, &d0, 4, 1, 1u << 24, 0, rule_of(&d0, 0));
  assert_true(p.gather);
  nsc_config ag = cfg_of3("NCCLSHIM_COMPRESS=int8", "NCCLSHIM_TWOPHASE_GATHER=allgather", NULL);
  nsc_tp_plan_init(&p, &ag, 4, 1, 1u << 24, 0, rule_of(&ag, 1));
  assert_true(p.gather);
  nsc_config sr = cfg_of3("NCCLSHIM_COMPRESS=int8", "NCCLSHIM_TWOPHASE_GATHER=sendrecv", NULL);
  nsc_tp_plan_init(&p, &sr, 4, 1, 1u << 24, 0, rule_of(&sr, 1));
  assert_false(p.gather);
  nsc_tp_plan_init(&p, &d, 4, 1, 1u << 20, 1, rule_of(&d, 0));
  assert_false(p.gather);
  nsc_config fp = cfg_of("NCCLSHIM_COMPRESS=fp16", "NCCLSHIM_TWOPHASE_GATHER=allgather");
  nsc_tp_plan_init(&p, &fp, 4, 0, 16, 0, rule_of(&fp, 0)); /* 4 elements per chunk: 8 bytes in a 16-byte slot; 4 x 16 = 64 bytes */
  assert_true(p.gather);
  nsc_tp_plan_init(&p, &fp, 4, 0, 15, 0, rule_of(&fp, 0)); /* 60 bytes cannot hold the 4 slots */
  assert_false(p.gather);
  /* 4 KiB pieces: 1024 elements, but at most 64 per chunk: 2^22 / 64 */
  nsc_config s = cfg_of("NCCLSHIM_COMPRESS=int8", "NCCLSHIM_TWOPHASE_PIECE_BYTES=4096");
  nsc_tp_plan_init(&p, &s, 3, 0, 65536, 0, rule_of(&s, 0));
  assert_int_equal(p.piece, 1024);
  assert_int_equal(p.npieces, 22); /* chunk 0: 21846 elements */
  nsc_tp_plan_init(&p, &s, 4, 0, 1u << 24, 0, rule_of(&s, 0));
  assert_int_equal(p.piece, 1u << 16);
  assert_int_equal(p.npieces, 64);
  nsc_tp_plan_init(&p, &s, 64, 0, 1u << 24, 0, rule_of(&s, 0)); /* 256 / 64 = 4 pieces */
  assert_int_equal(p.npieces, 4);
  nsc_tp_plan_init(&p, &s, 300, 0, 1u << 24, 0, rule_of(&s, 0)); /* more ranks than 256 slots: one piece */
  assert_int_equal(p.npieces, 1);
  /* whether two phases fit does not depend on the pieces */
  nsc_config z = cfg_of("NCCLSHIM_COMPRESS=int8", "NCCLSHIM_TWOPHASE_PIECE_BYTES=0");
  for (size_t c = 1; c < 200; c++) assert_int_equal(nsc_tp_fits(&s, 4, c, 0), nsc_tp_fits(&z, 4, c, 0));
}

/* Which algorithm a compressible all-reduce (rs: reduce-scatter) of count
 * per call on n ranks gets from the plan (plan.h) with launches free, so
 * that the settings' preferences show: "twophase" for two phases, flat or
 * hierarchical (hier: the communicator adopted it, on 2 nodes), "ring", or
 * "plain". */
static const char *choose(const nsc_config *cfg, size_t count, int n, int rs, int hier) {
  int64_t keys[64];
  int node[64];
  for (int i = 0; i < n; i++) keys[i] = hier ? 1 + 2 * i / n : 1;
  nsc_topo t;
  memset(&t, 0, sizeof t);
  assert_int_equal(nsc_topo_build(&t, keys, n, 0, node), 0);
  nsc_config c = *cfg;
  c.launch_bytes = 0;
  nsc_plan p;
  nsc_plan_call in = {rs, count, 0, 1, &t, hier, nsc_cost_rule_of(0, 0), NSC_IN_F32};
  nsc_plan_make(&p, &c, &in);
  return p.alg == NSC_ALG_HIER ? "twophase" : nsc_alg_name(p.alg);
}

static void test_choice(void **state) {
  (void)state;
  nsc_config a = cfg_of("NCCLSHIM_ALGO=auto", "NCCLSHIM_COMPRESS=fp16");
  assert_string_equal(choose(&a, 4 * 16384, 4, 0, 0), "twophase");
  assert_string_equal(choose(&a, 4 * 16384 - 1, 4, 0, 0), "ring"); /* < 64 KiB per rank */
  assert_string_equal(choose(&a, 1 << 24, 3, 0, 0), "ring");       /* < 4 ranks */
  assert_string_equal(choose(&a, 1 << 24, 64, 0, 0), "twophase");
  assert_string_equal(choose(&a, 100, 2, 1, 0), "twophase");       /* reduce-scatter: always */
  nsc_config r = cfg_of("NCCLSHIM_ALGO=ring", "NCCLSHIM_COMPRESS=bf16");
  assert_string_equal(choose(&r, 1 << 24, 8, 0, 0), "ring");
  assert_string_equal(choose(&r, 1 << 20, 8, 1, 0), "twophase");
  nsc_config t = cfg_of("NCCLSHIM_ALGO=twophase", "NCCLSHIM_COMPRESS=fp16");
  assert_string_equal(choose(&t, 1000, 2, 0, 0), "twophase");
  assert_string_equal(choose(&t, 1, 2, 0, 0), "ring"); /* 2-byte chunk in a 16-byte slot > 4 bytes */
  assert_string_equal(choose(&t, 1000, 1, 0, 0), "ring"); /* one rank */
  nsc_config e = cfg_of("NCCLSHIM_ALGO=ring", "NCCLSHIM_COMPRESS=int8"); /* 8-bit: always two-phase */
  assert_string_equal(choose(&e, 1000, 2, 0, 0), "twophase");
  assert_false(nsc_tp_fits(&e, 2, 1, 0));
  assert_string_equal(choose(&e, 1, 2, 0, 0), "plain"); /* too small for two phases, and NCCL cannot sum int8 */
  /* hier: on a communicator that adopted it, two-phase wherever it fits (it
   * then runs hierarchically); elsewhere auto's choice */
  nsc_config h = cfg_of("NCCLSHIM_ALGO=hier", "NCCLSHIM_COMPRESS=fp16");
  assert_string_equal(choose(&h, 1000, 4, 0, 1), "twophase");
  assert_string_equal(choose(&h, 1, 4, 0, 1), "ring"); /* does not fit */
  assert_string_equal(choose(&h, 1000, 4, 0, 0), "ring"); /* not adopted: auto, < 64 KiB per rank */
  assert_string_equal(choose(&h, 1 << 24, 3, 0, 0), "ring");     /* auto: < 4 ranks */
  assert_string_equal(choose(&h, 1 << 24, 8, 0, 0), "twophase"); /* auto: flat two-phase */
  assert_string_equal(choose(&h, 100, 2, 1, 0), "twophase");     /* reduce-scatter: flat */
  /* asking for stochastic rounding (as for error feedback) makes auto, and hier
   * where not adopted, choose two phases wherever they fit (fuzzer seed 40077:
   * hier on uneven nodes fell to the ring, which has no stochastic rounding) */
  nsc_config sr = cfg_of3("NCCLSHIM_ALGO=hier", "NCCLSHIM_COMPRESS=bf16", "NCCLSHIM_ROUNDING=stochastic");
  assert_string_equal(choose(&sr, 65536, 3, 0, 0), "twophase");
  nsc_config sa = cfg_of3("NCCLSHIM_ALGO=auto", "NCCLSHIM_COMPRESS=fp16", "NCCLSHIM_ROUNDING=stochastic");
  assert_string_equal(choose(&sa, 1000, 2, 0, 0), "twophase");
  nsc_config off = cfg_of("NCCLSHIM_COMPRESS=off", "NCCLSHIM_ALGO=twophase");
  assert_false(nsc_tp_fits(&off, 4, 1 << 20, 0));
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_plan_layout), cmocka_unit_test(test_plan_pieces),
                                      cmocka_unit_test(test_choice)};
  return cmocka_run_group_tests_name("algo", tests, NULL, NULL);
}
