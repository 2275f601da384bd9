/* check_kernels.c — the CUDA kernels and the CUDA backend on a real GPU,
 * bit for bit against the host casts (which the unit tests tie to the scalar
 * reference), then their bandwidth against a device-to-device cuMemcpy.
 *
 *   check_kernels [--quick] [--allow-no-gpu] [--bw-mib N]
 *
 * Checks: every fp32 bit pattern (or 2^22 random ones with --quick) to fp16
 * and bf16 with exact counts; 2^28 random values with scales; boundary values;
 * misaligned pointers; all 2^16 wire values back; segment tables (small,
 * large, more than one launch, empty and misaligned segments); the scale
 * kernels in place; counts >= 2^31; and the backend's other duties (fill,
 * stream-ordered staging, marks, capture into a graph and replay, side streams,
 * the out-of-band exchange, nsc_backend_for). Prints one TAP-style line per
 * check ("ok - ...", "not ok - ...") and a bandwidth table; exits 1 on any
 * mismatch. --quick leaves out the counts >= 2^31 and the bandwidth table
 * unless --bw-mib N asks for the table (on N MiB of fp32; default 1024), as
 * make gpu-check does on the driver test double to check its own parsing.
 * Without a usable GPU it exits 1,
 * or 0 with --allow-no-gpu after checking that everything falls back to the
 * host backend (what tests/t/10-cast.sh runs on machines without one).
 *
 * Uses the CUDA driver API for its own buffers, streams and timing, loaded
 * with dlopen("libcuda.so.1") like the shim does (so it runs on the real
 * driver, on the test double of tests/cudadrv, and without any driver), and
 * the shim's backend for everything under test. Must not: be part of the
 * shim, or assert timings (the bandwidth table is information). */
#include <cuda.h>
#include <dlfcn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend.h"
#include "cast.h"
#include "wire.h"
#include "../tap.h"

static int quick;
static const nsc_backend *be;
static CUstream st;

/* The driver entry points this program uses; names go through cuda.h's
 * version macros (cuMemAlloc is cuMemAlloc_v2), as in compress/cu_driver.h. */
#define CK_DRIVER(X)                                                                     \
  X(cuInit) X(cuGetErrorName) X(cuDeviceGetCount) X(cuDeviceGetName) X(cuDeviceGetAttribute) \
  X(cuDevicePrimaryCtxRetain) X(cuCtxSetCurrent) X(cuStreamCreate) X(cuStreamSynchronize)   \
  X(cuMemAlloc) X(cuMemFree) X(cuMemGetInfo) X(cuMemcpyHtoDAsync) X(cuMemcpyDtoHAsync)     \
  X(cuMemcpyDtoDAsync) X(cuMemsetD8Async) X(cuEventCreate) X(cuEventRecord)               \
  X(cuEventSynchronize) X(cuEventElapsedTime) X(cuEventDestroy) X(cuStreamBeginCapture)    \
  X(cuStreamEndCapture) X(cuGraphInstantiate) X(cuGraphLaunch) X(cuGraphExecDestroy)       \
  X(cuGraphDestroy)
#define CK_FIELD(f) __typeof__(f) *f;
static struct { CK_DRIVER(CK_FIELD) } D;
#undef CK_FIELD
#define STR_(x) #x
#define STR(x) STR_(x)

/* 0 when every entry point resolved. */
static int load_driver(void) {
  void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!h) return -1;
#define CK_LOAD(f) if (!(*(void **)&D.f = dlsym(h, STR(f)))) return -1;
  CK_DRIVER(CK_LOAD)
#undef CK_LOAD
  return 0;
}

#define RT(call)                                                                         \
  do {                                                                                   \
    CUresult e_ = (call);                                                                \
    if (e_ != CUDA_SUCCESS) {                                                            \
      const char *n_ = NULL;                                                             \
      D.cuGetErrorName(e_, &n_);                                                         \
      printf("FATAL %s: %s\n", #call, n_ ? n_ : "?");                                    \
      exit(2);                                                                           \
    }                                                                                    \
  } while (0)
#define DP(p) ((CUdeviceptr)(uintptr_t)(p))
#define BE(call)                                                                         \
  do {                                                                                   \
    if ((call) != 0) {                                                                   \
      printf("FATAL %s: %s\n", #call, nsc_backend_error());                              \
      exit(2);                                                                           \
    }                                                                                    \
  } while (0)


static uint64_t rng = 0x853c49e6748fea9bull;
static uint32_t rnd(void) {
  rng ^= rng >> 12;
  rng ^= rng << 25;
  rng ^= rng >> 27;
  return (uint32_t)((rng * 0x2545f4914f6cdd1dull) >> 32);
}

static void *hmalloc(size_t bytes) {
  void *p = malloc(bytes ? bytes : 1);
  if (!p) {
    printf("FATAL out of host memory (%zu bytes)\n", bytes);
    exit(2);
  }
  return p;
}
static void *dmalloc(size_t bytes) {
  void *p = NULL;
  CUdeviceptr d = 0;
  RT(D.cuMemAlloc(&d, bytes ? bytes : 1));
  p = (void *)(uintptr_t)d;
  return p;
}

/* Copies and fills in order with the kernels: on st (non-blocking, so the
 * legacy stream's implicit ordering would not apply), then waited for. */
static void h2d(void *d, const void *h, size_t bytes) {
  RT(D.cuMemcpyHtoDAsync(DP(d), h, bytes, st));
  RT(D.cuStreamSynchronize(st));
}
static void d2h(void *h, const void *d, size_t bytes) {
  RT(D.cuMemcpyDtoHAsync(h, DP(d), bytes, st));
  RT(D.cuStreamSynchronize(st));
}
static void dset(void *d, int v, size_t bytes) { RT(D.cuMemsetD8Async(DP(d), (unsigned char)v, bytes, st)); }

/* Number of differing 16/32-bit elements; *first gets the first index. */
static size_t diff(const void *a, const void *b, size_t n, size_t es, size_t *first) {
  size_t bad = 0;
  *first = 0;
  if (!memcmp(a, b, n * es)) return 0;
  for (size_t i = 0; i < n; i++)
    if (memcmp((const char *)a + i * es, (const char *)b + i * es, es) && !bad++) *first = i;
  return bad;
}

static nsc_cast_counts counts_now(void) {
  nsc_cast_counts c = {0, 0};
  be->counts(&c);
  return c;
}

/* fp32 host values -> wire on the GPU at element offsets so/do, vs the host. */
static void check_to_wire(const char *what, nsc_fmt_t w, const float *x, size_t n, float scale,
                          size_t so, size_t dof) {
  float *dx = dmalloc((n + so) * 4);
  uint16_t *dh = dmalloc((n + dof) * 2), *got = hmalloc(n * 2), *want = hmalloc(n * 2);
  h2d(dx + so, x, n * 4);
  nsc_cast_counts c0 = counts_now(), hc = {0, 0};
  BE(be->to_wire(st, w, dx + so, dh + dof, n, scale));
  RT(D.cuStreamSynchronize(st));
  nsc_cast_counts c1 = counts_now();
  d2h(got, dh + dof, n * 2);
  nsc_cast_to_wire(w, x, want, n, scale, &hc);
  size_t first, bad = diff(got, want, n, 2, &first);
  int cnt_ok = c1.overflow - c0.overflow == hc.overflow && c1.underflow - c0.underflow == hc.underflow;
  if (bad) {
    uint32_t u;
    memcpy(&u, &x[first], 4);
    check(0, "%s to %s: %zu of %zu differ, first [%zu] 0x%08x -> 0x%04x, want 0x%04x", what,
           w ? "bf16" : "fp16", bad, n, first, u, got[first], want[first]);
  } else {
    check(cnt_ok, "%s to %s: %zu values, counts %llu/%llu (gpu %llu/%llu)", what,
           w ? "bf16" : "fp16", n, (unsigned long long)hc.overflow,
           (unsigned long long)hc.underflow, (unsigned long long)(c1.overflow - c0.overflow),
           (unsigned long long)(c1.underflow - c0.underflow));
  }
  RT(D.cuMemFree(DP(dx)));
  RT(D.cuMemFree(DP(dh)));
  free(got);
  free(want);
}

static void check_from_wire(const char *what, nsc_fmt_t w, const uint16_t *h, size_t n,
                            float scale, size_t so, size_t dof) {
  uint16_t *dh = dmalloc((n + so) * 2);
  float *dx = dmalloc((n + dof) * 4), *got = hmalloc(n * 4), *want = hmalloc(n * 4);
  h2d(dh + so, h, n * 2);
  BE(be->from_wire(st, w, dh + so, dx + dof, n, scale));
  RT(D.cuStreamSynchronize(st));
  d2h(got, dx + dof, n * 4);
  nsc_cast_from_wire(w, h, want, n, scale);
  size_t first, bad = diff(got, want, n, 4, &first);
  check(!bad, "%s from %s (scale %g): %zu values, %zu differ (first [%zu])", what,
         w ? "bf16" : "fp16", (double)scale, n, bad, first);
  RT(D.cuMemFree(DP(dx)));
  RT(D.cuMemFree(DP(dh)));
  free(got);
  free(want);
}

/* Bit patterns near every boundary of both wire types, with both signs. */
static size_t boundary_values(float *x) {
  static const uint32_t b[] = {
      0x00000000, 0x00000001, 0x00008000, 0x00018000, 0x007fffff, 0x00800000, 0x33000000,
      0x33800000, 0x33c00000, 0x387fc000, 0x38800000, 0x3f801000, 0x3f803000, 0x3f808000,
      0x3f818000, 0x477fe000, 0x477ff000, 0x47800000, 0x7f7f7fff, 0x7f7f8000, 0x7f7fffff,
      0x7f800000, 0x7f800001, 0x7fa00000, 0x7fc00000, 0x7fffffff};
  size_t n = 0;
  for (size_t i = 0; i < sizeof b / sizeof b[0]; i++)
    for (int d = -2; d <= 2; d++)
      for (uint32_t sgn = 0; sgn < 2; sgn++) {
        uint32_t u = (b[i] + (uint32_t)d) | (sgn << 31);
        memcpy(&x[n++], &u, 4);
      }
  return n;
}

static void check_casts(void) {
  size_t chunk = (size_t)1 << 28, nrand = quick ? (size_t)1 << 22 : chunk;
  float *x = hmalloc(chunk * 4);
  for (int wi = 0; wi < 2; wi++) {
    nsc_fmt_t w = (nsc_fmt_t)wi;
    if (!quick) { /* every fp32 bit pattern, 2^28 at a time */
      int ok0 = failures;
      for (uint64_t base = 0; base < ((uint64_t)1 << 32); base += chunk) {
        for (size_t i = 0; i < chunk; i++) {
          uint32_t u = (uint32_t)(base + i);
          memcpy(&x[i], &u, 4);
        }
        char what[64];
        snprintf(what, sizeof what, "all patterns 0x%08llx..", (unsigned long long)base);
        check_to_wire(what, w, x, chunk, 1.0f, 0, 0);
      }
      check(failures == ok0, "every fp32 bit pattern to %s", wi ? "bf16" : "fp16");
    }
    for (size_t i = 0; i < nrand; i++) {
      uint32_t u = rnd();
      memcpy(&x[i], &u, 4);
    }
    check_to_wire("random bits", w, x, nrand, 1.0f, 0, 0);
    check_to_wire("random bits x0.1", w, x, nrand, 0.1f, 0, 0);
    check_to_wire("random bits x1e-30", w, x, nrand, 1e-30f, 0, 0);
    check_to_wire("random bits misaligned", w, x, ((size_t)1 << 20) + 7, 1.0f, 1, 3);
    check_to_wire("random bits misaligned src", w, x, ((size_t)1 << 20) + 5, 1.0f, 3, 0);
    check_to_wire("random bits misaligned dst", w, x, ((size_t)1 << 20) + 1, 1.0f, 0, 1);
    size_t nb = boundary_values(x);
    for (size_t n = 0; n < 70; n += 7) check_to_wire("boundary values", w, x, nb - n, 1.0f, n % 4, 0);
    uint16_t *h = hmalloc(65536 * 4 * 2);
    for (size_t i = 0; i < 65536 * 4; i++) h[i] = (uint16_t)i;
    check_from_wire("all wire values", w, h, 65536, 1.0f, 0, 0);
    check_from_wire("all wire values", w, h, 65536, 0.375f, 0, 0);
    check_from_wire("all wire values misaligned", w, h + 1, 65535 * 4, 1.0f, 1, 3);
    free(h);
  }
  free(x);
}

/* A table of segments with random (some empty) counts and misaligned offsets,
 * to the wire and back, against the host doing each segment alone. */
static void check_segments(int nseg, size_t maxcount) {
  nsc_seg *segs = hmalloc((size_t)nseg * sizeof *segs);
  size_t total = 0, wire_n = 0;
  for (int i = 0; i < nseg; i++) {
    segs[i].count = i % 17 == 3 ? 0 : rnd() % (maxcount + 1);
    segs[i].off = wire_n + rnd() % 3; /* gaps: misaligned wire offsets */
    wire_n = segs[i].off + segs[i].count;
    total += segs[i].count + 1;
  }
  float *hx = hmalloc(total * 4), *dx = dmalloc(total * 4), *dy = dmalloc(total * 4);
  for (size_t i = 0; i < total; i++) hx[i] = (float)((int)(rnd() % 200001) - 100000) * 0.37f;
  h2d(dx, hx, total * 4);
  dset(dy, 0, total * 4);
  size_t pos = 0;
  for (int i = 0; i < nseg; i++) { /* every other segment starts misaligned */
    segs[i].src = dx + pos + (i & 1);
    segs[i].dst = dy + pos + (i & 1);
    pos += segs[i].count + 1;
  }
  uint16_t *dw = dmalloc(wire_n * 2 + 2), *got = hmalloc(wire_n * 2 + 2), *want = hmalloc(wire_n * 2 + 2);
  float *goty = hmalloc(total * 4), *wanty = hmalloc(total * 4);
  for (int wi = 0; wi < 2; wi++) {
    nsc_fmt_t w = (nsc_fmt_t)wi;
    dset(dw, 0, wire_n * 2 + 2);
    memset(want, 0, wire_n * 2 + 2);
    memset(wanty, 0, total * 4);
    nsc_cast_counts c0 = counts_now(), hc = {0, 0};
    BE(be->seg_to_wire(st, w, segs, nseg, dw, 0.5f));
    BE(be->seg_from_wire(st, w, segs, nseg, dw, 2.0f));
    RT(D.cuStreamSynchronize(st));
    nsc_cast_counts c1 = counts_now();
    pos = 0;
    for (int i = 0; i < nseg; i++) {
      const float *hs = hx + pos + (i & 1);
      nsc_cast_to_wire(w, hs, want + segs[i].off, segs[i].count, 0.5f, &hc);
      nsc_cast_from_wire(w, want + segs[i].off, wanty + pos + (i & 1), segs[i].count, 2.0f);
      pos += segs[i].count + 1;
    }
    d2h(got, dw, wire_n * 2 + 2);
    d2h(goty, dy, total * 4);
    size_t f1, f2, b1 = diff(got, want, wire_n + 1, 2, &f1), b2 = diff(goty, wanty, total, 4, &f2);
    int cnt_ok = c1.overflow - c0.overflow == hc.overflow && c1.underflow - c0.underflow == hc.underflow;
    check(!b1 && !b2 && cnt_ok, "%d segments (up to %zu values) to %s and back: %zu/%zu differ%s",
           nseg, maxcount, wi ? "bf16" : "fp16", b1, b2, cnt_ok ? "" : ", counts differ");
  }
  RT(D.cuMemFree(DP(dx)));
  RT(D.cuMemFree(DP(dy)));
  RT(D.cuMemFree(DP(dw)));
  free(segs);
  free(hx);
  free(got);
  free(want);
  free(goty);
  free(wanty);
}

static void check_scale(void) {
  static const char kinds[] = {'f', 'd', 'h', 'b'};
  static const size_t es[] = {4, 8, 2, 2};
  size_t n = ((size_t)1 << 22) + 3;
  for (int k = 0; k < 4; k++)
    for (int inplace = 0; inplace < 2; inplace++) {
      size_t bytes = n * es[k];
      unsigned char *h = hmalloc(bytes), *want = hmalloc(bytes), *got = hmalloc(bytes);
      for (size_t i = 0; i < bytes; i++) h[i] = (unsigned char)rnd();
      unsigned char *ds = dmalloc(bytes + 8), *dd = inplace ? ds : dmalloc(bytes + 8);
      h2d(ds + es[k], h, bytes); /* misaligned by one */
      BE(be->scale(st, kinds[k], ds + es[k], dd + es[k], n, 0.1));
      RT(D.cuStreamSynchronize(st));
      d2h(got, dd + es[k], bytes);
      nsc_scale_buffer(kinds[k], h, want, n, 0.1);
      size_t first, bad = diff(got, want, n, es[k], &first);
      check(!bad, "scale '%c' x0.1 %s: %zu values, %zu differ", kinds[k],
             inplace ? "in place" : "out of place", n, bad);
      RT(D.cuMemFree(DP(ds)));
      if (!inplace) RT(D.cuMemFree(DP(dd)));
      free(h);
      free(want);
      free(got);
    }
  check(be->scale(st, 'x', NULL, NULL, 1, 1.0) == -1, "scale of an unknown kind fails");
}

/* 2^31 + 5 elements: size_t indexing and exact 64-bit counts. */
static void check_huge(void) {
  size_t n = ((size_t)1 << 31) + 5, freeb = 0, totalb = 0;
  RT(D.cuMemGetInfo(&freeb, &totalb));
  if (freeb < n * 10 + ((size_t)1 << 30)) {
    printf("skip 2^31 elements: %zu bytes free\n", freeb);
    return;
  }
  float *dx = dmalloc(n * 4);
  uint16_t *dh = dmalloc(n * 2);
  dset(dx, 0x48, n * 4); /* 0x48484848 = 205089.1: overflows fp16 */
  nsc_cast_counts c0 = counts_now();
  BE(be->to_wire(st, NSC_FMT_FP16, dx, dh, n, 1.0f));
  RT(D.cuStreamSynchronize(st));
  nsc_cast_counts c1 = counts_now();
  uint16_t tail[4096];
  d2h(tail, dh + n - 4096, sizeof tail);
  int ok = c1.overflow - c0.overflow == n && c1.underflow == c0.underflow;
  for (int i = 0; i < 4096; i++) ok &= tail[i] == 0x7c00;
  check(ok, "2^31+5 values to fp16: overflow count %llu, tail all Inf",
         (unsigned long long)(c1.overflow - c0.overflow));
  dset(dh, 0x3c, n * 2); /* 0x3c3c */
  BE(be->from_wire(st, NSC_FMT_FP16, dh, dx, n, 1.0f));
  RT(D.cuStreamSynchronize(st));
  float ftail[4096];
  d2h(ftail, dx + n - 4096, sizeof ftail);
  ok = 1;
  for (int i = 0; i < 4096; i++) ok &= ftail[i] == nsc_f16_to_f32_ref(0x3c3c);
  check(ok, "2^31+5 values from fp16: tail exact");
  RT(D.cuMemFree(DP(dx)));
  RT(D.cuMemFree(DP(dh)));
}

/* The backend's non-cast duties. */
static void check_backend_api(void) {
  float *d = dmalloc(4096 * 4), host = 1.0f;
  check(nsc_backend_for(d) == be, "nsc_backend_for(device pointer) is the CUDA backend");
  check(nsc_backend_for(&host) == &nsc_backend_host, "nsc_backend_for(host pointer) is the host backend");
  int cap = -1;
  check(be->capturing(st, &cap) == 0 && cap == 0, "capturing() is 0 on a plain stream");

  /* fill_ones, stream-ordered staging */
  void *stage = NULL;
  BE(be->alloc(st, 1 << 20, &stage));
  BE(be->fill_ones(st, stage, 1 << 20));
  unsigned char *h = hmalloc(1 << 20);
  RT(D.cuMemcpyDtoHAsync(h, DP(stage), 1 << 20, st));
  RT(D.cuStreamSynchronize(st));
  be->release(st, stage);
  int ones = 1;
  for (int i = 0; i < 1 << 20; i++) ones &= h[i] == 0xff;
  check(ones, "fill_ones on stream-ordered staging memory");
  free(h);

  /* marks: elapsed() is 1 once both events completed, never waits */
  nsc_mark a, b;
  BE(be->mark(st, &a));
  BE(be->to_wire(st, NSC_FMT_FP16, d, (uint16_t *)(d + 2048), 2048, 1.0f));
  BE(be->mark(st, &b));
  RT(D.cuStreamSynchronize(st));
  uint64_t ns = 0;
  int r = be->elapsed(&a, &b, &ns);
  check(r == 1, "elapsed() after completion: %d (%llu ns)", r, (unsigned long long)ns);
  be->mark_release(&a);
  be->mark_release(&b);

  /* capture: launches go into a graph, and replay gives the same results */
  float hx[4096];
  for (int i = 0; i < 4096; i++) hx[i] = (float)(i - 2048) * 0.25f;
  h2d(d, hx, sizeof hx);
  uint16_t *dw = dmalloc(4096 * 2), hw[4096], want[4096];
  dset(dw, 0, 4096 * 2);
  CUgraph g;
  CUgraphExec ge;
  RT(D.cuStreamBeginCapture(st, CU_STREAM_CAPTURE_MODE_GLOBAL));
  cap = 0;
  int rc = be->capturing(st, &cap);
  nsc_seg seg = {d, d, 4096, 0};
  int rs = be->seg_to_wire(st, NSC_FMT_BF16, &seg, 1, dw, 1.0f);
  RT(D.cuStreamEndCapture(st, &g));
  check(rc == 0 && cap == 1 && rs == 0, "capturing() is 1 while capturing; a segment launch is captured");
  RT(D.cuGraphInstantiate(&ge, g, 0));
  RT(D.cuGraphLaunch(ge, st));
  RT(D.cuStreamSynchronize(st));
  d2h(hw, dw, sizeof hw);
  nsc_cast_to_wire(NSC_FMT_BF16, hx, want, 4096, 1.0f, NULL);
  check(!memcmp(hw, want, sizeof hw), "graph replay of a captured cast");
  RT(D.cuGraphExecDestroy(ge));
  RT(D.cuGraphDestroy(g));

  /* side stream + joins: cast on the side, result visible on the main stream */
  nsc_stream side = NULL;
  BE(be->side_stream(st, &side));
  RT(D.cuMemsetD8Async(DP(dw), 0, 4096 * 2, st));
  BE(be->join(side, st));
  BE(be->to_wire(side, NSC_FMT_FP16, d, dw, 4096, 1.0f));
  BE(be->join(st, side));
  RT(D.cuMemcpyDtoHAsync(hw, DP(dw), sizeof hw, st));
  RT(D.cuStreamSynchronize(st));
  nsc_cast_to_wire(NSC_FMT_FP16, hx, want, 4096, 1.0f, NULL);
  nsc_stream side2 = NULL;
  BE(be->side_stream(st, &side2));
  check(side != (nsc_stream)st && side == side2 && !memcmp(hw, want, sizeof hw),
         "side stream: one per caller stream, joined both ways");

  /* out-of-band exchange round trip */
  int64_t vals[3] = {7, -1, 1ll << 40}, back[3] = {0, 0, 0};
  void *buf = NULL;
  nsc_stream os = NULL;
  BE(be->oob_begin((nsc_stream)st, vals, sizeof vals, &buf, &os));
  check(be->oob_end(buf, os, back, sizeof back, 1) == 1, "oob_end with wait polls until the result is there");
  check(!memcmp(vals, back, sizeof vals) && os != (nsc_stream)st, "oob_begin/oob_end round trip on a private stream");
  RT(D.cuMemFree(DP(d)));
  RT(D.cuMemFree(DP(dw)));
}

static int cmp_f(const void *a, const void *b) {
  float x = *(const float *)a, y = *(const float *)b;
  return (x > y) - (x < y);
}

/* Median milliseconds of reps runs of fn on st, each between two events. */
typedef void (*bench_fn)(void *arg);
static float time_ms(bench_fn fn, void *arg, int reps) {
  CUevent e0, e1;
  float t[32];
  RT(D.cuEventCreate(&e0, CU_EVENT_DEFAULT));
  RT(D.cuEventCreate(&e1, CU_EVENT_DEFAULT));
  fn(arg); /* warm-up */
  for (int i = 0; i < reps; i++) {
    RT(D.cuEventRecord(e0, st));
    fn(arg);
    RT(D.cuEventRecord(e1, st));
    RT(D.cuEventSynchronize(e1));
    RT(D.cuEventElapsedTime(&t[i], e0, e1));
  }
  RT(D.cuEventDestroy(e0));
  RT(D.cuEventDestroy(e1));
  qsort(t, (size_t)reps, sizeof t[0], cmp_f);
  return t[reps / 2];
}

typedef struct {
  int op; /* 0 memcpy, 1 to_wire, 2 from_wire, 3 scale, 4 seg_to, 5 seg_from,
           * 6 two-phase encode of format kind, 7 its decode-and-sum of 2 runs */
  nsc_fmt_t w;
  char kind;
  void *a, *b;
  size_t n;
  nsc_seg *segs;
  int nseg;
} bench_arg;

static void run_op(void *p) {
  bench_arg *a = p;
  switch (a->op) {
  case 0: RT(D.cuMemcpyDtoDAsync(DP(a->b), DP(a->a), a->n, st)); break;
  case 1: BE(be->to_wire(st, a->w, a->a, a->b, a->n, 1.0f)); break;
  case 2: BE(be->from_wire(st, a->w, a->b, a->a, a->n, 1.0f)); break;
  case 3: BE(be->scale(st, a->kind, a->a, a->a, a->n, 0.5)); break;
  case 4: BE(be->seg_to_wire(st, a->w, a->segs, a->nseg, a->b, 1.0f)); break;
  case 6: BE(be->fmt_encode(st, (nsc_fmt_t)a->kind, 256, a->a, a->b, a->n, 1.0f)); break;
  case 7:
    BE(be->fmt_decode_sum(st, (nsc_fmt_t)a->kind, 256, a->b, nsc_fmt_bytes((nsc_fmt_t)a->kind, a->n, 256), 2, a->a,
                          a->n, 1.0f));
    break;
  default: BE(be->seg_from_wire(st, a->w, a->segs, a->nseg, a->b, 1.0f)); break;
  }
}

static size_t bw_mib = 1024; /* --bw-mib */
static int bw_asked;

static void bandwidth(void) {
  size_t n = bw_mib << 18, bytes = n * 4;
  float *x = dmalloc(bytes), *y = dmalloc(bytes), *z = dmalloc(bytes);
  uint16_t *wv = dmalloc(n * 2);
  uint8_t *w2 = dmalloc(2 * nsc_fmt_bytes(NSC_FMT_FP16S, n, 256));
  dset(x, 0x3c, bytes);
  dset(z, 0x01, bytes); /* 2.4e-38: every element underflows fp16 (and is counted) */
  dset(wv, 0x3c, n * 2);
  dset(w2, 0x3c, 2 * nsc_fmt_bytes(NSC_FMT_FP16S, n, 256));
  enum { NSEG = 64 };
  nsc_seg segs[NSEG];
  for (int i = 0; i < NSEG; i++)
    segs[i] = (nsc_seg){x + (size_t)i * (n / NSEG), x + (size_t)i * (n / NSEG), n / NSEG,
                        (size_t)i * (n / NSEG)};
  bench_arg m = {0, NSC_FMT_FP16, 0, x, y, bytes, NULL, 0};
  float tm = time_ms(run_op, &m, 21);
  double mgbs = 2.0 * (double)bytes / tm * 1e-6;
  printf("# bandwidth on %zu MiB of fp32, median of 21, bytes moved (read + write)\n", bytes >> 20);
  printf("# %-22s %9s %9s %7s\n", "kernel", "ms", "GB/s", "vs copy");
  printf("  %-22s %9.3f %9.1f %7.2f\n", "cuMemcpy D2D", (double)tm, mgbs, 1.0);
  struct {
    const char *name;
    bench_arg a;
    double moved;
  } rows[] = {
      {"to_wire fp16", {1, NSC_FMT_FP16, 0, x, wv, n, NULL, 0}, 6.0 * (double)n},
      {"to_wire bf16", {1, NSC_FMT_BF16, 0, x, wv, n, NULL, 0}, 6.0 * (double)n},
      {"to_wire fp16 underflow", {1, NSC_FMT_FP16, 0, z, wv, n, NULL, 0}, 6.0 * (double)n},
      {"from_wire fp16", {2, NSC_FMT_FP16, 0, y, wv, n, NULL, 0}, 6.0 * (double)n},
      {"from_wire bf16", {2, NSC_FMT_BF16, 0, y, wv, n, NULL, 0}, 6.0 * (double)n},
      {"seg_to_wire fp16 x64", {4, NSC_FMT_FP16, 0, NULL, wv, 0, segs, NSEG}, 6.0 * (double)n},
      {"seg_from_wire bf16 x64", {5, NSC_FMT_BF16, 0, NULL, wv, 0, segs, NSEG}, 6.0 * (double)n},
      {"scale fp32", {3, 0, 'f', y, NULL, n, NULL, 0}, 8.0 * (double)n},
      {"scale fp64", {3, 0, 'd', y, NULL, n / 2, NULL, 0}, 8.0 * (double)n},
      {"scale fp16", {3, 0, 'h', wv, NULL, n, NULL, 0}, 4.0 * (double)n},
      {"scale bf16", {3, 0, 'b', wv, NULL, n, NULL, 0}, 4.0 * (double)n},
      {"tp encode int8", {6, 0, NSC_FMT_INT8, x, w2, n, NULL, 0}, 5.0 * (double)n},
      {"tp encode fp16s", {6, 0, NSC_FMT_FP16S, x, w2, n, NULL, 0}, 6.0 * (double)n},
      {"tp encode int8 underflow", {6, 0, NSC_FMT_INT8, z, w2, n, NULL, 0}, 5.0 * (double)n},
      {"tp decode-sum int8 x2", {7, 0, NSC_FMT_INT8, y, w2, n, NULL, 0}, 6.0 * (double)n},
      {"tp decode-sum fp16 x2", {7, 0, NSC_FMT_FP16, y, w2, n, NULL, 0}, 8.0 * (double)n},
      {"tp encode int4", {6, 0, NSC_FMT_INT4, x, w2, n, NULL, 0}, 4.5 * (double)n},
      {"tp decode-sum int4 x2", {7, 0, NSC_FMT_INT4, y, w2, n, NULL, 0}, 5.0 * (double)n},
  };
  /* Decode-and-sum rows read what their encoders make of random inputs,
   * each operand its own (operand j encodes the random values from j on):
   * valid headers and codes, as a real call's (not what an earlier row left). */
  float *rv = dmalloc((n + 1) * 4), *hr = hmalloc((n + 1) * 4);
  for (size_t i = 0; i <= n; i++) hr[i] = (float)((int)(rnd() % 20001) - 10000) * 1e-3f;
  h2d(rv, hr, (n + 1) * 4);
  free(hr);
  for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
    if (rows[i].a.op == 7) {
      nsc_fmt_t f = (nsc_fmt_t)rows[i].a.kind;
      size_t one = nsc_fmt_bytes(f, n, 256);
      for (size_t j = 0; j < 2; j++) BE(be->fmt_encode(st, f, 256, rv + j, w2 + j * one, n, 1.0f));
    }
    float t = time_ms(run_op, &rows[i].a, 21);
    double gbs = rows[i].moved / t * 1e-6;
    printf("  %-22s %9.3f %9.1f %7.2f\n", rows[i].name, (double)t, gbs, gbs / mgbs);
  }
  RT(D.cuMemFree(DP(x)));
  RT(D.cuMemFree(DP(y)));
  RT(D.cuMemFree(DP(wv)));
  RT(D.cuMemFree(DP(z)));
  RT(D.cuMemFree(DP(w2)));
  RT(D.cuMemFree(DP(rv)));
}

int main(int argc, char **argv) {
  int allow_no_gpu = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--quick")) quick = 1;
    else if (!strcmp(argv[i], "--allow-no-gpu")) allow_no_gpu = 1;
    else if (!strcmp(argv[i], "--bw-mib") && i + 1 < argc && atol(argv[i + 1]) >= 1 && atol(argv[i + 1]) <= 4096)
      bw_mib = (size_t)atol(argv[++i]), bw_asked = 1;
    else {
      fprintf(stderr, "usage: check_kernels [--quick] [--allow-no-gpu] [--bw-mib 1..4096]\n");
      return 2;
    }
  }
  int ndev = 0;
  if (load_driver() || D.cuInit(0) != CUDA_SUCCESS || D.cuDeviceGetCount(&ndev) != CUDA_SUCCESS || ndev == 0) {
    float host = 0;
    int fallback = nsc_backend_cuda() == NULL && nsc_backend_for(&host) == &nsc_backend_host &&
                   nsc_backend_for(NULL) == &nsc_backend_host;
    printf("# no usable GPU; CUDA backend: %s\n",
           nsc_backend_cuda() ? "available (unexpected)" : nsc_backend_error());
    check(fallback, "without a GPU the CUDA backend is unavailable and every pointer goes to the host backend");
    if (!allow_no_gpu) printf("# nothing checked on a GPU\n");
    return failures || !allow_no_gpu;
  }
  /* device 0's primary context, current (as the runtime makes it); the backend finds it */
  CUcontext ctx;
  RT(D.cuDevicePrimaryCtxRetain(&ctx, 0));
  RT(D.cuCtxSetCurrent(ctx));
  RT(D.cuStreamCreate(&st, CU_STREAM_NON_BLOCKING));
  struct {
    char name[256];
    int major, minor, multiProcessorCount;
  } prop;
  RT(D.cuDeviceGetName(prop.name, sizeof prop.name, 0));
  RT(D.cuDeviceGetAttribute(&prop.major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, 0));
  RT(D.cuDeviceGetAttribute(&prop.minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, 0));
  RT(D.cuDeviceGetAttribute(&prop.multiProcessorCount, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 0));
  be = nsc_backend_cuda();
  if (!be) {
    printf("FATAL CUDA backend unavailable on %s: %s\n", prop.name, nsc_backend_error());
    return 1;
  }
  nsc_cast_set_threads(16);
  printf("# %s (sm_%d%d, %d SMs), host casts: %s%s\n", prop.name, prop.major, prop.minor,
         prop.multiProcessorCount, nsc_cast_impl_name(), quick ? ", quick" : "");
  time_t t0 = time(NULL);
  check_casts();
  check_segments(10, 5000);           /* small table */
  check_segments(700, 3000);          /* large table */
  check_segments(2000, 300);          /* several launches */
  check_scale();
  check_backend_api();
  if (!quick) check_huge();
  if (!quick || bw_asked) bandwidth();
  printf("# %s: %d failure(s), %ld s\n", failures ? "FAIL" : "PASS", failures,
         (long)(time(NULL) - t0));
  return failures != 0;
}
