/* test_host_stream.c — the host backend's side stream (shim/backend/
 * host_stream.c) and the backend operations on it: tasks run in submission
 * order, also past the ring's 256 slots; waits return only after their task
 * ran; a mark taken on the side stream is waited for by the caller's stream
 * and by nothing else; casts queued on the side stream give the bits of the
 * same casts on the caller's stream; a forked child starts its own worker.
 *
 * Must not: touch NCCL, MPI or a GPU. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "backend.h"
#include "host_stream.h"

enum { NTASK = 5000 };
static int order[NTASK];
static int next_slot; /* written by the worker only */

typedef struct {
  int id;
  int spin;
} tsk;

static void record(void *arg) {
  const tsk *t = arg;
  volatile int x = 0;
  for (int i = 0; i < t->spin; i++) x += i;
  order[next_slot++] = t->id;
}

static void test_order(void **state) {
  (void)state;
  assert_non_null(nsc_hs_stream());
  uint64_t first = 0, last = 0;
  for (int i = 0; i < NTASK; i++) {
    tsk t = {i, i % 7 == 0 ? 20000 : 0};
    last = nsc_hs_submit(record, &t, sizeof t);
    if (i == 0) first = last;
    assert_int_equal(last, first + (uint64_t)i);
  }
  assert_int_equal(nsc_hs_tail(), last);
  nsc_hs_wait(last);
  assert_int_equal(next_slot, NTASK);
  for (int i = 0; i < NTASK; i++) assert_int_equal(order[i], i);
}

static void test_marks_and_casts(void **state) {
  (void)state;
  const nsc_backend *be = &nsc_backend_host;
  nsc_stream caller = (nsc_stream)(uintptr_t)0x1234, side = NULL;
  assert_int_equal(be->side_stream(caller, &side), 0);
  assert_true(nsc_hs_is(side));
  enum { N = 1 << 20 };
  float *x = malloc(N * 4), *y1 = malloc(N * 4), *y2 = malloc(N * 4);
  uint8_t *e1 = malloc(2 * N), *e2 = malloc(2 * N);
  for (int i = 0; i < N; i++) x[i] = (float)((i * 2654435761u) % 100003) / 77.0f - 600.0f;
  /* the same encode and decode on both streams */
  assert_int_equal(be->fmt_encode(caller, NSC_FMT_INT8, 256, x, e1, N, 1.0f), 0);
  assert_int_equal(be->fmt_decode(caller, NSC_FMT_INT8, 256, e1, y1, N, 1.0f), 0);
  memset(e2, 0, 2 * N);
  assert_int_equal(be->fmt_encode(side, NSC_FMT_INT8, 256, x, e2, N, 1.0f), 0);
  nsc_mark m;
  assert_int_equal(be->mark(side, &m), 0);
  assert_int_equal((uint64_t)(uintptr_t)m.ev, nsc_hs_tail());
  assert_int_equal(be->wait_mark(caller, &m), 0); /* the encode has run */
  assert_memory_equal(e1, e2, nsc_fmt_bytes(NSC_FMT_INT8, N, 256));
  be->mark_release(&m);
  assert_int_equal(be->fmt_decode(side, NSC_FMT_INT8, 256, e2, y2, N, 1.0f), 0);
  assert_int_equal(be->fill_ones(side, e2, 16), 0);
  assert_int_equal(be->join(caller, side), 0); /* everything so far */
  assert_memory_equal(y1, y2, N * 4);
  for (int i = 0; i < 16; i++) assert_int_equal(e2[i], 0xff);
  /* a caller's mark needs no wait on the side stream; a side mark none there */
  nsc_mark c;
  assert_int_equal(be->mark(caller, &c), 0);
  assert_null(c.ev);
  assert_int_equal(be->wait_mark(side, &c), 0);
  free(x), free(y1), free(y2), free(e1), free(e2);
}

static void test_fork(void **state) {
  (void)state;
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    nsc_hs_forget(); /* what the shim's atfork child handler does */
    next_slot = 0;
    tsk t = {7, 0};
    if (!nsc_hs_stream()) _exit(3);
    uint64_t tk = nsc_hs_submit(record, &t, sizeof t);
    nsc_hs_wait(tk);
    _exit(tk == 1 && next_slot == 1 && order[0] == 7 ? 0 : 4);
  }
  int st = 0;
  assert_int_equal(waitpid(pid, &st, 0), pid);
  assert_true(WIFEXITED(st));
  assert_int_equal(WEXITSTATUS(st), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_order), cmocka_unit_test(test_marks_and_casts),
                                     cmocka_unit_test(test_fork)};
  return cmocka_run_group_tests_name("host_stream", tests, NULL, NULL);
}
