/* backend_cuda.c — the CUDA backend of backend.h: every operation enqueued on
 * the caller's stream through the driver API (compress/cu_*.c: libcuda
 * dlopen'ed, kernels from the embedded fatbin, per-context state), and
 * nsc_backend_for(), which sends device memory here and the rest to the host
 * backend.
 *
 * Staging memory is stream-ordered (cuMemAllocAsync/cuMemFreeAsync) where the
 * device supports memory pools, else cuMemAlloc/cuMemFree. Timing marks are
 * pooled events, read with cuEventElapsedTime only once complete. Counters
 * live in host-mapped memory and are read without any synchronisation.
 *
 * nsc_backend_cuda() is NULL unless the driver loads and (when a context is
 * current at the first call) the kernels load in it; device pointers still
 * get this backend then, whose operations fail with the reason (cu_ctx.c
 * keeps a context's failed setup), never the host backend, which would
 * dereference them.
 *
 * Must not: synchronise the caller's stream or device (only oob_end waits, on
 * the backend's private stream), exit, or print; errors go to
 * nsc_backend_set_error() and -1. Not for forked children (CUDA is not). */
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <time.h>

#include "backend.h"
#include "cu_kernels.h"

/* The backend passes nsc_seg tables to cu_kernels as nsc_cu_seg. */
_Static_assert(sizeof(nsc_seg) == sizeof(nsc_cu_seg) &&
                   offsetof(nsc_seg, src) == offsetof(nsc_cu_seg, src) &&
                   offsetof(nsc_seg, dst) == offsetof(nsc_cu_seg, dst) &&
                   offsetof(nsc_seg, count) == offsetof(nsc_cu_seg, count) &&
                   offsetof(nsc_seg, off) == offsetof(nsc_cu_seg, off),
               "nsc_seg and nsc_cu_seg have the same layout");

static int fail(CUresult r, const char *what) {
  nsc_backend_set_error("CUDA backend: %s failed (%s)", what ? what : "?", nsc_cu_errname(r));
  return -1;
}

/* Runs `call` (a CUresult expression that may set `what`); -1 on failure. */
#define CU_DO(call)                                                                      \
  do {                                                                                   \
    CUresult r_ = (call);                                                                \
    if (r_ != CUDA_SUCCESS) return fail(r_, what);                                       \
  } while (0)

/* Declares c, the context entry of stream s, and `what`. */
#define WITH_CTX(s)                                                                      \
  nsc_cuctx *c = NULL;                                                                   \
  const char *what = NULL;                                                               \
  CU_DO(nsc_cuctx_of((CUstream)(s), &c, &what))

static const nsc_cu_api *cu(void) { return nsc_cu_driver(); }

static int c_to_wire(nsc_stream s, nsc_wire_t w, const float *src, void *dst, size_t n,
                     float scale) {
  WITH_CTX(s);
  CU_DO(nsc_cuk_to_wire(c, (CUstream)s, w, src, dst, n, scale, &what));
  return 0;
}

static int c_from_wire(nsc_stream s, nsc_wire_t w, const void *src, float *dst, size_t n,
                       float scale) {
  WITH_CTX(s);
  CU_DO(nsc_cuk_from_wire(c, (CUstream)s, w, src, dst, n, scale, &what));
  return 0;
}

static int c_fmt_encode(nsc_stream s, nsc_fmt_t f, size_t block, const float *src, void *dst, size_t n,
                        float scale) {
  WITH_CTX(s);
  CU_DO(nsc_cuk_fmt_encode(c, (CUstream)s, f, block, src, dst, n, scale, &what));
  return 0;
}
static int c_fmt_decode(nsc_stream s, nsc_fmt_t f, size_t block, const void *src, float *dst, size_t n,
                        float scale) {
  WITH_CTX(s);
  CU_DO(nsc_cuk_fmt_decode(c, (CUstream)s, f, block, src, dst, n, scale, &what));
  return 0;
}
static int c_fmt_decode_sum(nsc_stream s, nsc_fmt_t f, size_t block, const void *base, size_t stride, int m,
                            float *dst, size_t n, float post) {
  WITH_CTX(s);
  CU_DO(nsc_cuk_fmt_decode_sum(c, (CUstream)s, f, block, base, stride, m, dst, n, post, &what));
  return 0;
}
static int c_seg_to_wire(nsc_stream s, nsc_wire_t w, const nsc_seg *segs, int nseg, void *dst,
                         float scale) {
  WITH_CTX(s);
  CU_DO(nsc_cuk_seg(c, (CUstream)s, 1, w, (const nsc_cu_seg *)segs, nseg, dst, scale, &what));
  return 0;
}

static int c_seg_from_wire(nsc_stream s, nsc_wire_t w, const nsc_seg *segs, int nseg,
                           const void *src, float scale) {
  WITH_CTX(s);
  CU_DO(nsc_cuk_seg(c, (CUstream)s, 0, w, (const nsc_cu_seg *)segs, nseg, (void *)src, scale,
                    &what));
  return 0;
}

static int c_scale(nsc_stream s, char kind, const void *src, void *dst, size_t n,
                   double factor) {
  if (kind != 'f' && kind != 'd' && kind != 'h' && kind != 'b') {
    nsc_backend_set_error("CUDA backend: cannot scale datatype kind '%c'", kind);
    return -1;
  }
  WITH_CTX(s);
  CU_DO(nsc_cuk_scale(c, (CUstream)s, kind, src, dst, n, factor, &what));
  return 0;
}

/* Runs a driver call with c's context current. */
#define IN_CTX(call, name)                                                               \
  do {                                                                                   \
    int pushed_;                                                                         \
    CU_DO(nsc_cuctx_enter(c, &pushed_, &what));                                          \
    CUresult r2_ = (call);                                                               \
    nsc_cuctx_leave(pushed_);                                                            \
    if (r2_ != CUDA_SUCCESS) return fail(r2_, name);                                     \
  } while (0)

static int c_fill_ones(nsc_stream s, void *p, size_t bytes) {
  WITH_CTX(s);
  if (bytes)
    IN_CTX(cu()->cuMemsetD8Async((CUdeviceptr)(uintptr_t)p, 0xff, bytes, (CUstream)s),
           "cuMemsetD8Async");
  return 0;
}

/* Device memory on s's context: stream-ordered where pools exist. */
static int dev_alloc(nsc_cuctx *c, CUstream s, size_t bytes, void **p) {
  const char *what = NULL;
  CUdeviceptr d = 0;
  *p = NULL;
  if (!bytes) return 0;
  if (c->pools) IN_CTX(cu()->cuMemAllocAsync(&d, bytes, s), "cuMemAllocAsync");
  else IN_CTX(cu()->cuMemAlloc(&d, bytes), "cuMemAlloc");
  *p = (void *)(uintptr_t)d;
  return 0;
}

static int dev_free(nsc_cuctx *c, CUstream s, void *p) {
  const char *what = NULL;
  if (!p) return 0;
  if (c->pools) IN_CTX(cu()->cuMemFreeAsync((CUdeviceptr)(uintptr_t)p, s), "cuMemFreeAsync");
  else IN_CTX(cu()->cuMemFree((CUdeviceptr)(uintptr_t)p), "cuMemFree");
  return 0;
}

static int c_alloc(nsc_stream s, size_t bytes, void **p) {
  *p = NULL;
  WITH_CTX(s);
  if (dev_alloc(c, (CUstream)s, bytes, p)) {
    nsc_backend_set_error("CUDA backend: no staging memory for %zu bytes (%s)", bytes,
                          nsc_backend_error());
    return -1;
  }
  return 0;
}

static void c_release(nsc_stream s, void *p) {
  nsc_cuctx *c = NULL;
  const char *what = NULL;
  if (p && nsc_cuctx_of((CUstream)s, &c, &what) == CUDA_SUCCESS) dev_free(c, (CUstream)s, p);
}

static int c_capturing(nsc_stream s, int *yes) {
  CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
  CUresult r = cu()->cuStreamIsCapturing((CUstream)s, &st);
  *yes = st != CU_STREAM_CAPTURE_STATUS_NONE;
  return r == CUDA_SUCCESS ? 0 : fail(r, "cuStreamIsCapturing");
}

static int c_mark(nsc_stream s, nsc_mark *m) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  m->host_ns = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
  m->ev = NULL;
  WITH_CTX(s);
  nsc_cuev *e = NULL;
  CU_DO(nsc_cuev_get(c, &e, &what));
  int pushed;
  CUresult r = nsc_cuctx_enter(c, &pushed, &what);
  if (r == CUDA_SUCCESS) {
    if ((r = cu()->cuEventRecord(e->ev, (CUstream)s)) != CUDA_SUCCESS) what = "cuEventRecord";
    nsc_cuctx_leave(pushed);
  }
  if (r != CUDA_SUCCESS) {
    nsc_cuev_put(e);
    return fail(r, what);
  }
  m->ev = e;
  return 0;
}

/* 1 with *ns when both events completed, 0 while either is pending. */
static int c_elapsed(const nsc_mark *a, const nsc_mark *b, uint64_t *ns) {
  const nsc_cuev *ea = a->ev, *eb = b->ev;
  if (!ea || !eb) {
    nsc_backend_set_error("CUDA backend: elapsed() on a mark that was not taken");
    return -1;
  }
  nsc_cuctx *c = ea->owner;
  const char *what = NULL;
  float ms = 0;
  int pushed;
  CU_DO(nsc_cuctx_enter(c, &pushed, &what));
  CUresult r = cu()->cuEventQuery(eb->ev);
  if (r == CUDA_SUCCESS) r = cu()->cuEventElapsedTime(&ms, ea->ev, eb->ev);
  nsc_cuctx_leave(pushed);
  if (r == CUDA_ERROR_NOT_READY) return 0;
  if (r != CUDA_SUCCESS) return fail(r, "cuEventElapsedTime");
  *ns = ms > 0 ? (uint64_t)((double)ms * 1e6 + 0.5) : 0;
  return 1;
}

static void c_mark_release(nsc_mark *m) {
  nsc_cuev_put(m->ev);
  m->ev = NULL;
}

static void c_counts(nsc_cast_counts *out) { nsc_cuctx_counts(&out->overflow, &out->underflow); }

static int c_side_stream(nsc_stream s, nsc_stream *side) {
  CUstream sd = (CUstream)s;
  *side = s;
  WITH_CTX(s);
  CU_DO(nsc_cuctx_side_stream(c, (CUstream)s, &sd, &what));
  *side = (nsc_stream)sd;
  return 0;
}

static int c_join(nsc_stream waiter, nsc_stream signaller) {
  WITH_CTX(signaller);
  CU_DO(nsc_cuctx_join(c, (CUstream)waiter, (CUstream)signaller, &what));
  return 0;
}

/* The configuration exchange: a device buffer on the current context's private
 * stream, filled from host; oob_end waits for that stream alone. */
static int c_oob_begin(const void *host, size_t bytes, void **buf, nsc_stream *s) {
  nsc_cuctx *c = NULL;
  const char *what = NULL;
  CUstream priv = NULL;
  *buf = NULL;
  CU_DO(nsc_cuctx_current(&c, &what));
  CU_DO(nsc_cuctx_private_stream(c, &priv, &what));
  if (dev_alloc(c, priv, bytes, buf)) return -1;
  int pushed;
  CUresult r = nsc_cuctx_enter(c, &pushed, &what);
  if (r == CUDA_SUCCESS) {
    if ((r = cu()->cuMemcpyHtoDAsync((CUdeviceptr)(uintptr_t)*buf, host, bytes, priv)) !=
        CUDA_SUCCESS)
      what = "cuMemcpyHtoDAsync";
    nsc_cuctx_leave(pushed);
  }
  if (r != CUDA_SUCCESS) {
    dev_free(c, priv, *buf);
    *buf = NULL;
    return fail(r, what);
  }
  *s = (nsc_stream)priv;
  return 0;
}

static int c_oob_end(void *buf, nsc_stream s, void *host, size_t bytes) {
  WITH_CTX(s);
  int pushed;
  CU_DO(nsc_cuctx_enter(c, &pushed, &what));
  CUresult r = cu()->cuMemcpyDtoHAsync(host, (CUdeviceptr)(uintptr_t)buf, bytes, (CUstream)s);
  what = "cuMemcpyDtoHAsync";
  if (r == CUDA_SUCCESS) {
    r = cu()->cuStreamSynchronize((CUstream)s); /* the private stream only */
    what = "cuStreamSynchronize(private stream)";
  }
  nsc_cuctx_leave(pushed);
  int freed = dev_free(c, (CUstream)s, buf);
  if (r != CUDA_SUCCESS) return fail(r, what);
  return freed;
}

static const nsc_backend cuda_backend = {
    .name = "cuda",
    .to_wire = c_to_wire,
    .from_wire = c_from_wire,
    .seg_to_wire = c_seg_to_wire,
    .seg_from_wire = c_seg_from_wire,
    .fmt_encode = c_fmt_encode,
    .fmt_decode = c_fmt_decode,
    .fmt_decode_sum = c_fmt_decode_sum,
    .scale = c_scale,
    .fill_ones = c_fill_ones,
    .alloc = c_alloc,
    .release = c_release,
    .capturing = c_capturing,
    .mark = c_mark,
    .elapsed = c_elapsed,
    .mark_release = c_mark_release,
    .counts = c_counts,
    .side_stream = c_side_stream,
    .join = c_join,
    .oob_begin = c_oob_begin,
    .oob_end = c_oob_end,
};

static const nsc_backend *available;
static char unavailable_why[256];
static pthread_once_t decided = PTHREAD_ONCE_INIT;

/* Driver loaded; and when a context is current, the fatbin must load in it. */
static void decide(void) {
  if (!nsc_cu_driver()) {
    snprintf(unavailable_why, sizeof unavailable_why, "%s", nsc_cu_driver_error());
    return;
  }
  CUcontext cur = NULL;
  if (cu()->cuCtxGetCurrent(&cur) == CUDA_SUCCESS && cur) {
    nsc_cuctx *c = NULL;
    const char *what = NULL;
    CUresult r = nsc_cuctx_current(&c, &what);
    if (r != CUDA_SUCCESS) {
      snprintf(unavailable_why, sizeof unavailable_why, "%s failed (%s)", what,
               nsc_cu_errname(r));
      return;
    }
  }
  __atomic_store_n(&available, &cuda_backend, __ATOMIC_RELEASE);
}

static const nsc_backend *get(void) {
  const nsc_backend *b = __atomic_load_n(&available, __ATOMIC_ACQUIRE);
  if (b) return b;
  pthread_once(&decided, decide);
  return __atomic_load_n(&available, __ATOMIC_ACQUIRE);
}

const nsc_backend *nsc_backend_cuda(void) {
  const nsc_backend *b = get();
  if (!b) nsc_backend_set_error("CUDA backend unavailable: %s", unavailable_why);
  return b;
}

/* Called for every collective: no error text is formatted on this path.
 * Without a driver there is no device memory, so everything is host. Device
 * memory always gets the CUDA backend, even when its kernels failed to load
 * (a driver older than the fatbin, say): its operations then fail with the
 * reason, where the host backend would dereference device pointers. */
const nsc_backend *nsc_backend_for(const void *ptr) {
  if (!ptr || !nsc_cu_driver()) return &nsc_backend_host;
  unsigned int type = 0;
  CUresult r = cu()->cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                                           (CUdeviceptr)(uintptr_t)ptr);
  if (r == CUDA_SUCCESS && (type == CU_MEMORYTYPE_DEVICE || type == CU_MEMORYTYPE_UNIFIED))
    return &cuda_backend;
  return &nsc_backend_host;
}
