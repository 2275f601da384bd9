/* backend_host.c — the backend for host memory (tests/hostnccl, and any
 * buffer that is not device memory). Work on a caller's stream runs
 * synchronously on the calling thread, which is stream order for a host
 * NCCL; work on the side stream (side_stream) runs in order on the codec
 * thread of host_stream.c, and a join or mark wait from the caller's stream
 * waits for it there. Timing marks read CLOCK_MONOTONIC. Also holds the
 * backend error message shared by both backends (thread-local, so
 * concurrent callers do not mix messages). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend.h"
#include "host_stream.h"

static __thread char errbuf[256];

const char *nsc_backend_error(void) { return errbuf[0] ? errbuf : "unknown error"; }

/* The arguments may include nsc_backend_error() itself (a wrapped reason). */
void nsc_backend_set_error(const char *fmt, ...) {
  char msg[sizeof errbuf];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  memcpy(errbuf, msg, sizeof errbuf);
}

static nsc_cast_counts totals;

/* Work for the side stream: the arguments of one call, copied into its task. */
typedef struct {
  int op;
  nsc_fmt_t w;
  nsc_fmt_t f;
  int m, has_opt;
  size_t block, n, stride;
  const void *src;
  void *dst;
  float scale;
  nsc_enc_opt o;
} hs_args;
enum { HS_TO_WIRE, HS_FROM_WIRE, HS_ENCODE, HS_DECODE, HS_DECODE_SUM, HS_FILL, HS_ENCODE16, HS_DECODE16 };
_Static_assert(sizeof(hs_args) <= NSC_HS_ARG_BYTES, "host stream task arguments");

static int run_args(const hs_args *a);
static void hs_run(void *arg) { run_args(arg); }

/* On the side stream: queue the call and answer 0 (host codec work cannot
 * fail); else 1: the caller runs it now. */
static int queued(nsc_stream s, const hs_args *a) {
  if (!nsc_hs_is(s)) return 0;
  nsc_hs_submit(hs_run, a, sizeof *a);
  return 1;
}

/* A call the side stream does not queue (it reads caller-owned tables):
 * everything queued so far runs first, then the call, here. */
static void drained(nsc_stream s) {
  if (nsc_hs_is(s)) nsc_hs_wait(nsc_hs_tail());
}

/* A cast's overflows and underflows, into the totals. */
static void count(const nsc_cast_counts *c) {
  if (c->overflow) __atomic_fetch_add(&totals.overflow, c->overflow, __ATOMIC_RELAXED);
  if (c->underflow) __atomic_fetch_add(&totals.underflow, c->underflow, __ATOMIC_RELAXED);
}

static int h_to_wire(nsc_stream s, nsc_fmt_t w, const float *src, void *dst, size_t n, float scale) {
  hs_args a = {.op = HS_TO_WIRE, .w = w, .src = src, .dst = dst, .n = n, .scale = scale};
  if (queued(s, &a)) return 0;
  nsc_cast_counts c = {0, 0};
  nsc_cast_to_wire(w, src, dst, n, scale, &c);
  count(&c);
  return 0;
}

static int h_from_wire(nsc_stream s, nsc_fmt_t w, const void *src, float *dst, size_t n, float scale) {
  hs_args a = {.op = HS_FROM_WIRE, .w = w, .src = src, .dst = dst, .n = n, .scale = scale};
  if (queued(s, &a)) return 0;
  nsc_cast_from_wire(w, src, dst, n, scale);
  return 0;
}

static int h_seg_to_wire(nsc_stream s, nsc_fmt_t w, const nsc_seg *segs, int nseg, void *dst, float scale) {
  drained(s);
  s = NULL;
  for (int i = 0; i < nseg; i++)
    h_to_wire(s, w, segs[i].src, (uint16_t *)dst + segs[i].off, segs[i].count, scale);
  return 0;
}

static int h_seg_from_wire(nsc_stream s, nsc_fmt_t w, const nsc_seg *segs, int nseg, const void *src, float scale) {
  drained(s);
  for (int i = 0; i < nseg; i++)
    nsc_cast_from_wire(w, (const uint16_t *)src + segs[i].off, segs[i].dst, segs[i].count, scale);
  (void)s;
  return 0;
}

static int h_fmt_encode_opt(nsc_stream s, nsc_fmt_t f, size_t block, const float *src, void *dst, size_t n,
                            float scale, const nsc_enc_opt *o) {
  hs_args a = {.op = HS_ENCODE, .f = f, .block = block, .src = src, .dst = dst, .n = n, .scale = scale,
               .has_opt = o != NULL};
  if (o) a.o = *o;
  if (queued(s, &a)) return 0;
  nsc_cast_counts c = {0, 0};
  nsc_fmt_encode_opt(f, block, src, dst, n, scale, o, &c);
  count(&c);
  return 0;
}

/* The 16-bit input's and output's fused loops (wire.h): no scratch. */
static int h_fmt_encode16(nsc_stream s, nsc_fmt_t in, nsc_fmt_t f, size_t block, const void *src, float *scratch,
                          void *dst, size_t n, float scale, const nsc_enc_opt *o) {
  (void)scratch;
  hs_args a = {.op = HS_ENCODE16, .w = in, .f = f, .block = block, .src = src, .dst = dst, .n = n, .scale = scale,
               .has_opt = o != NULL};
  if (o) a.o = *o;
  if (queued(s, &a)) return 0;
  nsc_cast_counts c = {0, 0};
  nsc_fmt_encode_in(in, f, block, src, dst, n, scale, o, &c);
  count(&c);
  return 0;
}

static int h_fmt_decode16(nsc_stream s, nsc_fmt_t out, nsc_fmt_t f, size_t block, const void *src, float *scratch,
                          void *dst, size_t n, float scale) {
  (void)scratch;
  hs_args a = {.op = HS_DECODE16, .w = out, .f = f, .block = block, .src = src, .dst = dst, .n = n, .scale = scale};
  if (queued(s, &a)) return 0;
  nsc_cast_counts c = {0, 0};
  nsc_fmt_decode_out(out, f, block, src, dst, n, scale, &c);
  count(&c);
  return 0;
}

static int h_fmt_encode(nsc_stream s, nsc_fmt_t f, size_t block, const float *src, void *dst, size_t n,
                        float scale) {
  return h_fmt_encode_opt(s, f, block, src, dst, n, scale, NULL);
}

static int h_fmt_decode(nsc_stream s, nsc_fmt_t f, size_t block, const void *src, float *dst, size_t n,
                        float scale) {
  hs_args a = {.op = HS_DECODE, .f = f, .block = block, .src = src, .dst = dst, .n = n, .scale = scale};
  if (queued(s, &a)) return 0;
  nsc_fmt_decode(f, block, src, dst, n, scale);
  return 0;
}

static int h_fmt_decode_sum(nsc_stream s, nsc_fmt_t f, size_t block, const void *base, size_t stride, int m,
                            float *dst, size_t n, float post) {
  hs_args a = {.op = HS_DECODE_SUM, .f = f, .block = block, .src = base, .stride = stride, .m = m, .dst = dst,
               .n = n, .scale = post};
  if (queued(s, &a)) return 0;
  nsc_fmt_decode_sum(f, block, base, stride, m, dst, n, post);
  return 0;
}

static int h_scale(nsc_stream s, char kind, const void *src, void *dst, size_t n, double factor) {
  drained(s);
  if (nsc_scale_buffer(kind, src, dst, n, factor)) {
    nsc_backend_set_error("cannot scale datatype kind '%c'", kind);
    return -1;
  }
  return 0;
}

static int h_fill_ones(nsc_stream s, void *p, size_t bytes) {
  hs_args a = {.op = HS_FILL, .dst = p, .n = bytes};
  if (queued(s, &a)) return 0;
  memset(p, 0xff, bytes);
  return 0;
}

static int h_alloc(nsc_stream s, size_t bytes, void **p) {
  (void)s;
  *p = aligned_alloc(256, (bytes + 255) / 256 * 256);
  if (!*p) {
    nsc_backend_set_error("out of host memory for %zu bytes of staging", bytes);
    return -1;
  }
  return 0;
}

static void h_release(nsc_stream s, void *p) {
  drained(s);
  free(p);
}

/* Host memory: the codec thread is the only thing that may still read it,
 * so a point is "everything queued so far" and release_at waits for that
 * (the thread never blocks on a caller's stream). */
static int h_point(nsc_stream s, void **pt) {
  (void)s;
  *pt = (void *)&nsc_backend_host; /* any non-NULL token */
  return 0;
}
static void h_release_at(void *pt, void *p) {
  (void)pt;
  nsc_hs_wait(nsc_hs_tail());
  free(p);
}
static void h_point_free(void *pt) { (void)pt; }
/* Work on a caller's stream runs on the caller's thread at once (only the
 * side stream's is queued), so a caller's stream has nothing to wait for;
 * the side stream takes its work after everything submitted before. */
static int h_wait_point(nsc_stream waiter, void *pt) {
  (void)waiter;
  (void)pt;
  return 0;
}

static int h_capturing(nsc_stream s, int *yes) {
  (void)s;
  *yes = 0;
  return 0;
}

/* On the side stream a mark holds its place in the queue (ev = the ticket of
 * the last task before it; host_ns is the time it was taken, not reached). */
static int h_mark(nsc_stream s, nsc_mark *m) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  m->host_ns = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
  m->ev = nsc_hs_is(s) ? (void *)(uintptr_t)nsc_hs_tail() : NULL;
  return 0;
}

/* A caller's stream waiting for a side-stream mark waits for its ticket; the
 * side stream waiting for a caller's mark has nothing to wait for (the
 * caller's work ran before the mark was taken). */
static int h_wait_mark(nsc_stream waiter, const nsc_mark *m) {
  if (!nsc_hs_is(waiter) && m->ev) nsc_hs_wait((uint64_t)(uintptr_t)m->ev);
  return 0;
}

static int h_elapsed(const nsc_mark *a, const nsc_mark *b, uint64_t *ns) {
  *ns = b->host_ns >= a->host_ns ? b->host_ns - a->host_ns : 0;
  return 1;
}

static void h_mark_release(nsc_mark *m) { (void)m; }

static void h_counts(nsc_cast_counts *out) {
  out->overflow = __atomic_load_n(&totals.overflow, __ATOMIC_RELAXED);
  out->underflow = __atomic_load_n(&totals.underflow, __ATOMIC_RELAXED);
}

static int h_oob_begin(nsc_stream caller, const void *host, size_t bytes, void **buf, nsc_stream *s) {
  (void)caller;
  *s = NULL;
  if (h_alloc(NULL, bytes, buf)) return -1;
  memcpy(*buf, host, bytes);
  return 0;
}

static int h_oob_end(void *buf, nsc_stream s, void *host, size_t bytes, int wait) {
  (void)s;
  (void)wait;
  memcpy(host, buf, bytes);
  free(buf);
  return 1;
}

/* Host exchanges completed inside their collective call. */
static void h_oob_abandon(void *buf, nsc_stream s) {
  (void)s;
  free(buf);
}

static int h_usable(nsc_stream s) {
  (void)s;
  return 1;
}

static const char *h_kernels(void) { return nsc_cast_impl_name(); }

static int h_side_stream(nsc_stream s, nsc_stream *side) {
  void *hs = nsc_hs_stream();
  *side = hs ? hs : s;
  return 0;
}

static int h_join(nsc_stream waiter, nsc_stream signaller) {
  if (nsc_hs_is(signaller) && !nsc_hs_is(waiter)) nsc_hs_wait(nsc_hs_tail());
  return 0;
}

static int run_args(const hs_args *a) {
  switch (a->op) {
  case HS_TO_WIRE: return h_to_wire(NULL, a->w, a->src, a->dst, a->n, a->scale);
  case HS_FROM_WIRE: return h_from_wire(NULL, a->w, a->src, a->dst, a->n, a->scale);
  case HS_ENCODE: return h_fmt_encode_opt(NULL, a->f, a->block, a->src, a->dst, a->n, a->scale, a->has_opt ? &a->o : NULL);
  case HS_DECODE: return h_fmt_decode(NULL, a->f, a->block, a->src, a->dst, a->n, a->scale);
  case HS_DECODE_SUM: return h_fmt_decode_sum(NULL, a->f, a->block, a->src, a->stride, a->m, a->dst, a->n, a->scale);
  case HS_ENCODE16:
    return h_fmt_encode16(NULL, a->w, a->f, a->block, a->src, NULL, a->dst, a->n, a->scale, a->has_opt ? &a->o : NULL);
  case HS_DECODE16: return h_fmt_decode16(NULL, a->w, a->f, a->block, a->src, NULL, a->dst, a->n, a->scale);
  default: return h_fill_ones(NULL, a->dst, a->n);
  }
}

const nsc_backend nsc_backend_host = {
    .name = "host",
    .to_wire = h_to_wire,
    .from_wire = h_from_wire,
    .seg_to_wire = h_seg_to_wire,
    .seg_from_wire = h_seg_from_wire,
    .fmt_encode = h_fmt_encode,
    .fmt_encode_opt = h_fmt_encode_opt,
    .fmt_decode = h_fmt_decode,
    .fmt_decode_sum = h_fmt_decode_sum,
    .fmt_encode16 = h_fmt_encode16,
    .fmt_decode16 = h_fmt_decode16,
    .scale = h_scale,
    .fill_ones = h_fill_ones,
    .alloc = h_alloc,
    .release = h_release,
    .point = h_point,
    .release_at = h_release_at,
    .point_free = h_point_free,
    .wait_point = h_wait_point,
    .capturing = h_capturing,
    .mark = h_mark,
    .wait_mark = h_wait_mark,
    .elapsed = h_elapsed,
    .mark_release = h_mark_release,
    .counts = h_counts,
    .side_stream = h_side_stream,
    .join = h_join,
    .oob_begin = h_oob_begin,
    .oob_end = h_oob_end,
    .oob_abandon = h_oob_abandon,
    .usable = h_usable,
    .kernels = h_kernels,
};
