/* test_accum.c — the accumulation state machine (shim/accum/accum.c) as a
 * pure function of a call sequence, on 1 to 4 simulated ranks whose
 * agreements are computed here (Max over ranks, as nsc_exchange_max does),
 * and the policy's accumulable() predicate (shim/plan/plan.c).
 *
 * Sequences are built the way DDP issues them: the whole model in one bucket
 * first (twice with static_graph), rebuilt buckets at new addresses after it,
 * or buckets from the start with a used-map (find_unused_parameters). Every
 * simulated rank has its own addresses (rank r's buffers are offset by r MiB):
 * decisions must not depend on pointer values, only on identity. Every
 * expectation is exact: which call syncs, when the pass is learned, when and
 * why accumulation ends, and that all ranks decide alike.
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

#define MAXR 4
#define N_OF(a) (sizeof(a) / sizeof((a)[0]))

/* Simulated ranks fed the same call sequence. */
typedef struct {
  nsc_accum a[MAXR];
  int W;
  long long K;
  int lag;                       /* 1: agreements applied when nsc_accum_apply_at() says (as the
                                  * shim does); 0: before the next call (every rule's own timing) */
  struct {
    int64_t v[NSC_ACC_AGREE_N];  /* the Max over ranks */
    uint64_t at;                 /* applied before this call number */
  } q[NSC_ACC_INFLIGHT];         /* issued, not yet applied, oldest first */
  int nq;
  int64_t agreed[NSC_ACC_AGREE_N];
  uintptr_t skew[MAXR];          /* per-rank address offset (0: rank * 1 MiB) */
  size_t calls;
  size_t agreements;
  char why[512];                 /* rank 0's last message */
  size_t learned_at, off_at;     /* call number (1-based) of the lock / the end */
} sim;

static void sim_init(sim *s, int W, long long K) {
  memset(s, 0, sizeof *s);
  s->W = W;
  s->K = K;
  for (int r = 0; r < W; r++) {
    nsc_accum_init(&s->a[r]);
    s->skew[r] = (uintptr_t)r << 20;
  }
}

static void sim_free(sim *s) {
  for (int r = 0; r < s->W; r++) nsc_accum_free(&s->a[r]);
}

static void note(sim *s, int r, const char *why) {
  if (r || !why[0]) return;
  snprintf(s->why, sizeof s->why, "%s", why);
  if (strstr(why, "learned")) s->learned_at = s->calls;
  if (strstr(why, "every call syncs")) s->off_at = s->calls;
}

/* Before call number s->calls: apply on every rank, oldest first, the
 * agreements due by then. */
static void collect(sim *s) {
  int last = -1;
  for (int i = 0; i < s->nq; i++)
    if (s->q[i].at <= s->calls) last = i;
  for (; last >= 0; last--) {
    for (int r = 0; r < s->W; r++) {
      char why[512];
      nsc_accum_agreed(&s->a[r], s->q[0].v, 1, s->K, why, sizeof why);
      note(s, r, why);
    }
    memmove(&s->q[0], &s->q[1], (size_t)(s->nq - 1) * sizeof s->q[0]);
    s->nq--;
  }
}

/* After a call: if due on rank 0 it must be due on every rank; Max over ranks. */
static void maybe_agree(sim *s) {
  int due0 = nsc_accum_take_due(&s->a[0]);
  for (int r = 1; r < s->W; r++) assert_int_equal(nsc_accum_take_due(&s->a[r]), due0);
  if (!due0) return;
  uint64_t at = s->lag ? nsc_accum_apply_at(&s->a[0], 0) : s->calls + 1;
  for (int r = 1; r < s->W; r++)
    if (s->lag) assert_int_equal(nsc_accum_apply_at(&s->a[r], 0), at);
  if (s->nq && at < s->q[s->nq - 1].at) at = s->q[s->nq - 1].at; /* as accumulate.c: in issue order */
  assert_true(s->nq < NSC_ACC_INFLIGHT);
  for (int i = 0; i < NSC_ACC_AGREE_N; i++) s->agreed[i] = INT64_MIN;
  for (int r = 0; r < s->W; r++) {
    int64_t v[NSC_ACC_AGREE_N];
    nsc_accum_agree_vals_at(&s->a[r], v, at);
    for (int i = 0; i < NSC_ACC_AGREE_N; i++)
      if (v[i] > s->agreed[i]) s->agreed[i] = v[i];
  }
  memcpy(s->q[s->nq].v, s->agreed, sizeof s->agreed);
  s->q[s->nq++].at = at;
  s->agreements++;
}

/* One accumulable fp32 Sum call of `count` floats on buffer id `buf` (rank r
 * sees buf + skew[r]); returns the decision, asserting all ranks agree. */
static int sim_call_on(sim *s, uintptr_t buf, const uintptr_t *per_rank, uint64_t count) {
  s->calls++;
  collect(s);
  int d0 = -1;
  for (int r = 0; r < s->W; r++) {
    uintptr_t b = per_rank ? per_rank[r] : buf + s->skew[r];
    nsc_accum_el e = {b, b, count, 7 /* ncclFloat32 */, 0 /* ncclSum */, count * 4};
    char why[512];
    int d = nsc_accum_next(&s->a[r], &e, s->K, why, sizeof why);
    note(s, r, why);
    if (r == 0) d0 = d;
    else assert_int_equal(d, d0);
  }
  maybe_agree(s);
  return d0;
}

static int sim_call(sim *s, uintptr_t buf, uint64_t count) { return sim_call_on(s, buf, NULL, count); }

/* A small floating Sum call on buffer buf (identity only) of fbytes bytes. */
static void sim_small(sim *s, uintptr_t buf, uint64_t fbytes) {
  nsc_accum_el e = {buf, buf, fbytes / 4, 7 /* ncclFloat32 */, 0 /* ncclSum */, fbytes};
  for (int r = 0; r < s->W; r++) nsc_accum_observe(&s->a[r], 0, &e);
}

/* Any other all-reduce: integer Sum (used-map) or floating bytes, on a buffer
 * of its own every time. */
static void sim_other(sim *s, int int_sum, uint64_t fbytes) {
  static uintptr_t fresh = 0x7000000000;
  nsc_accum_el e = {fresh, fresh, fbytes / 4, 7 /* ncclFloat32 */, 0 /* ncclSum */, fbytes};
  fresh += 64;
  for (int r = 0; r < s->W; r++) nsc_accum_observe(&s->a[r], int_sum, fbytes ? &e : NULL);
}

/* A model: whole-model bucket id, rebuilt bucket ids and sizes. */
typedef struct {
  uintptr_t whole;
  uint64_t wcount;
  int nb;
  uintptr_t b[8];
  uint64_t n[8];
  uint64_t small;   /* floats in buckets below MIN_BYTES (observed, not accumulable) */
  int used_map;     /* an int32 used-map after every pass */
} model;

static model mk(uint64_t n0, uint64_t n1, uint64_t n2, uint64_t n3) {
  model m = {0};
  uint64_t n[4] = {n0, n1, n2, n3};
  m.whole = 0x10000;
  for (int i = 0; i < 4 && n[i]; i++) {
    m.b[m.nb] = 0x20000 + 0x1000 * (uintptr_t)i;
    m.n[m.nb++] = n[i];
    m.wcount += n[i];
  }
  return m;
}

/* One pass of the rebuilt buckets; all decisions must be `expect` (or -1: any),
 * bucket `drop` (or -1) left out. Returns the decision of the last call. */
static int pass(sim *s, const model *m, int expect, int drop) {
  int d = -1;
  for (int i = 0; i < m->nb; i++) {
    if (i == drop) continue;
    d = sim_call(s, m->b[i], m->n[i]);
    if (expect >= 0) assert_int_equal(d, expect);
  }
  if (m->small) sim_other(s, 0, m->small * 4);
  if (m->used_map) sim_other(s, 1, 0);
  sim_other(s, 0, 4); /* the 1-element loss metric */
  return d;
}

static void whole(sim *s, const model *m) {
  assert_int_equal(sim_call(s, m->whole, m->wcount + m->small), 1);
  sim_other(s, 0, 4);
}

/* Steady state: pass i syncs exactly when i mod K == K-1. */
static void steady(sim *s, const model *m, long long from, long long to) {
  for (long long i = from; i < to; i++) pass(s, m, i % s->K == s->K - 1, -1);
}

/* One accumulable bucket and a small one on a fixed buffer: a pass that lacks
 * the large bucket is seen through the small one (it comes twice before the
 * next first bucket), and every later pass syncs (fuzz seed 147). */
/* lag: the shim's schedule (sim.lag), which learns a pass of one bucket
 * NSC_ACC_LAG - 2 passes later (see lagged_agreements); the run is then 3
 * passes longer, so that the missing pass keeps its phase. */
static void one_bucket(int lag) {
  const long long off = lag ? 3 : 0, from = 4 + (lag ? NSC_ACC_LAG - 2 : 0);
  for (int miss = 0; miss < 2; miss++) {
    sim s;
    sim_init(&s, 2, 3);
    s.lag = lag;
    assert_int_equal(sim_call(&s, 0x10000, 1100), 1); /* whole-model pass */
    sim_other(&s, 0, 4);
    long long i = 1;
    for (; i < 9 + off; i++) {
      int d = sim_call(&s, 0x20000, 1000);
      if (i >= from) assert_int_equal(d, i % 3 == 2);
      else if (i % 3 == 2) assert_int_equal(d, 1);
      sim_small(&s, 0x30000, 400);
    }
    assert_int_equal(s.a[0].mode, NSC_ACC_LOCKED);
    if (miss) sim_small(&s, 0x30000, 400); /* pass 9 + off without its large bucket */
    else sim_call(&s, 0x20000, 1000), sim_small(&s, 0x30000, 400);
    for (i = 10 + off; i < 16 + off; i++) {
      int d = sim_call(&s, 0x20000, 1000);
      assert_int_equal(d, miss ? 1 : i % 3 == 2);
      sim_small(&s, 0x30000, 400);
    }
    assert_int_equal(s.a[0].mode, miss ? NSC_ACC_OFF : NSC_ACC_LOCKED);
    sim_free(&s);
  }
}

static void one_bucket_pass_missing(void **state) {
  (void)state;
  one_bucket(0);
}

/* The shim's schedule (sim.lag = 1: each agreement applied up to
 * NSC_ACC_LAG calls after the one it followed, nsc_accum_apply_at()): the
 * lock is proposed ahead of the end of the pass that completes learning and
 * applied at the next pass's first bucket, with the calls in between
 * replayed into the locked state, so ddp_default's decisions are the same
 * with it. Passes of one bucket (the lag shrinks to 1 once the bucket has
 * come twice, but the agreement after its first call had the full lag):
 * learned NSC_ACC_LAG - 2 passes later, the same decisions from then on,
 * and a pass that lacks the bucket still stops every later skip. */
static void lagged_agreements(void **state) {
  (void)state;
  one_bucket(1);
}

/* find_unused_parameters with a foreign call of the pass's size (or larger)
 * before the first pass: find_unused has no whole-model pass, so it is never
 * micro-step 0 (fuzz seeds 133, 34223). Every pass m with m mod K = K-1
 * syncs. */
static void find_unused_foreign_first(void **state) {
  (void)state;
  model m = mk(1000, 0, 0, 0);
  m.used_map = 1;
  /* v = 0: of the pass's size; 1: larger, with an integer Sum after it by
   * chance (fuzzer seed 34223: taken for a whole-model pass, the count one
   * ahead, a pass before an optimizer step answered locally) */
  for (int v = 0; v < 2; v++) {
    sim s;
    sim_init(&s, 4, 3);
    m.small = v ? 400 : 0; /* a small bucket: the larger call is within a pass and its small calls */
    assert_int_equal(sim_call(&s, 0x90000, v ? 1300 : 1000), 1);
    if (v) sim_other(&s, 1, 0);
    for (long long i = 0; i < 20; i++) {
      int d = pass(&s, &m, -1, -1);
      if (i % 3 == 2) assert_int_equal(d, 1);
    }
    sim_free(&s);
  }
}

/* The first rebuilt pass lacks its first bucket and a call as large as the
 * pass follows: never locked on the rotated pass (fuzz seed 113). */
static void rotated_after_short_first_pass(void **state) {
  (void)state;
  model m = mk(300, 300, 300, 0);
  sim s;
  sim_init(&s, 2, 4);
  whole(&s, &m);
  pass(&s, &m, 1, 0);
  assert_int_equal(sim_call(&s, 0x90000, 900), 1);
  for (long long i = 2; i < 30; i++) pass(&s, &m, 1, -1);
  assert_int_equal(s.a[0].mode, NSC_ACC_OFF);
  assert_non_null(strstr(s.why, "as large as the backward pass being learned"));
  sim_free(&s);
}

/* find_unused_parameters whose first pass lacks its first bucket (fuzzer
 * seed 13114): the used-map ends each pass, so the rotation [b1 b2 b3 b0]
 * is never a candidate; every pass m with m mod K = K-1 (the optimizer's)
 * syncs in full, on every rank. */
static void find_unused_short_first(void **state) {
  (void)state;
  model m = mk(300, 100, 300, 300);
  m.used_map = 1;
  for (int lag = 0; lag < 2; lag++) {
    sim s;
    sim_init(&s, 2, 4);
    s.lag = lag;
    pass(&s, &m, 1, 0);
    for (long long i = 1; i < 40; i++)
      if (i % 4 == 3) {
        for (int b = 0; b < m.nb; b++) assert_int_equal(sim_call(&s, m.b[b], m.n[b]), 1);
        sim_other(&s, 1, 0);
        sim_other(&s, 0, 4);
      } else
        pass(&s, &m, -1, -1);
    sim_free(&s);
  }
}

/* One accumulable bucket and three small ones on fixed buffers (below
 * MIN_BYTES); pass 2 lacks the accumulable bucket (invisible to the pass
 * count), pass 3 a small one (fuzzer seed 15160): not learned, every pass
 * the optimizer steps after (m mod K = K-1, counted over every pass) syncs. */
static void invisible_pass_while_learning(void **state) {
  (void)state;
  sim s;
  sim_init(&s, 2, 4);
  assert_int_equal(sim_call(&s, 0x90000, 1000 + 3 * 50), 1); /* the whole-model pass */
  sim_other(&s, 0, 4);
  for (long long t = 1; t < 30; t++) {
    for (int b = 0; b < 3; b++)
      if (!(t == 3 && b == 0)) sim_small(&s, 0x5000 + (uintptr_t)b * 64, 200);
    if (t != 2) {
      int d = sim_call(&s, 0x6000, 1000);
      if (t % 4 == 3) assert_int_equal(d, 1);
    }
    sim_other(&s, 0, 4);
  }
  assert_int_equal(s.a[0].mode, NSC_ACC_OFF);
  assert_non_null(strstr(s.why, "without any of its accumulable buckets"));
  sim_free(&s);
}

/* "Past its first pass" with a foreign metric after the whole-model bucket
 * and a foreign call of a bucket's size in the rebuilt pass (fuzzer seed
 * 16942): the rebuilt pass's large calls add up to the whole-model bucket
 * without the metric, so a model re-wrapped on a new communicator after it
 * is late (never skips) instead of counting its phase from its own pass. */
static void recurred_with_foreign_metric(void **state) {
  (void)state;
  sim s;
  sim_init(&s, 2, 4);
  assert_int_equal(sim_call(&s, 0x90000, 900), 1); /* the whole-model bucket */
  sim_other(&s, 0, 400);                           /* a metric */
  assert_int_equal(sim_call(&s, 0x91000, 300), 1); /* a foreign call of a bucket's size */
  assert_false(nsc_accum_recurred(&s.a[0]));
  assert_int_equal(sim_call(&s, 0xa0000, 300), 1);
  assert_int_equal(sim_call(&s, 0xa1000, 300), 1);
  assert_true(nsc_accum_recurred(&s.a[0]));
  sim_free(&s);
}

/* Small foreign calls before and inside the rebuilt pass (fuzzer seed 26039:
 * an all-reduce of a bucket's size below MIN_BYTES, twice after the
 * whole-model bucket and once before the rebuilt pass's first bucket): no
 * running sum equals the whole-model bucket, a subset of the calls after it
 * does (the rebuilt pass: two small buckets and a large one). */
static void recurred_with_small_foreign_calls(void **state) {
  (void)state;
  sim s;
  sim_init(&s, 2, 4);
  assert_int_equal(sim_call(&s, 0x90000, 900), 1); /* the whole-model bucket: 3600 bytes */
  sim_other(&s, 0, 800);                           /* foreign, a small bucket's size */
  sim_other(&s, 0, 800);
  sim_other(&s, 0, 800);                           /* foreign, in the rebuilt pass */
  sim_small(&s, 0xb0000, 800);                     /* rebuilt: small bucket 0 */
  sim_small(&s, 0xb1000, 1600);                    /* rebuilt: small bucket 1 */
  assert_false(nsc_accum_recurred(&s.a[0]));
  assert_int_equal(sim_call(&s, 0xa0000, 300), 1); /* rebuilt: the large bucket, 1200 bytes */
  assert_true(nsc_accum_recurred(&s.a[0]));
  sim_free(&s);
}

/* A communicator whose accumulation went off (a failed agreement) before its
 * first pass was known to be over counts as past it (fuzzer seeds 17411,
 * 17416): a model re-wrapped on a new communicator later is late. One that
 * went off before any accumulable call does not. */
static void off_counts_as_past_first_pass(void **state) {
  (void)state;
  nsc_accum a, b;
  nsc_accum_init(&a);
  nsc_accum_init(&b);
  nsc_accum_el w = {0x90000, 0x90000, 900, 7, 0, 3600};
  char why[256];
  (void)nsc_accum_next(&a, &w, 4, why, sizeof why);
  assert_false(nsc_accum_recurred(&a));
  int64_t v[NSC_ACC_AGREE_N] = {0};
  nsc_accum_agreed(&a, v, 0, 4, why, sizeof why); /* the agreement failed on this rank */
  assert_int_equal(a.mode, NSC_ACC_OFF);
  assert_true(nsc_accum_recurred(&a));
  nsc_accum_agreed(&b, v, 0, 4, why, sizeof why);
  assert_int_equal(b.mode, NSC_ACC_OFF);
  assert_false(nsc_accum_recurred(&b));
  nsc_accum_free(&a);
  nsc_accum_free(&b);
}

/* A larger call before the whole-model bucket (fuzzer seed 17416: a one-bucket
 * model, W then its rebuilt bucket of W's size, after a larger metric): the
 * first pass is over at the rebuilt bucket. */
static void recurred_after_larger_metric(void **state) {
  (void)state;
  sim s;
  sim_init(&s, 2, 4);
  assert_int_equal(sim_call(&s, 0x80000, 2000), 1); /* a larger metric */
  assert_int_equal(sim_call(&s, 0x90000, 900), 1);  /* the whole-model bucket */
  assert_false(nsc_accum_recurred(&s.a[0]));
  assert_int_equal(sim_call(&s, 0xa0000, 900), 1);  /* its one rebuilt bucket */
  assert_true(nsc_accum_recurred(&s.a[0]));
  sim_free(&s);
}

/* Locked on a one-bucket pass; a bucket that was never learned (its own
 * buffer, accumulable) joins the passes, then a pass holds only it (fuzzer
 * seed 21621): that pass is invisible to the count, but the unlearned
 * bucket twice before the next first bucket shows it: no skip after. */
static void extra_bucket_shows_invisible_pass(void **state) {
  (void)state;
  model m = mk(1000, 0, 0, 0);
  sim s;
  sim_init(&s, 2, 4);
  whole(&s, &m);
  for (long long i = 1; i < 8; i++) pass(&s, &m, -1, -1); /* learned, then locked */
  assert_int_equal(s.a[0].mode, NSC_ACC_LOCKED);
  for (long long i = 8; i < 11; i++) { /* b0 then the extra bucket */
    sim_call(&s, m.b[0], 1000);
    assert_int_equal(sim_call(&s, 0xe0000, 1000), 1);
    sim_other(&s, 0, 4);
  }
  assert_int_equal(sim_call(&s, 0xe0000, 1000), 1); /* pass 11: the extra bucket alone */
  sim_other(&s, 0, 4);
  for (long long i = 12; i < 24; i++) assert_int_equal(sim_call(&s, m.b[0], 1000), 1);
  sim_free(&s);
}

static void ddp_default(void **state) {
  (void)state;
  model m = mk(100, 300, 300, 300);
  for (int lag = 0; lag < 2; lag++) /* lag: the shim's schedule, the same decisions (lagged_agreements) */
  for (long long K = 2; K <= 9; K++)
    for (int W = 1; W <= 4; W += 3) {
      sim s;
      sim_init(&s, W, K);
      s.lag = lag;
      whole(&s, &m);
      for (int p = 1; p < 4; p++) pass(&s, &m, 1, -1);
      /* Proposed at the end of pass 3 (lag: at its first bucket), agreed before the first call of pass 4. */
      assert_int_equal(s.a[0].mode, NSC_ACC_LEARNING);
      assert_int_equal(s.agreements, 13);
      steady(&s, &m, 4, 4 + 6 * K);
      assert_int_equal(s.a[0].mode, NSC_ACC_LOCKED);
      assert_int_equal(s.learned_at, 14);
      assert_non_null(strstr(s.why, "learned a backward pass of 4 bucket(s), 4000 bytes"));
      assert_non_null(strstr(s.why, "after DDP's whole-model pass"));
      uint64_t skipped = 0;
      for (long long i = 4; i < 4 + 6 * K; i++) skipped += (i % K) != K - 1 ? 4 : 0;
      assert_int_equal(s.a[0].skipped, skipped);
      assert_int_equal(s.off_at, 0);
      /* After the lock: one agreement per K passes (13 while learning). */
      assert_int_equal(s.agreements, 13 + 6);
      sim_free(&s);
    }
}

/* R6: the program's optimizer steps, told to every simulated rank alike. */
static void sim_steps(sim *s, int watched, uint64_t steps) {
  for (int r = 0; r < s->W; r++) nsc_accum_steps(&s->a[r], watched, steps);
}

/* DDP of 4 buckets locked from pass 4 (as ddp_default), then passes 4..n-1
 * with an optimizer step after each pass i where step_after(i); returns the
 * decisions of every pass (1 sync, 0 skipped) in d[]; steps are counted on. */
typedef int (*step_rule)(long long i, long long P);
static void stepped(sim *s, const model *m, long long n, step_rule after, long long P, int *d) {
  uint64_t steps = 0;
  whole(s, m);
  sim_steps(s, 1, steps);
  if (after(0, P)) sim_steps(s, 1, ++steps);
  for (long long i = 1; i < n; i++) {
    d[i] = pass(s, m, -1, -1);
    if (after(i, P)) sim_steps(s, 1, ++steps);
  }
}
static int every_P(long long i, long long P) { return i % P == P - 1; }
/* windows of P, but one cut short: a step after pass 29 (window 28..29) */
static int cut_short(long long i, long long P) { return i == 29 || (i < 28 && i % P == P - 1) || (i > 29 && (i - 30) % P == P - 1); }

static void steps_auto(void **state) {
  (void)state;
  model m = mk(100, 300, 300, 300);
  for (long long P = 1; P <= 5; P++) {
    sim s;
    sim_init(&s, 2, NSC_ACC_AUTO);
    int d[60] = {0};
    stepped(&s, &m, 60, every_P, P, d);
    assert_int_equal(s.a[0].mode, NSC_ACC_LOCKED);
    assert_int_equal(s.a[0].P, P);
    /* every pass that ends a window syncs: no step on a skipped sync */
    for (long long i = 1; i < 60; i++)
      if (every_P(i, P)) assert_int_equal(d[i], 1);
    /* the passes from the third window after the lock on: only the last of each window syncs */
    long long skipped = 0;
    for (long long i = 40; i < 60; i++) {
      assert_int_equal(d[i], P < 2 || i % P == P - 1);
      skipped += !d[i];
    }
    if (P >= 2) assert_true(skipped > 0);
    assert_int_equal(s.off_at, 0);
    sim_free(&s);
  }
}

static void steps_check_k(void **state) {
  (void)state;
  model m = mk(100, 300, 300, 300);
  /* K = 4 and the optimizer steps every 4 passes: skipping as K says, checked */
  sim s;
  sim_init(&s, 2, 4);
  int d[60] = {0};
  stepped(&s, &m, 60, every_P, 4, d);
  for (long long i = 1; i < 60; i++)
    if (every_P(i, 4)) assert_int_equal(d[i], 1);
  for (long long i = 40; i < 60; i++) assert_int_equal(d[i], i % 4 == 3);
  assert_int_equal(s.a[0].k_off, 0);
  sim_free(&s);
  /* K = 4 but the optimizer steps every 2 (or every pass): never a skipped pass before a step; after two windows
   * of the other length, every pass syncs, said once */
  for (long long P = 1; P <= 2; P++) {
    sim_init(&s, 3, 4);
    memset(d, 0, sizeof d);
    stepped(&s, &m, 60, every_P, P, d);
    for (long long i = 1; i < 60; i++) assert_int_equal(d[i], 1);
    assert_int_equal(s.a[0].k_off, 1);
    assert_non_null(strstr(s.why, "NCCLSHIM_ACCUM_STEPS=4, but the optimizer stepped after"));
    sim_free(&s);
  }
  /* K = 4 and a window cut short (2 passes): its last pass was skipped (the hook makes the gradients whole);
   * the window after it syncs all (the one before it did not have 4 passes), then skipping resumes */
  sim_init(&s, 2, 4);
  memset(d, 0, sizeof d);
  stepped(&s, &m, 60, cut_short, 4, d);
  assert_int_equal(d[29], 0); /* the step after it sees a skipped pass: ncclshim_optimizer_step says so */
  for (long long i = 30; i < 34; i++) assert_int_equal(d[i], 1);
  for (long long i = 34; i < 60; i++) assert_int_equal(d[i], (i - 30) % 4 == 3);
  assert_int_equal(s.a[0].k_off, 0);
  sim_free(&s);
}

/* Without the step signal: K as before (R3); auto: nothing skipped. */
static void steps_unwatched(void **state) {
  (void)state;
  model m = mk(100, 300, 300, 300);
  sim s;
  sim_init(&s, 2, NSC_ACC_AUTO);
  whole(&s, &m);
  for (long long i = 1; i < 40; i++) assert_int_equal(pass(&s, &m, -1, -1), 1);
  assert_int_equal(s.a[0].skipped, 0);
  assert_non_null(strstr(s.why, "needs the optimizer steps"));
  sim_free(&s);
}

static void static_graph(void **state) {
  (void)state;
  model m = mk(250, 250, 250, 250); /* equal sizes */
  sim s;
  sim_init(&s, 3, 4);
  sim_other(&s, 1, 0); /* the used-map before the first whole-model pass */
  whole(&s, &m);
  whole(&s, &m);
  for (int p = 2; p < 5; p++) pass(&s, &m, 1, -1);
  steady(&s, &m, 5, 25);
  assert_non_null(strstr(s.why, "(static_graph)"));
  assert_non_null(strstr(s.why, "(2 whole-model pass(es)); pass 5 is next"));
  assert_int_equal(s.a[0].skipped, 4 * 15);
  sim_free(&s);
}

static void find_unused(void **state) {
  (void)state;
  model m = mk(100, 300, 300, 300);
  m.used_map = 1;
  sim s;
  sim_init(&s, 2, 4);
  for (int p = 0; p < 3; p++) pass(&s, &m, 1, -1);
  steady(&s, &m, 3, 20);
  assert_int_equal(s.learned_at, 13);
  assert_non_null(strstr(s.why, "find_unused_parameters"));
  sim_free(&s);
  /* The same passes without the used-map: not DDP's gradients (a metric-only
   * communicator looks like this), never skipped. */
  m.used_map = 0;
  sim_init(&s, 2, 4);
  for (int p = 0; p < 20; p++) pass(&s, &m, 1, -1);
  assert_int_equal(s.a[0].mode, NSC_ACC_OFF);
  assert_non_null(strstr(s.why, "not as DDP's gradients"));
  assert_int_equal(s.a[1].skipped, 0);
  sim_free(&s);
}

/* Rebuilt buckets below MIN_BYTES: later passes count fewer accumulable bytes
 * than the whole-model pass; the small buckets account for the difference. */
static void small_rebuilt_buckets(void **state) {
  (void)state;
  model m = mk(300, 400, 0, 0);
  m.small = 75;
  sim s;
  sim_init(&s, 2, 3);
  whole(&s, &m);
  for (int p = 1; p < 4; p++) pass(&s, &m, 1, -1);
  steady(&s, &m, 4, 16);
  assert_int_equal(s.a[0].mode, NSC_ACC_LOCKED);
  sim_free(&s);
  /* A first call larger than the pass plus its small calls: not DDP's. */
  model big = m;
  big.wcount += 1000;
  sim_init(&s, 2, 3);
  whole(&s, &big);
  for (int p = 1; p < 20; p++) pass(&s, &m, 1, -1);
  assert_int_equal(s.a[0].mode, NSC_ACC_OFF);
  assert_int_equal(s.a[0].skipped, 0);
  sim_free(&s);
}

/* Foreign calls of a bucket's exact size at every position: synced, the
 * counter never moves, accumulation goes on. */
static void foreign_equal_size(void **state) {
  (void)state;
  model m = mk(250, 250, 250, 0);
  for (int pos = 0; pos <= 3; pos++) {
    sim s;
    sim_init(&s, 2, 2);
    whole(&s, &m);
    for (int p = 1; p < 4; p++) pass(&s, &m, 1, -1);
    for (long long i = 4; i < 30; i++) {
      int want = i % 2 == 1;
      for (int b = 0; b <= m.nb; b++) {
        if (b == pos) assert_int_equal(sim_call(&s, 0x90000 + (uintptr_t)i * 0x100, 250), 1);
        if (b < m.nb) assert_int_equal(sim_call(&s, m.b[b], m.n[b]), want);
      }
      sim_other(&s, 0, 4);
    }
    assert_int_equal(s.a[0].mode, NSC_ACC_LOCKED);
    assert_int_equal(s.a[0].skipped, 13 * 3);
    sim_free(&s);
  }
}

/* Of another size, or as large as the whole pass (a re-created model's first
 * pass, or a parameter average): the second ends accumulation at once. */
static void foreign_other_sizes(void **state) {
  (void)state;
  model m = mk(250, 250, 250, 0);
  sim s;
  sim_init(&s, 3, 2);
  whole(&s, &m);
  for (int p = 1; p < 4; p++) pass(&s, &m, 1, -1);
  pass(&s, &m, 0, -1);
  assert_int_equal(sim_call(&s, 0xa0000, 700), 1); /* < the pass: synced, goes on */
  pass(&s, &m, 1, -1);
  pass(&s, &m, 0, -1);
  assert_int_equal(sim_call(&s, 0xa0000, 750), 1);
  assert_int_equal(s.a[0].mode, NSC_ACC_OFF);
  assert_non_null(strstr(s.why, "as large as a whole backward pass (3000 bytes)"));
  for (int p = 0; p < 6; p++) pass(&s, &m, 1, -1);
  sim_free(&s);
}

/* Equal-sized buckets, one pass without bucket `drop`: the phase never shifts;
 * that pass's later buckets sync, and the agreement after the next synced
 * pass ends accumulation on every rank. */
static void short_pass(void **state) {
  (void)state;
  model m = mk(250, 250, 250, 0);
  for (int drop = 0; drop < 3; drop++) {
    sim s;
    sim_init(&s, 2, 2);
    whole(&s, &m);
    for (int p = 1; p < 4; p++) pass(&s, &m, 1, -1);
    pass(&s, &m, 0, -1);     /* 4: skipped */
    pass(&s, &m, 1, -1);     /* 5: synced */
    for (int b = 0; b < m.nb; b++) /* 6: skipped up to the gap, synced after it */
      if (b != drop) assert_int_equal(sim_call(&s, m.b[b], m.n[b]), b < drop ? 0 : 1);
    if (drop == 2) assert_int_equal(sim_call(&s, m.b[0], m.n[0]), 1); /* 7 begins: the gap is seen here */
    for (int b = drop == 2 ? 1 : 0; b < m.nb; b++) assert_int_equal(sim_call(&s, m.b[b], m.n[b]), 1);
    for (int p = 8; p < 20; p++) pass(&s, &m, 1, -1);
    assert_int_equal(s.a[0].mode, NSC_ACC_OFF);
    assert_non_null(strstr(s.why, "did not come where expected"));
    sim_free(&s);
  }
}

/* Two models on one communicator: two different whole-model buckets before
 * the passes: the phase cannot be told, never skipped. */
static void two_models(void **state) {
  (void)state;
  model a = mk(500, 500, 0, 0), b = mk(500, 500, 0, 0);
  b.whole = 0x50000;
  for (int i = 0; i < b.nb; i++) b.b[i] += 0x30000;
  sim s;
  sim_init(&s, 2, 2);
  whole(&s, &a);
  whole(&s, &b);
  for (int p = 1; p < 20; p++) {
    pass(&s, &a, 1, -1);
    pass(&s, &b, 1, -1);
  }
  assert_int_equal(s.a[0].mode, NSC_ACC_OFF);
  assert_int_equal(s.a[0].skipped, 0);
  sim_free(&s);
}

/* Created mid-training (the late flag on one rank is enough): never skips. */
static void late_communicator(void **state) {
  (void)state;
  model m = mk(100, 300, 300, 300);
  sim s;
  sim_init(&s, 3, 4);
  s.a[2].late = 1;
  whole(&s, &m);
  for (int p = 1; p < 12; p++) pass(&s, &m, 1, -1);
  assert_int_equal(s.a[0].mode, NSC_ACC_OFF);
  assert_non_null(strstr(s.why, "created mid-training"));
  assert_int_equal(s.off_at, 14);
  sim_free(&s);
}

/* A bucket that moved on one rank only (assumption B broken while learning):
 * the ranks learn different passes and never propose the same one; after 16
 * passes learning ends, having synced every call. */
static void moved_while_learning(void **state) {
  (void)state;
  model m = mk(100, 300, 300, 300);
  sim s;
  sim_init(&s, 2, 2);
  whole(&s, &m);
  pass(&s, &m, 1, -1);
  pass(&s, &m, 1, -1);
  uintptr_t moved[2] = {m.b[1] + s.skew[0], 0x777000}; /* rank 1: bucket 1 elsewhere from now on */
  for (int p = 3; p < 20; p++) {
    assert_int_equal(sim_call(&s, m.b[0], m.n[0]), 1);
    assert_int_equal(sim_call_on(&s, 0, moved, m.n[1]), 1);
    assert_int_equal(sim_call(&s, m.b[2], m.n[2]), 1);
    assert_int_equal(sim_call(&s, m.b[3], m.n[3]), 1);
  }
  assert_int_equal(s.a[0].mode, NSC_ACC_OFF);
  assert_int_equal(s.a[1].mode, NSC_ACC_OFF);
  assert_non_null(strstr(s.why, "no stable backward pass after 16 passes"));
  sim_free(&s);
}

/* Assumption B broken after the lock on one rank (a bucket's address taken
 * by another tensor there): caught by the next agreement, off on all ranks. */
static void moved_after_lock(void **state) {
  (void)state;
  model m = mk(100, 300, 300, 300);
  sim s;
  sim_init(&s, 2, 2);
  whole(&s, &m);
  for (int p = 1; p < 4; p++) pass(&s, &m, 1, -1);
  pass(&s, &m, 0, -1); /* 4 */
  /* Pass 5 (synced): rank 1's bucket 2 came from elsewhere. */
  uintptr_t other[2] = {m.b[2] + s.skew[0], 0x888000};
  assert_int_equal(sim_call(&s, m.b[0], m.n[0]), 1);
  assert_int_equal(sim_call(&s, m.b[1], m.n[1]), 1);
  /* The decisions agree here only because pass 5 syncs anyway. */
  for (int r = 0; r < 2; r++) {
    nsc_accum_el e = {other[r], other[r], m.n[2], 7, 0, m.n[2] * 4};
    assert_int_equal(nsc_accum_next(&s.a[r], &e, 2, NULL, 0), 1);
  }
  assert_int_equal(sim_call(&s, m.b[3], m.n[3]), 1);
  for (int p = 6; p < 12; p++) pass(&s, &m, 1, -1);
  assert_int_equal(s.a[0].mode, NSC_ACC_OFF);
  assert_int_equal(s.a[1].mode, NSC_ACC_OFF);
  sim_free(&s);
}

/* Never the same pass twice in a row: after 16 passes rank 0 says so once. */
static void no_convergence(void **state) {
  (void)state;
  model m = mk(100, 200, 300, 400);
  sim s;
  sim_init(&s, 2, 2);
  for (int p = 0; p < 40; p++) {
    int order[2][4] = {{0, 1, 2, 3}, {0, 2, 1, 3}};
    for (int i = 0; i < 4; i++) assert_int_equal(sim_call(&s, m.b[order[p % 2][i]], m.n[order[p % 2][i]]), 1);
    sim_other(&s, 1, 0);
  }
  assert_int_equal(s.a[0].mode, NSC_ACC_OFF);
  assert_non_null(strstr(s.why, "no stable backward pass after 16 passes"));
  sim_free(&s);
}

/* Fresh buffers every call (a metric allocated anew each time, at a new
 * address): no pass ever forms, nothing is skipped, and the ranks keep
 * agreeing after every call until NSC_ACC_LEARN_MAX (learning_cap). */
static void fresh_buffers(void **state) {
  (void)state;
  sim s;
  sim_init(&s, 2, 2);
  for (size_t i = 0; i < 40; i++) {
    assert_int_equal(sim_call(&s, 0x100000 + 64 * i, 1000), 1);
    assert_int_equal(sim_call(&s, 0x200000 + 64 * i, 2000), 1);
  }
  assert_int_equal(s.a[0].mode, NSC_ACC_LEARNING);
  assert_int_equal(s.a[0].passes_local, 0);
  assert_int_equal(s.agreements, 80);
  assert_int_equal(s.a[1].skipped, 0);
  sim_free(&s);
}

/* Equal-sized buckets with find_unused_parameters, many of them: learned
 * (the count of equal signatures is no pass count). */
static void many_equal_buckets(void **state) {
  (void)state;
  sim s;
  sim_init(&s, 2, 2);
  for (int p = 0; p < 3; p++) {
    for (uintptr_t b = 0; b < 40; b++) assert_int_equal(sim_call(&s, 0x300000 + 0x1000 * b, 512), 1);
    sim_other(&s, 1, 0);
  }
  for (int p = 3; p < 9; p++) {
    for (uintptr_t b = 0; b < 40; b++) assert_int_equal(sim_call(&s, 0x300000 + 0x1000 * b, 512), p % 2 == 1);
    sim_other(&s, 1, 0);
  }
  assert_int_equal(s.a[0].mode, NSC_ACC_LOCKED);
  sim_free(&s);
}

/* Never a repeated buffer or signature: learning ends after NSC_ACC_LEARN_MAX calls. */
static void learning_cap(void **state) {
  (void)state;
  sim s;
  sim_init(&s, 1, 4);
  for (size_t i = 0; i < NSC_ACC_LEARN_MAX; i++) assert_int_equal(sim_call(&s, 0x100000 + 64 * i, 1000 + i), 1);
  assert_int_equal(s.a[0].mode, NSC_ACC_LEARNING);
  assert_int_equal(sim_call(&s, 5, 1000), 1);
  assert_int_equal(s.a[0].mode, NSC_ACC_OFF);
  assert_non_null(strstr(s.why, "no backward pass learned in 4096 accumulable all-reduces"));
  assert_null(s.a[0].hist);
  size_t agreed = s.agreements;
  for (int i = 0; i < 100; i++) assert_int_equal(sim_call(&s, 0x100000, 1000), 1);
  assert_int_equal(s.agreements, agreed); /* no more agreements */
  assert_int_equal(s.a[0].skipped, 0);
  sim_free(&s);
}

/* A failed agreement on one rank: that rank syncs everything (and says so). */
static void failed_agreement(void **state) {
  (void)state;
  nsc_accum a;
  nsc_accum_init(&a);
  nsc_accum_el e = {64, 64, 256, 7, 0, 1024};
  assert_int_equal(nsc_accum_next(&a, &e, 2, NULL, 0), 1);
  assert_int_equal(nsc_accum_take_due(&a), 1);
  assert_int_equal(nsc_accum_take_due(&a), 0);
  char why[256];
  nsc_accum_agreed(&a, NULL, 0, 2, why, sizeof why);
  assert_int_equal(a.mode, NSC_ACC_OFF);
  assert_non_null(strstr(why, "agreement failed"));
  assert_int_equal(nsc_accum_next(&a, &e, 2, NULL, 0), 1);
  assert_int_equal(nsc_accum_take_due(&a), 0);
  nsc_accum_free(&a);
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
      nsc_call c = {.count = count, .dt = (ncclDataType_t)dt, .op = (ncclRedOp_t)op, .has_buffers = 1, .in_group = 0, .capturing = 0};
      assert_int_equal(nsc_policy_accumulable(&cfg, &c), floating && sum_avg);
      c.in_group = 1; /* groups do not matter to accumulation */
      assert_int_equal(nsc_policy_accumulable(&cfg, &c), floating && sum_avg);
    }
  }
}

static void policy_edges(void **state) {
  (void)state;
  nsc_config cfg = cfg_with("NCCLSHIM_ACCUM_STEPS=2");
  nsc_call c = {.count = 16384, .dt = ncclFloat32, .op = ncclSum, .has_buffers = 1, .in_group = 0, .capturing = 0}; /* exactly MIN_BYTES */
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
  /* Captured into a CUDA graph: never accumulable (the decision forwards it:
   * test_plan.c's table). */
  nsc_call cap = {.count = 1 << 20, .dt = ncclFloat32, .op = ncclSum, .has_buffers = 1, .in_group = 0, .capturing = 1};
  assert_false(nsc_policy_accumulable(&cfg, &cap));
  cap.capturing = 0;
  assert_true(nsc_policy_accumulable(&cfg, &cap));
  /* NULL buffers or count 0: the caller gets plain NCCL's answer. */
  nsc_call nb = {.count = 1 << 20, .dt = ncclFloat32, .op = ncclSum, .has_buffers = 0, .in_group = 0, .capturing = 0};
  assert_false(nsc_policy_accumulable(&cfg, &nb));
  nsc_call zero = {.count = 0, .dt = ncclFloat32, .op = ncclSum, .has_buffers = 1, .in_group = 0, .capturing = 0};
  nsc_config cfg0 = cfg_with("NCCLSHIM_MIN_BYTES=0");
  cfg0.accum_steps = 2;
  assert_false(nsc_policy_accumulable(&cfg0, &zero));
  /* The 1-element metric all-reduce and an int32 used-map never count. */
  nsc_call metric = {.count = 1, .dt = ncclFloat32, .op = ncclSum, .has_buffers = 1, .in_group = 0, .capturing = 0};
  assert_false(nsc_policy_accumulable(&cfg, &metric));
  nsc_call used = {.count = 1 << 20, .dt = ncclInt32, .op = ncclSum, .has_buffers = 1, .in_group = 0, .capturing = 0};
  assert_false(nsc_policy_accumulable(&cfg, &used));
  /* K = 1 (the default): nothing is accumulable. */
  nsc_config one = cfg_with("NCCLSHIM_ACCUM_STEPS=1");
  nsc_call big = {.count = 1 << 20, .dt = ncclFloat32, .op = ncclSum, .has_buffers = 1, .in_group = 0, .capturing = 0};
  assert_false(nsc_policy_accumulable(&one, &big));
  /* Accumulation does not depend on compression being on. */
  nsc_config off = cfg_with("NCCLSHIM_COMPRESS=off");
  off.accum_steps = 4;
  assert_true(nsc_policy_accumulable(&off, &big));
}

/* A broadcast on the communicator (int32: DDP's bucket rebuild sends two). */
static void sim_bcast(sim *s, int int32, uint64_t count) {
  for (int r = 0; r < s->W; r++) nsc_accum_broadcast(&s->a[r], int32, count);
}

/* DDP's rebuild for a model of one bucket of n floats: the bucket indices
 * (one per parameter, and the bucket count) and the bucket sizes. */
static void sim_rebuild(sim *s, uint64_t nparams) {
  sim_bcast(s, 1, nparams + 1);
  sim_bcast(s, 1, 1);
}

/* A model of one bucket whose rebuilt bucket took the freed whole-model
 * bucket's address (issue 24: the caching allocator's reuse; every call on
 * one buffer, as a metric's). With DDP's rebuild broadcasts after the
 * whole-model pass (static_graph: after two) it is learned: NSC_ACC_REPS
 * rebuilt passes after them (with the shim's lag too: the pass is one
 * call long, its agreement's lag shrinks to 1 at once), micro-steps counted from the first call, every pass m with m mod K = K-1
 * synced; int64 broadcasts every forward (BatchNorm's buffers) change
 * nothing. */
static void one_bucket_in_place(void **state) {
  (void)state;
  for (int sg = 0; sg < 2; sg++)
    for (int lag = 0; lag < 2; lag++)
      for (long long K = 2; K <= 5; K++) {
        sim s;
        sim_init(&s, 3, K);
        s.lag = lag;
        const long long npre = 1 + sg, from = npre + NSC_ACC_REPS;
        for (long long i = 0; i < from + 4 * K; i++) {
          sim_bcast(&s, 0, 7); /* BatchNorm's num_batches_tracked (int64), every forward */
          if (i == npre) sim_rebuild(&s, 6);
          int d = sim_call(&s, 0x10000, 50000);
          sim_other(&s, 0, 4);
          assert_int_equal(d, i < from ? 1 : i % K == K - 1);
        }
        assert_int_equal(s.a[0].mode, NSC_ACC_LOCKED);
        assert_non_null(strstr(s.why, "its one bucket rebuilt in place"));
        char want[64];
        snprintf(want, sizeof want, "(%lld whole-model pass(es)); pass %lld is next", npre, from);
        assert_non_null(strstr(s.why, want));
        sim_free(&s);
      }
}

/* The same calls without DDP's rebuild where it must be (none; after the
 * third call; int32 broadcasts after every call; a second broadcast of two
 * buckets), and DDP's rebuild beside a model whose whole gradient bucket is
 * below MIN_BYTES (2000 bytes, observed only) and a large metric on a fixed
 * buffer all-reduced after its backward (the bucket then comes before the
 * metric's first call) or before it (the bucket between the metric and the
 * rebuild): never skipped, and the message says what was seen rather than
 * "no stable pass". (With a used-map after every call it is find_unused's
 * pass of one bucket: find_unused.) */
static void one_bucket_in_place_not_ddp(void **state) {
  (void)state;
  static const char *why[] = {"no such broadcasts came", "the broadcasts came after a later pass",
                              "other int32 broadcasts came", "other int32 broadcasts came",
                              "a floating all-reduce came before the first accumulable one",
                              "a floating all-reduce larger than a loss came between the first pass and the broadcasts"};
  for (int v = 0; v < 6; v++) {
    sim s;
    sim_init(&s, 2, 4);
    for (long long i = 0; i < 30; i++) {
      if ((v == 1 && i == 3) || v == 2 || (v >= 4 && i == 1)) sim_rebuild(&s, 6);
      if (v == 3 && i == 1) sim_bcast(&s, 1, 7), sim_bcast(&s, 1, 2);
      if (v == 4) sim_small(&s, 0x5000, 2000); /* the small gradient bucket, then the metric */
      assert_int_equal(sim_call(&s, 0x10000, 50000), 1);
      if (v == 5) sim_small(&s, 0x5000, 2000); /* the metric (forward), then the small bucket */
      sim_other(&s, 0, 4);
    }
    assert_int_equal(s.a[0].mode, NSC_ACC_OFF);
    assert_int_equal(s.a[0].skipped, 0);
    assert_null(strstr(s.why, "no stable backward pass"));
    assert_non_null(strstr(s.why, "all-reduces repeat on one buffer"));
    assert_non_null(strstr(s.why, why[v]));
    sim_free(&s);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(one_bucket_in_place),
      cmocka_unit_test(one_bucket_in_place_not_ddp),
      cmocka_unit_test(ddp_default),
      cmocka_unit_test(one_bucket_pass_missing),
      cmocka_unit_test(lagged_agreements),
      cmocka_unit_test(find_unused_foreign_first),
      cmocka_unit_test(rotated_after_short_first_pass),
      cmocka_unit_test(static_graph),
      cmocka_unit_test(find_unused),
      cmocka_unit_test(find_unused_short_first),
      cmocka_unit_test(invisible_pass_while_learning),
      cmocka_unit_test(recurred_with_foreign_metric),
      cmocka_unit_test(recurred_with_small_foreign_calls),
      cmocka_unit_test(off_counts_as_past_first_pass),
      cmocka_unit_test(recurred_after_larger_metric),
      cmocka_unit_test(extra_bucket_shows_invisible_pass),
      cmocka_unit_test(small_rebuilt_buckets),
      cmocka_unit_test(foreign_equal_size),
      cmocka_unit_test(foreign_other_sizes),
      cmocka_unit_test(short_pass),
      cmocka_unit_test(two_models),
      cmocka_unit_test(late_communicator),
      cmocka_unit_test(moved_while_learning),
      cmocka_unit_test(moved_after_lock),
      cmocka_unit_test(no_convergence),
      cmocka_unit_test(fresh_buffers),
      cmocka_unit_test(many_equal_buckets),
      cmocka_unit_test(steps_auto),
      cmocka_unit_test(steps_check_k),
      cmocka_unit_test(steps_unwatched),
      cmocka_unit_test(learning_cap),
      cmocka_unit_test(failed_agreement),
      cmocka_unit_test(policy_types_and_ops),
      cmocka_unit_test(policy_edges),
  };
  return cmocka_run_group_tests_name("accum", tests, NULL, NULL);
}
