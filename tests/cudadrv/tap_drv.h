/* tap_drv.h — TAP check lines (tests/tap.h) for the unit programs that run
 * the shim's CUDA backend on the driver test double (test_cuda_backend.c,
 * test_ef_cuda.c, kernel_access.c): report() for a fixed message, DRV() for
 * a driver call that must succeed, else the program bails out (TAP "Bail
 * out!"), and drv_backend(), their common start. Included
 * once per program; everything here is static. */
#ifndef NSC_TESTS_TAP_DRV_H
#define NSC_TESTS_TAP_DRV_H

#include <cuda.h>
#include <stdlib.h>

#include "../tap.h"
#include "backend.h"

static void report(int ok, const char *what) { check(ok, "%s", what); }

#define DRV(call)                                                     \
  do {                                                                \
    CUresult r_ = (call);                                             \
    if (r_ != CUDA_SUCCESS) {                                         \
      printf("not ok - %s failed (%d)\nBail out!\n", #call, (int)r_); \
      exit(1);                                                        \
    }                                                                 \
  } while (0)

/* The prologue of a program that drives the shim's CUDA backend: device 0's
 * primary context made current, the backend and its kernels loaded on a new
 * non-blocking stream *s, else the program bails out. */
static inline const nsc_backend *drv_backend(CUstream *s) {
  DRV(cuInit(0));
  CUcontext ctx;
  DRV(cuDevicePrimaryCtxRetain(&ctx, 0));
  DRV(cuCtxSetCurrent(ctx));
  const nsc_backend *be = nsc_backend_cuda();
  if (!be) {
    printf("not ok - the CUDA backend loads: %s\nBail out!\n", nsc_backend_error());
    exit(1);
  }
  DRV(cuStreamCreate(s, CU_STREAM_NON_BLOCKING));
  if (!be->usable((nsc_stream)*s)) {
    printf("not ok - the kernels load: %s\nBail out!\n", nsc_backend_error());
    exit(1);
  }
  return be;
}

#endif
