/* shim_cuda_abort.c — a communicator destroyed or aborted while exchanges of
 * its own are in flight gives their exchange slots back (issue 13), on the
 * CUDA driver test double with the shim preloaded over the host NCCL, 2
 * ranks, device buffers; run with NCCLSHIM_ACCUM_STEPS=2.
 *
 * Each of 40 rounds (a context has 32 exchange slots, and every new
 * communicator's first call needs one for its configuration check) makes a
 * communicator, all-reduces one 64 Ki-element buffer (its first call: the
 * check, then learning's accumulation agreement, left in flight) and a group
 * of three 1 Mi-element buffers (more than the agreed fusion block: an
 * agreement on a bigger one is started at the group's end and left in
 * flight), checks every sum exactly (learning syncs every call), and ends the
 * communicator with both agreements unanswered: destroyed in even rounds,
 * aborted in odd ones. A slot kept by an ended communicator exhausts the
 * context within 32 rounds (the check then fails on every rank); one given
 * back before its collective completed would be reused under it; one freed as
 * if it were staging (cuMemFreeAsync) is an illegal free on the double.
 * Exits 1 on a failed check. */
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testmpi.h"
#include "cudatest.h"

enum { ROUNDS = 40, M = 3, N = 1 << 20, N1 = 1 << 16 };

static float val(int rank, int round, int m, size_t i) {
  return (float)((int)((rank * 5 + round * 7 + m * 3 + i) % 13) - 6) * 0.25f;
}

/* Sets d[0..n) to rank's values for (round, m). */
static void put(CUdeviceptr d, float *h, size_t n, int rank, int round, int m) {
  for (size_t i = 0; i < n; i++) h[i] = val(rank, round, m, i);
  DRV(cuMemcpyHtoD(d, h, n * 4));
}

/* Number of wrong elements of d[0..n) against the sum over ranks. */
static size_t wrong(CUdeviceptr d, float *h, size_t n, int nranks, int round, int m) {
  DRV(cuMemcpyDtoH(h, d, n * 4));
  size_t bad = 0;
  for (size_t i = 0; i < n; i++) {
    float want = 0;
    for (int q = 0; q < nranks; q++) want += val(q, round, m, i);
    bad += h[i] != want;
  }
  return bad;
}

int main(int argc, char **argv) {
  int rank, nranks, failures = 0;
  CUstream s = ct_begin(&argc, &argv, &rank, &nranks);
  float *h = malloc((size_t)N * 4);
  CUdeviceptr d[M], one;
  for (int m = 0; m < M; m++) DRV(cuMemAlloc(&d[m], (size_t)N * 4));
  DRV(cuMemAlloc(&one, (size_t)N1 * 4));
  int round = 0;
  for (; round < ROUNDS && !failures; round++) {
    ncclComm_t comm = tm_comm_world();
    put(one, h, N1, rank, round, M);
    for (int m = 0; m < M; m++) put(d[m], h, N, rank, round, m);
    ncclResult_t r = ncclAllReduce((void *)one, (void *)one, N1, ncclFloat32, ncclSum, comm, s);
    if (r != ncclSuccess) {
      printf("not ok - rank %d: round %d: the first all-reduce failed (%d: %s)\n", rank, round, (int)r,
             ncclGetErrorString(r));
      failures++;
      ncclCommAbort(comm);
      break; /* every rank fails that call alike */
    }
    NCCL_OK(ncclGroupStart());
    for (int m = 0; m < M; m++) NCCL_OK(ncclAllReduce((void *)d[m], (void *)d[m], N, ncclFloat32, ncclSum, comm, s));
    NCCL_OK(ncclGroupEnd());
    DRV(cuStreamSynchronize(s));
    size_t bad = wrong(one, h, N1, nranks, round, M);
    for (int m = 0; m < M; m++) bad += wrong(d[m], h, N, nranks, round, m);
    if (bad) {
      printf("not ok - rank %d: round %d: %zu elements wrong\n", rank, round, bad);
      failures++;
    }
    NCCL_OK(round % 2 ? ncclCommAbort(comm) : ncclCommDestroy(comm));
    MPI_Allreduce(MPI_IN_PLACE, &failures, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD); /* stop together */
  }
  printf("%s - rank %d: %d of %d communicators ended with their agreements in flight, every sum exact\n",
         failures ? "not ok" : "ok", rank, round, ROUNDS);
  MPI_Finalize();
  return failures != 0;
}
