/* test_fabric.c — the fabric learner (shim/fabric/fabric.h): the fit of a
 * launch's fixed cost and the link's rate from timed launches, the
 * agreement that keeps the latest arriver's times (arrival skew is not link
 * time), and the cases where it must fall back to the constant.
 *
 * Samples are made from a known fabric: t = a + x b plus noise and waits
 * that only add time, on 1 to 4 simulated ranks whose agreement is computed
 * here (Max over ranks, as nsc_exchange_max does). Must not: depend on
 * NCCL, clocks or a GPU. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "fabric.h"

/* A launch of x link bytes on a fabric of a ns per launch and b_ps
 * picoseconds per byte, plus extra ns. */
static int64_t t_of(uint64_t x, uint64_t a, uint64_t b_ps, int64_t extra) {
  return (int64_t)(a + x * b_ps / 1000) + extra;
}

/* DDP-like launch sizes: buckets of 1 and 25 MiB, a 4-byte metric, 64 KiB
 * and 4 MiB calls (link bytes of a 4-rank ring). */
static const uint64_t sizes[] = {4, 1u << 20, 25u << 20, 64u << 10, 4u << 20};
#define NS (sizeof sizes / sizeof *sizes)

/* Feeds call i of size x to every one of W ranks (rank k's time is t(x) plus
 * its wait, when it is not call i's latest arriver), as learn.c does. */
static void feed(nsc_fab *r, int W, int i, uint64_t x, uint64_t a, uint64_t b_ps, int64_t wait) {
  for (int k = 0; k < W; k++) {
    int s = nsc_fab_take(&r[k], x);
    if (s >= 0) nsc_fab_timed(&r[k], s, t_of(x, a, b_ps, (i % W) == k ? 0 : wait * (1 + k)));
  }
}

/* The Max exchange over W ranks' values, then every rank's agreement. */
static void agree(nsc_fab *r, int W) {
  int64_t v[NSC_FAB_VALS], m[NSC_FAB_VALS];
  for (int j = 0; j < NSC_FAB_VALS; j++) m[j] = INT64_MIN;
  for (int k = 0; k < W; k++) {
    assert_true(nsc_fab_due(&r[k]));
    nsc_fab_agree_vals(&r[k], v);
    for (int j = 0; j < NSC_FAB_VALS; j++)
      if (v[j] > m[j]) m[j] = v[j];
  }
  for (int k = 0; k < W; k++) nsc_fab_agreed(&r[k], m, 1);
  for (int k = 1; k < W; k++) { /* every rank the same bits */
    assert_int_equal(r[k].state, r[0].state);
    assert_int_equal(r[k].price, r[0].price);
    assert_int_equal(r[k].launch_ns, r[0].launch_ns);
  }
}

/* W ranks take the DDP-like calls until due (the warm-up's untimed, then
 * NSC_FAB_CALLS: their sizes are far apart); rank 0's agreed state. */
static void run(nsc_fab *f, int W, uint64_t a, uint64_t b_ps, int64_t wait) {
  nsc_fab r[4];
  for (int k = 0; k < W; k++) nsc_fab_init(&r[k]);
  int i = 0;
  for (; !nsc_fab_due(&r[0]); i++) {
    feed(r, W, i, sizes[i % NS] * 2 * 3 / 4, a, b_ps, wait);
  }
  assert_int_equal(i, NSC_FAB_CALLS + NSC_FAB_WARMUP); /* these sizes are 8 times apart and more: no more calls */
  assert_int_equal(r[0].nsizes, (int)NS);
  agree(r, W);
  *f = r[0];
}

/* The fit recovers the fabric's launch price (a / b link bytes) where the
 * latest arriver is a different rank at each call. */
static void fit_known(void **state) {
  (void)state;
  /* 1 Gb/s (8000 ps/B) with 2 ms launches (250 kB), 25 Gb/s (320 ps/B) with 100 us (312.5 kB), 100 Gb/s with 5 ms */
  static const struct { uint64_t a, b; } fab[] = {{2000000, 8000}, {100000, 320}, {5000000, 80}, {0, 8000}};
  for (size_t q = 0; q < sizeof fab / sizeof *fab; q++)
    for (int W = 1; W <= 4; W++) {
      nsc_fab f;
      run(&f, W, fab[q].a, fab[q].b, W > 1 ? 50000000 : 0); /* waits of 50 ms and more: skew, not link time */
      assert_int_equal(f.state, NSC_FAB_LEARNED);
      uint64_t want = fab[q].b ? fab[q].a * 1000 / fab[q].b : 0;
      uint64_t tol = want / 100 + 64; /* the integer fit of exact samples: within 1 % */
      assert_true(f.price + tol >= want && f.price <= want + tol);
      assert_true(f.ps_per_byte + fab[q].b / 100 + 1 >= fab[q].b && f.ps_per_byte <= fab[q].b + fab[q].b / 100 + 1);
    }
}

/* A wait that is the same on every rank is not skew: the fit takes it for
 * link time; a noise that only adds (one slow call) leaves the fastest of
 * its size. */
static void noise_only_adds(void **state) {
  (void)state;
  nsc_fab f;
  nsc_fab_init(&f);
  for (int i = 0; !nsc_fab_due(&f); i++) {
    uint64_t x = sizes[i % NS];
    int s = nsc_fab_take(&f, x);
    if (s >= 0) nsc_fab_timed(&f, s, t_of(x, 1000000, 8000, i == 7 ? 40000000 : 0));
  }
  int64_t v[NSC_FAB_VALS];
  nsc_fab_agree_vals(&f, v);
  nsc_fab_agreed(&f, v, 1);
  assert_int_equal(f.state, NSC_FAB_LEARNED);
  assert_true(f.price >= 124000 && f.price <= 126000); /* 1 ms at 8 ns/B = 125 kB */
}

/* The schedule from the call sequence alone: calls of two sizes 2 apart keep
 * it measuring past NSC_FAB_CALLS until a size 8 times apart has had
 * NSC_FAB_PER_SIZE calls (a sweep's); sizes never 8 apart end it at
 * NSC_FAB_MAX_CALLS, unfitted; sizes past NSC_FAB_SIZES are not kept; a
 * size of fewer calls does not count in the fit. */
static void schedule(void **state) {
  (void)state;
  nsc_fab f;
  nsc_fab_init(&f);
  int i = 0;
  for (; i < NSC_FAB_WARMUP + NSC_FAB_CALLS + 5; i++) {
    assert_false(nsc_fab_due(&f));
    int s = nsc_fab_take(&f, i % 2 ? 200000 : 100000);
    if (s >= 0) nsc_fab_timed(&f, s, t_of(i % 2 ? 200000 : 100000, 1000000, 8000, 0));
  }
  assert_false(nsc_fab_due(&f));
  assert_int_equal(nsc_fab_take(&f, 400000), 2); /* 4 x 100000: not yet */
  nsc_fab_timed(&f, 2, t_of(400000, 1000000, 8000, 0));
  assert_false(nsc_fab_due(&f));
  for (int k = 0; k < NSC_FAB_PER_SIZE; k++) { /* 8 x 100000: due once it has its calls */
    assert_false(nsc_fab_due(&f));
    assert_int_equal(nsc_fab_take(&f, 800000), 3);
    nsc_fab_timed(&f, 3, t_of(800000, 1000000, 8000, k == 0 ? 30000000 : 0)); /* its first call slow */
  }
  assert_true(nsc_fab_due(&f));
  assert_int_equal(nsc_fab_take(&f, 800000), -1);
  int64_t v[NSC_FAB_VALS];
  nsc_fab_agree_vals(&f, v);
  nsc_fab_agreed(&f, v, 1);
  assert_int_equal(f.state, NSC_FAB_LEARNED);
  assert_int_equal(f.ns[2], -1); /* 400000: one call */
  assert_true(f.price >= 124000 && f.price <= 126000);

  nsc_fab g;
  nsc_fab_init(&g);
  for (i = 0; !nsc_fab_due(&g); i++) {
    int s = nsc_fab_take(&g, 1000 + (uint64_t)(i % 3) * 3000); /* 1000, 4000, 7000: never 8 apart */
    if (s >= 0) nsc_fab_timed(&g, s, 1000);
  }
  assert_int_equal(i, NSC_FAB_MAX_CALLS + NSC_FAB_WARMUP);
  nsc_fab_agree_vals(&g, v);
  nsc_fab_agreed(&g, v, 1);
  assert_int_equal(g.state, NSC_FAB_FAILED);
  assert_non_null(strstr(g.why, "8 times apart"));

  nsc_fab h;
  nsc_fab_init(&h);
  for (i = 0; i < NSC_FAB_WARMUP; i++) assert_int_equal(nsc_fab_take(&h, 1), -1);
  for (i = 0; i < NSC_FAB_SIZES; i++) assert_int_equal(nsc_fab_take(&h, 1000 + (uint64_t)i), i);
  assert_int_equal(nsc_fab_take(&h, 99), -1);  /* a 17th size: not kept */
  assert_int_equal(nsc_fab_take(&h, 1003), 3); /* a kept size */
}

/* Falling back: one size only, ranks that sampled other launches, a failed
 * exchange, a poisoned one, times that do not grow; a size one rank could
 * not time is the others' fastest, one no rank timed is dropped (both
 * alike on every rank). */
static void fallbacks(void **state) {
  (void)state;
  int64_t v[NSC_FAB_VALS];
  nsc_fab f;
  nsc_fab_init(&f);
  while (!nsc_fab_due(&f)) {
    int s = nsc_fab_take(&f, 1 << 20);
    if (s >= 0) nsc_fab_timed(&f, s, 1000000);
  }
  nsc_fab_agree_vals(&f, v);
  nsc_fab_agreed(&f, v, 1);
  assert_int_equal(f.state, NSC_FAB_FAILED);
  assert_non_null(strstr(f.why, "8 times apart"));

  /* rank 1 saw another size at call 7 (a call that differs between ranks) */
  nsc_fab g[2];
  for (int k = 0; k < 2; k++) nsc_fab_init(&g[k]);
  for (int i = 0; !nsc_fab_due(&g[0]) && i < 200; i++)
    for (int k = 0; k < 2; k++) {
      uint64_t x = sizes[i % NS] + (uint64_t)(k && i == 7);
      int s = nsc_fab_take(&g[k], x);
      if (s >= 0) nsc_fab_timed(&g[k], s, t_of(x, 1000, 8000, 0));
    }
  int64_t m[NSC_FAB_VALS];
  for (int j = 0; j < NSC_FAB_VALS; j++) m[j] = INT64_MIN;
  for (int k = 0; k < 2; k++) {
    nsc_fab_agree_vals(&g[k], v);
    for (int j = 0; j < NSC_FAB_VALS; j++)
      if (v[j] > m[j]) m[j] = v[j];
  }
  nsc_fab_agreed(&g[1], m, 1);
  assert_int_equal(g[1].state, NSC_FAB_FAILED);
  assert_non_null(strstr(g[1].why, "different launches"));
  nsc_fab_agreed(&g[0], m, 0);
  assert_int_equal(g[0].state, NSC_FAB_FAILED);
  assert_non_null(strstr(g[0].why, "agreement"));

  /* the poisoned exchange (a rank without a buffer: -1 in every slot) */
  nsc_fab pz;
  nsc_fab_init(&pz);
  for (int i = 0; !nsc_fab_due(&pz); i++) (void)nsc_fab_take(&pz, sizes[i % NS]);
  for (int j = 0; j < NSC_FAB_VALS; j++) m[j] = -1;
  nsc_fab_agreed(&pz, m, 1);
  assert_int_equal(pz.state, NSC_FAB_FAILED);

  /* rank 0 timed no call of size 3 (sizes[3]), rank 1 none of size 1, neither of size 4: 3 and 1 are
   * the other's time, 4 is dropped, the fit holds, and both say a size was missed */
  nsc_fab h[2];
  for (int k = 0; k < 2; k++) nsc_fab_init(&h[k]);
  for (int i = 0; !nsc_fab_due(&h[0]); i++)
    for (int k = 0; k < 2; k++) {
      int s = nsc_fab_take(&h[k], sizes[i % NS]);
      int miss = s == 4 || (k == 0 && s == 3) || (k == 1 && s == 1);
      if (s >= 0 && !miss) nsc_fab_timed(&h[k], s, t_of(sizes[i % NS], 1000000, 8000, 0));
    }
  for (int j = 0; j < NSC_FAB_VALS; j++) m[j] = INT64_MIN;
  for (int k = 0; k < 2; k++) {
    nsc_fab_agree_vals(&h[k], v);
    for (int j = 0; j < NSC_FAB_VALS; j++)
      if (v[j] > m[j]) m[j] = v[j];
  }
  for (int k = 0; k < 2; k++) {
    nsc_fab_agreed(&h[k], m, 1);
    assert_int_equal(h[k].state, NSC_FAB_LEARNED);
    assert_int_equal(h[k].missed, 1);
    assert_int_equal(h[k].ns[4], -1);
    assert_true(h[k].ns[3] > 0 && h[k].ns[1] > 0);
    assert_true(h[k].price >= 124000 && h[k].price <= 126000);
  }
  assert_int_equal(h[0].price, h[1].price);

  uint64_t lx[] = {1000, 1000000};
  int64_t lt[] = {5000000, 1000000};
  uint64_t a, b, p;
  const char *why;
  assert_int_equal(nsc_fab_fit(lx, lt, 2, &a, &b, &p, &why), -1);
  assert_non_null(strstr(why, "did not grow"));
  int64_t nt[] = {1000, 9000000}; /* the line crosses below zero at x = 0: a price of 0 */
  assert_int_equal(nsc_fab_fit(lx, nt, 2, &a, &b, &p, &why), 0);
  assert_int_equal(p, 0);
  assert_int_equal(a, 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(fit_known),
      cmocka_unit_test(noise_only_adds),
      cmocka_unit_test(schedule),
      cmocka_unit_test(fallbacks),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
