/* shim_cuda_grow.c — growing the staging block never waits (issue 13, defect
 * 6), on the CUDA driver test double with the shim preloaded over the host
 * NCCL, 2 ranks, device buffers.
 *
 * Round 1: a group of three 1 Mi-element fp32 all-reduces (6 MiB on the
 * wire, more than the 4 MiB agreed at the first call) is forwarded in fp32,
 * and the shim starts an agreement on a bigger block. Rank 0 returns from its
 * ncclGroupEnd and only then lets rank 1 make its own group (an MPI message):
 * if rank 0 waited in ncclGroupEnd for the agreement's answer, which needs
 * rank 1, the job would hang (the test's timeout fails it). Round 2 reads the
 * answer (by then long there) and issues its confirmation, round 3 reads
 * that, round 4 is fused. Every result is checked exactly (inputs k/4, small
 * k). Exits 1 on a failed check. */
#include <cuda.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ncclshim.h"
#include "testmpi.h"
#include "cudatest.h"


enum { M = 3, N = 1 << 20 };

static float val(int rank, int m, size_t i) { return (float)((int)((rank * 5 + m * 3 + i) % 13) - 6) * 0.25f; }

int main(int argc, char **argv) {
  int rank, nranks, failures = 0;
  CUstream s = ct_begin(&argc, &argv, &rank, &nranks);
  ncclComm_t comm = tm_comm_world();
  float *h = malloc((size_t)N * 4), *got = malloc((size_t)N * 4);
  CUdeviceptr d[M], one;
  for (int m = 0; m < M; m++) DRV(cuMemAlloc(&d[m], (size_t)N * 4));
  DRV(cuMemAlloc(&one, 1 << 18));
  /* The first call (outside a group) makes the check and agrees on 4 MiB. */
  NCCL_OK(ncclAllReduce((void *)one, (void *)one, 1 << 16, ncclFloat32, ncclSum, comm, s));
  DRV(cuStreamSynchronize(s));
  for (int round = 1; round <= 4; round++) {
    for (int m = 0; m < M; m++) {
      for (size_t i = 0; i < N; i++) h[i] = val(rank, m + round, i);
      DRV(cuMemcpyHtoD(d[m], h, (size_t)N * 4));
    }
    if (round == 1 && rank == 1) MPI_Recv(NULL, 0, MPI_BYTE, 0, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    NCCL_OK(ncclGroupStart());
    for (int m = 0; m < M; m++) NCCL_OK(ncclAllReduce((void *)d[m], (void *)d[m], N, ncclFloat32, ncclSum, comm, s));
    NCCL_OK(ncclGroupEnd());
    if (round == 1 && rank == 0) MPI_Send(NULL, 0, MPI_BYTE, 1, 7, MPI_COMM_WORLD); /* only now may rank 1 go on */
    DRV(cuStreamSynchronize(s));
    for (int m = 0; m < M; m++) {
      DRV(cuMemcpyDtoH(got, d[m], (size_t)N * 4));
      size_t bad = 0;
      for (size_t i = 0; i < N; i++) {
        float want = 0;
        for (int q = 0; q < nranks; q++) want += val(q, m + round, i);
        bad += got[i] != want;
      }
      if (bad) {
        printf("not ok - rank %d: round %d member %d: %zu of %d wrong\n", rank, round, m, bad, N);
        failures++;
      }
    }
  }
  ncclshim_stats_t st;
  int (*get)(ncclshim_stats_t *) = (int (*)(ncclshim_stats_t *))dlsym(RTLD_DEFAULT, "ncclshim_get_stats");
  int fused = get && get(&st) == 0 && st.fused == M; /* round 4 only */
  printf("%s - rank %d: rounds 1-4 exact, no wait in round 1's ncclGroupEnd, round 4 fused (%llu members fused)\n",
         !failures && fused ? "ok" : "not ok", rank, get ? (unsigned long long)st.fused : 0ull);
  ncclCommDestroy(comm);
  MPI_Finalize();
  return failures || !fused;
}
