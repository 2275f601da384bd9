/* shim_cuda_streams.c — no stream handle the shim keeps outlives the
 * caller's stream (issue 23, defect 7), on the CUDA driver test double with
 * the shim preloaded over the host NCCL, device buffers.
 *
 * Four epochs, each on a stream of its own that the program destroys at the
 * epoch's end (as a framework does with its side streams): three steps of a
 * fused group of two all-reduces and one large all-reduce (two-phase, with
 * error feedback when the settings ask for it), the same buffers every step
 * (so staging, fusion space and error-feedback slots are kept and re-used
 * across epochs). A later epoch's calls, or the communicator's destruction,
 * must never name a destroyed stream: the double counts any use of one as an
 * illegal access, and the process then exits 86. Every sum is checked
 * exactly (inputs small multiples of 1/4, exact in every wire format).
 * Every NCCL call is bracketed with cudadrv_region: after the first call
 * (the communicator's configuration check, an agreement point whose answer
 * it polls for) no call may find device work not done by polling (issue 23,
 * defect 2: a hidden host wait). Exits 1 on a failed check. */
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testmpi.h"
#include "cudatest.h"
#include "cudadrv_hooks.h"

static uint64_t polls(void) {
  cudadrv_stats st;
  cudadrv_get_stats(&st);
  return st.region_polls;
}

enum { NSMALL = 1 << 12, NBIG = 1 << 18, EPOCHS = 4, STEPS = 3 };

static float val(int rank, int m, int step, size_t i) {
  return (float)((int)((rank * 5 + m * 3 + step + i) % 13) - 6) * 0.25f;
}

static int check(CUdeviceptr d, size_t n, int m, int step, int nranks, float *got) {
  DRV(cuMemcpyDtoH(got, d, n * 4));
  size_t bad = 0;
  for (size_t i = 0; i < n; i++) {
    float want = 0;
    for (int q = 0; q < nranks; q++) want += val(q, m, step, i);
    bad += got[i] != want;
  }
  if (bad) printf("not ok - rank %d: step %d buffer %d: %zu of %zu wrong\n", tm_rank(), step, m, bad, n);
  return bad != 0;
}

int main(int argc, char **argv) {
  int rank, nranks, failures = 0;
  CUstream first = ct_begin(&argc, &argv, &rank, &nranks);
  DRV(cuStreamDestroy(first));
  ncclComm_t comm = tm_comm_world();
  const size_t n[3] = {NSMALL, NSMALL, NBIG};
  CUdeviceptr d[3];
  float *h = malloc((size_t)NBIG * 4), *got = malloc((size_t)NBIG * 4);
  for (int m = 0; m < 3; m++) DRV(cuMemAlloc(&d[m], n[m] * 4));
  uint64_t after_check = 0;
  for (int e = 0; e < EPOCHS; e++) {
    CUstream s;
    DRV(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    for (int k = 0; k < STEPS; k++) {
      int step = e * STEPS + k;
      for (int m = 0; m < 3; m++) {
        for (size_t i = 0; i < n[m]; i++) h[i] = val(rank, m, step, i);
        DRV(cuMemcpyHtoD(d[m], h, n[m] * 4));
      }
      cudadrv_region(1);
      NCCL_OK(ncclGroupStart());
      for (int m = 0; m < 2; m++)
        NCCL_OK(ncclAllReduce((void *)d[m], (void *)d[m], n[m], ncclFloat32, ncclSum, comm, s));
      NCCL_OK(ncclGroupEnd());
      if (step == 0) after_check = polls();
      NCCL_OK(ncclAllReduce((void *)d[2], (void *)d[2], n[2], ncclFloat32, ncclSum, comm, s));
      cudadrv_region(0);
      DRV(cuStreamSynchronize(s));
      for (int m = 0; m < 3; m++) failures += check(d[m], n[m], m, step, nranks, got);
    }
    DRV(cuStreamDestroy(s));
  }
  uint64_t later = polls() - after_check;
  if (later) {
    printf("not ok - rank %d: %llu polls found device work not done in collectives after the first group\n", rank,
           (unsigned long long)later);
    failures++;
  }
  NCCL_OK(ncclCommDestroy(comm));
  for (int m = 0; m < 3; m++) DRV(cuMemFree(d[m]));
  free(h);
  free(got);
  MPI_Allreduce(MPI_IN_PLACE, &failures, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0)
    printf("%s - %d epochs on streams destroyed after use: every sum exact, no host wait after the first group\n",
           failures ? "not ok" : "ok", EPOCHS);
  MPI_Finalize();
  return failures != 0;
}
