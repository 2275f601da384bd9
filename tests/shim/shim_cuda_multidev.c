/* shim_cuda_multidev.c — one thread drives every device (issue 23, defect
 * 1): ncclCommInitAll over the CUDA driver test double's devices, then
 * groups holding one call per communicator, as single-process multi-GPU
 * programs (nccl-tests -g N) make them. NCCL needs a thread's communicators
 * in one group: nothing the shim adds after the group end may wait for one
 * communicator's peers before the others' work is issued (its configuration
 * check and its grouped two-phase calls did: a deadlock at the first group).
 *
 *   shim_cuda_multidev [NDEV]     (no MPI: one process, default 2 devices)
 *
 * Each group: two small all-reduces per communicator (fused) and one large
 * (two-phase under NCCLSHIM_ALGO=twophase), six groups, device buffers, sums
 * exact (inputs small multiples of 1/4). Prints TAP lines; exits 1 on a
 * failed check (a hang is the caller's timeout). Must not: use MPI. */
#include <cuda.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>

#define DRV(call)                                                                        \
  do {                                                                                   \
    CUresult r_ = (call);                                                                \
    if (r_ != CUDA_SUCCESS) {                                                            \
      fprintf(stderr, "%s failed (%d)\n", #call, (int)r_);                               \
      exit(2);                                                                           \
    }                                                                                    \
  } while (0)
#define NCCL(call)                                                                       \
  do {                                                                                   \
    ncclResult_t r_ = (call);                                                            \
    if (r_ != ncclSuccess) {                                                             \
      fprintf(stderr, "%s failed: %s\n", #call, ncclGetErrorString(r_));                 \
      exit(2);                                                                           \
    }                                                                                    \
  } while (0)

enum { MAXDEV = 8, M = 3, STEPS = 6 };
static const size_t count[M] = {1 << 12, 1 << 12, 1 << 18};

static float val(int dev, int m, int step, size_t i) { return (float)((int)((dev * 7 + m * 3 + step + i) % 13) - 6) * 0.25f; }

int main(int argc, char **argv) {
  int ndev = argc > 1 ? atoi(argv[1]) : 2, failures = 0;
  if (ndev < 1 || ndev > MAXDEV) return 2;
  DRV(cuInit(0));
  CUcontext ctx[MAXDEV];
  CUstream s[MAXDEV];
  CUdeviceptr buf[MAXDEV][M];
  int devs[MAXDEV];
  for (int d = 0; d < ndev; d++) {
    devs[d] = d;
    DRV(cuDevicePrimaryCtxRetain(&ctx[d], d));
    DRV(cuCtxSetCurrent(ctx[d]));
    DRV(cuStreamCreate(&s[d], CU_STREAM_NON_BLOCKING));
    for (int m = 0; m < M; m++) DRV(cuMemAlloc(&buf[d][m], count[m] * 4));
  }
  ncclComm_t comms[MAXDEV];
  NCCL(ncclCommInitAll(comms, ndev, devs));
  float *h = malloc(count[M - 1] * 4);
  for (int step = 0; step < STEPS; step++) {
    for (int d = 0; d < ndev; d++) {
      DRV(cuCtxSetCurrent(ctx[d]));
      for (int m = 0; m < M; m++) {
        for (size_t i = 0; i < count[m]; i++) h[i] = val(d, m, step, i);
        DRV(cuMemcpyHtoD(buf[d][m], h, count[m] * 4));
      }
    }
    NCCL(ncclGroupStart());
    for (int d = 0; d < ndev; d++) {
      DRV(cuCtxSetCurrent(ctx[d]));
      for (int m = 0; m < M; m++)
        NCCL(ncclAllReduce((void *)buf[d][m], (void *)buf[d][m], count[m], ncclFloat32, ncclSum, comms[d], s[d]));
    }
    NCCL(ncclGroupEnd());
    for (int d = 0; d < ndev; d++) {
      DRV(cuCtxSetCurrent(ctx[d]));
      DRV(cuStreamSynchronize(s[d]));
      for (int m = 0; m < M; m++) {
        DRV(cuMemcpyDtoH(h, buf[d][m], count[m] * 4));
        size_t bad = 0;
        for (size_t i = 0; i < count[m]; i++) {
          float want = 0;
          for (int q = 0; q < ndev; q++) want += val(q, m, step, i);
          bad += h[i] != want;
        }
        if (bad) {
          printf("not ok - step %d device %d call %d: %zu of %zu wrong\n", step, d, m, bad, count[m]);
          failures++;
        }
      }
    }
  }
  for (int d = 0; d < ndev; d++) NCCL(ncclCommDestroy(comms[d]));
  free(h);
  printf("%s - one thread, %d devices (ncclCommInitAll), %d groups of %d calls per communicator: no hang, every sum exact\n",
         failures ? "not ok" : "ok", ndev, STEPS, M);
  return failures != 0;
}
