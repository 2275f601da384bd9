/* backend_host.c — the backend for host memory (tests/hostnccl, and any
 * buffer that is not device memory). Work runs synchronously on the calling
 * thread, which is stream order for a host NCCL. Timing marks read
 * CLOCK_MONOTONIC. Also holds the backend error message shared by both
 * backends (thread-local, so concurrent callers do not mix messages). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend.h"

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

static int h_to_wire(nsc_stream s, nsc_wire_t w, const float *src, void *dst, size_t n, float scale) {
  (void)s;
  nsc_cast_counts c = {0, 0};
  nsc_cast_to_wire(w, src, dst, n, scale, &c);
  if (c.overflow) __atomic_fetch_add(&totals.overflow, c.overflow, __ATOMIC_RELAXED);
  if (c.underflow) __atomic_fetch_add(&totals.underflow, c.underflow, __ATOMIC_RELAXED);
  return 0;
}

static int h_from_wire(nsc_stream s, nsc_wire_t w, const void *src, float *dst, size_t n, float scale) {
  (void)s;
  nsc_cast_from_wire(w, src, dst, n, scale);
  return 0;
}

static int h_seg_to_wire(nsc_stream s, nsc_wire_t w, const nsc_seg *segs, int nseg, void *dst, float scale) {
  for (int i = 0; i < nseg; i++)
    h_to_wire(s, w, segs[i].src, (uint16_t *)dst + segs[i].off, segs[i].count, scale);
  return 0;
}

static int h_seg_from_wire(nsc_stream s, nsc_wire_t w, const nsc_seg *segs, int nseg, const void *src, float scale) {
  for (int i = 0; i < nseg; i++)
    nsc_cast_from_wire(w, (const uint16_t *)src + segs[i].off, segs[i].dst, segs[i].count, scale);
  (void)s;
  return 0;
}

static int h_fmt_encode_opt(nsc_stream s, nsc_fmt_t f, size_t block, const float *src, void *dst, size_t n,
                            float scale, const nsc_enc_opt *o) {
  (void)s;
  nsc_cast_counts c = {0, 0};
  nsc_fmt_encode_opt(f, block, src, dst, n, scale, o, &c);
  if (c.overflow) __atomic_fetch_add(&totals.overflow, c.overflow, __ATOMIC_RELAXED);
  if (c.underflow) __atomic_fetch_add(&totals.underflow, c.underflow, __ATOMIC_RELAXED);
  return 0;
}

static int h_fmt_encode(nsc_stream s, nsc_fmt_t f, size_t block, const float *src, void *dst, size_t n,
                        float scale) {
  return h_fmt_encode_opt(s, f, block, src, dst, n, scale, NULL);
}

static int h_fmt_decode(nsc_stream s, nsc_fmt_t f, size_t block, const void *src, float *dst, size_t n,
                        float scale) {
  (void)s;
  nsc_fmt_decode(f, block, src, dst, n, scale);
  return 0;
}

static int h_fmt_decode_sum(nsc_stream s, nsc_fmt_t f, size_t block, const void *base, size_t stride, int m,
                            float *dst, size_t n, float post) {
  (void)s;
  nsc_fmt_decode_sum(f, block, base, stride, m, dst, n, post);
  return 0;
}

static int h_scale(nsc_stream s, char kind, const void *src, void *dst, size_t n, double factor) {
  (void)s;
  if (nsc_scale_buffer(kind, src, dst, n, factor)) {
    nsc_backend_set_error("cannot scale datatype kind '%c'", kind);
    return -1;
  }
  return 0;
}

static int h_fill_ones(nsc_stream s, void *p, size_t bytes) {
  (void)s;
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
  (void)s;
  free(p);
}

static int h_capturing(nsc_stream s, int *yes) {
  (void)s;
  *yes = 0;
  return 0;
}

static int h_mark(nsc_stream s, nsc_mark *m) {
  (void)s;
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  m->host_ns = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
  m->ev = NULL;
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
  *side = s;
  return 0;
}

static int h_join(nsc_stream waiter, nsc_stream signaller) {
  (void)waiter;
  (void)signaller;
  return 0;
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
    .scale = h_scale,
    .fill_ones = h_fill_ones,
    .alloc = h_alloc,
    .release = h_release,
    .capturing = h_capturing,
    .mark = h_mark,
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
