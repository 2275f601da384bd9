/* test_ef.c — unit tests of the error-feedback slots (shim/algo/ef.h): which
 * slot each call of a changing call sequence gets, what state is dropped,
 * memory only from a bucket's second use, the memory cap, allocation
 * failure, fresh buffers on every call, and that every buffer is released
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
static nsc_ef_sig sigb(uintptr_t id, uint64_t count) { return (nsc_ef_sig){id, id, count, 0, 2, 256, 4}; }
static nsc_ef_sig sig(uint64_t count) { return sigb(count, count); }

/* Feed one call; mark it as carrying state; return its slot's index. */
static long callb(nsc_ef *e, uintptr_t id, uint64_t count) {
  nsc_ef_sig s = sigb(id, count);
  nsc_ef_slot *sl = nsc_ef_next(e, &s);
  assert_non_null(sl);
  if (!nsc_ef_buffers(e, sl, &fake, NULL, count, count / 4, (size_t)1 << 30)) sl->have = 1;
  return sl - e->slot;
}
static long call(nsc_ef *e, uint64_t count) { return callb(e, count, count); }

static int have(nsc_ef *e, size_t i) { return i < e->len && e->slot[i].have; }

static void test_sequence(void **state) {
  (void)state;
  nsc_ef e;
  nsc_ef_init(&e);
  /* DDP: one whole-model bucket, then the rebuilt ones (two of the same
   * count, in different buffers), passes repeating */
  assert_int_equal(call(&e, 1000), 0);
  for (int pass = 0; pass < 3; pass++) {
    assert_int_equal(call(&e, 100), pass == 0 ? 1 : 0);
    assert_int_equal(call(&e, 200), pass == 0 ? 2 : 1);
    assert_int_equal(callb(&e, 201, 200), pass == 0 ? 3 : 2);
    assert_int_equal(call(&e, 50), pass == 0 ? 4 : 3);
  }
  /* the whole-model slot was dropped when the second pass began */
  assert_int_equal(e.len, 4);
  assert_int_equal(e.slot[0].sig.count, 100);
  assert_true(have(&e, 0) && have(&e, 3));
  assert_int_equal(live, 8);
  /* a bucket's count changes at position 2: its state is dropped, the others kept */
  uint64_t dropped = e.dropped;
  assert_int_equal(call(&e, 100), 0);
  assert_int_equal(call(&e, 200), 1);
  nsc_ef_sig s = sigb(201, 300);
  nsc_ef_slot *sl = nsc_ef_next(&e, &s);
  assert_int_equal(sl - e.slot, 2);
  assert_int_equal(sl->have, 0);
  assert_null(sl->in);
  assert_int_equal(e.dropped, dropped + 1);
  assert_int_equal(call(&e, 50), 3);
  /* a pass that ends early: the slots after it are dropped */
  assert_int_equal(call(&e, 100), 0);
  assert_int_equal(call(&e, 200), 1);
  assert_int_equal(call(&e, 100), 0);
  assert_int_equal(e.len, 2);
  /* a longer pass grows the sequence */
  assert_int_equal(call(&e, 200), 1);
  assert_int_equal(call(&e, 7), 2);
  assert_int_equal(call(&e, 100), 0);
  assert_true(have(&e, 0) && have(&e, 1));
  nsc_ef_free(&e);
  assert_int_equal(live, 0);
  assert_int_equal(e.bytes, 0);
}

static void test_cap_and_failures(void **state) {
  (void)state;
  nsc_ef e;
  nsc_ef_init(&e);
  nsc_ef_sig a = sig(1000), b = sig(2000), c = sig(3000);
  /* first uses: no memory yet */
  nsc_ef_slot *sa = nsc_ef_next(&e, &a), *sb, *sc;
  assert_int_equal(nsc_ef_buffers(&e, sa, &fake, NULL, 1000, 250, 12000), -1);
  assert_int_equal(sa->none, 0);
  nsc_ef_next(&e, &b);
  nsc_ef_next(&e, &c);
  assert_int_equal(live, 0);
  /* second pass, cap 12000 bytes: a (1000 + 250 floats = 5000 bytes) fits, b (10000) does not */
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

/* A program that passes a fresh buffer to every call: no bucket recurs, no
 * memory is taken, the slots stay bounded and never run out. */
static void test_fresh_buffers(void **state) {
  (void)state;
  nsc_ef e;
  nsc_ef_init(&e);
  for (uintptr_t p = 1; p <= 3 * NSC_EF_MAX_SLOTS; p++) {
    nsc_ef_sig s = sigb(p * 64, 1000);
    nsc_ef_slot *sl = nsc_ef_next(&e, &s);
    assert_non_null(sl);
    assert_int_equal(nsc_ef_buffers(&e, sl, &fake, NULL, 1000, 250, (size_t)1 << 40), -1);
    assert_true(e.len <= NSC_EF_MAX_SLOTS);
  }
  assert_int_equal(live, 0);
  nsc_ef_free(&e);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_sequence),
      cmocka_unit_test(test_cap_and_failures),
      cmocka_unit_test(test_fresh_buffers),
  };
  return cmocka_run_group_tests_name("ef", tests, NULL, NULL);
}
