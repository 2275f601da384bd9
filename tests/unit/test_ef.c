/* test_ef.c — unit tests of the error-feedback slots (shim/ef/ef.h): which
 * slot each call of a changing call sequence gets (DDP's rebuilt buckets,
 * FSDP2's fresh buffers with equal layers, a one-off call, buffers as
 * evidence), what state is dropped, memory only from a bucket's second use,
 * the memory cap, allocation failure, and that every buffer is released
 * (a counting stand-in backend).
 *
 * Runs as cmocka with TAP output. Must not: rely on timings. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "ef.h"

static long live, fail_next;
static int f_alloc(nsc_stream s, size_t bytes, void **p) {
  (void)s;
  if (fail_next && !--fail_next) return -1;
  *p = malloc(bytes);
  live += *p != NULL;
  return *p ? 0 : -1;
}
static void f_release(nsc_stream s, void *p) {
  (void)s;
  live--;
  free(p);
}
static const nsc_backend fake = {.name = "fake", .alloc = f_alloc, .release = f_release};

/* Bucket `id` (its buffer) of `count` elements. */
static nsc_ef_sig sigb(uintptr_t id, uint64_t count) { return (nsc_ef_sig){id, id, count, 0, 2, 256, 4, 0}; }
static nsc_ef_sig sig(uint64_t count) { return sigb(count, count); }

/* Feed one call; mark it as carrying state; return its slot's index (-1: none). */
static long callb(nsc_ef *e, uintptr_t id, uint64_t count) {
  nsc_ef_sig s = sigb(id, count);
  nsc_ef_slot *sl = nsc_ef_next(e, &s);
  if (!sl) return -1;
  if (!nsc_ef_buffers(e, sl, &fake, NULL, count, count / 4, (size_t)1 << 30)) sl->have = 1;
  return sl - e->slot;
}
static long call(nsc_ef *e, uint64_t count) { return callb(e, count, count); }

/* A two-phase call as twophase.c makes it, with the test knowing which
 * bucket each call is: the slot's residual is fed only where it holds one
 * (have); every fed residual must have been written by the same bucket.
 * Returns 1 when fed, 0 when not, and counts cross-feeds in *wrong. */
#define MAXW 8192
static int writer[MAXW]; /* bucket whose call wrote slot i's residual */
static int feedb(nsc_ef *e, int bucket, uintptr_t id, uint64_t count, long *wrong) {
  nsc_ef_sig s = sigb(id, count);
  nsc_ef_slot *sl = nsc_ef_next(e, &s);
  if (!sl || nsc_ef_buffers(e, sl, &fake, NULL, count, count / 4, (size_t)1 << 30)) return 0;
  long i = sl - e->slot;
  assert_true(i >= 0 && i < MAXW);
  int fed = sl->have;
  if (fed && writer[i] != bucket) ++*wrong;
  writer[i] = bucket;
  sl->have = 1;
  return fed;
}

static int have(nsc_ef *e, size_t i) { return i < e->len && e->slot[i].have; }

/* One pass of `n` buckets of counts cnt[] (buffers from *id on, fresh each
 * call when fresh, else bucket b's own); their slots into got[]. */
static void pass(nsc_ef *e, const uint64_t *cnt, int n, long *got, uintptr_t *id, int fresh) {
  for (int b = 0; b < n; b++) got[b] = callb(e, fresh ? (*id)++ : 1000 + (uintptr_t)b, cnt[b]);
}

/* Every bucket holds its own slot, the same as in the pass before. */
static void own_slots(const long *got, const long *prev, int n) {
  for (int b = 0; b < n; b++) {
    assert_true(got[b] >= 0);
    if (prev) assert_int_equal(got[b], prev[b]);
    for (int c = 0; c < b; c++) assert_true(got[b] != got[c]);
  }
}

static void test_sequence(void **state) {
  (void)state;
  nsc_ef e;
  nsc_ef_init(&e);
  /* DDP: one whole-model bucket, then the rebuilt ones (two of the same
   * count, in different buffers), passes repeating: the whole-model call
   * never recurs; the rebuilt buckets' own buffers coming again re-anchor
   * the learning there, locked after two passes */
  assert_int_equal(call(&e, 1000), -1);
  long got[3][4];
  for (int p = 0; p < 3; p++) {
    got[p][0] = call(&e, 100);
    got[p][1] = call(&e, 200);
    got[p][2] = callb(&e, 201, 200);
    got[p][3] = call(&e, 50);
  }
  assert_int_equal(got[0][3], -1);
  assert_true(got[1][3] >= 0); /* the lock */
  own_slots(got[2], NULL, 4);
  assert_int_equal(e.len, 4);
  for (int b = 0; b < 4; b++) assert_true(have(&e, (size_t)got[2][b]));
  assert_int_equal(live, 8);
  /* a bucket's count changes at position 2: every state is dropped */
  uint64_t dropped = e.dropped;
  assert_int_equal(call(&e, 100), got[2][0]);
  assert_int_equal(call(&e, 200), got[2][1]);
  assert_int_equal(callb(&e, 201, 300), -1);
  assert_int_equal(e.len, 0);
  assert_int_equal(e.dropped, dropped + 4);
  assert_int_equal(live, 0);
  /* learned again from the changed call: locked within two passes */
  assert_int_equal(call(&e, 50), -1);
  long again[4][4];
  for (int p = 0; p < 4; p++) {
    again[p][0] = call(&e, 100);
    again[p][1] = call(&e, 200);
    again[p][2] = callb(&e, 201, 300);
    again[p][3] = call(&e, 50);
  }
  own_slots(again[3], again[2], 4);
  /* a pass that ends early breaks the sequence too */
  assert_int_equal(call(&e, 100), again[3][0]);
  assert_int_equal(call(&e, 200), again[3][1]);
  assert_int_equal(call(&e, 100), -1);
  assert_int_equal(e.len, 0);
  nsc_ef_free(&e);
  assert_int_equal(live, 0);
  assert_int_equal(e.bytes, 0);
}

/* FSDP2: fresh buffers every call, a unique bucket and six of one count
 * (equal layers): the first pass locks on the run too early (period 1),
 * the unique bucket breaks it, the next lock holds the whole pass: each
 * bucket its own slot from the third pass on, for good. */
static void test_fresh_equal(void **state) {
  (void)state;
  for (int first = 0; first < 2; first++) { /* the unique bucket first or last */
    nsc_ef e;
    nsc_ef_init(&e);
    uint64_t cnt[7];
    for (int b = 0; b < 7; b++) cnt[b] = 1000;
    cnt[first ? 0 : 6] = 500;
    uintptr_t id = 1;
    long got[8][7];
    for (int p = 0; p < 8; p++) pass(&e, cnt, 7, got[p], &id, 1);
    for (int p = 3; p < 8; p++) own_slots(got[p], p > 3 ? got[p - 1] : NULL, 7);
    assert_int_equal(e.len, 7);
    assert_int_equal(e.breaks, first ? 0 : 1); /* unique bucket last: the run locks early once */
    nsc_ef_free(&e);
    assert_int_equal(live, 0);
  }
  /* the limit: a pass of only equal calls in fresh buffers is one slot */
  nsc_ef e;
  nsc_ef_init(&e);
  uint64_t cnt[4] = {1000, 1000, 1000, 1000};
  uintptr_t id = 1;
  long got[4];
  for (int p = 0; p < 4; p++) pass(&e, cnt, 4, got, &id, 1);
  assert_int_equal(e.len, 1);
  nsc_ef_free(&e);
}

/* FSDP2 under a caching allocator: fresh buffers, but now and then an
 * address comes back (every 11th call takes the one of 14 calls, two
 * passes, before, often a slot's own first address): one break in all, the
 * first pass's run of equal layers; the whole pass, locked by keys, is not
 * broken by addresses coming back (only a lock on a run of one key is, once:
 * test_buffer_evidence); each bucket its own slot for good. */
static void test_chance_reuse(void **state) {
  (void)state;
  nsc_ef e;
  nsc_ef_init(&e);
  uint64_t cnt[7] = {1000, 1000, 1000, 1000, 1000, 1000, 500};
  uintptr_t ids[7 * 40];
  long got[40][7];
  int k = 0;
  for (int p = 0; p < 40; p++)
    for (int b = 0; b < 7; b++, k++) {
      ids[k] = k % 11 == 10 && k >= 14 ? ids[k - 14] : 5000 + (uintptr_t)k;
      got[p][b] = callb(&e, ids[k], cnt[b]);
    }
  for (int p = 10; p < 40; p++) own_slots(got[p], got[p - 1], 7);
  assert_int_equal(e.breaks, 1);
  nsc_ef_free(&e);
  assert_int_equal(live, 0);
}

/* A one-off call (fresh buffers: no evidence) anchors the learning; its
 * patience (NSC_EF_FIRST_LIMIT calls without a border) re-anchors it; a
 * pass longer than the patience is learned once it has doubled past it. */
static void test_patience(void **state) {
  (void)state;
  for (int n = 3; n <= 200; n += 197) {
    nsc_ef e;
    nsc_ef_init(&e);
    uint64_t *cnt = malloc((size_t)n * sizeof *cnt);
    long *got = malloc((size_t)n * sizeof *got), *prev = malloc((size_t)n * sizeof *prev);
    for (int b = 0; b < n; b++) cnt[b] = 10 + (uint64_t)b;
    uintptr_t id = 1;
    assert_int_equal(callb(&e, id++, 7), -1); /* the one-off */
    int p = 0, locked = -1;
    for (; p < 40 && locked < 0; p++) {
      pass(&e, cnt, n, got, &id, 1);
      if (got[n - 1] >= 0 && got[0] >= 0) locked = p;
    }
    assert_true(locked >= 0 && locked <= 2 + 2 * NSC_EF_FIRST_LIMIT / n + 6);
    memcpy(prev, got, (size_t)n * sizeof *got);
    pass(&e, cnt, n, got, &id, 1);
    own_slots(got, prev, n);
    nsc_ef_free(&e);
    free(cnt);
    free(got);
    free(prev);
  }
}

/* Buffers are evidence where they are stable: equal-count buckets in their
 * own buffers get a slot each; a call of the expected count in another
 * slot's stable buffers breaks the sequence (a fresh one would not). */
static void test_buffer_evidence(void **state) {
  (void)state;
  nsc_ef e;
  nsc_ef_init(&e);
  uint64_t cnt[3] = {100, 100, 100};
  long got[3];
  uintptr_t id = 0;
  long prev[3];
  /* three buckets of one count in buffers of their own: keys alone lock
   * one slot at the second call; bucket 1's buffer coming back after three
   * calls breaks it; the buffers then lock three slots */
  for (int p = 0; p < 5; p++) {
    memcpy(prev, got, sizeof got);
    pass(&e, cnt, 3, got, &id, 0);
  }
  own_slots(got, prev, 3);
  assert_int_equal(e.len, 3);
  assert_int_equal(e.breaks, 1);
  assert_int_equal(callb(&e, 1001, 100), -1); /* bucket 1's buffer where bucket 0 was expected */
  assert_int_equal(e.breaks, 2);
  nsc_ef_free(&e);
  assert_int_equal(live, 0);
}

static void test_cap_and_failures(void **state) {
  (void)state;
  nsc_ef e;
  nsc_ef_init(&e);
  nsc_ef_sig a = sig(1000), b = sig(2000), c = sig(3000);
  /* the first pass learns; the second locks at c: no memory before */
  assert_null(nsc_ef_next(&e, &a));
  assert_null(nsc_ef_next(&e, &b));
  assert_null(nsc_ef_next(&e, &c));
  assert_null(nsc_ef_next(&e, &a));
  assert_null(nsc_ef_next(&e, &b));
  nsc_ef_slot *sa, *sb, *sc = nsc_ef_next(&e, &c);
  assert_non_null(sc);
  assert_int_equal(live, 0);
  /* cap 12000 bytes: a (1000 + 250 floats = 5000 bytes) fits, b (10000) does not */
  sa = nsc_ef_next(&e, &a);
  assert_int_equal(nsc_ef_buffers(&e, sa, &fake, NULL, 1000, 250, 12000), 0);
  assert_int_equal(e.bytes, 5000);
  sb = nsc_ef_next(&e, &b);
  assert_int_equal(nsc_ef_buffers(&e, sb, &fake, NULL, 2000, 500, 12000), -1);
  assert_int_equal(sb->none, 1);
  assert_int_equal(e.bytes, 5000);
  /* a failed allocation: no feedback for that bucket, nothing leaked */
  fail_next = 2; /* the second buffer of c */
  sc = nsc_ef_next(&e, &c);
  assert_int_equal(nsc_ef_buffers(&e, sc, &fake, NULL, 3000, 750, 1 << 30), -1);
  assert_int_equal(live, 2);
  /* another stream: the state starts again */
  sa = nsc_ef_next(&e, &a);
  sa->have = 1;
  assert_int_equal(nsc_ef_buffers(&e, sa, &fake, (nsc_stream)0x10, 1000, 250, 12000), 0);
  assert_int_equal(sa->have, 0);
  assert_int_equal(live, 2);
  nsc_ef_free(&e);
  assert_int_equal(live, 0);
}

/* Two models on one communicator, buckets of equal sizes in buffers of
 * their own (X: A 20000, B 30000; Y: C 20000, D 30000), passes interleaved
 * (and X twice per Y): keys repeat every 2 calls, buffers every 4 (6).
 * No residual may ever reach another bucket's call; once learned, every
 * bucket is fed its own (a slot each). Likewise up to 8 such models. */
static void test_models(void **state) {
  (void)state;
  for (int m = 2; m <= 8; m++)
    for (int twice = 0; twice < 2; twice++) {
      if (twice && m > 2) continue;
      nsc_ef e;
      nsc_ef_init(&e);
      long wrong = 0, fed = 0, calls = 0;
      int order[3] = {0, twice ? 0 : 1, 1}, per = twice ? 3 : m;
      for (int p = 0; p < 40; p++)
        for (int q = 0; q < per; q++) {
          int model = twice ? order[q] : q;
          for (int b = 0; b < 2; b++) {
            int f = feedb(&e, 2 * model + b, 1000 + 16 * (uintptr_t)model + (uintptr_t)b, b ? 30000 : 20000, &wrong);
            if (p >= 30) {
              calls++;
              fed += f;
            }
          }
        }
      assert_int_equal(wrong, 0);
      assert_int_equal(fed, calls); /* learned: every late call fed its own residual */
      assert_int_equal(e.len, (size_t)2 * per);
      nsc_ef_free(&e);
      assert_int_equal(live, 0);
    }
}

/* Buffers that change on every call (FSDP2), with a caching allocator's
 * chance reuse (every 11th call in the buffers of the call two passes
 * before): position is the evidence; each bucket is fed its own residual
 * once its slot is proven fresh (NSC_EF_PROBATION buffers), never another
 * bucket's, and a buffer coming back costs that call its feedback only. */
static void test_fresh_fed(void **state) {
  (void)state;
  for (int reuse = 0; reuse < 2; reuse++) {
    nsc_ef e;
    nsc_ef_init(&e);
    uint64_t cnt[7] = {1000, 1000, 1000, 1000, 1000, 1000, 500};
    uintptr_t ids[7 * 40];
    long wrong = 0, fed = 0, calls = 0;
    int k = 0;
    for (int p = 0; p < 40; p++)
      for (int b = 0; b < 7; b++, k++) {
        ids[k] = reuse && k % 11 == 10 && k >= 14 ? ids[k - 14] : 5000 + (uintptr_t)k;
        int f = feedb(&e, b, ids[k], cnt[b], &wrong);
        if (p >= NSC_EF_PROBATION + 4) {
          calls++;
          fed += f;
        }
      }
    assert_int_equal(wrong, 0);
    if (reuse) assert_true(fed >= calls - 2 * (calls / 11 + 1)); /* a reuse and the call after it in its slot */
    else assert_int_equal(fed, calls);
    nsc_ef_free(&e);
    assert_int_equal(live, 0);
  }
}

/* A sequence that never repeats: no slot, no memory, a bounded history. */
static void test_no_period(void **state) {
  (void)state;
  nsc_ef e;
  nsc_ef_init(&e);
  for (uint64_t p = 1; p <= 3 * NSC_EF_MAX_HIST; p++) {
    nsc_ef_sig s = sigb(p * 64, p);
    assert_null(nsc_ef_next(&e, &s));
    assert_true(e.hn <= NSC_EF_MAX_HIST);
  }
  assert_int_equal(live, 0);
  nsc_ef_free(&e);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_sequence),      cmocka_unit_test(test_fresh_equal),
      cmocka_unit_test(test_patience),       cmocka_unit_test(test_buffer_evidence),
      cmocka_unit_test(test_chance_reuse),      cmocka_unit_test(test_models),
      cmocka_unit_test(test_fresh_fed),
      cmocka_unit_test(test_cap_and_failures), cmocka_unit_test(test_no_period),
  };
  return cmocka_run_group_tests_name("ef", tests, NULL, NULL);
}
