/* cudatest.h — what the MPI test programs on the CUDA driver test double
 * share (shim_cuda_capture.c, shim_cuda_grow.c, shim_cuda_abort.c): a driver call that must
 * succeed (else the whole job stops), and device 0's primary context made
 * current with a non-blocking stream on it. Include after testmpi.h. */
#ifndef NSC_CUDATEST_H
#define NSC_CUDATEST_H

#include <cuda.h>
#include <stdio.h>

#define DRV(call)                                                                        \
  do {                                                                                   \
    CUresult r_ = (call);                                                                \
    if (r_ != CUDA_SUCCESS) {                                                            \
      fprintf(stderr, "rank %d: %s failed (%d)\n", tm_rank(), #call, (int)r_);          \
      MPI_Abort(MPI_COMM_WORLD, 2);                                                      \
    }                                                                                    \
  } while (0)

/* Device 0's primary context, current on this thread, and a stream on it. */
static inline CUstream ct_stream(void) {
  CUcontext ctx;
  CUstream s;
  DRV(cuInit(0));
  DRV(cuDevicePrimaryCtxRetain(&ctx, 0));
  DRV(cuCtxSetCurrent(ctx));
  DRV(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  return s;
}

/* MPI initialised, this rank and the size, and ct_stream(). */
static inline CUstream ct_begin(int *argc, char ***argv, int *rank, int *nranks) {
  MPI_Init(argc, argv);
  MPI_Comm_rank(MPI_COMM_WORLD, rank);
  MPI_Comm_size(MPI_COMM_WORLD, nranks);
  return ct_stream();
}

#endif
