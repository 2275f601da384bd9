/* test_accum.c — the accumulation state machine (shim/accum/accum.c) as a pure
 * function of a sequence of accumulable call sizes, and the policy's
 * accumulable() predicate (shim/policy.c) for every datatype, op, size edge
 * and the captured-stream case.
 *
 * Call sequences are built the way DDP issues them: whole model in one bucket
 * on the first pass, rebuilt buckets afterwards (or buckets from the start
 * with find_unused_parameters=True). Every expectation is exact: which call
 * syncs, after how many calls P is learned, and when the machine gives up.
 * Must not: depend on NCCL, MPI or a GPU (only nccl.h for the enums). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "accum.h"
#include "config.h"
#include "policy.h"

/* Bucket sizes in bytes, as DDP would issue them. */
static const uint64_t WHOLE[] = {1000};
static const uint64_t REBUILT[] = {100, 300, 300, 300};        /* sums to 1000 */
static const uint64_t ODD[] = {97, 257, 331, 315};            /* non-multiples, sums to 1000 */
#define N_OF(a) (sizeof(a) / sizeof((a)[0]))

typedef struct {
  nsc_accum a;
  long long K;
  size_t calls;     /* calls fed so far */
  size_t learned_at; /* call number (1-based) whose why said "learned" */
  size_t fell_back_at;
  char last_why[256];
} feeder;

static void feeder_init(feeder *f, long long K) {
  memset(f, 0, sizeof *f);
  nsc_accum_init(&f->a);
  f->K = K;
}

static int feed(feeder *f, uint64_t bytes) {
  char why[256];
  int s = nsc_accum_next(&f->a, nsc_accum_sig((size_t)bytes / 4, ncclFloat32, ncclSum), bytes, f->K, why, sizeof why);
  f->calls++;
  if (why[0]) {
    snprintf(f->last_why, sizeof f->last_why, "%s", why);
    if (strstr(why, "learned")) f->learned_at = f->calls;
    if (strstr(why, "every call syncs from now on")) f->fell_back_at = f->calls;
  }
  return s;
}

/* Feed one pass; every call of it must decide `expect` (1 sync, 0 skip). */
static void pass_expect(feeder *f, const uint64_t *b, size_t n, int expect) {
  for (size_t j = 0; j < n; j++) assert_int_equal(feed(f, b[j]), expect);
}

/* After P is locked: micro-step i syncs exactly when i mod K == K-1. */
static void steady(feeder *f, const uint64_t *b, size_t n, int first_pass, int passes) {
  for (int i = first_pass; i < first_pass + passes; i++)
    pass_expect(f, b, n, (long long)(i % f->K) == f->K - 1);
}

static void ddp_default(void **state) {
  (void)state;
  for (long long K = 2; K <= 9; K++) {
    feeder f;
    feeder_init(&f, K);
    pass_expect(&f, WHOLE, 1, 1);
    pass_expect(&f, REBUILT, 4, 1);
    pass_expect(&f, REBUILT, 4, 1);
    assert_int_equal(f.a.mode, NSC_ACC_LEARNING);
    pass_expect(&f, REBUILT, 4, 1);
    /* Learned with the call that ends the fourth pass: 1 + 4 + 4 + 4 calls. */
    assert_int_equal(f.a.mode, NSC_ACC_LOCKED);
    assert_int_equal(f.a.pass_bytes, 1000);
    assert_int_equal(f.learned_at, 13);
    assert_non_null(strstr(f.last_why, "learned 1000 accumulable bytes per backward pass after 4 passes (13 accumulable calls)"));
    assert_null(strstr(f.last_why, "reduced more"));
    steady(&f, REBUILT, 4, 4, 6 * (int)K);
    uint64_t skipped = 0;
    for (int i = 4; i < 4 + 6 * (int)K; i++) skipped += (i % K) != K - 1 ? 4 : 0;
    assert_int_equal(f.a.skipped, skipped);
    assert_int_equal(f.a.synced, 13 + 6 * (int)K * 4 - skipped);
    assert_int_equal(f.fell_back_at, 0);
    nsc_accum_free(&f.a);
  }
}

/* Non-multiples: bucket sizes that divide nothing, P not a multiple of any. */
static void ddp_odd_sizes(void **state) {
  (void)state;
  feeder f;
  feeder_init(&f, 4);
  pass_expect(&f, WHOLE, 1, 1);
  for (int i = 0; i < 3; i++) pass_expect(&f, ODD, 4, 1);
  assert_int_equal(f.a.mode, NSC_ACC_LOCKED);
  assert_int_equal(f.a.pass_bytes, 1000);
  steady(&f, ODD, 4, 4, 17);
  nsc_accum_free(&f.a);
}

/* find_unused_parameters=True: the same buckets from the start. H1 (first
 * call = a pass) fails: later candidates exceed the first call. Under H0 the
 * candidates 100, 400 and 700 are rejected (a multiple is crossed, or passes
 * 2 and 3 differ); 1000 wins with the sixteenth call (four passes). */
static void find_unused(void **state) {
  (void)state;
  feeder f;
  feeder_init(&f, 4);
  for (int i = 0; i < 4; i++) pass_expect(&f, REBUILT, 4, 1);
  assert_int_equal(f.a.mode, NSC_ACC_LOCKED);
  assert_int_equal(f.a.pass_bytes, 1000);
  assert_int_equal(f.learned_at, 16);
  steady(&f, REBUILT, 4, 4, 20);
  nsc_accum_free(&f.a);
}

/* A pass of equal buckets without a whole-model first pass is ambiguous: the
 * smallest consistent candidate (one bucket) is taken, as accum.c documents. */
static void equal_buckets_ambiguous(void **state) {
  (void)state;
  static const uint64_t EQ[] = {250, 250, 250, 250};
  feeder f;
  feeder_init(&f, 2);
  pass_expect(&f, EQ, 4, 1);
  assert_int_equal(f.a.mode, NSC_ACC_LOCKED);
  assert_int_equal(f.a.pass_bytes, 250);
  /* With the whole model first the true P is found. */
  feeder g;
  feeder_init(&g, 2);
  pass_expect(&g, WHOLE, 1, 1);
  for (int i = 0; i < 3; i++) pass_expect(&g, EQ, 4, 1);
  assert_int_equal(g.a.mode, NSC_ACC_LOCKED);
  assert_int_equal(g.a.pass_bytes, 1000);
  nsc_accum_free(&f.a);
  nsc_accum_free(&g.a);
}

/* A pass with fewer bytes (a parameter without gradient) shifts the count; the
 * first call that straddles the learned boundary falls back, and from then on
 * every call syncs. */
static void contradiction_fewer_bytes(void **state) {
  (void)state;
  static const uint64_t SHORT[] = {100, 300, 300, 250};
  feeder f;
  feeder_init(&f, 4);
  pass_expect(&f, WHOLE, 1, 1);
  for (int i = 0; i < 3; i++) pass_expect(&f, REBUILT, 4, 1); /* learning: every call syncs */
  pass_expect(&f, SHORT, 4, 0); /* pass 4: not noticed yet, skipped */
  size_t before = f.calls;
  /* Pass 5 starts 50 bytes before the boundary: its first call (100) crosses. */
  pass_expect(&f, REBUILT, 4, 1);
  assert_int_equal(f.a.mode, NSC_ACC_FALLBACK);
  assert_int_equal(f.fell_back_at, before + 1);
  assert_non_null(strstr(f.last_why, "did not match the learned 1000 bytes"));
  for (int i = 0; i < 12; i++) pass_expect(&f, REBUILT, 4, 1);
  nsc_accum_free(&f.a);
}

static void contradiction_bigger_call(void **state) {
  (void)state;
  static const uint64_t BIG[] = {100, 300, 300, 400};
  feeder f;
  feeder_init(&f, 2);
  pass_expect(&f, WHOLE, 1, 1);
  for (int i = 0; i < 3; i++) pass_expect(&f, REBUILT, 4, 1);
  /* Pass 4 would skip until its last call crosses the boundary. */
  assert_int_equal(feed(&f, BIG[0]), 0);
  assert_int_equal(feed(&f, BIG[1]), 0);
  assert_int_equal(feed(&f, BIG[2]), 0);
  assert_int_equal(feed(&f, BIG[3]), 1);
  assert_int_equal(f.a.mode, NSC_ACC_FALLBACK);
  assert_int_equal(f.fell_back_at, f.calls);
  pass_expect(&f, REBUILT, 4, 1);
  nsc_accum_free(&f.a);
}

/* Sizes that never repeat: learning gives up after NSC_ACC_LEARN_MAX calls,
 * having synced every one of them, and says so once. */
static void learning_cap(void **state) {
  (void)state;
  feeder f;
  feeder_init(&f, 4);
  for (size_t i = 0; i < NSC_ACC_LEARN_MAX; i++) assert_int_equal(feed(&f, 1000 + i), 1);
  assert_int_equal(f.a.mode, NSC_ACC_LEARNING);
  assert_int_equal(f.fell_back_at, 0);
  assert_int_equal(feed(&f, 5), 1);
  assert_int_equal(f.a.mode, NSC_ACC_FALLBACK);
  assert_int_equal(f.fell_back_at, NSC_ACC_LEARN_MAX + 1);
  assert_non_null(strstr(f.last_why, "no repeating backward pass found in 4096 all-reduces"));
  assert_null(f.a.ent);
  f.last_why[0] = 0;
  for (int i = 0; i < 100; i++) assert_int_equal(feed(&f, 1000), 1);
  assert_string_equal(f.last_why, ""); /* said once */
  assert_int_equal(f.a.synced, NSC_ACC_LEARN_MAX + 101);
  assert_int_equal(f.a.skipped, 0);
  nsc_accum_free(&f.a);
}

/* The why buffer is optional, and zero-sized passes never lock. */
static void null_why_and_zero_bytes(void **state) {
  (void)state;
  nsc_accum a;
  nsc_accum_init(&a);
  for (int i = 0; i < 10; i++) assert_int_equal(nsc_accum_next(&a, 1, 0, 4, NULL, 0), 1);
  assert_int_equal(a.mode, NSC_ACC_LEARNING);
  nsc_accum_free(&a);
  nsc_accum_init(&a);
  for (int i = 0; i < 4; i++) assert_int_equal(nsc_accum_next(&a, 16, 64, 2, NULL, 0), 1);
  assert_int_equal(a.mode, NSC_ACC_LOCKED);
  assert_int_equal(nsc_accum_next(&a, 16, 64, 2, NULL, 0), 0); /* pass 4 */
  assert_int_equal(nsc_accum_next(&a, 16, 64, 2, NULL, 0), 1); /* pass 5 */
  nsc_accum_free(&a);
}


/* Rebuilt buckets below MIN_BYTES are not accumulable: later passes count
 * fewer bytes than the whole-model first pass. The small buckets are observed
 * (evidence) and account for the difference, so P = the accumulable part. */
static void small_rebuilt_buckets(void **state) {
  (void)state;
  for (long long K = 2; K <= 5; K++) {
    feeder f;
    feeder_init(&f, K);
    assert_int_equal(feed(&f, 1000), 1);
    for (int p = 1; p < 4; p++) {
      assert_int_equal(feed(&f, 300), 1);
      assert_int_equal(feed(&f, 400), 1);
      nsc_accum_observe(&f.a, nsc_accum_sig(75, ncclFloat32, ncclSum), 300); /* two buckets below MIN_BYTES */
      nsc_accum_observe(&f.a, 99, 0);                                        /* an int32 used-map */
    }
    assert_int_equal(f.a.mode, NSC_ACC_LOCKED);
    assert_int_equal(f.a.pass_bytes, 700);
    assert_non_null(strstr(f.last_why, "reduced more"));
    for (int i = 4; i < 4 + 3 * (int)K; i++) {
      int want = (i % K) == K - 1;
      assert_int_equal(feed(&f, 300), want);
      assert_int_equal(feed(&f, 400), want);
      nsc_accum_observe(&f.a, 5, 300); /* ignored once locked */
    }
    nsc_accum_free(&f.a);
  }
}

/* Equal accumulable buckets (250, 250) with small buckets between passes and a
 * whole model of 1000 bytes: 250 and 1000 line up in bytes, but only 500 is
 * explained by the first pass and gives identical passes. Without the first
 * pass's evidence 250 would be taken; a wrong P would corrupt training. */
static void equal_buckets_with_evidence(void **state) {
  (void)state;
  feeder f;
  feeder_init(&f, 4);
  assert_int_equal(feed(&f, 1000), 1);
  for (int p = 1; p < 4; p++) {
    assert_int_equal(feed(&f, 250), 1);
    assert_int_equal(feed(&f, 250), 1);
    nsc_accum_observe(&f.a, nsc_accum_sig(125, ncclFloat32, ncclSum), 500);
  }
  assert_int_equal(f.a.mode, NSC_ACC_LOCKED);
  assert_int_equal(f.a.pass_bytes, 500);
  for (int i = 4; i < 12; i++) {
    assert_int_equal(feed(&f, 250), i % 4 == 3);
    assert_int_equal(feed(&f, 250), i % 4 == 3);
  }
  nsc_accum_free(&f.a);
}

/* A first pass that nothing explains (the difference is not small floating
 * calls) is not taken as pass 0 of H1: with no other hypothesis fitting, the
 * machine keeps syncing. */
static void unexplained_first_pass(void **state) {
  (void)state;
  feeder f;
  feeder_init(&f, 2);
  assert_int_equal(feed(&f, 1000), 1);
  for (int p = 1; p < 8; p++) {
    assert_int_equal(feed(&f, 300), 1);
    assert_int_equal(feed(&f, 400), 1);
  }
  assert_int_equal(f.a.mode, NSC_ACC_LEARNING);
  assert_int_equal(f.a.skipped, 0);
  nsc_accum_free(&f.a);
}

/* ---- policy: nsc_policy_accumulable ---- */

static nsc_config cfg_with(const char *k) {
  nsc_config cfg;
  char err[256];
  char *env[] = {(char *)k, NULL};
  assert_int_equal(nsc_config_parse(env, &cfg, err, sizeof err), 0);
  return cfg;
}

static size_t es_of(ncclDataType_t dt) {
  switch (dt) {
  case ncclInt8: case ncclUint8: return 1;
  case ncclFloat16: case ncclBfloat16: return 2;
  case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
  case ncclInt64: case ncclUint64: case ncclFloat64: return 8;
  default: return 1; /* fp8 kinds */
  }
}

static void policy_types_and_ops(void **state) {
  (void)state;
  nsc_config cfg = cfg_with("NCCLSHIM_ACCUM_STEPS=4");
  assert_int_equal(cfg.min_bytes, 65536);
  for (int dt = 0; dt < (int)ncclNumTypes; dt++) {
    int floating = dt == ncclFloat16 || dt == ncclBfloat16 || dt == ncclFloat32 || dt == ncclFloat64;
    size_t count = 65536 / es_of((ncclDataType_t)dt);
    for (int op = 0; op <= (int)ncclNumOps; op++) { /* ncclNumOps: the first created (premulsum) op */
      int sum_avg = op == ncclSum || op == ncclAvg;
      nsc_call c = {count, (ncclDataType_t)dt, (ncclRedOp_t)op, 1, 0, 0};
      assert_int_equal(nsc_policy_accumulable(&cfg, &c), floating && sum_avg);
      c.in_group = 1; /* groups do not matter to accumulation */
      assert_int_equal(nsc_policy_accumulable(&cfg, &c), floating && sum_avg);
    }
  }
}

static void policy_edges(void **state) {
  (void)state;
  nsc_config cfg = cfg_with("NCCLSHIM_ACCUM_STEPS=2");
  nsc_call c = {16384, ncclFloat32, ncclSum, 1, 0, 0}; /* exactly MIN_BYTES */
  assert_true(nsc_policy_accumulable(&cfg, &c));
  c.count = 16383;
  assert_false(nsc_policy_accumulable(&cfg, &c));
  c.count = 16384;
  c.dt = ncclFloat16;
  assert_false(nsc_policy_accumulable(&cfg, &c)); /* 32 KiB */
  c.count = 32768;
  assert_true(nsc_policy_accumulable(&cfg, &c));
  c.dt = ncclFloat64;
  c.count = 8192;
  assert_true(nsc_policy_accumulable(&cfg, &c));
  c.count = 8191;
  assert_false(nsc_policy_accumulable(&cfg, &c));
  /* Captured into a CUDA graph: never accumulable, and passed through. */
  nsc_call cap = {1 << 20, ncclFloat32, ncclSum, 1, 0, 1};
  assert_false(nsc_policy_accumulable(&cfg, &cap));
  assert_int_equal(nsc_policy_transform(&cfg, &cap), NSC_ACT_PASS);
  cap.capturing = 0;
  assert_true(nsc_policy_accumulable(&cfg, &cap));
  /* NULL buffers or count 0: the caller gets plain NCCL's answer. */
  nsc_call nb = {1 << 20, ncclFloat32, ncclSum, 0, 0, 0};
  assert_false(nsc_policy_accumulable(&cfg, &nb));
  nsc_call zero = {0, ncclFloat32, ncclSum, 1, 0, 0};
  nsc_config cfg0 = cfg_with("NCCLSHIM_MIN_BYTES=0");
  cfg0.accum_steps = 2;
  assert_false(nsc_policy_accumulable(&cfg0, &zero));
  /* The 1-element metric all-reduce and an int32 used-map never count. */
  nsc_call metric = {1, ncclFloat32, ncclSum, 1, 0, 0};
  assert_false(nsc_policy_accumulable(&cfg, &metric));
  nsc_call used = {1 << 20, ncclInt32, ncclSum, 1, 0, 0};
  assert_false(nsc_policy_accumulable(&cfg, &used));
  /* K = 1 (the default): nothing is accumulable. */
  nsc_config one = cfg_with("NCCLSHIM_ACCUM_STEPS=1");
  nsc_call big = {1 << 20, ncclFloat32, ncclSum, 1, 0, 0};
  assert_false(nsc_policy_accumulable(&one, &big));
  /* Accumulation does not depend on compression being on. */
  nsc_config off = cfg_with("NCCLSHIM_COMPRESS=off");
  off.accum_steps = 4;
  assert_true(nsc_policy_accumulable(&off, &big));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(ddp_default),
      cmocka_unit_test(ddp_odd_sizes),
      cmocka_unit_test(find_unused),
      cmocka_unit_test(equal_buckets_ambiguous),
      cmocka_unit_test(small_rebuilt_buckets),
      cmocka_unit_test(equal_buckets_with_evidence),
      cmocka_unit_test(unexplained_first_pass),
      cmocka_unit_test(contradiction_fewer_bytes),
      cmocka_unit_test(contradiction_bigger_call),
      cmocka_unit_test(learning_cap),
      cmocka_unit_test(null_why_and_zero_bytes),
      cmocka_unit_test(policy_types_and_ops),
      cmocka_unit_test(policy_edges),
  };
  return cmocka_run_group_tests_name("accum", tests, NULL, NULL);
}
