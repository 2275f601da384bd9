/* backend.h — the seam between the shim's policy and the memory it works on.
 *
 * Two implementations: host (plain memory, as with tests/hostnccl; work runs
 * synchronously on the calling thread, which is stream order there, except on
 * the side stream, whose work runs in order on a codec thread) and cuda
 * (driver API through dlopen("libcuda.so.1"), kernels from the embedded fatbin,
 * everything enqueued on the caller's stream). The policy code includes no CUDA
 * header and is unit-testable with the host backend alone.
 *
 * Must not: synchronise a stream, retry anything, or call into NCCL. Every
 * function returns 0 on success or -1 (with a message in nsc_backend_error()). */
#ifndef NSC_BACKEND_H
#define NSC_BACKEND_H

#include <stddef.h>
#include <stdint.h>
#include "cast.h"
#include "wire.h"

typedef void *nsc_stream; /* cudaStream_t / CUstream, opaque here */

/* One tensor of a fused group: `count` fp32 values at src (cast in) or dst
 * (cast back), at element offset `off` of the wire buffer. */
typedef struct {
  const float *src;
  float *dst;
  size_t count;
  size_t off;
} nsc_seg;

/* A timing mark; host: a monotonic clock read; cuda: an event from a pool. */
typedef struct {
  uint64_t host_ns;
  void *ev;
} nsc_mark;

typedef struct nsc_backend {
  const char *name;
  /* Cast count fp32 values to the wire type (multiplying by scale first). */
  int (*to_wire)(nsc_stream s, nsc_fmt_t w, const float *src, void *dst, size_t n,
                 float scale);
  /* Cast back (multiplying by scale after widening). */
  int (*from_wire)(nsc_stream s, nsc_fmt_t w, const void *src, float *dst, size_t n,
                   float scale);
  /* The same for a table of segments, in one pass (one launch on a GPU). */
  int (*seg_to_wire)(nsc_stream s, nsc_fmt_t w, const nsc_seg *segs, int nseg,
                     void *dst, float scale);
  int (*seg_from_wire)(nsc_stream s, nsc_fmt_t w, const nsc_seg *segs, int nseg,
                       const void *src, float scale);
  /* The wire formats of the two-phase collectives (compress/wire.h): encode n
   * fp32 values (times scale), decode them (times scale), and decode-and-sum
   * m encoded runs `stride` bytes apart in the order 0..m-1 (times post). */
  int (*fmt_encode)(nsc_stream s, nsc_fmt_t f, size_t block, const float *src, void *dst, size_t n,
                    float scale);
  /* fmt_encode with error feedback / stochastic rounding (nsc_enc_opt in
   * wire.h; o->resid is memory of this backend, n floats). */
  int (*fmt_encode_opt)(nsc_stream s, nsc_fmt_t f, size_t block, const float *src, void *dst, size_t n,
                        float scale, const nsc_enc_opt *o);
  int (*fmt_decode)(nsc_stream s, nsc_fmt_t f, size_t block, const void *src, float *dst, size_t n,
                    float scale);
  int (*fmt_decode_sum)(nsc_stream s, nsc_fmt_t f, size_t block, const void *base, size_t stride, int m,
                        float *dst, size_t n, float post);
  /* A 16-bit input encoded from its own bits (in: its row; exactly
   * fmt_encode_opt of its fp32 widening), and a run decoded into a 16-bit
   * output (out: its row; fmt_decode, then to_wire's rounding): scratch is n
   * floats the backend may pass the fp32 values through (cuda: the widening
   * or narrowing as its own kernel, then the codec's; host: tiles of the
   * fused loops, scratch unused). */
  int (*fmt_encode16)(nsc_stream s, nsc_fmt_t in, nsc_fmt_t f, size_t block, const void *src, float *scratch,
                      void *dst, size_t n, float scale, const nsc_enc_opt *o);
  int (*fmt_decode16)(nsc_stream s, nsc_fmt_t out, nsc_fmt_t f, size_t block, const void *src, float *scratch,
                      void *dst, size_t n, float scale);
  /* dst = src * factor for a floating datatype kind ('f','d','h','b'). */
  int (*scale)(nsc_stream s, char kind, const void *src, void *dst, size_t n,
               double factor);
  /* Set `bytes` bytes at p to 0xff (NaN in fp16, bf16 and fp32), on s. */
  int (*fill_ones)(nsc_stream s, void *p, size_t bytes);
  /* Staging memory usable in stream order on s. release(s, p) only for a
   * stream of the current call: a stream the caller may have destroyed since
   * must never be named again (a real driver may have reused its handle). */
  int (*alloc)(nsc_stream s, size_t bytes, void **p);
  void (*release)(nsc_stream s, void *p);
  /* Release points, for memory kept across calls (staging arenas, the
   * fusion block, error-feedback residuals), whose last stream may be gone
   * when it is freed. point(s, &pt) marks the end of what is enqueued on s
   * so far (the first call makes *pt, later ones move it; -1 and *pt
   * unchanged when it cannot, e.g. s is being captured); release_at(pt, p)
   * frees p once the point is reached, without naming s (CUDA: a stream
   * wait on the point's event and a stream-ordered free on the context's
   * own stream; host: after the codec thread drained); point_free(pt) gives
   * the point back (pt may be NULL). */
  int (*point)(nsc_stream s, void **pt);
  void (*release_at)(void *pt, void *p);
  void (*point_free)(void *pt);
  /* `waiter` waits for point pt (a stream wait on its event; host: the
   * caller's thread waits for the codec thread). Non-zero on failure. */
  int (*wait_point)(nsc_stream waiter, void *pt);
  /* *yes = 1 when s is being captured into a CUDA graph. */
  int (*capturing)(nsc_stream s, int *yes);
  /* Timing marks; elapsed() returns 1 when both marks are complete and sets
   * *ns, 0 when not yet known (never waits), -1 on error. */
  int (*mark)(nsc_stream s, nsc_mark *m);
  int (*elapsed)(const nsc_mark *a, const nsc_mark *b, uint64_t *ns);
  void (*mark_release)(nsc_mark *m);
  /* `waiter` waits for the work enqueued before mark m, taken on another
   * stream of the same context (a stream wait on m's event on a GPU; host:
   * the caller's thread waits for the codec thread to pass m). m may be
   * released right after. */
  int (*wait_mark)(nsc_stream waiter, const nsc_mark *m);
  /* Cumulative overflow/underflow counts of to_wire casts so far. */
  void (*counts)(nsc_cast_counts *out);
  /* Pipelining: a helper stream that runs beside s (host: the codec thread,
   * or s itself when it cannot run), and a join that makes `waiter` wait for
   * everything enqueued so far on `signaller` (an event record + stream wait
   * on a GPU; host: the caller's thread waits for the codec thread). */
  int (*side_stream)(nsc_stream s, nsc_stream *side);
  int (*join)(nsc_stream waiter, nsc_stream signaller);
  /* A small out-of-band exchange buffer for the shim's own collectives (the
   * configuration check, fusion agreements), on a private stream of the
   * context of the caller's stream `caller` (the communicator's device),
   * never on the caller's stream: oob_begin copies `bytes` from host into a
   * buffer usable by NCCL and returns it with the stream to issue the
   * collective on. oob_end, after that collective, enqueues the copy back
   * and returns 1 once `host` holds the result (then the buffer is given
   * back), 0 while it is not there yet (only when !wait; call again with the
   * same arguments), -1 on error (buffer given back). Nothing synchronises:
   * with wait it polls a non-blocking query of the private stream's event. */
  int (*oob_begin)(nsc_stream caller, const void *host, size_t bytes, void **buf, nsc_stream *s);
  int (*oob_end)(void *buf, nsc_stream s, void *host, size_t bytes, int wait);
  /* Instead of (the rest of) oob_end, when the result is no longer wanted
   * (its communicator destroyed or aborted with the exchange in flight):
   * never waits; the buffer is reused only once the private stream has
   * passed the collective (CUDA: the slot's event, queried without waiting
   * by later oob_begin calls), so nothing reuses memory it may still write. */
  void (*oob_abandon)(void *buf, nsc_stream s);
  /* 1 when the casts can run on s (CUDA: the kernels loaded in s's
   * context), else 0 with the reason in nsc_backend_error(). */
  int (*usable)(nsc_stream s);
  /* Which casts run: "host (avx2)", "fatbin", "NVRTC 13.2, sm_90 CUBIN". */
  const char *(*kernels)(void);
} nsc_backend;

/* Free p, last used before point pt. A CUDA pt of NULL (no point could be
 * made) keeps p rather than free it under queued work; a stand-in backend
 * without points releases on no stream. */
static inline void nsc_release_after(const nsc_backend *be, void *pt, void *p) {
  if (!p) return;
  if (be->release_at) be->release_at(pt, p);
  else be->release(NULL, p);
}
/* Move pt to the end of what is enqueued on s (stand-ins: nothing). */
static inline void nsc_point(const nsc_backend *be, nsc_stream s, void **pt) {
  if (be && be->point) (void)be->point(s, pt);
}
static inline void nsc_point_free(const nsc_backend *be, void **pt) {
  if (be && be->point_free && *pt) be->point_free(*pt);
  *pt = NULL;
}

/* Make ctx (NULL: none) current on a thread of the shim's own (a worker
 * running a communicator's part of a group's work, whose NULL stream means
 * that context's). */
void nsc_backend_adopt_ctx(void *ctx);
/* Work queued earlier, done now on the calling thread (a group end's fused
 * collectives and after-work): ctx (an item's, NULL: none) current while it
 * runs, so that the legacy and per-thread handles name what they named when
 * the item was queued. enter returns 1 when it pushed ctx; leave(1) pops it. */
int nsc_backend_enter_ctx(void *ctx);
void nsc_backend_leave_ctx(int pushed);
/* The CUDA context a call's stream belongs to (the current one for the
 * NULL, legacy and per-thread handles); NULL for the host backend or when
 * the driver cannot say. */
void *nsc_backend_stream_ctx(const nsc_backend *be, nsc_stream s);
/* The per-thread default stream (CU_STREAM_PER_THREAD, 0x2) names this
 * thread's stream of a context, and another thread's on that thread: work
 * the calling thread hands to a worker on that handle goes to a proxy
 * instead. nsc_backend_ptd_proxy gives *proxy, a stream of ctx that waits
 * for everything the calling thread's per-thread stream of ctx holds so far
 * (a side stream and an event join); nsc_backend_ptd_rejoin, on the same
 * thread once the worker is done, makes that per-thread stream wait for
 * everything the proxy got. Neither synchronises. Non-zero on failure (the
 * reason in nsc_backend_error()): the work then stays on the calling
 * thread. */
int nsc_backend_ptd_proxy(void *ctx, nsc_stream *proxy);
int nsc_backend_ptd_rejoin(void *ctx, nsc_stream proxy);

/* The host backend (always available). */
extern const nsc_backend nsc_backend_host;

/* The CUDA backend if libcuda.so.1 loads, else NULL. Whether its kernels
 * load is known per context (usable()). Safe to call from any thread. */
const nsc_backend *nsc_backend_cuda(void);

/* Pick the backend for a call: the host one only for memory CUDA does not
 * know (no driver, or cuPointerGetAttribute answers CUDA_ERROR_INVALID_VALUE);
 * the CUDA one for device, pinned host and managed memory, and when the
 * driver cannot say (its operations then fail; host code never touches
 * memory the driver may own). */
const nsc_backend *nsc_backend_for(const void *ptr);

/* At a communicator's creation (inside the interposed ncclCommInit* and
 * ncclCommSplit, which synchronise anyway): the one-time setup of the CUDA
 * context it will use (module load, pinned counters, exchange slots: the
 * only synchronising driver calls the backend makes), so that no collective
 * makes one. ndev = 0: the calling thread's current context (NCCL creates a
 * communicator on the current device); else the active primary contexts of
 * devs[0..ndev-1] (devs NULL: devices 0..ndev-1), for ncclCommInitAll.
 * Best effort and quiet: without a driver or a context it does nothing, and
 * a context not set up here (a failure, a stream of another context) is set
 * up at its first collective, which then says why if it fails. */
void nsc_backend_prepare(const int *devs, int ndev);

const char *nsc_backend_error(void);
void nsc_backend_set_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
