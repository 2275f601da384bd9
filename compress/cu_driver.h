/* cu_driver.h — the CUDA driver API as a table of function pointers resolved
 * from dlopen("libcuda.so.1"), and the embedded kernel fatbin.
 *
 * cuda.h is included for its types and prototypes only: nothing links against
 * libcuda, so the library loads (and stays inert) on machines without a
 * driver. Names go through cuda.h's version macros (cuMemAlloc is
 * cuMemAlloc_v2), so each pointer has the prototype of the symbol resolved.
 *
 * Must not: call anything in the driver before nsc_cu_driver() is asked for,
 * or exit/print on failure (the reason is kept for nsc_cu_driver_error()). */
#ifndef NSC_CU_DRIVER_H
#define NSC_CU_DRIVER_H

#include <stddef.h>
#include <cuda.h>

/* Required entry points. */
#define NSC_CU_REQUIRED(X)                                                              \
  X(cuInit) X(cuGetErrorName) X(cuCtxGetCurrent) X(cuCtxPushCurrent) X(cuCtxPopCurrent) \
  X(cuCtxGetDevice) X(cuStreamGetCtx) X(cuDeviceGetAttribute) X(cuModuleLoadData)       \
  X(cuModuleGetFunction) X(cuLaunchKernel) X(cuMemAlloc) X(cuMemFree)                    \
  X(cuMemHostAlloc) X(cuMemHostGetDevicePointer) X(cuStreamIsCapturing)                \
  X(cuStreamCreate) X(cuStreamCreateWithPriority) X(cuStreamGetPriority)                \
  X(cuStreamSynchronize) X(cuStreamWaitEvent) X(cuMemcpyHtoDAsync) X(cuMemcpyDtoHAsync)  \
  X(cuMemsetD8Async) X(cuEventCreate) X(cuEventRecord) X(cuEventQuery)                  \
  X(cuEventElapsedTime) X(cuPointerGetAttribute)
/* Optional (stream-ordered allocation 11.2+, context ids 12.0+, capture modes
 * 10.1+; primary contexts, only for preparing ncclCommInitAll's devices);
 * NULL when absent. */
#define NSC_CU_OPTIONAL(X) X(cuMemAllocAsync) X(cuMemFreeAsync) X(cuMemPoolCreate) X(cuMemPoolSetAttribute) \
  X(cuMemAllocFromPoolAsync) X(cuCtxGetId) \
  X(cuThreadExchangeStreamCaptureMode) X(cuDeviceGet) X(cuDevicePrimaryCtxGetState) \
  X(cuDevicePrimaryCtxRetain) X(cuDevicePrimaryCtxRelease) X(cuOccupancyMaxActiveBlocksPerMultiprocessor)

#define NSC_CU_FIELD(f) __typeof__(f) *f;
typedef struct {
  NSC_CU_REQUIRED(NSC_CU_FIELD)
  NSC_CU_OPTIONAL(NSC_CU_FIELD)
} nsc_cu_api;
#undef NSC_CU_FIELD

/* The driver, loaded and cuInit'ed once (thread-safe); NULL when there is no
 * libcuda.so.1, a required symbol is missing or cuInit fails. Loaded whether
 * or not the library has kernels: without the driver nothing could tell
 * device memory from host memory. */
const nsc_cu_api *nsc_cu_driver(void);
const char *nsc_cu_driver_error(void);

/* The shim's own driver calls that stream capture may forbid (event queries,
 * stream creation, module loads) run between nsc_cu_relax() and
 * nsc_cu_unrelax(prev): the calling thread is in relaxed capture mode, so a
 * capture in global mode on another thread (torch.cuda.graph's default) is
 * not invalidated by them. prev is the mode to restore (-1: none to). */
int nsc_cu_relax(void);
void nsc_cu_unrelax(int prev);

/* "CUDA_ERROR_..." for a result code (works without a driver too). */
const char *nsc_cu_errname(CUresult r);

/* The kernels (compress/fatbin.S): the fatbin nvcc built (size 0 when built
 * without nvcc), and always their source for NVRTC (cu_nvrtc.h), a
 * NUL-terminated string. */
extern const unsigned char nsc_fatbin[];
extern const size_t nsc_fatbin_size;
extern const char nsc_kernels_src[];

#endif
