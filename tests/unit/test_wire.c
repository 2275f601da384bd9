/* test_wire.c — unit tests of the wire formats (compress/wire.h).
 *
 * The fast host path against the scalar reference, bit for bit (encoded bytes,
 * decoded floats, sums), on random inputs spanning 2^-140 .. 2^120 with Inf,
 * NaN, zeros and subnormals sprinkled in, for several block sizes, lengths
 * and scales; e4m3 rounding against a brute-force nearest-even search; round
 * trips of values exact in each format; and the block edge cases: all-zero
 * block, Inf/NaN propagation, subnormal blocks, +-FLT_MAX, the invalid header
 * a 0xff-filled (poisoned) buffer carries, and the documented error bounds.
 * Error feedback and stochastic rounding (nsc_fmt_encode_opt): fast path =
 * reference with residuals carried over calls; with round to nearest the
 * residual is exactly what the code lost (y = value + residual in fp32) and
 * 0 for Inf/NaN; a value halfway between two codes goes up in a fraction of
 * 65536 trials within 5 binomial standard deviations of 1/2 (fixed seeds:
 * the counts are reproducible, the bound says they are not tuned); the mean
 * of 65536 stochastic roundings of a value 5/16 of a step above a code lies
 * within 5 standard deviations (+ the 2^-24 step bias) of the value; the
 * random streams differ between keys and repeat for one key; no neighbour
 * beyond a format's range is ever taken. A 16-bit input's chain (widen,
 * encode, decode-sum, narrow: the two-phase executor's) fast = reference for
 * every input and wire, and one rounding of the fp32 sum on its own wire.
 *
 * Runs as cmocka with TAP output. Must not: rely on timings. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "wire.h"
#include "wire_bits.h"

static uint32_t f2u(float x) { uint32_t u; memcpy(&u, &x, 4); return u; }
static float u2f(uint32_t u) { float x; memcpy(&x, &u, 4); return x; }
static uint64_t rs = 0x9e3779b97f4a7c15ull;
static uint32_t rnd(void) {
  rs ^= rs >> 12; rs ^= rs << 25; rs ^= rs >> 27;
  return (uint32_t)((rs * 0x2545f4914f6cdd1dull) >> 32);
}
/* Random values: sign, exponent spread per block, some specials. */
static void fill_random(float *x, size_t n, int specials) {
  int base = (int)(rnd() % 260) - 140;
  for (size_t i = 0; i < n; i++) {
    if (i % 97 == 0) base = (int)(rnd() % 260) - 140;
    uint32_t r = rnd() % 1000;
    if (specials && r == 0) x[i] = INFINITY;
    else if (specials && r == 1) x[i] = -INFINITY;
    else if (specials && r == 2) x[i] = NAN;
    else if (r < 20) x[i] = 0.0f;
    else if (r < 25) x[i] = u2f(rnd() & 0x807fffffu); /* subnormal */
    else x[i] = ldexpf((float)(rnd() % (1u << 24)) / (1u << 24) + 0.5f, base - (int)(rnd() % 12)) * ((rnd() & 1) ? -1.f : 1.f);
  }
}

static const nsc_fmt_t fmts[] = {NSC_FMT_FP16, NSC_FMT_BF16, NSC_FMT_INT8, NSC_FMT_FP8, NSC_FMT_FP16S, NSC_FMT_INT4};
#define NF ((int)(sizeof fmts / sizeof *fmts)) /* fmts; from index 2 the block-scaled ones */

static void same_bits(const float *a, const float *b, size_t n, const char *what) {
  for (size_t i = 0; i < n; i++)
    if (f2u(a[i]) != f2u(b[i])) fail_msg("%s: element %zu: %08x != %08x", what, i, f2u(a[i]), f2u(b[i]));
}

static void test_fast_equals_reference(void **state) {
  (void)state;
  /* 15: blocks and tiles that start on an odd element (int4's high nibble first) */
  static const size_t blocks[] = {15, 16, 100, 256, 4096};
  static const size_t lens[] = {0, 1, 15, 16, 17, 255, 256, 257, 1000, 5000, 9001};
  static const float scales[] = {1.0f, 0.25f, 3.0f};
  size_t maxn = 9001, maxb = 2 * maxn + 2 * 9001;
  float *x = malloc(maxn * 4), *a = malloc(maxn * 4), *b = malloc(maxn * 4);
  uint8_t *ea = malloc(6 * maxb), *eb = malloc(6 * maxb);
  assert_true(x && a && b && ea && eb);
  for (int fi = 0; fi < NF; fi++)
    for (size_t bi = 0; bi < sizeof blocks / sizeof blocks[0]; bi++)
      for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++)
        for (int si = 0; si < 3; si++) {
          nsc_fmt_t f = fmts[fi];
          size_t n = lens[li], blk = blocks[bi], nb = nsc_fmt_bytes(f, n, blk);
          char what[96];
          snprintf(what, sizeof what, "%s block %zu n %zu scale %g", nsc_fmt_name(f), blk, n, scales[si]);
          for (int m = 0; m < 5; m++) {
            fill_random(x, n, li % 2);
            nsc_cast_counts ca = {0, 0}, cb = {0, 0};
            nsc_fmt_encode_ref(f, blk, x, ea + (size_t)m * maxb, n, scales[si], &ca);
            nsc_fmt_encode(f, blk, x, eb + (size_t)m * maxb, n, scales[si], &cb);
            if (memcmp(ea + (size_t)m * maxb, eb + (size_t)m * maxb, nb)) fail_msg("%s: encoded bytes differ", what);
            if (ca.overflow != cb.overflow || ca.underflow != cb.underflow)
              fail_msg("%s: counts differ (ref %llu/%llu, fast %llu/%llu)", what, (unsigned long long)ca.overflow,
                       (unsigned long long)ca.underflow, (unsigned long long)cb.overflow,
                       (unsigned long long)cb.underflow);
          }
          nsc_fmt_decode_ref(f, blk, ea, a, n, scales[si]);
          nsc_fmt_decode(f, blk, ea, b, n, scales[si]);
          same_bits(a, b, n, what);
          for (int m = 1; m <= 5; m += 2) {
            nsc_fmt_decode_sum_ref(f, blk, ea, maxb, m, a, n, scales[si]);
            nsc_fmt_decode_sum(f, blk, ea, maxb, m, b, n, scales[si]);
            same_bits(a, b, n, what);
          }
        }
  free(x); free(a); free(b); free(ea); free(eb);
}

/* A 16-bit input through a wire (issue 47), as the two-phase executor
 * chains it: widened by the input's row's cast, encoded, m runs decoded and
 * summed in fp32, the sum narrowed by the same row's cast; the fast host
 * path against the scalar references, bit for bit, for every 16-bit input
 * row and every wire, random 16-bit patterns (no NaN; Inf, zeros and
 * subnormals included). With the input's own wire the decode is exact, so
 * the chain is one rounding of the fp32 sum: checked against that too. */
static uint16_t narrow_ref(nsc_fmt_t in, float x) { return in == NSC_FMT_BF16 ? nsc_f32_to_bf16_ref(x) : nsc_f32_to_f16_ref(x); }
static float widen_ref(nsc_fmt_t in, uint16_t h) { return in == NSC_FMT_BF16 ? nsc_bf16_to_f32_ref(h) : nsc_f16_to_f32_ref(h); }

static void test_input16_chain(void **state) {
  (void)state;
  enum { N = 3001, M = 4, BLK = 256 };
  size_t stride = nsc_fmt_bytes(NSC_FMT_FP16S, N, BLK) + 16; /* the largest encoding of N */
  uint16_t *h = malloc((size_t)M * N * 2), *oa = malloc(N * 2), *ob = malloc(N * 2);
  float *x = malloc(N * 4), *sa = malloc(N * 4), *sb = malloc(N * 4);
  uint8_t *ea = malloc(M * stride), *eb = malloc(M * stride), *ec = malloc(stride);
  uint16_t *oc = malloc(N * 2);
  float *ra = malloc(N * 4), *rb = malloc(N * 4);
  assert_true(h && oa && ob && x && sa && sb && ea && eb && ec && oc && ra && rb);
  for (int ii = 0; ii < NF; ii++) {
    nsc_fmt_t in = fmts[ii];
    if (nsc_fmt_blocked(in) || nsc_fmt_code_bits(in) != 16) continue; /* the 16-bit input rows */
    uint16_t expmask = in == NSC_FMT_BF16 ? 0x7f80u : 0x7c00u;
    for (int fi = 0; fi < NF; fi++) {
      nsc_fmt_t f = fmts[fi];
      char what[64];
      snprintf(what, sizeof what, "%s input, %s wire", nsc_fmt_name(in), nsc_fmt_name(f));
      float sc = f == in ? 1.0f : 0.25f, post = 1.0f / sc; /* the own wire as a Sum: no scaling */
      for (size_t i = 0; i < (size_t)M * N; i++) {
        uint16_t v = (uint16_t)rnd();
        if ((v & expmask) == expmask && (v & (uint16_t)~(expmask | 0x8000u))) v &= 0x8000u | expmask; /* NaN -> Inf */
        if (i % 7 == 3) v = (uint16_t)((v & 0x80ffu) | (in == NSC_FMT_BF16 ? 0x3f00u : 0x3800u)); /* near 1 */
        h[i] = v;
      }
      for (int j = 0; j < M; j++) {
        for (size_t i = 0; i < N; i++) x[i] = widen_ref(in, h[(size_t)j * N + i]);
        nsc_fmt_encode_ref(f, BLK, x, ea + (size_t)j * stride, N, sc, NULL);
        nsc_cast_from_wire(in, h + (size_t)j * N, x, N, 1.0f);
        nsc_fmt_encode(f, BLK, x, eb + (size_t)j * stride, N, sc, NULL);
        if (memcmp(ea + (size_t)j * stride, eb + (size_t)j * stride, nsc_fmt_bytes(f, N, BLK)))
          fail_msg("%s: run %d encoded differently", what, j);
        /* the fused loop from the 16-bit bits: the same bytes, and with
         * error feedback and stochastic rounding the same codes, residuals
         * and counts as the reference on the widened copy */
        nsc_fmt_encode_in(in, f, BLK, h + (size_t)j * N, ec, N, sc, NULL, NULL);
        if (memcmp(ea + (size_t)j * stride, ec, nsc_fmt_bytes(f, N, BLK)))
          fail_msg("%s: run %d: the fused encode differs", what, j);
        for (size_t i = 0; i < N; i++) ra[i] = rb[i] = (float)((int)(rnd() % 2001) - 1000) * 0x1p-14f;
        nsc_enc_opt oa = {ra, 0, j % 2, 0x5eed + (uint64_t)j}, ob = oa;
        ob.resid = rb;
        nsc_cast_counts ca = {0, 0}, cb = {0, 0};
        nsc_fmt_encode_opt_ref(f, BLK, x, eb + (size_t)j * stride, N, sc, &oa, &ca);
        nsc_fmt_encode_in(in, f, BLK, h + (size_t)j * N, ec, N, sc, &ob, &cb);
        if (memcmp(eb + (size_t)j * stride, ec, nsc_fmt_bytes(f, N, BLK)))
          fail_msg("%s: run %d: the fused encode with feedback differs", what, j);
        same_bits(ra, rb, N, what);
        if (ca.overflow != cb.overflow || ca.underflow != cb.underflow) fail_msg("%s: run %d: counts differ", what, j);
        memcpy(eb + (size_t)j * stride, ea + (size_t)j * stride, nsc_fmt_bytes(f, N, BLK));
      }
      /* the fused decode into the 16-bit type: the decode, then one rounding */
      nsc_cast_counts cd = {0, 0};
      nsc_fmt_decode_ref(f, BLK, ea, sa, N, post);
      nsc_fmt_decode_out(in, f, BLK, ea, oc, N, post, &cd);
      for (size_t i = 0; i < N; i++) {
        uint16_t w = narrow_ref(in, sa[i]);
        if (w != oc[i] && !((w & expmask) == expmask && (oc[i] & expmask) == expmask && (w & ~expmask & 0x7fffu) &&
                            (oc[i] & ~expmask & 0x7fffu)))
          fail_msg("%s: decoded element %zu: %04x != %04x", what, i, oc[i], w);
      }
      nsc_fmt_decode_sum_ref(f, BLK, ea, stride, M, sa, N, post);
      nsc_fmt_decode_sum(f, BLK, eb, stride, M, sb, N, post);
      same_bits(sa, sb, N, what);
      for (size_t i = 0; i < N; i++) oa[i] = narrow_ref(in, sa[i]);
      nsc_cast_to_wire(in, sb, ob, N, 1.0f, NULL);
      for (size_t i = 0; i < N; i++)
        if (oa[i] != ob[i] && !((oa[i] & expmask) == expmask && (ob[i] & expmask) == expmask && (oa[i] & ~expmask & 0x7fffu) && (ob[i] & ~expmask & 0x7fffu)))
          fail_msg("%s: result %zu: %04x != %04x", what, i, oa[i], ob[i]);
      if (f != in) continue;
      /* the own wire (a Sum): one rounding of the fp32 sum of the inputs, in rank order */
      for (size_t i = 0; i < N; i++) {
        float t = widen_ref(in, h[i]);
        for (int j = 1; j < M; j++) t = t + widen_ref(in, h[(size_t)j * N + i]);
        uint16_t w = narrow_ref(in, nsc_canon_nan(t));
        if (w != ob[i] && !(isnan(t) && (ob[i] & expmask) == expmask && (ob[i] & ~expmask & 0x7fffu)))
          fail_msg("%s: element %zu: %04x, one rounding of the fp32 sum gives %04x", what, i, ob[i], w);
      }
    }
  }
  free(h); free(oa); free(ob); free(x); free(sa); free(sb); free(ea); free(eb); free(ec); free(oc); free(ra); free(rb);
}

/* e4m3 element rounding against the nearest of all finite codes (ties to the
 * even code), over every fp32 value in [2^-12, 256] (every 3rd) and signs. */
static void test_e4m3_rounding(void **state) {
  (void)state;
  float val[0x79];
  for (int c = 0; c <= 0x78; c++) val[c] = nsc_e4m3_value((uint8_t)c);
  for (int c = 1; c <= 0x78; c++) assert_true(val[c] > val[c - 1]);
  for (uint32_t u = f2u(ldexpf(1, -12)); u <= f2u(256.0f); u += 3) {
    float v = u2f(u);
    int lo = 0;
    while (lo < 0x78 && val[lo + 1] <= v) lo++;
    int want = lo;
    if (lo < 0x78) {
      float dl = v - val[lo], dh = val[lo + 1] - v;
      want = dh < dl || (dh == dl && (lo & 1)) ? lo + 1 : lo;
    }
    uint8_t got = nsc_e4m3_bits(v), gotn = nsc_e4m3_bits(-v);
    if (got != want || gotn != (want | 0x80)) fail_msg("e4m3(%a) = %#x, want %#x", v, got, want);
  }
  assert_int_equal(nsc_e4m3_bits(ldexpf(1, -10)), 0);  /* half the smallest subnormal: tie to 0 */
  assert_int_equal(nsc_e4m3_bits(ldexpf(1.5f, -10)), 1);
}

static void roundtrip(nsc_fmt_t f, size_t blk, const float *x, size_t n, float *y, uint8_t *e) {
  nsc_fmt_encode(f, blk, x, e, n, 1.0f, NULL);
  nsc_fmt_decode(f, blk, e, y, n, 1.0f);
}

/* Small integers times a power of two come back exact, per block. */
static void test_exact_roundtrip(void **state) {
  (void)state;
  enum { N = 4096 };
  float x[N], y[N];
  uint8_t e[3 * N];
  for (int fi = 0; fi < NF; fi++) {
    nsc_fmt_t f = fmts[fi];
    for (int pass = 0; pass < 20; pass++) {
      int ex = (int)(rnd() % 240) - 140;
      for (int i = 0; i < N; i++) {
        int lim = f == NSC_FMT_INT8 ? 127 : f == NSC_FMT_FP8 ? 15 : f == NSC_FMT_BF16 ? 255 : f == NSC_FMT_INT4 ? 7
                                                                                      : 2047; /* fp16(s): 11 bits */
        int v = (int)(rnd() % (2 * lim + 1)) - lim;
        if (f == NSC_FMT_FP8 && (i % 256) == 0) v = 15; /* block range: 4 significant bits suffice */
        if (f == NSC_FMT_INT4 && (i % 256) == 0) v = 4; /* the block's scale is that of its largest: 2^ex */
        x[i] = ldexpf((float)v, ex);
      }
      if (f == NSC_FMT_FP16) for (int i = 0; i < N; i++) x[i] = ldexpf(x[i], -ex - 10 + (int)(pass % 10));
      roundtrip(f, 256, x, N, y, e);
      same_bits(x, y, N, nsc_fmt_name(f));
    }
  }
}

static void test_block_edges(void **state) {
  (void)state;
  enum { N = 512 };
  float x[N], y[N];
  uint8_t e[3 * N];
  for (int fi = 2; fi < NF; fi++) {
    nsc_fmt_t f = fmts[fi];
    /* all zero: header k = 0, codes 0, +0 back */
    memset(x, 0, sizeof x);
    roundtrip(f, 256, x, N, y, e);
    for (int i = 0; i < N; i++) assert_int_equal(f2u(y[i]), 0);
    uint16_t h; memcpy(&h, e, 2);
    assert_int_equal(h, NSC_W8_BIAS);
    /* Inf / NaN propagate; the finite values of that block stay within the bound */
    for (int i = 0; i < N; i++) x[i] = (float)(i - 200) * 0.37f;
    x[3] = INFINITY; x[4] = -INFINITY; x[5] = NAN; x[300] = NAN;
    roundtrip(f, 256, x, N, y, e);
    assert_true(isinf(y[3]) && y[3] > 0);
    assert_true(isinf(y[4]) && y[4] < 0);
    assert_true(isnan(y[5]) && isnan(y[300]));
    for (int i = 0; i < N; i++) {
      if (i >= 3 && i <= 5) continue;
      if (i == 300) continue;
      float amax = i < 256 ? 255 * 0.37f : 311 * 0.37f;
      double bound = f == NSC_FMT_INT8   ? amax / 63.0
                     : f == NSC_FMT_INT4 ? amax / 3.25 /* lim 6 in a block with Inf/NaN: < 2 steps */
                     : f == NSC_FMT_FP8  ? fmax(fabs(x[i]) / 16.0, amax * ldexp(1, -17))
                                         : fmax(fabs(x[i]) * ldexp(1, -11), amax * ldexp(1, -39));
      if (fabs((double)y[i] - x[i]) > bound) fail_msg("%s edge: x[%d] = %g came back %g", nsc_fmt_name(f), i, x[i], y[i]);
    }
    /* subnormal block: int8 keeps subnormal integers m * 2^-149 exact */
    for (int i = 0; i < N; i++) x[i] = u2f((uint32_t)(i % 128)) * ((i & 1) ? -1.f : 1.f);
    roundtrip(f, 256, x, N, y, e);
    if (f == NSC_FMT_INT4) { /* 7 levels: within amax/7.5 of each 128-value run's largest (127 * 2^-149) */
      for (int i = 0; i < N; i++) assert_true(fabsf(y[i] - x[i]) <= u2f(127) / 7.5f + u2f(1));
    } else if (f != NSC_FMT_FP8) same_bits(x, y, N, "int8/fp16s subnormals"); /* m * 2^-149, m < 128: exact */
    else for (int i = 0; i < N; i++) assert_true(fabsf(y[i] - x[i]) <= fabsf(x[i]) / 16);
    /* +-FLT_MAX: finite, never Inf */
    for (int i = 0; i < N; i++) x[i] = (i & 1) ? -FLT_MAX : FLT_MAX / 7.0f * (float)(i % 7);
    roundtrip(f, 256, x, N, y, e);
    for (int i = 0; i < N; i++) {
      assert_true(isfinite(y[i]));
      assert_true(fabs((double)y[i] - x[i]) <= (f == NSC_FMT_INT8   ? FLT_MAX / 127.5
                                                : f == NSC_FMT_INT4 ? FLT_MAX / 4 /* a top block: one step of 2^k */
                                                : f == NSC_FMT_FP8  ? fabs(x[i]) / 15.0 + FLT_MAX * ldexp(1, -17)
                                                                    : fabs(x[i]) * ldexp(1, -10)));
    }
    /* a buffer of 0xff (what a rank that could not stage sends) is NaN throughout */
    memset(e, 0xff, sizeof e);
    nsc_fmt_decode(f, 256, e, y, N, 1.0f);
    for (int i = 0; i < N; i++) assert_true(isnan(y[i]));
    nsc_fmt_decode_sum(f, 256, e, 0, 3, y, N, 1.0f);
    for (int i = 0; i < N; i++) assert_int_equal(f2u(y[i]), NSC_NAN_BITS);
  }
}

/* The documented per-element bounds on random inputs (no specials). */
static void test_bounds(void **state) {
  (void)state;
  enum { N = 256 * 40 };
  static float x[N], y[N];
  static uint8_t e[3 * N];
  for (int fi = 0; fi < NF; fi++) {
    nsc_fmt_t f = fmts[fi];
    fill_random(x, N, 0);
    roundtrip(f, 256, x, N, y, e);
    for (int b = 0; b < N / 256; b++) {
      double amax = 0;
      for (int i = b * 256; i < (b + 1) * 256; i++) amax = fmax(amax, fabs(x[i]));
      for (int i = b * 256; i < (b + 1) * 256; i++) {
        double err = fabs((double)y[i] - x[i]), ax = fabs(x[i]), bound;
        switch (f) {
        case NSC_FMT_FP16: bound = ax < 6.1e-5 ? ldexp(1, -25) : ax >= 65520 ? INFINITY : ax * ldexp(1, -11); break;
        case NSC_FMT_BF16: bound = ax * ldexp(1, -8) + ldexp(1, -134); break;
        /* a top block (amax >= 2^111): above its top code (amax rounded down
         * to a code) values round down, by less than one step (wire_bits.h) */
        case NSC_FMT_INT8:
        case NSC_FMT_INT4: { /* amax/(q + 0.5), q = 127 or 7 (wire_bits.h) */
          int q = f == NSC_FMT_INT8 ? 127 : 7, k = ilogb(amax) - (q == 127 ? 6 : 2);
          double top = amax >= 0x1p111 ? floor(ldexp(amax, -k)) * ldexp(1, k) : INFINITY;
          bound = ax <= top ? amax / (q + 0.5) : ldexp(1, k);
          break;
        }
        case NSC_FMT_FP16S: { /* relative 2^-11 in fp16's normal range, half a subnormal step below */
          int k = ilogb(amax) - 14;
          double top = amax >= 0x1p111 ? floor(ldexp(amax, -k) / 16) * 16 * ldexp(1, k) : INFINITY;
          bound = ax <= top ? fmax(ax * ldexp(1, -11), ldexp(1, k - 25)) : ldexp(16, k);
          break;
        }
        default: {
          int k = ilogb(amax) - 7;
          double t = ldexp(amax, -k), top = amax >= 0x1p111 ? (128 + 16 * floor((t - 128) / 16)) * ldexp(1, k) : INFINITY;
          bound = ax <= top ? fmax(ax / 16, amax * ldexp(1, -17)) : ax / 8;
          break;
        }
        }
        if (err > bound) fail_msg("%s: x = %a, got %a, err %g > bound %g (amax %g)", nsc_fmt_name(f), x[i], y[i], err, bound, amax);
      }
    }
  }
}

/* The top of fp32's range (issue 26): no 8-bit code of a top block (amax >=
 * 2^111) decodes above that block's largest |y| (nearest and stochastic,
 * with and without error feedback), so sums over ranks stay finite wherever
 * the ranks' block maxima add up to at most FLT_MAX; below 2^111 at most half
 * a step above (the nearest code); the fed-back value x + r never becomes
 * Inf in a format where x alone encodes finite. */
static void test_top_range(void **state) {
  (void)state;
  enum { N = 256 * 32 };
  static float x[N], y[N], r[N], yin[N];
  static uint8_t e[3 * N];
  for (int fi = 2; fi < NF; fi++)
    for (int opt = 0; opt < 3; opt++) { /* 0 nearest, 1 stochastic, 2 error feedback */
      nsc_fmt_t f = fmts[fi];
      fill_random(x, N, 0);
      for (int b = 0; b < N / 256; b++) /* blocks near FLT_MAX and just above 2^111 too */
        for (int i = b * 256; i < (b + 1) * 256 && b % 4 >= 2; i++)
          x[i] = copysignf((b % 4 == 3 ? FLT_MAX : 0x1.fffffep111f) * (0.3f + 0.7f * (float)(i % 256) / 255.0f), x[i]);
      for (int i = 0; i < N; i++) r[i] = 0.0f;
      nsc_enc_opt o = {opt == 2 ? r : NULL, 1, opt == 1, nsc_sr_key(3, 1, 0, 0)};
      long tops = 0;
      for (int call = 0; call < (opt == 2 ? 3 : 1); call++) {
        o.resid_zero = call == 0;
        for (int i = 0; i < N; i++) yin[i] = opt == 2 && call ? nsc_ef_in((int)f, x[i], r[i]) : x[i];
        nsc_fmt_encode_opt(f, 256, x, e, N, 1.0f, &o, NULL);
        nsc_fmt_decode(f, 256, e, y, N, 1.0f);
        for (int b = 0; b < N / 256; b++) {
          double amax = 0;
          for (int i = b * 256; i < (b + 1) * 256; i++) amax = fmax(amax, fabs(yin[i]));
          int k = ilogb(amax) - (f == NSC_FMT_INT8 ? 6 : f == NSC_FMT_FP8 ? 7 : f == NSC_FMT_INT4 ? 2 : 14);
          /* below 2^111 up to the next code: half the top step (stochastic: all of it) */
          double step = f == NSC_FMT_INT8 || f == NSC_FMT_INT4 ? 1 : 16;
          double above = amax >= 0x1p111 ? 0 : ldexp(step * (opt == 1 ? 1.0 : 0.5), k);
          tops += amax >= 0x1p111;
          for (int i = b * 256; i < (b + 1) * 256; i++)
            if (!(fabs((double)y[i]) <= amax + above))
              fail_msg("%s opt %d call %d: %a decoded to %a above its block's max %a", nsc_fmt_name(f), opt, call,
                       yin[i], y[i], amax);
        }
      }
      assert_true(tops >= 16);
    }
  /* two ranks' values whose block maxima add up to FLT_MAX (1 - 2^-20):
   * finite sums (with nearest rounding both would go up past FLT_MAX) */
  for (int fi = 2; fi < NF; fi++) {
    static float a[2][256], s[256];
    static uint8_t ea[2][768];
    /* int8: 85.6 * 2^121; fp8: 255.75 * 2^119; fp16s: 12 significant bits (nearest would round up) */
    float v0 = fi == 2 ? 0x1.5666p+127f : fi == 3 ? 0x1.ff8p+126f : 0x1.fffp+126f;
    for (int q = 0; q < 2; q++) {
      for (int i = 0; i < 256; i++) a[q][i] = q ? (float)((double)FLT_MAX * (1 - 0x1p-20) - v0) : v0;
      nsc_fmt_encode(fmts[fi], 256, a[q], ea[q], 256, 1.0f, NULL);
    }
    nsc_fmt_decode_sum(fmts[fi], 256, ea[0], (size_t)(ea[1] - ea[0]), 2, s, 256, 1.0f);
    for (int i = 0; i < 256; i++)
      if (!isfinite(s[i])) fail_msg("%s: %a + %a summed to %a", nsc_fmt_name(fmts[fi]), a[0][i], a[1][i], s[i]);
  }
  /* the fed-back value: clamped to the largest finite code's value where x
   * alone encodes finite, untouched where x itself overflows */
  assert_true(nsc_ef_in(0, 65519.0f, 15.0f) == 65504.0f);
  assert_true(nsc_ef_in(0, -65519.0f, -15.0f) == -65504.0f);
  assert_true(nsc_ef_in(0, 65519.0f, 0.5f) == 65519.5f);
  assert_true(nsc_ef_in(0, 70000.0f, 1.0f) == 70001.0f);
  assert_true(nsc_ef_in(1, 3.39e38f, 1e36f) == u2f(0x7f7f0000u));
  assert_true(nsc_ef_in(2, FLT_MAX, 2e36f) == FLT_MAX);
  assert_true(nsc_ef_in(3, -FLT_MAX, -2e36f) == -FLT_MAX);
  assert_true(isinf(nsc_ef_in(3, INFINITY, 1.0f)));
}

/* ---- error feedback and stochastic rounding ---- */

static void test_opt_fast_equals_reference(void **state) {
  (void)state;
  static const size_t lens[] = {1, 17, 256, 1000, 5000};
  enum { MAXN = 5000 };
  static float x[MAXN], ra[MAXN], rb[MAXN];
  static uint8_t ea[3 * MAXN], eb[3 * MAXN];
  for (int fi = 0; fi < NF; fi++)
    for (size_t li = 0; li < 5; li++)
      for (int mode = 0; mode < 3; mode++) {
        nsc_fmt_t f = fmts[fi];
        size_t n = lens[li], blk = li % 2 ? 16 : 256, nb = nsc_fmt_bytes(f, n, blk);
        float scale = li == 3 ? 3.0f : 1.0f;
        for (int call = 0; call < 3; call++) {
          fill_random(x, n, li % 2);
          nsc_enc_opt a = {mode != 1 ? ra : NULL, call == 0, mode != 0, nsc_sr_key(1, (uint64_t)call, 2, 3)};
          nsc_enc_opt b = a;
          b.resid = mode != 1 ? rb : NULL;
          nsc_cast_counts ca = {0, 0}, cb = {0, 0};
          nsc_fmt_encode_opt_ref(f, blk, x, ea, n, scale, &a, &ca);
          nsc_fmt_encode_opt(f, blk, x, eb, n, scale, &b, &cb);
          if (memcmp(ea, eb, nb)) fail_msg("%s n %zu mode %d call %d: encoded bytes differ", nsc_fmt_name(f), n, mode, call);
          if (ca.overflow != cb.overflow || ca.underflow != cb.underflow)
            fail_msg("%s n %zu mode %d call %d: counts differ", nsc_fmt_name(f), n, mode, call);
          if (mode != 1) same_bits(ra, rb, n, "residuals");
        }
      }
  /* neither option: the plain encode, bit for bit */
  fill_random(x, 1000, 1);
  nsc_enc_opt none = {NULL, 0, 0, 0};
  for (int fi = 0; fi < NF; fi++) {
    nsc_fmt_encode_opt(fmts[fi], 256, x, ea, 1000, 1.0f, &none, NULL);
    nsc_fmt_encode(fmts[fi], 256, x, eb, 1000, 1.0f, NULL);
    assert_memory_equal(ea, eb, nsc_fmt_bytes(fmts[fi], 1000, 256));
  }
}

/* Round to nearest: what was encoded (x + r_prev) = decoded value + new
 * residual, exactly, over several calls; Inf/NaN leave residual 0. */
static void test_ef_residual_exact(void **state) {
  (void)state;
  enum { N = 4096 };
  static float x[N], r[N], y[N], v[N];
  static uint8_t e[3 * N];
  for (int fi = 0; fi < NF; fi++) {
    nsc_fmt_t f = fmts[fi];
    for (int call = 0; call < 4; call++) {
      fill_random(x, N, 1);
      for (size_t i = 0; i < N; i++) y[i] = call == 0 ? x[i] : nsc_ef_in((int)f, x[i], r[i]);
      nsc_enc_opt o = {r, call == 0, 0, 0};
      nsc_fmt_encode_opt(f, 256, x, e, N, 1.0f, &o, NULL);
      nsc_fmt_decode_ref(f, 256, e, v, N, 1.0f);
      for (size_t i = 0; i < N; i++) {
        if (!isfinite(y[i]) || !isfinite(v[i])) {
          if (r[i] != 0.0f) fail_msg("%s: y %a decoded %a: residual %a, want 0", nsc_fmt_name(f), y[i], v[i], r[i]);
          continue;
        }
        if ((double)v[i] + (double)r[i] != (double)y[i])
          fail_msg("%s call %d: y %a != value %a + residual %a", nsc_fmt_name(f), call, y[i], v[i], r[i]);
      }
    }
  }
}

/* n copies of y in blocks of 256 (amax y), stochastic; decoded values. */
static void sr_copies(nsc_fmt_t f, float y, size_t n, float *out, uint64_t seed) {
  float *x = malloc(n * 4);
  uint8_t *e = malloc(3 * n);
  for (size_t i = 0; i < n; i++) x[i] = y;
  nsc_enc_opt o = {NULL, 0, 1, nsc_sr_key(seed, 7, 0, 1)};
  nsc_fmt_encode_opt(f, 256, x, e, n, 1.0f, &o, NULL);
  nsc_fmt_decode(f, 256, e, out, n, 1.0f);
  free(x);
  free(e);
}

/* lo < y < hi, the two codes around y; halfway for each format (int8 and
 * fp8 with a block amax that makes the scale 1). */
static const struct { nsc_fmt_t f; float lo, hi; } grid[] = {
    {NSC_FMT_FP16, 1.0f, 1.0f + 0x1p-10f}, {NSC_FMT_BF16, 1.0f, 1.0f + 0x1p-7f},
    {NSC_FMT_INT8, 64.0f, 65.0f},          {NSC_FMT_FP8, 128.0f, 144.0f},
    {NSC_FMT_FP16S, 16384.0f, 16400.0f}, /* k = 0: fp16's step 16 at 2^14 */
};
#define NGRID (sizeof grid / sizeof grid[0])

static void test_sr_halfway_binomial(void **state) {
  (void)state;
  enum { M = 65536 };
  static float out[M];
  for (size_t g = 0; g < NGRID; g++)
    for (uint64_t seed = 0; seed < 3; seed++) {
      float lo = grid[g].lo, hi = grid[g].hi, y = lo + (hi - lo) / 2;
      sr_copies(grid[g].f, y, M, out, seed);
      long up = 0;
      for (size_t i = 0; i < M; i++) {
        if (out[i] != lo && out[i] != hi) fail_msg("%s: %a rounded to %a, not a neighbour", nsc_fmt_name(grid[g].f), y, out[i]);
        up += out[i] == hi;
      }
      /* binomial(M, 1/2): sd = sqrt(M)/2 = 128; 5 sd */
      if (labs(up - M / 2) > 640) fail_msg("%s seed %llu: %ld of %d halfway values up (want %d +- 640)",
                                           nsc_fmt_name(grid[g].f), (unsigned long long)seed, up, M, M / 2);
    }
}

static void test_sr_mean_unbiased(void **state) {
  (void)state;
  enum { M = 65536 };
  static float out[M];
  for (size_t g = 0; g < NGRID; g++) {
    float lo = grid[g].lo, hi = grid[g].hi, step = hi - lo, y = lo + step * 0.3125f;
    sr_copies(grid[g].f, y, M, out, 11);
    double mean = 0;
    for (size_t i = 0; i < M; i++) mean += out[i];
    mean /= M;
    /* sd of the mean: step * sqrt(p (1 - p) / M); plus the 2^-24 bias of the 24 random bits */
    double bound = 5 * step * sqrt(0.3125 * 0.6875 / M) + step * ldexp(1, -24);
    if (fabs(mean - y) > bound) fail_msg("%s: mean of %d roundings of %a is %.9g, off by %g > %g",
                                         nsc_fmt_name(grid[g].f), M, y, mean, fabs(mean - y), bound);
    /* nearest rounding of the same value: biased by 5/16 of a step every time */
    float x[256], v[256];
    uint8_t e[768];
    for (int i = 0; i < 256; i++) x[i] = y;
    nsc_fmt_encode(grid[g].f, 256, x, e, 256, 1.0f, NULL);
    nsc_fmt_decode(grid[g].f, 256, e, v, 256, 1.0f);
    assert_true(v[0] == lo);
  }
}

static void test_sr_streams_and_ranges(void **state) {
  (void)state;
  /* one key repeats, another differs */
  int same = 0, diff = 0;
  for (uint64_t i = 0; i < 1000; i++) {
    same += nsc_sr_bits(nsc_sr_key(1, 2, 3, 4), i) == nsc_sr_bits(nsc_sr_key(1, 2, 3, 4), i);
    diff += nsc_sr_bits(nsc_sr_key(1, 2, 3, 4), i) != nsc_sr_bits(nsc_sr_key(1, 2, 4, 4), i);
  }
  assert_int_equal(same, 1000);
  assert_true(diff > 990);
  for (uint32_t u = 0; u < (1u << 24); u += 4099) {
    /* fp16 between 65504 and its overflow threshold: never Inf */
    assert_int_equal(nsc_w16_code_x(0, 65519.0f, 1, u), 0x7bff);
    /* bf16 beyond its largest finite value rounds to nearest, never Inf when nearest is finite */
    assert_true((nsc_w16_code_x(1, 3.389e38f, 1, u) & 0x7fff) <= 0x7f7f);
    /* int8: t = 126.5 in a block with Inf/NaN (limit 126), 127.4 in one without (limit 127) */
    assert_int_equal(nsc_int8_code_x(126.5f, 0, nsc_int8_lim(f2u(127.0f), 0, 1), 1, u), 126);
    assert_int_equal(nsc_int8_code_x(127.4f, 0, nsc_int8_lim(f2u(127.4f), 0, 0), 1, u), 127);
    assert_int_equal(nsc_int8_code_x(-127.4f, 0, nsc_int8_lim(f2u(127.4f), 0, 0), 1, u), -127);
    /* a top block (amax >= 2^111): its amax 100.7 * 2^k never goes up to 101 */
    assert_int_equal(nsc_int8_code_x(0x1.92cccap+118f, 112, nsc_int8_lim(f2u(0x1.92cccap+118f), 112, 0), 1, u), 100);
    /* fp8: 250 * 2^k rounds to 256 or 240, never beyond the block's limit;
     * as a top block's amax, always down to 240 */
    uint8_t c = nsc_fp8_code_x(250.0f, 0, nsc_fp8_lim(f2u(250.0f), 0), 1, u);
    assert_true(c == 0x78 || c == 0x77);
    assert_int_equal(nsc_fp8_code_x(0x1.f4p+127f, 120, nsc_fp8_lim(f2u(0x1.f4p+127f), 120), 1, u), 0x77);
    /* Inf and NaN untouched */
    assert_int_equal(nsc_w16_code_x(0, INFINITY, 1, u), 0x7c00);
    assert_int_equal(nsc_int8_code_x(NAN, 0, 126, 1, u), -128);
    assert_int_equal(nsc_fp8_code_x(-INFINITY, 0, 0x78, 1, u), 0xfe);
    /* exact values stay */
    assert_int_equal(nsc_w16_code_x(0, 1.5f, 1, u), 0x3e00);
    assert_int_equal(nsc_int8_code_x(-3.0f, 0, 127, 1, u), -3);
  }
  /* a tiny value near 0 goes to the smallest code with its sign, or to 0 */
  int pos = 0, neg = 0;
  for (uint32_t u = 0; u < (1u << 24); u += 65537) {
    uint16_t h = nsc_w16_code_x(0, 0x1p-26f, 1, u), g = nsc_w16_code_x(0, -0x1p-26f, 1, u);
    assert_true(h == 0x0000 || h == 0x0001);
    assert_true(g == 0x8000 || g == 0x8001);
    pos += h == 1;
    neg += g == 0x8001;
  }
  /* P = 2^-26 / 2^-24 = 1/4 of 256 trials: 64 +- 5 sd (sd = sqrt(256 * 3/16) = 6.9) */
  assert_true(pos > 64 - 35 && pos < 64 + 35);
  assert_true(neg > 64 - 35 && neg < 64 + 35);
}

/* Values flushed to zero by the 8-bit formats count as underflows (issue 24:
 * int8 never counted them): a block of 256 whose amax is 1 holds 3 values
 * below half of int8's step (2^-7) and of e4m3's smallest subnormal at that
 * scale, one exact zero, one -0 (neither counted) and a NaN block apart. */
static void test_flush_counts(void **state) {
  (void)state;
  static float x[512];
  for (int i = 0; i < 512; i++) x[i] = 0.5f;
  x[0] = 1.0f;
  x[1] = 1e-6f;
  x[2] = -3e-7f;
  x[3] = 1e-30f;
  x[4] = 0.0f;
  x[5] = -0.0f;
  x[256] = NAN; /* a special block: its other values are 0.5, none flushed */
  static uint8_t e[2 * 2 + 2 * 512]; /* fp16s: 2-byte codes */
  for (int fi = 2; fi < NF; fi++) {
    nsc_fmt_t f = fmts[fi];
    nsc_cast_counts fast = {0, 0}, ref = {0, 0}, opt = {0, 0};
    nsc_fmt_encode(f, 256, x, e, 512, 1.0f, &fast);
    nsc_fmt_encode_ref(f, 256, x, e, 512, 1.0f, &ref);
    nsc_enc_opt sr = {NULL, 0, 1, nsc_sr_key(7, 1, 0, 0)};
    nsc_fmt_encode_opt(f, 256, x, e, 512, 1.0f, &sr, &opt);
    /* fp16s keeps 1e-6 and -3e-7 (2^-14 scale: fp16 normals); only 1e-30 flushes */
    assert_int_equal(fast.underflow, f == NSC_FMT_FP16S ? 1 : 3);
    assert_int_equal(ref.underflow, f == NSC_FMT_FP16S ? 1 : 3);
    assert_int_equal(fast.overflow + ref.overflow, 0);
    /* stochastic rounding may round a tiny value up to the smallest code: at most 3 */
    assert_true(opt.underflow <= 3);
  }
}

static void test_sizes(void **state) {
  (void)state;
  assert_int_equal(nsc_fmt_bytes(NSC_FMT_FP16, 1000, 256), 2000);
  assert_int_equal(nsc_fmt_bytes(NSC_FMT_INT8, 1000, 256), 1000 + 2 * 4);
  assert_int_equal(nsc_fmt_bytes(NSC_FMT_FP8, 256, 256), 258);
  assert_int_equal(nsc_fmt_bytes(NSC_FMT_FP8, 0, 256), 0);
  assert_int_equal(nsc_fmt_bytes(NSC_FMT_FP16S, 1000, 256), 2000 + 2 * 4);
  assert_int_equal(nsc_fmt_bytes(NSC_FMT_INT4, 1000, 256), 500 + 2 * 4); /* two codes per byte */
  assert_int_equal(nsc_fmt_bytes(NSC_FMT_INT4, 1001, 256), 501 + 2 * 4); /* an odd run: its last byte half used */
}

/* fp16s on what DDP's averaging makes of small gradients (issue 21 part 5):
 * values log-uniform over 1e-9..1e-2 (23 binades, inside the 28 of fp16's
 * normals under each block's scale) all keep fp16's 11 bits (relative error
 * <= 2^-11), where plain fp16 flushes those below 2^-25 and keeps fewer bits
 * below 6.1e-5, and bf16 has 8 bits. */
static void test_f16s_small_values(void **state) {
  (void)state;
  enum { N = 256 * 64 };
  static float x[N], y[N], z[N];
  static uint8_t e[3 * N];
  for (int i = 0; i < N; i++) {
    double t = (double)(rnd() % 1000000) / 1e6;
    x[i] = (float)(pow(10.0, -9.0 + 7.0 * t) * ((i & 1) ? -1 : 1));
  }
  roundtrip(NSC_FMT_FP16S, 256, x, N, y, e);
  roundtrip(NSC_FMT_FP16, 256, x, N, z, e);
  double worst = 0, worst16 = 0;
  long flushed16 = 0;
  for (int i = 0; i < N; i++) {
    worst = fmax(worst, fabs((double)y[i] - x[i]) / fabs(x[i]));
    worst16 = fmax(worst16, fabs((double)z[i] - x[i]) / fabs(x[i]));
    flushed16 += z[i] == 0.0f;
  }
  if (worst > ldexp(1, -11)) fail_msg("fp16s: worst relative error %g > 2^-11", worst);
  assert_true(worst16 > 0.1 && flushed16 > 0); /* plain fp16 loses them: the test can tell */
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_sizes),
      cmocka_unit_test(test_flush_counts),
      cmocka_unit_test(test_e4m3_rounding),
      cmocka_unit_test(test_exact_roundtrip),
      cmocka_unit_test(test_block_edges),
      cmocka_unit_test(test_bounds),
      cmocka_unit_test(test_fast_equals_reference),
      cmocka_unit_test(test_opt_fast_equals_reference),
      cmocka_unit_test(test_ef_residual_exact),
      cmocka_unit_test(test_sr_halfway_binomial),
      cmocka_unit_test(test_sr_mean_unbiased),
      cmocka_unit_test(test_sr_streams_and_ranges),
      cmocka_unit_test(test_top_range),
      cmocka_unit_test(test_f16s_small_values),
      cmocka_unit_test(test_input16_chain),
  };
  return cmocka_run_group_tests_name("wire", tests, NULL, NULL);
}
