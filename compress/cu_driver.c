/* cu_driver.c — loads the CUDA driver once: dlopen("libcuda.so.1"), resolve
 * the entry points of cu_driver.h, cuInit(0); whether or not this build has
 * a fatbin (the kernels can come from NVRTC, and pointers must be classified
 * by the driver in any case). Also the thread's capture-mode switch.
 *
 * A few entry points were versioned after CUDA 12.0 (cuEventElapsedTime_v2);
 * when the versioned name is missing we fall back to the unversioned symbol,
 * whose prototype is the same.
 *
 * Must not: link libcuda, exit, print, or unload the driver (the program may
 * share it). */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "cu_driver.h"

#define STR_(x) #x
#define STR(x) STR_(x)

static nsc_cu_api api;
static const nsc_cu_api *loaded;
static char why[160] = "not loaded";
static pthread_once_t once = PTHREAD_ONCE_INIT;

/* Unversioned fallbacks for versioned names (same prototypes). */
static const struct {
  const char *name, *fallback;
} fallbacks[] = {{"cuEventElapsedTime_v2", "cuEventElapsedTime"}};

static void *resolve(void *h, const char *name) {
  void *p = dlsym(h, name);
  for (size_t i = 0; !p && i < sizeof fallbacks / sizeof fallbacks[0]; i++)
    if (!strcmp(name, fallbacks[i].name)) p = dlsym(h, fallbacks[i].fallback);
  return p;
}

static void load(void) {
  void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    snprintf(why, sizeof why, "no CUDA driver (libcuda.so.1 not loadable)");
    return;
  }
#define REQ(f)                                                                          \
  if (!(*(void **)&api.f = resolve(h, STR(f)))) {                                       \
    snprintf(why, sizeof why, "libcuda.so.1 lacks %s (driver too old)", STR(f));        \
    return;                                                                             \
  }
#define OPT(f) *(void **)&api.f = resolve(h, STR(f));
  NSC_CU_REQUIRED(REQ)
  NSC_CU_OPTIONAL(OPT)
#undef REQ
#undef OPT
  CUresult r = api.cuInit(0);
  if (r != CUDA_SUCCESS) {
    snprintf(why, sizeof why, "cuInit failed: %s", nsc_cu_errname(r));
    return;
  }
  why[0] = '\0';
  __atomic_store_n(&loaded, &api, __ATOMIC_RELEASE);
}

const nsc_cu_api *nsc_cu_driver(void) {
  const nsc_cu_api *p = __atomic_load_n(&loaded, __ATOMIC_ACQUIRE);
  if (p) return p;
  pthread_once(&once, load);
  return __atomic_load_n(&loaded, __ATOMIC_ACQUIRE);
}

const char *nsc_cu_driver_error(void) {
  nsc_cu_driver();
  return why;
}

int nsc_cu_relax(void) {
  const nsc_cu_api *cu = __atomic_load_n(&loaded, __ATOMIC_ACQUIRE);
  CUstreamCaptureMode m = CU_STREAM_CAPTURE_MODE_RELAXED;
  if (!cu || !cu->cuThreadExchangeStreamCaptureMode ||
      cu->cuThreadExchangeStreamCaptureMode(&m) != CUDA_SUCCESS)
    return -1;
  return (int)m;
}

void nsc_cu_unrelax(int prev) {
  const nsc_cu_api *cu = __atomic_load_n(&loaded, __ATOMIC_ACQUIRE);
  CUstreamCaptureMode m = (CUstreamCaptureMode)prev;
  if (prev >= 0 && cu && cu->cuThreadExchangeStreamCaptureMode) cu->cuThreadExchangeStreamCaptureMode(&m);
}

const char *nsc_cu_errname(CUresult r) {
  const char *s = NULL;
  const nsc_cu_api *cu = __atomic_load_n(&loaded, __ATOMIC_ACQUIRE);
  if (cu && cu->cuGetErrorName(r, &s) == CUDA_SUCCESS && s) return s;
  static __thread char buf[32];
  snprintf(buf, sizeof buf, "CUresult %d", (int)r);
  return buf;
}
