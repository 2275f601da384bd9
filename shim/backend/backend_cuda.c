/* backend_cuda.c — the CUDA backend of backend.h: every operation enqueued on
 * the caller's stream through the driver API (compress/cu_*.c: libcuda
 * dlopen'ed, kernels from the embedded fatbin, per-context state), and
 * nsc_backend_for(), which sends device memory here and the rest to the host
 * backend.
 *
 * Staging memory is stream-ordered (cuMemAllocFromPoolAsync/cuMemFreeAsync
 * from a memory pool of the shim's own with release threshold 0, which
 * PyTorch's caching allocator neither sees nor can reclaim; the default pool
 * when a pool cannot be made); a device without memory pools has no staging
 * (compression stops alike on every rank at the agreement), never
 * cuMemAlloc/cuMemFree, which synchronise and are illegal under capture.
 * Timing marks are pooled events, read with cuEventElapsedTime only once
 * complete. Counters live in device memory (kernels add one atomic per
 * block) and are copied out on a private stream when read (summaries,
 * ncclshim_get_stats), never inside a collective. Memory kept across calls
 * is freed after a release point (an event behind its last use) on the
 * context's own stream, never on a caller's stream that may be gone. The driver calls capture may forbid (queries, stream
 * creation, allocation) run with the thread in relaxed capture mode, so they
 * never invalidate another thread's capture.
 *
 * nsc_backend_cuda() is NULL unless the driver loads. Device, pinned host
 * and managed memory get this backend even when a context's kernels failed
 * to load: usable() then says no (the policy forwards such calls untouched)
 * and its operations fail with the reason (cu_ctx.c keeps a context's failed
 * setup), never the host backend, which would touch them in host code.
 *
 * Must not: synchronise a stream, context or event (oob_end polls a
 * non-blocking event query of the private stream), exit, or print; errors go
 * to nsc_backend_set_error() and -1. Not for forked children (CUDA is not). */
#include <sched.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
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

static int c_to_wire(nsc_stream s, nsc_fmt_t w, const float *src, void *dst, size_t n,
                     float scale) {
  WITH_CTX(s);
  CU_DO(nsc_cuk_to_wire(c, (CUstream)s, w, src, dst, n, scale, &what));
  return 0;
}

static int c_from_wire(nsc_stream s, nsc_fmt_t w, const void *src, float *dst, size_t n,
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
static int c_fmt_encode_opt(nsc_stream s, nsc_fmt_t f, size_t block, const float *src, void *dst, size_t n,
                            float scale, const nsc_enc_opt *o) {
  WITH_CTX(s);
  CU_DO(nsc_cuk_fmt_encode_opt(c, (CUstream)s, f, block, src, dst, n, scale, o, &what));
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
static int c_fmt_encode16(nsc_stream s, nsc_fmt_t in, nsc_fmt_t f, size_t block, const void *src, float *scratch,
                          void *dst, size_t n, float scale, const nsc_enc_opt *o) {
  if (c_from_wire(s, in, src, scratch, n, 1.0f)) return -1;
  return c_fmt_encode_opt(s, f, block, scratch, dst, n, scale, o);
}
static int c_fmt_decode16(nsc_stream s, nsc_fmt_t out, nsc_fmt_t f, size_t block, const void *src, float *scratch,
                          void *dst, size_t n, float scale) {
  if (c_fmt_decode(s, f, block, src, scratch, n, scale)) return -1;
  return c_to_wire(s, out, scratch, dst, n, 1.0f);
}
static int c_seg_to_wire(nsc_stream s, nsc_fmt_t w, const nsc_seg *segs, int nseg, void *dst,
                         float scale) {
  WITH_CTX(s);
  CU_DO(nsc_cuk_seg(c, (CUstream)s, 1, w, (const nsc_cu_seg *)segs, nseg, dst, scale, &what));
  return 0;
}

static int c_seg_from_wire(nsc_stream s, nsc_fmt_t w, const nsc_seg *segs, int nseg,
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

/* Runs a driver call with c's context current, in relaxed capture mode. */
#define IN_CTX(call, name)                                                               \
  do {                                                                                   \
    int pushed_, mode_ = nsc_cu_relax();                                                 \
    CUresult r1_ = nsc_cuctx_enter(c, &pushed_, &what);                                  \
    CUresult r2_ = r1_ == CUDA_SUCCESS ? (call) : r1_;                                   \
    if (r1_ == CUDA_SUCCESS) nsc_cuctx_leave(pushed_);                                   \
    nsc_cu_unrelax(mode_);                                                               \
    if (r2_ != CUDA_SUCCESS) return fail(r2_, r1_ == CUDA_SUCCESS ? name : what);        \
  } while (0)

static int c_fill_ones(nsc_stream s, void *p, size_t bytes) {
  WITH_CTX(s);
  if (bytes)
    IN_CTX(cu()->cuMemsetD8Async((CUdeviceptr)(uintptr_t)p, 0xff, bytes, (CUstream)s),
           "cuMemsetD8Async");
  return 0;
}

/* Device memory on s's context, stream-ordered; none without memory pools. */
static int dev_alloc(nsc_cuctx *c, CUstream s, size_t bytes, void **p) {
  const char *what = NULL;
  CUdeviceptr d = 0;
  *p = NULL;
  if (!bytes) return 0;
  if (!c->pools) {
    nsc_backend_set_error("CUDA backend: device %d has no memory pools (stream-ordered "
                          "allocation), so there is no staging memory", (int)c->dev);
    return -1;
  }
  if (c->pool) IN_CTX(cu()->cuMemAllocFromPoolAsync(&d, bytes, c->pool, s), "cuMemAllocFromPoolAsync");
  else IN_CTX(cu()->cuMemAllocAsync(&d, bytes, s), "cuMemAllocAsync");
  *p = (void *)(uintptr_t)d;
  return 0;
}

static int dev_free(nsc_cuctx *c, CUstream s, void *p) {
  const char *what = NULL;
  if (!p || !c->pools) return 0;
  IN_CTX(cu()->cuMemFreeAsync((CUdeviceptr)(uintptr_t)p, s), "cuMemFreeAsync");
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

static int c_capturing(nsc_stream s, int *yes);

/* A release point is a pooled event of the stream's context, re-recorded at
 * every point() (the event outlives the stream it was recorded on; waiting
 * for it names no stream). Not while s is being captured: the point stays
 * where the last uncaptured call left it. */
static int c_point(nsc_stream s, void **pt) {
  int cap = 0;
  if (c_capturing(s, &cap) || cap) return -1;
  WITH_CTX(s);
  nsc_cuev *e = *pt;
  if (e && e->owner != c) { /* the object moved to another context's stream */
    nsc_cuev_put(e);
    *pt = e = NULL;
  }
  if (!e) CU_DO(nsc_cuev_get(c, &e, &what));
  *pt = e;
  int pushed;
  CU_DO(nsc_cuctx_enter(c, &pushed, &what));
  CUresult r = cu()->cuEventRecord(e->ev, (CUstream)s);
  nsc_cuctx_leave(pushed);
  return r == CUDA_SUCCESS ? 0 : fail(r, "cuEventRecord(release point)");
}

static void c_release_at(void *pt, void *p) {
  nsc_cuev *e = pt;
  if (!p) return;
  if (!e) { /* never enqueued anything we could mark: keep it rather than free it under queued work */
    static int warned;
    if (!__atomic_exchange_n(&warned, 1, __ATOMIC_RELAXED))
      nsc_backend_set_error("CUDA backend: staging without a release point kept until exit");
    return;
  }
  nsc_cuctx *c = e->owner;
  const char *what = NULL;
  int pushed, mode = nsc_cu_relax();
  if (c->pools && nsc_cuctx_enter(c, &pushed, &what) == CUDA_SUCCESS) {
    if (cu()->cuStreamWaitEvent(c->rel_stream, e->ev, 0) == CUDA_SUCCESS)
      cu()->cuMemFreeAsync((CUdeviceptr)(uintptr_t)p, c->rel_stream);
    nsc_cuctx_leave(pushed);
  }
  nsc_cu_unrelax(mode);
}

static void c_point_free(void *pt) { nsc_cuev_put(pt); }

static int c_wait_point(nsc_stream waiter, void *pt) {
  nsc_cuev *e = pt;
  if (!e) return 0;
  int cap = 0; /* a captured stream may not wait for an event recorded outside the capture */
  if (c_capturing(waiter, &cap) || cap) {
    nsc_backend_set_error("CUDA backend: a stream being captured cannot wait for a release point");
    return -1;
  }
  WITH_CTX(waiter);
  int pushed;
  CU_DO(nsc_cuctx_enter(c, &pushed, &what));
  CUresult r = cu()->cuStreamWaitEvent((CUstream)waiter, e->ev, 0);
  nsc_cuctx_leave(pushed);
  return r == CUDA_SUCCESS ? 0 : fail(r, "cuStreamWaitEvent(release point)");
}

static int c_capturing(nsc_stream s, int *yes) {
  CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
  int mode = nsc_cu_relax();
  CUresult r = cu()->cuStreamIsCapturing((CUstream)s, &st);
  nsc_cu_unrelax(mode);
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
  /* (An exhausted pool fails in nsc_cuev_get above: the log counts the
   * mark as dropped.) */
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
  int pushed, mode = nsc_cu_relax(); /* a query would invalidate a global-mode capture */
  CUresult r = nsc_cuctx_enter(c, &pushed, &what);
  if (r == CUDA_SUCCESS) {
    r = cu()->cuEventQuery(eb->ev);
    if (r == CUDA_SUCCESS) r = cu()->cuEventElapsedTime(&ms, ea->ev, eb->ev);
    nsc_cuctx_leave(pushed);
  }
  nsc_cu_unrelax(mode);
  if (r == CUDA_ERROR_NOT_READY) return 0;
  if (r != CUDA_SUCCESS) return fail(r, "cuEventElapsedTime");
  *ns = ms > 0 ? (uint64_t)((double)ms * 1e6 + 0.5) : 0;
  return 1;
}

static int c_wait_mark(nsc_stream waiter, const nsc_mark *m) {
  const nsc_cuev *e = m->ev;
  if (!e) {
    nsc_backend_set_error("CUDA backend: wait_mark() on a mark that was not taken");
    return -1;
  }
  const char *what = "cuStreamWaitEvent";
  int pushed;
  CUresult r = nsc_cuctx_enter(e->owner, &pushed, &what);
  if (r == CUDA_SUCCESS) {
    r = cu()->cuStreamWaitEvent((CUstream)waiter, e->ev, 0);
    nsc_cuctx_leave(pushed);
  }
  return r == CUDA_SUCCESS ? 0 : fail(r, what);
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

/* The out-of-band exchange: a slot of s's context (pinned host bytes, device
 * bytes and an event, all made at the context's setup), copied in and out
 * on the context's private stream. Nothing is allocated or synchronised. */
static int c_oob_begin(nsc_stream caller, const void *host, size_t bytes, void **buf,
                       nsc_stream *s) {
  int slot = -1;
  *buf = NULL;
  if (bytes > NSC_CU_OOB_BYTES) {
    nsc_backend_set_error("CUDA backend: exchange of %zu bytes (at most %d)", bytes, NSC_CU_OOB_BYTES);
    return -1;
  }
  WITH_CTX(caller);
  CU_DO(nsc_cuctx_oob_get(c, &slot, &what));
  CUstream priv = c->oob_stream[slot];
  unsigned char *h = c->oob_host + (size_t)slot * NSC_CU_OOB_BYTES;
  CUdeviceptr d = c->oob_dev + (CUdeviceptr)slot * NSC_CU_OOB_BYTES;
  memcpy(h, host, bytes);
  int pushed;
  CUresult r = nsc_cuctx_enter(c, &pushed, &what);
  if (r == CUDA_SUCCESS) {
    if ((r = cu()->cuMemcpyHtoDAsync(d, h, bytes, priv)) != CUDA_SUCCESS) what = "cuMemcpyHtoDAsync";
    nsc_cuctx_leave(pushed);
  }
  if (r != CUDA_SUCCESS) {
    nsc_cuctx_oob_put(c, slot);
    return fail(r, what);
  }
  *buf = (void *)(uintptr_t)d;
  *s = (nsc_stream)priv;
  return 0;
}

static int c_oob_end(void *buf, nsc_stream s, void *host, size_t bytes, int wait) {
  WITH_CTX(s);
  CUdeviceptr d = (CUdeviceptr)(uintptr_t)buf;
  int slot = nsc_cuctx_oob_slot(c, d);
  if (slot < 0) {
    nsc_backend_set_error("CUDA backend: oob_end on a buffer oob_begin did not give");
    return -1;
  }
  unsigned char *h = c->oob_host + (size_t)slot * NSC_CU_OOB_BYTES;
  int pushed, mode = nsc_cu_relax();
  CUresult r = nsc_cuctx_enter(c, &pushed, &what);
  if (r == CUDA_SUCCESS) {
    if (!(__atomic_load_n(&c->oob_ended, __ATOMIC_ACQUIRE) & NSC_CU_SLOT_BIT(slot))) {
      /* Pinned destination: the copy is truly asynchronous. */
      if ((r = cu()->cuMemcpyDtoHAsync(h, d, bytes, (CUstream)s)) != CUDA_SUCCESS) what = "cuMemcpyDtoHAsync";
      else if ((r = cu()->cuEventRecord(c->oob_ev[slot], (CUstream)s)) != CUDA_SUCCESS) what = "cuEventRecord";
      else __atomic_or_fetch(&c->oob_ended, NSC_CU_SLOT_BIT(slot), __ATOMIC_RELEASE);
    }
    if (r == CUDA_SUCCESS)
      while ((r = cu()->cuEventQuery(c->oob_ev[slot])) == CUDA_ERROR_NOT_READY && wait) sched_yield();
    if (r != CUDA_SUCCESS && r != CUDA_ERROR_NOT_READY && !what) what = "cuEventQuery";
    nsc_cuctx_leave(pushed);
  }
  nsc_cu_unrelax(mode);
  if (r == CUDA_ERROR_NOT_READY) return 0;
  if (r == CUDA_SUCCESS) memcpy(host, h, bytes);
  nsc_cuctx_oob_put(c, slot);
  return r == CUDA_SUCCESS ? 1 : fail(r, what);
}

/* The slot's event marks the end of its work on the private stream (recorded
 * here when oob_end never ran); the slot is reclaimed once it completed. A
 * slot whose event cannot be recorded stays taken (a driver failure). */
static void c_oob_abandon(void *buf, nsc_stream s) {
  nsc_cuctx *c = NULL;
  const char *what = NULL;
  if (nsc_cuctx_of((CUstream)s, &c, &what) != CUDA_SUCCESS) return;
  int slot = nsc_cuctx_oob_slot(c, (CUdeviceptr)(uintptr_t)buf);
  if (slot < 0) return;
  int pushed, mode = nsc_cu_relax();
  CUresult r = nsc_cuctx_enter(c, &pushed, &what);
  if (r == CUDA_SUCCESS) {
    if (!(__atomic_load_n(&c->oob_ended, __ATOMIC_ACQUIRE) & NSC_CU_SLOT_BIT(slot)))
      r = cu()->cuEventRecord(c->oob_ev[slot], (CUstream)s);
    nsc_cuctx_leave(pushed);
  }
  nsc_cu_unrelax(mode);
  if (r == CUDA_SUCCESS) nsc_cuctx_oob_abandon(c, slot);
}

static int c_usable(nsc_stream s) {
  nsc_cuctx *c = NULL;
  const char *what = NULL;
  CUresult r = nsc_cuctx_of((CUstream)s, &c, &what);
  if (r == CUDA_SUCCESS && (r = c->kload) != CUDA_SUCCESS) what = c->kload_what;
  return r == CUDA_SUCCESS ? 1 : (fail(r, what), 0);
}

static const char *c_kernels(void) { return nsc_cuctx_kernels(); }

static const nsc_backend cuda_backend = {
    .name = "cuda",
    .to_wire = c_to_wire,
    .from_wire = c_from_wire,
    .seg_to_wire = c_seg_to_wire,
    .seg_from_wire = c_seg_from_wire,
    .fmt_encode = c_fmt_encode,
    .fmt_encode_opt = c_fmt_encode_opt,
    .fmt_decode = c_fmt_decode,
    .fmt_decode_sum = c_fmt_decode_sum,
    .fmt_encode16 = c_fmt_encode16,
    .fmt_decode16 = c_fmt_decode16,
    .scale = c_scale,
    .fill_ones = c_fill_ones,
    .alloc = c_alloc,
    .release = c_release,
    .point = c_point,
    .release_at = c_release_at,
    .point_free = c_point_free,
    .wait_point = c_wait_point,
    .capturing = c_capturing,
    .mark = c_mark,
    .wait_mark = c_wait_mark,
    .elapsed = c_elapsed,
    .mark_release = c_mark_release,
    .counts = c_counts,
    .side_stream = c_side_stream,
    .join = c_join,
    .oob_begin = c_oob_begin,
    .oob_end = c_oob_end,
    .oob_abandon = c_oob_abandon,
    .usable = c_usable,
    .kernels = c_kernels,
};

void *nsc_backend_stream_ctx(const nsc_backend *be, nsc_stream s) {
  const nsc_cu_api *d = nsc_cu_driver();
  CUcontext ctx = NULL;
  if (!d || be != &cuda_backend) return NULL;
  int mode = nsc_cu_relax();
  if (d->cuStreamGetCtx((CUstream)s, &ctx) != CUDA_SUCCESS) ctx = NULL;
  nsc_cu_unrelax(mode);
  return ctx;
}

int nsc_backend_ptd_proxy(void *ctx, nsc_stream *proxy) {
  nsc_cuctx *c = NULL;
  const char *what = NULL;
  CUstream ptd = CU_STREAM_PER_THREAD, sd = ptd;
  *proxy = (nsc_stream)ptd;
  if (!nsc_cu_driver() || !ctx) return fail(CUDA_ERROR_INVALID_CONTEXT, "no CUDA context for the per-thread stream");
  CU_DO(nsc_cuctx_for((CUcontext)ctx, &c, &what));
  CU_DO(nsc_cuctx_side_stream(c, ptd, &sd, &what)); /* this thread's: side streams of 0x2 are kept per thread */
  if (sd == ptd) return fail(CUDA_ERROR_OUT_OF_MEMORY, "no side stream left for the per-thread stream");
  CU_DO(nsc_cuctx_join(c, sd, ptd, &what));
  *proxy = (nsc_stream)sd;
  return 0;
}

int nsc_backend_ptd_rejoin(void *ctx, nsc_stream proxy) {
  nsc_cuctx *c = NULL;
  const char *what = NULL;
  CU_DO(nsc_cuctx_for((CUcontext)ctx, &c, &what));
  CU_DO(nsc_cuctx_join(c, CU_STREAM_PER_THREAD, (CUstream)proxy, &what));
  return 0;
}

int nsc_backend_enter_ctx(void *ctx) {
  const nsc_cu_api *d = nsc_cu_driver();
  CUcontext cur = NULL;
  if (!d || !ctx || (d->cuCtxGetCurrent(&cur) == CUDA_SUCCESS && cur == (CUcontext)ctx)) return 0;
  return d->cuCtxPushCurrent((CUcontext)ctx) == CUDA_SUCCESS;
}

void nsc_backend_leave_ctx(int pushed) {
  CUcontext dummy;
  if (pushed) (void)nsc_cu_driver()->cuCtxPopCurrent(&dummy);
}

void nsc_backend_adopt_ctx(void *ctx) {
  const nsc_cu_api *d = nsc_cu_driver();
  if (d && ctx) (void)d->cuCtxPushCurrent((CUcontext)ctx); /* a fresh thread: nothing to pop later */
}


const nsc_backend *nsc_backend_cuda(void) {
  if (nsc_cu_driver()) return &cuda_backend;
  nsc_backend_set_error("CUDA backend unavailable: %s", nsc_cu_driver_error());
  return NULL;
}

void nsc_backend_prepare(const int *devs, int ndev) {
  const nsc_cu_api *d = nsc_cu_driver();
  nsc_cuctx *c = NULL;
  const char *what = NULL;
  if (!d) return;
  if (ndev <= 0) {
    CUcontext cur = NULL;
    if (d->cuCtxGetCurrent(&cur) == CUDA_SUCCESS && cur) (void)nsc_cuctx_for(cur, &c, &what);
    return;
  }
  if (!d->cuDeviceGet || !d->cuDevicePrimaryCtxGetState || !d->cuDevicePrimaryCtxRetain ||
      !d->cuDevicePrimaryCtxRelease)
    return;
  for (int i = 0; i < ndev; i++) {
    CUdevice dev = 0;
    CUcontext ctx = NULL;
    unsigned flags = 0;
    int active = 0;
    if (d->cuDeviceGet(&dev, devs ? devs[i] : i) != CUDA_SUCCESS ||
        d->cuDevicePrimaryCtxGetState(dev, &flags, &active) != CUDA_SUCCESS || !active)
      continue; /* an inactive primary context is not NCCL's: never create one */
    if (d->cuDevicePrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS) continue;
    (void)nsc_cuctx_for(ctx, &c, &what);
    d->cuDevicePrimaryCtxRelease(dev);
  }
}

/* Called for every collective: no error text is formatted on this path.
 * Without a driver there is no device memory, so everything is host. Only
 * CUDA_ERROR_INVALID_VALUE means memory the driver does not know (malloc'ed,
 * stack, the host NCCL's buffers); pinned host memory (CU_MEMORYTYPE_HOST) and
 * managed memory (reported as DEVICE or HOST, told apart by IS_MANAGED only)
 * are reached by kernels in stream order like device memory, never by host
 * code, which would run ahead of the stream. Any other error (a driver being
 * torn down, say) keeps the CUDA backend, whose operations then fail. */
const nsc_backend *nsc_backend_for(const void *ptr) {
  if (!ptr || !nsc_cu_driver()) return &nsc_backend_host;
  unsigned int type = 0;
  CUresult r = cu()->cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                                           (CUdeviceptr)(uintptr_t)ptr);
  return r == CUDA_ERROR_INVALID_VALUE ? &nsc_backend_host : &cuda_backend;
}
