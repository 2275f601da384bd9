/* test_staging.c — cmocka tests of a communicator's staging block
 * (shim/staging/staging.h, block.c; issue 23 defect 3) on a counting backend: what a
 * take gets, when it waits or joins, when memory is allocated (only at the
 * reserve and at settles), how agreements swap or stop it, and the fault
 * knobs. No NCCL, no GPU: the agreement is a stand-in whose answer the test
 * sets, as check.c's exchange would give it on every rank.
 *
 * Must not: depend on the host backend or anything but staging.c. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "staging.h"

/* ---- a counting backend ---- */
static struct {
  int allocs, releases, released_at, joins, waits, points, point_frees, fail_alloc;
  size_t last_alloc;
  nsc_stream join_waiter, join_signaller;
} k;

static int f_alloc(nsc_stream s, size_t bytes, void **p) {
  (void)s;
  if (k.fail_alloc) return -1;
  k.allocs++;
  k.last_alloc = bytes;
  *p = malloc(bytes);
  return *p ? 0 : -1;
}
static void f_release(nsc_stream s, void *p) {
  (void)s;
  k.releases++;
  free(p);
}
static void f_release_at(void *pt, void *p) {
  (void)pt;
  k.released_at++;
  free(p);
}
static int f_join(nsc_stream waiter, nsc_stream signaller) {
  k.joins++;
  k.join_waiter = waiter;
  k.join_signaller = signaller;
  return 0;
}
static int f_point(nsc_stream s, void **pt) {
  (void)s;
  k.points++;
  if (!*pt) *pt = malloc(1);
  return 0;
}
static void f_point_free(void *pt) {
  k.point_frees++;
  free(pt);
}
static int f_wait_point(nsc_stream waiter, void *pt) {
  (void)waiter;
  (void)pt;
  k.waits++;
  return 0;
}
static const nsc_backend be = {.name = "counting", .alloc = f_alloc, .release = f_release, .join = f_join,
                               .point = f_point, .release_at = f_release_at, .point_free = f_point_free,
                               .wait_point = f_wait_point};
static const nsc_backend other = {.name = "other", .alloc = f_alloc, .release = f_release, .join = f_join};

void nsc_backend_set_error(const char *fmt, ...) { (void)fmt; }

/* ---- the agreement stand-in ---- */
static struct {
  int starts, finishes, answer, last_ok;
} g;
static void *ag_start(int ok, const nsc_backend *b, nsc_stream s, void *arg) {
  (void)b;
  (void)s;
  (void)arg;
  g.starts++;
  g.last_ok = ok;
  return &g;
}
static int ag_finish(void *tok, int wait, const nsc_stream *now, void *arg) {
  (void)tok;
  (void)now;
  (void)arg;
  g.finishes++;
  return wait < 0 ? 0 : g.answer;
}
static const nsc_staging_agreement ag = {ag_start, ag_finish, NULL};

#define S1 ((nsc_stream)0x11)
#define S2 ((nsc_stream)0x22)
#define LIMIT ((size_t)1 << 30)

static int setup(void **state) {
  (void)state;
  memset(&k, 0, sizeof k);
  memset(&g, 0, sizeof g);
  g.answer = 1;
  nsc_staging_fault_at(0, 0);
  return 0;
}

static nsc_staging *fresh_reserved(size_t bytes, int ok) {
  nsc_staging *st = calloc(1, sizeof *st);
  assert_int_equal(nsc_staging_reserve(st, &be, S1, bytes), 1);
  nsc_staging_agreed(st, &be, S1, ok);
  return st;
}

static void done(nsc_staging *st) {
  nsc_staging_release(st);
  free(st);
}

/* Takes of one group are successive pieces; one that does not fit says so
 * without allocating; the settle allocates what the group wanted and starts
 * its agreement; the next settle swaps the blocks; from then on it fits. */
static void grows_by_agreement(void **state) {
  (void)state;
  nsc_staging *st = fresh_reserved(4096, 1);
  assert_int_equal(k.allocs, 1);
  void *a = NULL, *b = NULL, *c = NULL;
  assert_int_equal(nsc_staging_take(st, &be, S1, 1000, &a), 0);
  assert_int_equal(nsc_staging_take(st, &be, S1, 1000, &b), 0);
  assert_ptr_equal((char *)b, (char *)a + 1024);
  assert_int_equal(nsc_staging_take(st, &be, S1, 3000, &c), -1);
  assert_int_equal(k.allocs, 1); /* never at a take */
  assert_int_equal(nsc_staging_settle(st, LIMIT, &ag, 0, NULL), 0);
  assert_int_equal(k.allocs, 2);
  assert_int_equal(k.last_alloc, 1024 + 1024 + 3072);
  assert_int_equal(g.starts, 1);
  assert_int_equal(g.last_ok, 1);
  /* The next group still has the old size: the answer is read at its settle. */
  assert_int_equal(nsc_staging_take(st, &be, S1, 5000, &c), -1);
  assert_int_equal(nsc_staging_settle(st, LIMIT, &ag, 0, NULL), 1);
  assert_int_equal(g.finishes, 1);
  assert_int_equal(g.starts, 1); /* 5120 wanted, 5120 held: no further growth */
  assert_int_equal(k.released_at, 1); /* the old block, after its release point */
  assert_int_equal(nsc_staging_take(st, &be, S1, 5000, &c), 0);
  assert_false(nsc_staging_disabled(st));
  done(st);
}

/* A rank that could not allocate at the agreement (answer 0 on every rank):
 * compression stops; nothing fits any more and nothing is allocated again. */
static void refused_growth_stops(void **state) {
  (void)state;
  nsc_staging *st = fresh_reserved(4096, 1);
  void *p = NULL;
  g.answer = 0;
  assert_int_equal(nsc_staging_take(st, &be, S1, 8000, &p), -1);
  nsc_staging_settle(st, LIMIT, &ag, 0, NULL);
  assert_int_equal(nsc_staging_settle(st, LIMIT, &ag, 0, NULL), 0);
  assert_true(nsc_staging_disabled(st));
  assert_int_equal(nsc_staging_take(st, &be, S1, 16, &p), -1);
  int allocs = k.allocs;
  nsc_staging_settle(st, LIMIT, &ag, 0, NULL);
  assert_int_equal(k.allocs, allocs);
  assert_int_equal(g.starts, 1);
  done(st);
}

/* This rank's growth allocation fails: it still starts the agreement (its
 * peers issue theirs), saying no. */
static void failed_allocation_still_agrees(void **state) {
  (void)state;
  nsc_staging *st = fresh_reserved(4096, 1);
  void *p = NULL;
  assert_int_equal(nsc_staging_take(st, &be, S1, 8000, &p), -1);
  k.fail_alloc = 1;
  nsc_staging_settle(st, LIMIT, &ag, 0, NULL);
  assert_int_equal(g.starts, 1);
  assert_int_equal(g.last_ok, 0);
  k.fail_alloc = 0;
  done(st);
}

/* A retired block too many: fresh says so (1) instead of allocating. */
static void fresh_bounded(void **state) {
  (void)state;
  nsc_staging *st = fresh_reserved(4096, 1);
  void *p = NULL;
  for (int i = 0; i < 2; i++) {
    assert_int_equal(nsc_staging_fresh(st, S1), 0);
    assert_int_equal(nsc_staging_take(st, &be, S1, 100, &p), 0);
    nsc_staging_settle(st, LIMIT, &ag, 1, NULL);
  }
  int allocs = k.allocs;
  assert_int_equal(nsc_staging_fresh(st, S1), 1);
  assert_int_equal(k.allocs, allocs);
  nsc_staging_free_retired(st);
  assert_int_equal(nsc_staging_fresh(st, S1), 0);
  done(st);
}

/* The initial block refused by some rank: freed, compression off. */
static void refused_reserve(void **state) {
  (void)state;
  nsc_staging *st = fresh_reserved(4096, 0);
  assert_int_equal(k.releases, 1);
  assert_true(nsc_staging_disabled(st));
  void *p = NULL;
  assert_int_equal(nsc_staging_take(st, &be, S1, 16, &p), -1);
  done(st);
}

/* Streams: a take on another stream of the group joins the previous one; a
 * group's first take waits for the release point instead. */
static void streams_join_and_wait(void **state) {
  (void)state;
  nsc_staging *st = fresh_reserved(1 << 16, 1);
  void *p = NULL;
  int w0 = k.waits;
  assert_int_equal(nsc_staging_take(st, &be, S1, 100, &p), 0);
  assert_int_equal(k.waits, w0 + 1);
  assert_int_equal(k.joins, 0);
  assert_int_equal(nsc_staging_take(st, &be, S1, 100, &p), 0);
  assert_int_equal(k.joins, 0);
  assert_int_equal(nsc_staging_take(st, &be, S2, 100, &p), 0);
  assert_int_equal(k.joins, 1);
  assert_ptr_equal(k.join_waiter, S2);
  assert_ptr_equal(k.join_signaller, S1);
  nsc_staging_settle(st, LIMIT, &ag, 0, NULL);
  int w1 = k.waits;
  assert_int_equal(nsc_staging_take(st, &be, S2, 100, &p), 0);
  assert_int_equal(k.joins, 1); /* not named again: the point covers it */
  assert_int_equal(k.waits, w1 + 1);
  done(st);
}

/* Another memory kind never fits and never grows the block. */
static void other_kind(void **state) {
  (void)state;
  nsc_staging *st = fresh_reserved(1 << 16, 1);
  void *p = NULL;
  assert_int_equal(nsc_staging_take(st, &other, S1, 100, &p), -1);
  nsc_staging_settle(st, LIMIT, &ag, 0, NULL);
  assert_int_equal(g.starts, 0);
  done(st);
}

/* A call of several pieces asks once; no room counts its want. */
static void fits_counts_want(void **state) {
  (void)state;
  nsc_staging *st = fresh_reserved(4096, 1);
  assert_true(nsc_staging_fits(st, &be, S1, 4096));
  assert_false(nsc_staging_fits(st, &be, S1, 4097));
  nsc_staging_settle(st, LIMIT, &ag, 0, NULL);
  assert_int_equal(g.starts, 1);
  assert_int_equal(k.last_alloc, 4352);
  done(st);
}

/* No initial block (NCCLSHIM_STAGING_BYTES=0): the first want grows it. */
static void no_initial_block(void **state) {
  (void)state;
  nsc_staging *st = calloc(1, sizeof *st);
  void *p = NULL;
  assert_int_equal(nsc_staging_take(st, &be, S1, 1000, &p), -1);
  nsc_staging_settle(st, LIMIT, &ag, 0, NULL);
  assert_int_equal(k.allocs, 1);
  nsc_staging_settle(st, LIMIT, &ag, 0, NULL);
  assert_int_equal(nsc_staging_take(st, &be, S1, 1000, &p), 0);
  done(st);
}

/* Growth stops at the limit: a want beyond it grows the block to the limit
 * once, and never again. */
static void limit_caps_growth(void **state) {
  (void)state;
  nsc_staging *st = fresh_reserved(4096, 1);
  void *p = NULL;
  assert_int_equal(nsc_staging_take(st, &be, S1, 100000, &p), -1);
  nsc_staging_settle(st, 65536, &ag, 0, NULL);
  assert_int_equal(g.starts, 1);
  assert_int_equal(k.last_alloc, 65536);
  assert_int_equal(nsc_staging_take(st, &be, S1, 100000, &p), -1);
  assert_int_equal(nsc_staging_settle(st, 65536, &ag, 0, NULL), 1);
  assert_int_equal(nsc_staging_take(st, &be, S1, 100000, &p), -1);
  nsc_staging_settle(st, 65536, &ag, 0, NULL);
  assert_int_equal(g.starts, 1);
  assert_int_equal(nsc_staging_take(st, &be, S1, 60000, &p), 0);
  done(st);
}

/* Parked cast-backs read the block: a fresh one for the next group, the old
 * one retired (not freed) until a settle without parked work. */
static void parked_work_gets_fresh_block(void **state) {
  (void)state;
  nsc_staging *st = fresh_reserved(4096, 1);
  void *a = NULL, *b = NULL;
  assert_int_equal(nsc_staging_take(st, &be, S1, 100, &a), 0);
  nsc_staging_settle(st, LIMIT, &ag, 1, NULL);
  assert_int_equal(nsc_staging_fresh(st, S1), 0);
  assert_int_equal(k.allocs, 2);
  assert_int_equal(nsc_staging_take(st, &be, S1, 100, &b), 0);
  assert_ptr_not_equal(a, b);
  assert_int_equal(nsc_staging_fresh(st, S1), 0); /* not the group's first take: nothing */
  assert_int_equal(k.allocs, 2);
  int freed = k.released_at;
  nsc_staging_settle(st, LIMIT, &ag, 1, NULL);
  assert_int_equal(k.released_at, freed);
  nsc_staging_settle(st, LIMIT, &ag, 0, NULL);
  assert_int_equal(k.released_at, freed + 1);
  done(st);
}

/* NCCLSHIM_FAULT_STAGE: the t-th take is handed out but cannot wait. */
static void fault_stage(void **state) {
  (void)state;
  nsc_staging *st = fresh_reserved(4096, 1);
  void *p = NULL;
  nsc_staging_fault_at(0, 2);
  assert_int_equal(nsc_staging_take(st, &be, S1, 100, &p), 0);
  assert_int_equal(nsc_staging_take(st, &be, S1, 100, &p), 1);
  assert_non_null(p);
  assert_int_equal(nsc_staging_take(st, &be, S1, 100, &p), 0);
  done(st);
}

/* An agreement that needs another settle (finish says -1 although it
 * waited: its confirmation was just issued) stays in flight: nothing is
 * applied and no second growth starts until it is decided. */
static int stages;
static int ag_finish_two(void *tok, int wait, const nsc_stream *now, void *arg) {
  (void)tok;
  (void)now;
  (void)arg;
  g.finishes++;
  if (wait < 0) return 0;
  return ++stages < 2 ? -1 : g.answer;
}
static const nsc_staging_agreement ag2 = {ag_start, ag_finish_two, NULL};
static void two_stage_agreement(void **state) {
  (void)state;
  stages = 0;
  nsc_staging *st = fresh_reserved(4096, 1);
  void *p = NULL;
  assert_int_equal(nsc_staging_take(st, &be, S1, 8000, &p), -1);
  nsc_staging_settle(st, LIMIT, &ag2, 0, NULL); /* started */
  assert_int_equal(nsc_staging_take(st, &be, S1, 16000, &p), -1);
  assert_int_equal(nsc_staging_settle(st, LIMIT, &ag2, 0, NULL), 0); /* answer read, confirmation issued */
  assert_int_equal(g.starts, 1); /* no second growth while one is in flight */
  assert_int_equal(nsc_staging_take(st, &be, S1, 8000, &p), -1);
  assert_int_equal(nsc_staging_settle(st, LIMIT, &ag2, 0, NULL), 1); /* decided: applied */
  assert_int_equal(nsc_staging_take(st, &be, S1, 8000, &p), 0);
  done(st);
}

/* A cast-back's use on another stream than the group's last take does not
 * count as covering that take: the settle still moves the release point. */
static void settle_covers_last_take(void **state) {
  (void)state;
  nsc_staging *st = fresh_reserved(4096, 1);
  void *p = NULL;
  nsc_staging_settle(st, LIMIT, &ag, 0, NULL);
  assert_int_equal(nsc_staging_take(st, &be, S1, 100, &p), 0);
  nsc_staging_used(st, S2); /* another stream's cast-back (a poll on another thread) */
  int points = k.points;
  nsc_staging_settle(st, LIMIT, &ag, 0, NULL);
  assert_int_equal(k.points, points + 1);
  assert_int_equal(nsc_staging_take(st, &be, S1, 100, &p), 0);
  nsc_staging_used(st, S1); /* its own cast-back: covered */
  points = k.points;
  nsc_staging_settle(st, LIMIT, &ag, 0, NULL);
  assert_int_equal(k.points, points);
  done(st);
}

/* A release with an agreement in flight abandons it (finish(-1)). */
static void release_abandons(void **state) {
  (void)state;
  nsc_staging *st = fresh_reserved(4096, 1);
  void *p = NULL;
  assert_int_equal(nsc_staging_take(st, &be, S1, 8000, &p), -1);
  nsc_staging_settle(st, LIMIT, &ag, 0, NULL);
  assert_int_equal(g.finishes, 0);
  done(st);
  assert_int_equal(g.finishes, 1);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup(grows_by_agreement, setup),
      cmocka_unit_test_setup(refused_growth_stops, setup),
      cmocka_unit_test_setup(failed_allocation_still_agrees, setup),
      cmocka_unit_test_setup(refused_reserve, setup),
      cmocka_unit_test_setup(fresh_bounded, setup),
      cmocka_unit_test_setup(streams_join_and_wait, setup),
      cmocka_unit_test_setup(other_kind, setup),
      cmocka_unit_test_setup(fits_counts_want, setup),
      cmocka_unit_test_setup(no_initial_block, setup),
      cmocka_unit_test_setup(limit_caps_growth, setup),
      cmocka_unit_test_setup(parked_work_gets_fresh_block, setup),
      cmocka_unit_test_setup(fault_stage, setup),
      cmocka_unit_test_setup(two_stage_agreement, setup),
      cmocka_unit_test_setup(settle_covers_last_take, setup),
      cmocka_unit_test_setup(release_abandons, setup),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
