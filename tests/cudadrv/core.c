/* core.c — the CUDA driver test double's init, error names, devices,
 * contexts (primary contexts, a per-thread current-context stack, none
 * current on a fresh thread), the stream-capture mode rules, the counters of
 * cudadrv_hooks.h with their report at exit, and cuGetProcAddress.
 *
 * Devices: CUDADRV_DEVICES of them (default 2, at most 8), sm_90 (CUDADRV_SM),
 * 132 SMs; CUDADRV_NO_POOLS=1 makes them report no memory-pool support.
 * CUDADRV_STATS=1 prints the information counters at exit.
 *
 * Must not: do anything before cuInit except answer cuGetErrorName/String,
 * or print anything but "cudadrv: " lines on stderr. */
#include <dlfcn.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cudadrv.h"
#include "simt_kernels.h"

#define CTX_MAGIC 0x43545831
cudadrv_stats cd_stats;
static int inited, ndev = CD_NDEV, no_pools;
static pid_t init_pid;
static struct CUctx_st primaries[8];
static unsigned long long next_id = 1;
static __thread CUcontext ctx_stack[32];
static __thread int ctx_depth;
static __thread int region_depth;
static __thread CUstreamCaptureMode thread_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;

void cd_count(uint64_t *field) { __atomic_add_fetch(field, 1, __ATOMIC_RELAXED); }

void cd_note(const char *fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  fprintf(stderr, "cudadrv: %s\n", buf);
}

void cd_count_illegal(const char *fmt, ...) {
  char buf[400];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  cd_count(&cd_stats.illegal_accesses);
  cd_note("illegal access: %s", buf);
}

static simt_counts simt_base; /* at the last reset */

CD_EXPORT int cudadrv_get_stats(cudadrv_stats *out) {
  __atomic_thread_fence(__ATOMIC_SEQ_CST);
  *out = cd_stats;
  simt_counts c;
  simt_get_counts(&c);
  out->kernel_blocks = c.blocks - simt_base.blocks;
  out->kernel_barriers = c.barriers - simt_base.barriers;
  out->kernel_shuffles = c.shuffles - simt_base.shuffles;
  out->kernel_vec_accesses = c.vec_accesses - simt_base.vec_accesses;
  out->kernel_loads = c.loads - simt_base.loads;
  out->kernel_stores = c.stores - simt_base.stores;
  out->kernel_load_bytes = c.load_bytes - simt_base.load_bytes;
  out->kernel_store_bytes = c.store_bytes - simt_base.store_bytes;
  return 0;
}
CD_EXPORT void cudadrv_reset_stats(void) {
  memset(&cd_stats, 0, sizeof cd_stats);
  simt_get_counts(&simt_base);
}

CD_EXPORT void cudadrv_region(int enter) { region_depth += enter ? 1 : (region_depth > 0 ? -1 : 0); }

void cd_poll_result(const char *api, CUresult r) {
  if (region_depth <= 0 || r != CUDA_ERROR_NOT_READY) return;
  cd_count(&cd_stats.region_polls);
  if (getenv("CUDADRV_POLL_NOTES")) cd_note("%s found device work not done during a user's collective", api);
}

void cd_sync_call(const char *api) {
  if (region_depth <= 0) return;
  cd_count(&cd_stats.region_syncs);
  cd_note("synchronising call %s during a user's collective", api);
}

static void report(void) {
  if (getpid() != init_pid) return;
  cudadrv_stats s;
  cudadrv_get_stats(&s);
  if (getenv("CUDADRV_STATS") && !strcmp(getenv("CUDADRV_STATS"), "1"))
    cd_note("stats: %llu kernel launches (%llu blocks, largest grid %llu), %llu host operations, %llu graph allocations, "
            "%llu pool blocks reused at once, %llu queries found device work not done inside user collectives",
            (unsigned long long)s.launches, (unsigned long long)s.kernel_blocks, (unsigned long long)s.kernel_max_grid,
            (unsigned long long)s.host_ops, (unsigned long long)s.graph_allocs, (unsigned long long)s.pool_reuses,
            (unsigned long long)s.region_polls);
  if (!s.capture_violations && !s.region_syncs && !s.illegal_accesses) return;
  cd_note("FAIL %llu capture violation(s), %llu synchronising call(s) in user collectives, "
          "%llu illegal access(es)",
          (unsigned long long)s.capture_violations, (unsigned long long)s.region_syncs,
          (unsigned long long)s.illegal_accesses);
  const char *e = getenv("CUDADRV_EXIT_ON_FAIL");
  if (!e || strcmp(e, "0")) {
    fflush(NULL);
    _exit(86);
  }
}

/* ---- init, errors, version ---- */
CD_EXPORT CUresult cuInit(unsigned flags) {
  if (flags) return CUDA_ERROR_INVALID_VALUE;
  if (__atomic_load_n(&inited, __ATOMIC_ACQUIRE)) return getpid() == init_pid ? CUDA_SUCCESS : CUDA_ERROR_NOT_INITIALIZED;
  static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
  pthread_mutex_lock(&m);
  if (!inited) {
    const char *d = getenv("CUDADRV_DEVICES");
    if (d && atoi(d) >= 1 && atoi(d) <= 8) ndev = atoi(d);
    no_pools = getenv("CUDADRV_NO_POOLS") && !strcmp(getenv("CUDADRV_NO_POOLS"), "1");
    for (int i = 0; i < ndev; i++) {
      primaries[i].magic = CTX_MAGIC;
      primaries[i].dev = i;
      primaries[i].primary = 1;
      primaries[i].id = next_id++;
      pthread_mutex_init(&primaries[i].lock, NULL);
    }
    init_pid = getpid();
    atexit(report);
    __atomic_store_n(&inited, 1, __ATOMIC_RELEASE);
  }
  pthread_mutex_unlock(&m);
  return CUDA_SUCCESS;
}

/* Forked children cannot use the parent's CUDA (as with the real driver). */
CUresult cd_ready(void) {
  if (!__atomic_load_n(&inited, __ATOMIC_ACQUIRE)) return CUDA_ERROR_NOT_INITIALIZED;
  return getpid() == init_pid ? CUDA_SUCCESS : CUDA_ERROR_NOT_INITIALIZED;
}
#define READY() do { CUresult r_ = cd_ready(); if (r_ != CUDA_SUCCESS) return r_; } while (0)

/* CUDA_VERSION of the cuda.h it was built with; CUDADRV_DRIVER_VERSION=N
 * (e.g. 12020) pretends an older or newer driver. */
CD_EXPORT CUresult cuDriverGetVersion(int *v) {
  if (!v) return CUDA_ERROR_INVALID_VALUE;
  const char *e = getenv("CUDADRV_DRIVER_VERSION");
  *v = e && atoi(e) > 0 ? atoi(e) : CUDA_VERSION;
  return CUDA_SUCCESS;
}

static const struct { CUresult r; const char *name, *text; } errs[] = {
#define E(x, t) {x, #x, t},
    E(CUDA_SUCCESS, "no error") E(CUDA_ERROR_INVALID_VALUE, "invalid argument")
    E(CUDA_ERROR_OUT_OF_MEMORY, "out of memory") E(CUDA_ERROR_NOT_INITIALIZED, "initialization error")
    E(CUDA_ERROR_INVALID_DEVICE, "invalid device ordinal") E(CUDA_ERROR_INVALID_IMAGE, "device kernel image is invalid")
    E(CUDA_ERROR_INVALID_CONTEXT, "invalid device context") E(CUDA_ERROR_INVALID_HANDLE, "invalid resource handle")
    E(CUDA_ERROR_NOT_FOUND, "named symbol not found") E(CUDA_ERROR_NOT_READY, "device not ready")
    E(CUDA_ERROR_ILLEGAL_ADDRESS, "an illegal memory access was encountered")
    E(CUDA_ERROR_NOT_SUPPORTED, "operation not supported")
    E(CUDA_ERROR_NO_BINARY_FOR_GPU, "no kernel image is available for execution on the device")
    E(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, "operation not permitted when stream is capturing")
    E(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, "operation failed due to a previous error during capture")
    E(CUDA_ERROR_STREAM_CAPTURE_UNMATCHED, "capture was not initiated in this stream")
    E(CUDA_ERROR_STREAM_CAPTURE_UNJOINED, "capturing stream has unjoined work")
    E(CUDA_ERROR_STREAM_CAPTURE_ISOLATION, "dependency created on uncaptured work in another stream")
    E(CUDA_ERROR_STREAM_CAPTURE_IMPLICIT, "operation would make the legacy stream depend on a capturing blocking stream")
    E(CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD, "attempt to terminate a thread-local capture sequence from another thread")
    E(CUDA_ERROR_ILLEGAL_STATE, "the operation is not permitted in this state")
    E(CUDA_ERROR_INVALID_PTX, "a PTX JIT compilation failed")
    E(CUDA_ERROR_LAUNCH_FAILED, "unspecified launch failure")
#undef E
};

/* The name (which 0) or text (1) of r. */
static CUresult err_lookup(CUresult r, int which, const char **s) {
  for (size_t i = 0; i < sizeof errs / sizeof errs[0]; i++)
    if (errs[i].r == r) {
      *s = which ? errs[i].text : errs[i].name;
      return CUDA_SUCCESS;
    }
  *s = NULL;
  return CUDA_ERROR_INVALID_VALUE;
}
CD_EXPORT CUresult cuGetErrorName(CUresult r, const char **s) { return err_lookup(r, 0, s); }
CD_EXPORT CUresult cuGetErrorString(CUresult r, const char **s) { return err_lookup(r, 1, s); }

/* ---- devices ---- */
CD_EXPORT CUresult cuDeviceGetCount(int *n) {
  READY();
  *n = ndev;
  return CUDA_SUCCESS;
}

CD_EXPORT CUresult cuDeviceGet(CUdevice *d, int ordinal) {
  READY();
  if (ordinal < 0 || ordinal >= ndev) return CUDA_ERROR_INVALID_DEVICE;
  *d = ordinal;
  return CUDA_SUCCESS;
}

CD_EXPORT CUresult cuDeviceGetName(char *name, int len, CUdevice d) {
  READY();
  if (d < 0 || d >= ndev) return CUDA_ERROR_INVALID_DEVICE;
  snprintf(name, (size_t)len, "cudadrv test double device %d", d);
  return CUDA_SUCCESS;
}

/* "0000:0N:00.0" with N = the PCI_BUS_ID attribute (tests/nvml's double finds the device by it). */
CD_EXPORT CUresult cuDeviceGetPCIBusId(char *bus, int len, CUdevice d) {
  READY();
  if (d < 0 || d >= ndev) return CUDA_ERROR_INVALID_DEVICE;
  if (!bus || len < 13) return CUDA_ERROR_INVALID_VALUE;
  snprintf(bus, (size_t)len, "0000:%02x:00.0", (unsigned)(d + 1));
  return CUDA_SUCCESS;
}

size_t cd_device_bytes(void);
CD_EXPORT CUresult cuDeviceTotalMem(size_t *bytes, CUdevice d) {
  READY();
  if (d < 0 || d >= ndev) return CUDA_ERROR_INVALID_DEVICE;
  *bytes = cd_device_bytes();
  return CUDA_SUCCESS;
}

/* The devices' compute capability as major * 10 + minor: CUDADRV_SM (e.g.
 * 100 for a device newer than any SASS of the fatbin, 70 for one older than
 * all of it), default 90. */
int cd_device_sm(void) {
  static int sm;
  if (!sm) {
    const char *e = getenv("CUDADRV_SM");
    int v = e ? atoi(e) : 90;
    sm = v >= 30 && v <= 200 ? v : 90;
  }
  return sm;
}

CD_EXPORT CUresult cuDeviceGetAttribute(int *v, CUdevice_attribute a, CUdevice d) {
  READY();
  if (d < 0 || d >= ndev) return CUDA_ERROR_INVALID_DEVICE;
  if ((int)a <= 0 || a >= CU_DEVICE_ATTRIBUTE_MAX) return CUDA_ERROR_INVALID_VALUE;
  switch (a) {
  case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: *v = 132; break;
  case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: *v = cd_device_sm() / 10; break;
  case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: *v = cd_device_sm() % 10; break;
  case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: *v = 1024; break;
  case CU_DEVICE_ATTRIBUTE_WARP_SIZE: *v = 32; break;
  case CU_DEVICE_ATTRIBUTE_PCI_BUS_ID: *v = d + 1; break;
  case CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED: *v = !no_pools; break;
  case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING:
  case CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY:
  case CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY:
  case CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED:
  case CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS: *v = 1; break;
  default: *v = 0;
  }
  return CUDA_SUCCESS;
}

/* ---- contexts ---- */
CUcontext cd_primary(int dev) { return dev >= 0 && dev < ndev ? &primaries[dev] : NULL; }
int cd_ctx_valid(CUcontext c) {
  for (int i = 0; i < ndev; i++)
    if (c == &primaries[i]) return 1;
  return 0;
}
CUcontext cd_current(void) { return ctx_depth ? ctx_stack[ctx_depth - 1] : NULL; }

CD_EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext *c, CUdevice d) {
  READY();
  if (!(*c = cd_primary(d))) return CUDA_ERROR_INVALID_DEVICE;
  return CUDA_SUCCESS;
}
CD_EXPORT CUresult cuDevicePrimaryCtxRelease(CUdevice d) {
  READY();
  return cd_primary(d) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
}
CD_EXPORT CUresult cuDevicePrimaryCtxGetState(CUdevice d, unsigned *flags, int *active) {
  READY();
  if (!cd_primary(d)) return CUDA_ERROR_INVALID_DEVICE;
  *flags = 0;
  *active = 1;
  return CUDA_SUCCESS;
}

CD_EXPORT CUresult cuCtxGetCurrent(CUcontext *c) {
  READY();
  *c = cd_current();
  return CUDA_SUCCESS;
}

CD_EXPORT CUresult cuCtxSetCurrent(CUcontext c) {
  READY();
  if (c && !cd_ctx_valid(c)) return CUDA_ERROR_INVALID_CONTEXT;
  if (!c) {
    if (ctx_depth) ctx_depth--;
    return CUDA_SUCCESS;
  }
  if (!ctx_depth) ctx_depth = 1;
  ctx_stack[ctx_depth - 1] = c;
  return CUDA_SUCCESS;
}

CD_EXPORT CUresult cuCtxPushCurrent(CUcontext c) {
  READY();
  if (!c || !cd_ctx_valid(c)) return CUDA_ERROR_INVALID_CONTEXT;
  if (ctx_depth == 32) return CUDA_ERROR_OUT_OF_MEMORY;
  ctx_stack[ctx_depth++] = c;
  return CUDA_SUCCESS;
}

CD_EXPORT CUresult cuCtxPopCurrent(CUcontext *c) {
  READY();
  if (!ctx_depth) return CUDA_ERROR_INVALID_CONTEXT;
  CUcontext top = ctx_stack[--ctx_depth];
  if (c) *c = top;
  return CUDA_SUCCESS;
}

CD_EXPORT CUresult cuCtxGetDevice(CUdevice *d) {
  READY();
  CUcontext c = cd_current();
  if (!c) return CUDA_ERROR_INVALID_CONTEXT;
  *d = c->dev;
  return CUDA_SUCCESS;
}

CD_EXPORT CUresult cuCtxGetId(CUcontext c, unsigned long long *id) {
  READY();
  if (!c) c = cd_current();
  if (!c || !cd_ctx_valid(c)) return CUDA_ERROR_INVALID_CONTEXT;
  *id = c->id;
  return CUDA_SUCCESS;
}

CD_EXPORT CUresult cuCtxGetFlags(unsigned *flags) {
  READY();
  if (!cd_current()) return CUDA_ERROR_INVALID_CONTEXT;
  *flags = 0;
  return CUDA_SUCCESS;
}

CD_EXPORT CUresult cuCtxSynchronize(void) {
  READY();
  CUcontext c = cd_current();
  if (!c) return CUDA_ERROR_INVALID_CONTEXT;
  CUresult r = cd_unsafe("cuCtxSynchronize");
  if (r != CUDA_SUCCESS) return r;
  cd_sync_call("cuCtxSynchronize");
  pthread_mutex_lock(&c->lock);
  struct CUstream_st *list = c->streams;
  pthread_mutex_unlock(&c->lock);
  for (struct CUstream_st *s = list; s; s = s->next_in_ctx) cd_stream_drain(s);
  return CUDA_SUCCESS;
}

/* ---- capture modes ---- */
CD_EXPORT CUresult cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode *mode) {
  READY();
  if (!mode || (unsigned)*mode > CU_STREAM_CAPTURE_MODE_RELAXED) return CUDA_ERROR_INVALID_VALUE;
  CUstreamCaptureMode old = thread_mode;
  thread_mode = *mode;
  *mode = old;
  return CUDA_SUCCESS;
}

/* The driver's rules (cuThreadExchangeStreamCaptureMode): a thread in global
 * mode may not make unsafe calls while it has a non-relaxed capture of its
 * own or any other thread has a global one; thread-local mode only looks at
 * its own captures; relaxed mode never prohibits. */
CUresult cd_unsafe(const char *api) {
  if (thread_mode == CU_STREAM_CAPTURE_MODE_RELAXED) return CUDA_SUCCESS;
  CUresult r = CUDA_SUCCESS;
  pthread_t self = pthread_self();
  cd_captures_lock();
  for (cd_capture *c = cd_captures_first(); c; c = c->next_active) {
    int own = pthread_equal(c->thread, self);
    if ((own && c->mode != CU_STREAM_CAPTURE_MODE_RELAXED) ||
        (!own && thread_mode == CU_STREAM_CAPTURE_MODE_GLOBAL && c->mode == CU_STREAM_CAPTURE_MODE_GLOBAL)) {
      cd_capture_invalidate(c, "%s from %s thread (thread mode %s) during a %s-mode capture", api,
                            own ? "the capturing" : "another",
                            thread_mode == CU_STREAM_CAPTURE_MODE_GLOBAL ? "global" : "thread-local",
                            c->mode == CU_STREAM_CAPTURE_MODE_GLOBAL ? "global" : "thread-local");
      r = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    }
  }
  cd_captures_unlock();
  return r;
}

/* ---- cuGetExportTable: the real driver's private tables, which the double
 * has none of. NVRTC (libnvrtc.so.13) dlopens libcuda.so.1 and asks for one
 * before compiling; it compiles without it when the answer is an error. */
CD_EXPORT CUresult cuGetExportTable(const void **table, const CUuuid *id) {
  (void)id;
  if (table) *table = NULL;
  return CUDA_ERROR_NOT_SUPPORTED;
}

/* ---- cuGetProcAddress: the newest version of a name this library has ---- */
CD_EXPORT CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                                    CUdriverProcAddressQueryResult *status) {
  (void)cudaVersion;
  (void)flags;
  static void *self;
  if (!self) {
    Dl_info info;
    if (dladdr((void *)cuInit, &info) && info.dli_fname) self = dlopen(info.dli_fname, RTLD_LAZY | RTLD_NOLOAD);
  }
  *pfn = NULL;
  if (self && symbol && !strncmp(symbol, "cu", 2)) {
    static const char *const sfx[] = {"_v4", "_v3", "_v2", ""};
    char name[128];
    for (int i = 0; i < 4 && !*pfn; i++) {
      snprintf(name, sizeof name, "%s%s", symbol, sfx[i]);
      *pfn = dlsym(self, name);
    }
  }
  if (status) *status = *pfn ? CU_GET_PROC_ADDRESS_SUCCESS : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  return *pfn ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
}
