/* nvrtc_stub.c — a stand-in libnvrtc.so.13 whose compiler always fails, for
 * tests/t/16-cuda-backend.sh: preloaded, it is what the shim's dlopen of
 * "libnvrtc.so.13" finds, so a run can have neither a usable fatbin
 * (CUDADRV_NO_FATBIN=1) nor working NVRTC on a machine that has NVRTC
 * installed. Every entry point the shim resolves exists; compiling answers
 * NVRTC_ERROR_COMPILATION (6) with a one-line log. Must not: be shipped. */
#include <stddef.h>
#include <string.h>

#define API __attribute__((visibility("default")))
static const char logtext[] = "nvrtc_stub: this test's NVRTC cannot compile";

API int nvrtcVersion(int *major, int *minor) { *major = 13; *minor = 0; return 0; }
API int nvrtcGetNumSupportedArchs(int *n) { *n = 1; return 0; }
API int nvrtcGetSupportedArchs(int *a) { a[0] = 90; return 0; }
API int nvrtcCreateProgram(void **p, const char *src, const char *name, int n, const char *const *h,
                           const char *const *i) {
  (void)src; (void)name; (void)n; (void)h; (void)i;
  static int prog;
  *p = &prog;
  return 0;
}
API int nvrtcCompileProgram(void *p, int n, const char *const *o) { (void)p; (void)n; (void)o; return 6; }
API int nvrtcGetProgramLogSize(void *p, size_t *n) { (void)p; *n = sizeof logtext; return 0; }
API int nvrtcGetProgramLog(void *p, char *log) { (void)p; memcpy(log, logtext, sizeof logtext); return 0; }
API int nvrtcGetPTXSize(void *p, size_t *n) { (void)p; *n = 0; return 7; }
API int nvrtcGetPTX(void *p, char *x) { (void)p; (void)x; return 7; }
API int nvrtcGetCUBINSize(void *p, size_t *n) { (void)p; *n = 0; return 7; }
API int nvrtcGetCUBIN(void *p, char *x) { (void)p; (void)x; return 7; }
API int nvrtcDestroyProgram(void **p) { *p = NULL; return 0; }
