/* tap_drv.h — TAP check lines (tests/tap.h) for the unit programs that run
 * the shim's CUDA backend on the driver test double (test_cuda_backend.c,
 * test_ef_cuda.c): report() for a fixed message, and DRV() for a driver call
 * that must succeed, else the program bails out (TAP "Bail out!"). Included
 * once per program; everything here is static. */
#ifndef NSC_TESTS_TAP_DRV_H
#define NSC_TESTS_TAP_DRV_H

#include <cuda.h>
#include <stdlib.h>

#include "../tap.h"

static void report(int ok, const char *what) { check(ok, "%s", what); }

#define DRV(call)                                                     \
  do {                                                                \
    CUresult r_ = (call);                                             \
    if (r_ != CUDA_SUCCESS) {                                         \
      printf("not ok - %s failed (%d)\nBail out!\n", #call, (int)r_); \
      exit(1);                                                        \
    }                                                                 \
  } while (0)

#endif
