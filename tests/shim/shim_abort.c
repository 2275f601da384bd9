/* shim_abort.c — a watchdog thread aborts communicators while the caller is
 * blocked inside a real NCCL call, PyTorch's pattern (its watchdog calls
 * ncclCommAbort on a collective that never completes). After the abort
 * returns, nothing may be issued on the aborted communicator or on the
 * shim's sub-communicators of it: the host NCCL reports any such call
 * (HOSTNCCL-ENDED) and, in the ASan build, touching its freed memory is a
 * heap-use-after-free.
 *
 *   mpirun -np N shim_abort MODE     (the last rank is the laggard)
 *
 * MODE says where the stalled call is:
 *   call    one all-reduce of 1 Mi floats outside any group (the shim's
 *           algorithm is the settings': ring in chunks, two-phase in pieces,
 *           hierarchical on emulated nodes);
 *   group   a group of two small all-reduces (fused) and the large one (a
 *           grouped two-phase or hierarchical call, run after the group's
 *           real end);
 *   first   the first calls of two communicators in one group (their
 *           settings checks run after the group, one thread per
 *           communicator), no call before.
 * Every rank first makes the same calls twice (call, group) and checks the
 * sums exactly; then the laggard stops joining, and every other rank makes
 * them once more: the call blocks on the laggard's messages. The watchdog
 * waits until the host NCCL reports this process waiting for a peer
 * (hostnccl_waiting: deterministic, never a sleep that hopes), then aborts
 * every communicator of the test. The call must return an error; the
 * laggard aborts its own communicators once the others are done; then a new
 * communicator gives an exact sum on every rank (the process is still
 * usable). Exits 1 on a failed check. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "shimfault_util.h"
#include "testmpi.h"

enum { NC = 2, NBIG = 1 << 20, NSMALL = 4096 };

static float *big[NC], *small[NC][2];

/* The calls of one round on communicator c (index i): the large all-reduce,
 * and in a group the two small ones beside it. */
static ncclResult_t calls(ncclComm_t c, int i, int grouped, int salt) {
  sf_fill(big[i], NBIG, rank, salt);
  if (!grouped) return ncclAllReduce(big[i], big[i], NBIG, ncclFloat32, ncclSum, c, NULL);
  for (int k = 0; k < 2; k++) sf_fill(small[i][k], NSMALL, rank, salt + 1 + k);
  ncclResult_t r = ncclSuccess;
  for (int k = 0; k < 2 && r == ncclSuccess; k++)
    r = ncclAllReduce(small[i][k], small[i][k], NSMALL, ncclFloat32, ncclSum, c, NULL);
  if (r == ncclSuccess) r = ncclAllReduce(big[i], big[i], NBIG, ncclFloat32, ncclSum, c, NULL);
  return r;
}

static void check_round(int i, int grouped, int salt) {
  sf_check(big[i], NBIG, salt, nranks, 0, "large all-reduce before the abort");
  for (int k = 0; grouped && k < 2; k++) sf_check(small[i][k], NSMALL, salt + 1 + k, nranks, 0, "small all-reduce before the abort");
}

/* One round on ncomm communicators: in one group when grouped or several. */
static ncclResult_t round_on(ncclComm_t *c, int ncomm, int grouped, int salt) {
  int group = grouped || ncomm > 1;
  ncclResult_t r = group ? ncclGroupStart() : ncclSuccess;
  for (int i = 0; i < ncomm && r == ncclSuccess; i++) r = calls(c[i], i, grouped, salt);
  if (group) {
    ncclResult_t e = ncclGroupEnd();
    if (r == ncclSuccess) r = e;
  }
  return r;
}

typedef struct {
  ncclComm_t *c;
  int ncomm;
  int (*waiting)(void);
} watch_t;

static void *watchdog(void *p) {
  watch_t *w = p;
  /* Until the caller (or a thread of the shim's working for it) is blocked
   * on a peer inside a real call; then longer, as a watchdog's timeout would
   * be (minutes in PyTorch): 100 ms, so that the shim's other threads (first:
   * the other communicator's settings check) have reached their real calls.
   * An abort that lands between the shim's "has it ended?" and its next real
   * call on another thread cannot be excluded without holding a lock across
   * that call (docs/troubleshooting.md); with 20 ms, one run of this test in
   * make test under ASan and load saw such a call (2026-12-05). */
  while (w->waiting() == 0) usleep(1000);
  usleep(100000);
  for (int i = 0; i < w->ncomm; i++) EXPECT(ncclCommAbort(w->c[i]) == ncclSuccess, "ncclCommAbort of communicator %d failed", i);
  return NULL;
}

int main(int argc, char **argv) {
  sf_init(&argc, &argv, 1);
  const char *mode = argc > 1 ? argv[1] : "";
  int grouped = !strcmp(mode, "group"), first = !strcmp(mode, "first");
  if (!grouped && !first && strcmp(mode, "call")) {
    fprintf(stderr, "usage: shim_abort call|group|first\n");
    return 2;
  }
  int (*waiting)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "hostnccl_waiting");
  if (!waiting) {
    fprintf(stderr, "shim_abort: needs the host NCCL (hostnccl_waiting)\n");
    return 2;
  }
  int ncomm = first ? 2 : 1, laggard = rank == nranks - 1;
  for (int i = 0; i < NC; i++) {
    big[i] = malloc(NBIG * sizeof(float));
    for (int k = 0; k < 2; k++) small[i][k] = malloc(NSMALL * sizeof(float));
  }
  ncclComm_t c[NC];
  for (int i = 0; i < ncomm; i++) c[i] = tm_comm_world();
  int warm = first ? 0 : 2;
  for (int s = 0; s < warm; s++) {
    NCCL_OK(round_on(c, ncomm, grouped, 10 * s));
    for (int i = 0; i < ncomm; i++) check_round(i, grouped, 10 * s);
  }
  if (!laggard) {
    watch_t w = {c, ncomm, waiting};
    pthread_t th;
    if (pthread_create(&th, NULL, watchdog, &w)) return 2;
    ncclResult_t r = round_on(c, ncomm, grouped, 99);
    pthread_join(th, NULL);
    EXPECT(r != ncclSuccess, "%s: the call blocked on a peer that never joined returned ncclSuccess after the abort", mode);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (laggard)
    for (int i = 0; i < ncomm; i++) NCCL_OK(ncclCommAbort(c[i]));
  /* The process is still usable: a new communicator, exact sums. */
  ncclComm_t fresh = tm_comm_world();
  NCCL_OK(calls(fresh, 0, 0, 7));
  sf_check(big[0], NBIG, 7, nranks, 0, "a new communicator after the abort");
  NCCL_OK(ncclCommDestroy(fresh));
  for (int i = 0; i < NC; i++) {
    free(big[i]);
    for (int k = 0; k < 2; k++) free(small[i][k]);
  }
  return sf_finish();
}
