/* test_cast.c — unit tests of the host numeric core (compress/cast.h).
 *
 * The scalar reference is checked exhaustively (all 2^32 fp32 patterns) against
 * an independent reference (cast_ref2.h) and the F16C instruction, every
 * vector implementation against the scalar one on the same inputs, counts and
 * all; all 2^16 wire values are widened and checked exactly. Then the edges:
 * special values from a table computed with exact rational arithmetic,
 * misaligned pointers with every tail length 0..70, scale, crafted counts,
 * threads, denormals-are-zero, nsc_scale_buffer.
 *
 * Runs as cmocka with TAP output (CMOCKA_MESSAGE_OUTPUT=TAP). Under a
 * sanitizer build the exhaustive sweeps visit every 97th chunk of 65536
 * (NSC_TEST_STRIDE=k overrides; 1 = everything).
 *
 * Must not: assert inside worker threads (they count and the main thread
 * asserts), or rely on timings. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <immintrin.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cast.h"
#include "cast_impl.h"
#include "cast_ref2.h"

static uint32_t f2u(float x) {
  uint32_t u;
  memcpy(&u, &x, 4);
  return u;
}
static float u2f(uint32_t u) {
  float x;
  memcpy(&x, &u, 4);
  return x;
}
static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint32_t rnd(void) { /* xorshift64*, deterministic */
  rng_state ^= rng_state >> 12;
  rng_state ^= rng_state << 25;
  rng_state ^= rng_state >> 27;
  return (uint32_t)((rng_state * 0x2545f4914f6cdd1dull) >> 32);
}
static void *xalloc(size_t bytes) {
  void *p = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
  assert_non_null(p);
  return p;
}
static uint16_t ref_narrow(nsc_fmt_t w, float x) {
  return w == NSC_FMT_FP16 ? nsc_f32_to_f16_ref(x) : nsc_f32_to_bf16_ref(x);
}
static uint32_t ref_widen(nsc_fmt_t w, uint16_t h) {
  return f2u(w == NSC_FMT_FP16 ? nsc_f16_to_f32_ref(h) : nsc_bf16_to_f32_ref(h));
}
static const char *wname(nsc_fmt_t w) { return w == NSC_FMT_FP16 ? "fp16" : "bf16"; }

/* ---- special values: expectations from exact rational rounding ---------- */

static const struct {
  uint32_t in;
  uint16_t f16, bf16;
} specials[] = {
    {0x00000000, 0x0000, 0x0000}, {0x80000000, 0x8000, 0x8000}, /* +-0 */
    {0x3f800000, 0x3c00, 0x3f80}, {0xbf800000, 0xbc00, 0xbf80}, /* +-1 */
    {0x477fe000, 0x7bff, 0x4780}, /* 65504, fp16 max */
    {0x477fefff, 0x7bff, 0x4780}, /* just below 65520 */
    {0x477ff000, 0x7c00, 0x4780}, /* 65520: tie, to even = overflow */
    {0xc77ff000, 0xfc00, 0xc780}, {0x47800000, 0x7c00, 0x4780},
    {0x7f7fffff, 0x7c00, 0x7f80}, /* FLT_MAX */
    {0x7f7f7fff, 0x7c00, 0x7f7f}, /* just below the bf16 tie */
    {0x7f7f8000, 0x7c00, 0x7f80}, /* bf16 tie: overflow */
    {0x7f7effff, 0x7c00, 0x7f7f}, {0x7f800000, 0x7c00, 0x7f80}, /* +Inf */
    {0xff800000, 0xfc00, 0xff80},                               /* -Inf */
    {0x7fc00000, 0x7e00, 0x7fc0}, {0xffc00000, 0xfe00, 0xffc0}, /* qNaN */
    {0x7f800001, 0x7e00, 0x7fc0}, /* sNaN, payload only in low bits */
    {0x7fa00000, 0x7f00, 0x7fe0}, {0xff812345, 0xfe09, 0xffc1},
    {0x33800000, 0x0001, 0x3380}, /* 2^-24, fp16 min subnormal */
    {0x33000000, 0x0000, 0x3300}, /* 2^-25: tie to 0 */
    {0x33000001, 0x0001, 0x3300}, {0x33c00000, 0x0002, 0x33c0}, /* 1.5 ulp -> 2 */
    {0x34200000, 0x0002, 0x3420},                               /* 2.5 ulp -> 2 */
    {0x387fc000, 0x03ff, 0x3880}, /* largest fp16 subnormal */
    {0x38800000, 0x0400, 0x3880}, /* 2^-14, min normal */
    {0x3f801000, 0x3c00, 0x3f80}, {0x3f803000, 0x3c02, 0x3f80}, /* fp16 ties */
    {0x3f808000, 0x3c04, 0x3f80}, {0x3f818000, 0x3c0c, 0x3f82}, /* bf16 ties */
    {0x00000001, 0x0000, 0x0000}, {0x80000001, 0x8000, 0x8000}, /* fp32 subnormals */
    {0x00008000, 0x0000, 0x0000}, {0x00008001, 0x0000, 0x0001},
    {0x00018000, 0x0000, 0x0002}, {0x007fffff, 0x0000, 0x0080},
    {0x00800000, 0x0000, 0x0080}, {0x3c8e38e4, 0x2472, 0x3c8e},
    {0xc0490fdb, 0xc248, 0xc049}, {0x1f2e4c6a, 0x0000, 0x1f2e},
    {0x4e6e6b28, 0x7c00, 0x4e6e},
};
#define NSPECIALS (sizeof specials / sizeof specials[0])

static void test_special_values(void **state) {
  (void)state;
  for (size_t i = 0; i < NSPECIALS; i++) {
    float x = u2f(specials[i].in);
    assert_int_equal(nsc_f32_to_f16_ref(x), specials[i].f16);
    assert_int_equal(nsc_f32_to_bf16_ref(x), specials[i].bf16);
    assert_int_equal(ref2_f32_to_f16(x), specials[i].f16);
    assert_int_equal(ref2_f32_to_bf16(x), specials[i].bf16);
  }
  /* Every implementation, the table repeated so it crosses vector bodies. */
  enum { REP = 5 };
  float src[NSPECIALS * REP];
  uint16_t out[NSPECIALS * REP];
  for (size_t i = 0; i < NSPECIALS * REP; i++) src[i] = u2f(specials[i % NSPECIALS].in);
  for (int k = 0; k < nsc_cast_nimpls; k++) {
    const nsc_cast_impl *im = nsc_cast_impls[k];
    if (!im->available()) continue;
    for (int nt = 0; nt < 2; nt++) {
      im->to_wire[NSC_FMT_FP16](src, out, NSPECIALS * REP, 1.0f, NULL, nt);
      for (size_t i = 0; i < NSPECIALS * REP; i++)
        assert_int_equal(out[i], specials[i % NSPECIALS].f16);
      im->to_wire[NSC_FMT_BF16](src, out, NSPECIALS * REP, 1.0f, NULL, nt);
      for (size_t i = 0; i < NSPECIALS * REP; i++)
        assert_int_equal(out[i], specials[i % NSPECIALS].bf16);
    }
  }
  /* Widening edges. */
  assert_int_equal(f2u(nsc_f16_to_f32_ref(0x0001)), 0x33800000);
  assert_int_equal(f2u(nsc_f16_to_f32_ref(0x83ff)), 0xb87fc000);
  assert_int_equal(f2u(nsc_f16_to_f32_ref(0x7bff)), 0x477fe000);
  assert_int_equal(f2u(nsc_f16_to_f32_ref(0xfc00)), 0xff800000);
  assert_int_equal(f2u(nsc_f16_to_f32_ref(0x7c01)), 0x7fc02000); /* quieted */
  assert_int_equal(f2u(nsc_bf16_to_f32_ref(0x7f81)), 0x7f810000); /* exact */
  assert_int_equal(f2u(nsc_bf16_to_f32_ref(0x0001)), 0x00010000);
}

/* ---- all 2^16 wire values back to fp32 ---------------------------------- */

static void test_widen_all(void **state) {
  (void)state;
  uint16_t *h = xalloc(65536 * 2);
  float *out = xalloc(65536 * 4 + 64);
  for (uint32_t i = 0; i < 65536; i++) h[i] = (uint16_t)i;
  for (int wi = 0; wi < 2; wi++) {
    nsc_fmt_t w = (nsc_fmt_t)wi;
    for (uint32_t i = 0; i < 65536; i++) {
      uint32_t want = wi == 0 ? ref2_widen((uint16_t)i, 10, 5, 1) : ref2_widen((uint16_t)i, 7, 8, 0);
      if (ref_widen(w, (uint16_t)i) != want)
        fail_msg("%s widen 0x%04x: 0x%08x, want 0x%08x", wname(w), i, ref_widen(w, (uint16_t)i), want);
    }
    for (int k = 0; k < nsc_cast_nimpls; k++) {
      const nsc_cast_impl *im = nsc_cast_impls[k];
      if (!im->available()) continue;
      for (int nt = 0; nt < 2; nt++)
        for (int sc = 0; sc < 2; sc++) {
          float scale = sc ? 0.375f : 1.0f;
          im->from_wire[w](h, out, 65536, scale, nt);
          for (uint32_t i = 0; i < 65536; i++) {
            float x = u2f(ref_widen(w, (uint16_t)i));
            uint32_t want = f2u(sc ? x * scale : x);
            if (f2u(out[i]) != want)
              fail_msg("%s %s from_wire(scale %g, nt %d) 0x%04x: 0x%08x, want 0x%08x",
                       im->name, wname(w), scale, nt, i, f2u(out[i]), want);
          }
        }
    }
    /* Round trip: every non-NaN wire value comes back unchanged. */
    for (uint32_t i = 0; i < 65536; i++) {
      float x = u2f(ref_widen(w, (uint16_t)i));
      if (isnan(x)) continue;
      assert_int_equal(ref_narrow(w, x), i);
    }
  }
  free(h);
  free(out);
}

/* ---- exhaustive fp32 -> wire ---------------------------------------------- */

#define CHUNK (1u << 16)
#define MAXIMPL 8

typedef struct {
  nsc_fmt_t w;
  uint64_t first, stride; /* chunks first, first+stride, ... < 2^16 */
  uint64_t chunks, bad_ref2, bad_cnt, bad_hw, bad_impl[MAXIMPL];
  uint32_t first_bad; /* an input where the scalar reference and ref2 differ */
} sweep;

static int have_f16c_hw(void) {
  __builtin_cpu_init();
  return __builtin_cpu_supports("f16c");
}
__attribute__((target("f16c"))) static void hw_to_f16(const float *s, uint16_t *d, size_t n) {
  for (size_t i = 0; i < n; i += 4)
    _mm_storel_epi64((__m128i *)(d + i),
                     _mm_cvtps_ph(_mm_loadu_ps(s + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}

static void *sweep_run(void *arg) {
  sweep *s = arg;
  uint32_t *src = aligned_alloc(64, CHUNK * 4);
  uint16_t *ref = aligned_alloc(64, CHUNK * 2), *out = aligned_alloc(64, CHUNK * 2);
  if (!src || !ref || !out) {
    s->bad_cnt = ~0ull;
    return NULL;
  }
  int hw = s->w == NSC_FMT_FP16 && have_f16c_hw();
  uint16_t inf = s->w == NSC_FMT_FP16 ? 0x7c00 : 0x7f80;
  for (uint64_t k = s->first; k < (1u << 16); k += s->stride) {
    /* Chunk k holds the patterns whose high half is ch = perm(k), a bijection
     * that mixes high bits of k into low ones, so a sampled sweep (stride > 1)
     * still sees both values of every bit of the high half. */
    uint64_t ch = (k * 40503u) & 0xffffu;
    ch ^= ch >> 7;
    ch = (ch * 27227u + 15471u) & 0xffffu;
    for (uint32_t i = 0; i < CHUNK; i++) src[i] = (uint32_t)(ch * CHUNK + i);
    const float *x = (const float *)src;
    nsc_cast_counts cr = {0, 0};
    nsc_cast_impl_scalar.to_wire[s->w](x, ref, CHUNK, 1.0f, &cr, 0);
    /* Independent reference, and the counts by their definition on values. */
    uint64_t ov = 0, uf = 0;
    ref2_narrow_chunk((uint32_t)ch, s->w == NSC_FMT_BF16, out);
    uint64_t bad = 0;
    for (uint32_t i = 0; i < CHUNK; i++) {
      uint32_t a = src[i] & 0x7fffffffu, mag = out[i] & 0x7fffu;
      bad += out[i] != ref[i];
      ov += (a < 0x7f800000u) & (mag == inf); /* finite, became Inf */
      uf += (a != 0) & (mag == 0);            /* non-zero, became 0 */
    }
    for (uint32_t i = 0; bad && i < CHUNK; i++)
      if (out[i] != ref[i] && s->bad_ref2++ == 0) s->first_bad = src[i];
    s->bad_cnt += ov != cr.overflow || uf != cr.underflow;
    if (hw) {
      hw_to_f16(x, out, CHUNK);
      s->bad_hw += memcmp(out, ref, CHUNK * 2) != 0;
    }
    for (int j = 1; j < nsc_cast_nimpls && j < MAXIMPL; j++) {
      const nsc_cast_impl *im = nsc_cast_impls[j];
      if (!im->available()) continue;
      nsc_cast_counts c = {0, 0};
      im->to_wire[s->w](x, out, CHUNK, 1.0f, &c, (int)(k & 1));
      s->bad_impl[j] += memcmp(out, ref, CHUNK * 2) != 0 || c.overflow != cr.overflow ||
                        c.underflow != cr.underflow;
    }
    s->chunks++;
  }
  free(src);
  free(ref);
  free(out);
  return NULL;
}

static uint64_t sweep_stride(void) {
  const char *e = getenv("NSC_TEST_STRIDE");
  if (e && atoi(e) > 0) return (uint64_t)atoi(e);
#if defined(__SANITIZE_ADDRESS__)
  return 97;
#else
  return 1;
#endif
}

static void exhaustive(nsc_fmt_t w) {
  enum { T = 2 };
  sweep s[T];
  pthread_t tid[T];
  uint64_t stride = sweep_stride();
  for (int t = 0; t < T; t++) {
    memset(&s[t], 0, sizeof s[t]);
    s[t].w = w;
    s[t].first = (uint64_t)t * stride;
    s[t].stride = (uint64_t)T * stride;
    assert_int_equal(pthread_create(&tid[t], NULL, sweep_run, &s[t]), 0);
  }
  uint64_t chunks = 0;
  for (int t = 0; t < T; t++) {
    pthread_join(tid[t], NULL);
    chunks += s[t].chunks;
    if (s[t].bad_ref2)
      fail_msg("%s: %llu inputs differ from the second reference, e.g. 0x%08x -> 0x%04x vs 0x%04x",
               wname(w), (unsigned long long)s[t].bad_ref2, s[t].first_bad,
               ref_narrow(w, u2f(s[t].first_bad)),
               w == NSC_FMT_FP16 ? ref2_f32_to_f16(u2f(s[t].first_bad))
                                  : ref2_f32_to_bf16(u2f(s[t].first_bad)));
    if (s[t].bad_cnt) fail_msg("%s: counts differ from their definition", wname(w));
    if (s[t].bad_hw) fail_msg("%s: %llu chunks differ from vcvtps2ph", wname(w),
                              (unsigned long long)s[t].bad_hw);
    for (int k = 1; k < nsc_cast_nimpls && k < MAXIMPL; k++)
      if (s[t].bad_impl[k])
        fail_msg("%s %s: %llu chunks differ from scalar", nsc_cast_impls[k]->name, wname(w),
                 (unsigned long long)s[t].bad_impl[k]);
  }
  assert_int_equal(chunks, (65536 + stride - 1) / stride);
  print_message("# %s: %llu chunks of 65536 checked (stride %llu)\n", wname(w),
                (unsigned long long)chunks, (unsigned long long)stride);
}
static void test_exhaustive_f16(void **state) {
  (void)state;
  exhaustive(NSC_FMT_FP16);
}
static void test_exhaustive_bf16(void **state) {
  (void)state;
  exhaustive(NSC_FMT_BF16);
}

/* ---- misaligned pointers, every tail -------------------------------------- */

/* A mix of random bit patterns and values near every edge. */
static float edge_mix(void) {
  uint32_t r = rnd();
  switch (r % 4) {
  case 0: return u2f(rnd());
  case 1: return u2f(specials[rnd() % NSPECIALS].in);
  case 2: return (float)((int)(r >> 8) % 4096) * 0.125f;
  default: return u2f(specials[rnd() % NSPECIALS].in + (rnd() % 3) - 1);
  }
}

static void test_misaligned_tails(void **state) {
  (void)state;
  enum { MAXN = 70, OFF = 17, PAD = 8 };
  float src[OFF + MAXN], back[OFF + MAXN + PAD];
  uint16_t out[OFF + MAXN + PAD], want[MAXN];
  for (int i = 0; i < OFF + MAXN; i++) src[i] = edge_mix();
  for (int k = 0; k < nsc_cast_nimpls; k++) {
    const nsc_cast_impl *im = nsc_cast_impls[k];
    if (!im->available()) continue;
    for (int wi = 0; wi < 2; wi++)
      for (int so = 0; so < OFF; so++)
        for (int d0 = 0; d0 < OFF; d0 += 3)
          for (int n = 0; n <= MAXN; n++) {
            nsc_fmt_t w = (nsc_fmt_t)wi;
            int nt = (so + d0 + n) & 1;
            nsc_cast_counts c = {0, 0}, cw = {0, 0};
            nsc_cast_impl_scalar.to_wire[w](src + so, want, (size_t)n, 1.0f, &cw, 0);
            memset(out, 0xa5, sizeof out);
            im->to_wire[w](src + so, out + d0, (size_t)n, 1.0f, &c, nt);
            for (int i = 0; i < n; i++)
              if (out[d0 + i] != ref_narrow(w, src[so + i]))
                fail_msg("%s %s to_wire src+%d dst+%d n=%d: [%d] 0x%04x want 0x%04x", im->name,
                         wname(w), so, d0, n, i, out[d0 + i], ref_narrow(w, src[so + i]));
            for (int i = 0; i < d0; i++) assert_int_equal(out[i], 0xa5a5);
            for (int i = d0 + n; i < OFF + MAXN + PAD; i++) assert_int_equal(out[i], 0xa5a5);
            assert_int_equal(c.overflow, cw.overflow);
            assert_int_equal(c.underflow, cw.underflow);
            /* And back, from a misaligned wire buffer into a misaligned dst. */
            memset(back, 0x5a, sizeof back);
            im->from_wire[w](out + d0, back + so, (size_t)n, 1.0f, nt);
            for (int i = 0; i < n; i++)
              assert_int_equal(f2u(back[so + i]), ref_widen(w, out[d0 + i]));
            for (int i = 0; i < so; i++) assert_int_equal(f2u(back[i]), 0x5a5a5a5a);
            for (int i = so + n; i < OFF + MAXN + PAD; i++)
              assert_int_equal(f2u(back[i]), 0x5a5a5a5a);
          }
  }
}

/* ---- scale -------------------------------------------------------------- */

static void test_scale(void **state) {
  (void)state;
  enum { N = 65536 };
  float *x = xalloc(N * 4), *y = xalloc(N * 4);
  uint16_t *h = xalloc(N * 2);
  for (int k = 0; k < nsc_cast_nimpls; k++) {
    const nsc_cast_impl *im = nsc_cast_impls[k];
    if (!im->available()) continue;
    for (int wi = 0; wi < 2; wi++) {
      nsc_fmt_t w = (nsc_fmt_t)wi;
      /* Prescale by 1/F, post-scale by F, F a power of two: exact for every
       * wire value whose quotient stays normal in the wire type. */
      float F = w == NSC_FMT_FP16 ? 8.0f : 0x1p20f;
      int emin = w == NSC_FMT_FP16 ? 4 : 21, emax = w == NSC_FMT_FP16 ? 30 : 254;
      int mbits = w == NSC_FMT_FP16 ? 10 : 7;
      size_t n = 0;
      for (uint32_t v = 0; v < 65536; v++) {
        int e = (int)((v >> mbits) & (w == NSC_FMT_FP16 ? 0x1f : 0xff));
        if (e >= emin && e <= emax) x[n++] = u2f(ref_widen(w, (uint16_t)v));
      }
      nsc_cast_counts c = {0, 0};
      im->to_wire[w](x, h, n, 1.0f / F, &c, 0);
      im->from_wire[w](h, y, n, F, 0);
      for (size_t i = 0; i < n; i++)
        if (f2u(y[i]) != f2u(x[i]))
          fail_msg("%s %s: scale round trip of %a gave %a", im->name, wname(w), (double)x[i],
                   (double)y[i]);
      assert_int_equal(c.overflow + c.underflow, 0);
      /* Any scale: rounds (x * scale) computed in fp32. */
      const float scales[] = {0.1f, 3.0f, 1e-30f, 1e30f};
      for (int si = 0; si < 4; si++) {
        for (int i = 0; i < N; i++) x[i] = edge_mix();
        nsc_cast_counts c1 = {0, 0}, c2 = {0, 0};
        im->to_wire[w](x, h, N, scales[si], &c1, si & 1);
        for (int i = 0; i < N; i++) {
          float p = x[i] * scales[si];
          if (h[i] != ref_narrow(w, p))
            fail_msg("%s %s scale %g: %a -> 0x%04x, want 0x%04x", im->name, wname(w),
                     (double)scales[si], (double)x[i], h[i], ref_narrow(w, p));
          /* Counted on the scaled value. */
          uint16_t mag = h[i] & 0x7fff, inf = w == NSC_FMT_FP16 ? 0x7c00 : 0x7f80;
          c2.overflow += isfinite(p) && mag == inf;
          c2.underflow += p != 0.0f && !isnan(p) && mag == 0;
        }
        assert_int_equal(c1.overflow, c2.overflow);
        assert_int_equal(c1.underflow, c2.underflow);
      }
    }
  }
  free(x);
  free(y);
  free(h);
}

/* ---- crafted counts ------------------------------------------------------ */

/* Planted lossy values among 1.0s, at places in heads, bodies and tails. */
static void plant(float *x, size_t n, nsc_fmt_t w, uint64_t *ov, uint64_t *uf) {
  static const uint32_t f16_vals[] = {
      0x477ff000, 0xc788b800, 0x7f7fffff,             /* overflow: 65520, -70000, FLT_MAX */
      0x7f800000, 0x7fc00000, 0x477fefff, 0x33800000, /* none: Inf, NaN, 65519.99, 2^-24 */
      0x33000000, 0xb2800000, 0x00000001,             /* underflow: 2^-25, -2^-26, fp32 subnormal */
      0x33000001, 0x00000000, 0x80000000};            /* none */
  static const uint32_t bf16_vals[] = {
      0x7f7f8000, 0x7f7fffff, 0xff7fffff,             /* overflow */
      0x7f800000, 0xffc00000, 0x477ff000, 0x7f7f7fff, /* none */
      0x00008000, 0x80000001,                         /* underflow */
      0x00008001, 0x00000000, 0x33000000, 0x80000000};/* none */
  const uint32_t *v = w == NSC_FMT_FP16 ? f16_vals : bf16_vals;
  size_t nv = 13, o = 3, u = w == NSC_FMT_FP16 ? 3 : 2;
  const size_t pos[] = {0, 1, 15, 16, 31, 32, 33, 63, 64, 127, 128, 511, 513};
  *ov = *uf = 0;
  for (size_t i = 0; i < n; i++) x[i] = 1.0f;
  for (size_t rep = 0; rep * 1000 + 513 < n; rep++)
    for (size_t j = 0; j < nv; j++) {
      x[rep * 1000 + pos[j]] = u2f(v[j]);
      *ov += j < o;
      *uf += j >= 7 && j < 7 + u;
    }
  x[n - 1] = u2f(v[0]);
  x[n - 2] = u2f(v[7]);
  *ov += 1;
  *uf += 1;
}

static void test_counts_crafted(void **state) {
  (void)state;
  enum { N = 5000 };
  float *x = xalloc((N + 8) * 4);
  uint16_t *h = xalloc((N + 8) * 2);
  for (int wi = 0; wi < 2; wi++) {
    nsc_fmt_t w = (nsc_fmt_t)wi;
    uint64_t ov, uf;
    for (int k = 0; k < nsc_cast_nimpls; k++) {
      const nsc_cast_impl *im = nsc_cast_impls[k];
      if (!im->available()) continue;
      for (int off = 0; off < 4; off++)
        for (int nt = 0; nt < 2; nt++) {
          plant(x + off, N, w, &ov, &uf);
          nsc_cast_counts c = {0, 0};
          im->to_wire[w](x + off, h + 3 - off, N, 1.0f, &c, nt);
          im->to_wire[w](x + off, h + 3 - off, N, 1.0f, &c, nt); /* counts add up */
          assert_int_equal(c.overflow, 2 * ov);
          assert_int_equal(c.underflow, 2 * uf);
        }
    }
    /* Exact expectations, not only agreement: 5 repetitions of the plant. */
    assert_int_equal(ov, 5 * 3 + 1);
    assert_int_equal(uf, 5 * (w == NSC_FMT_FP16 ? 3 : 2) + 1);
  }
  /* Scale effects: counted on the value after the multiply. */
  nsc_cast_counts c = {0, 0};
  float one = 1.0f, big = u2f(0x7f7fffff), tiny = 1e-30f;
  nsc_cast_to_wire(NSC_FMT_FP16, &one, h, 1, 65520.0f, &c); /* 65520: overflow */
  nsc_cast_to_wire(NSC_FMT_FP16, &big, h, 1, 2.0f, &c);     /* fp32 Inf: not counted */
  nsc_cast_to_wire(NSC_FMT_FP16, &tiny, h, 1, 1e-10f, &c);  /* 1e-40 -> 0: underflow */
  nsc_cast_to_wire(NSC_FMT_FP16, &tiny, h, 1, 1e-20f, &c);  /* fp32 0: not counted */
  assert_int_equal(c.overflow, 1);
  assert_int_equal(c.underflow, 1);
  free(x);
  free(h);
}

/* ---- threads -------------------------------------------------------------- */

static void test_threads(void **state) {
  (void)state;
  /* Above NSC_CAST_MT_BYTES and NSC_CAST_NT_BYTES, odd length, odd offsets;
   * n / 16 is a multiple of 64 plus 7/16, so 16 parts of floor(n / 16)
   * elements would leave the last 7 unconverted. */
  size_t n = (NSC_CAST_NT_BYTES / 4) + 7;
  float *x = xalloc((n + 1) * 4), *y1 = xalloc((n + 1) * 4), *y2 = xalloc((n + 1) * 4);
  uint16_t *h1 = xalloc((n + 1) * 2), *h2 = xalloc((n + 1) * 2);
  uint64_t ov, uf;
  for (int wi = 0; wi < 2; wi++) {
    nsc_fmt_t w = (nsc_fmt_t)wi;
    plant(x + 1, n, w, &ov, &uf);
    for (size_t i = 0; i < n; i += 7) x[1 + i] = edge_mix();
    nsc_cast_set_threads(1);
    nsc_cast_counts c1 = {0, 0};
    nsc_cast_to_wire(w, x + 1, h1 + 1, n, 1.0f, &c1);
    nsc_cast_from_wire(w, h1 + 1, y1, n, 0.5f);
    static const int threads[] = {2, 3, 16};
    for (int k = 0; k < 3; k++) {
      int t = threads[k];
      memset(h2, 0, (n + 1) * 2);
      memset(y2, 0, (n + 1) * 4);
      nsc_cast_set_threads(t);
      nsc_cast_counts c2 = {0, 0};
      nsc_cast_to_wire(w, x + 1, h2 + 1, n, 1.0f, &c2);
      nsc_cast_from_wire(w, h2 + 1, y2, n, 0.5f);
      assert_memory_equal(h1 + 1, h2 + 1, n * 2);
      assert_memory_equal(y1, y2, n * 4);
      assert_int_equal(c1.overflow, c2.overflow);
      assert_int_equal(c1.underflow, c2.underflow);
    }
    for (size_t i = 0; i < n; i += 4099) assert_int_equal(h1[1 + i], ref_narrow(w, x[1 + i]));
  }
  nsc_cast_set_threads(1);
  free(x);
  free(y1);
  free(y2);
  free(h1);
  free(h2);
}

/* ---- dispatch ------------------------------------------------------------- */

static void test_force_impl(void **state) {
  (void)state;
  const char *best = nsc_cast_impl_name();
  assert_int_equal(nsc_cast_force_impl("no-such-impl"), -1);
  assert_string_equal(nsc_cast_impl_name(), best);
  for (int k = 0; k < nsc_cast_nimpls; k++) {
    int r = nsc_cast_force_impl(nsc_cast_impls[k]->name);
    assert_int_equal(r, nsc_cast_impls[k]->available() ? 0 : -1);
    if (!r) assert_string_equal(nsc_cast_impl_name(), nsc_cast_impls[k]->name);
  }
  assert_int_equal(nsc_cast_force_impl(NULL), 0);
  assert_string_equal(nsc_cast_impl_name(), best);
  print_message("# implementation chosen on this CPU: %s\n", best);
}

/* ---- denormals-are-zero / flush-to-zero --------------------------------- */

/* PyTorch's set_flush_denormal(True) sets both; the casts without a scale
 * must not change (counts included) on any path. */
static void test_daz_ftz(void **state) {
  (void)state;
  enum { N = 65536 };
  uint32_t *xs = xalloc(N * 4);
  uint16_t *want = xalloc(N * 2), *h = xalloc(N * 2), *wire = xalloc(N * 2);
  float *back = xalloc(N * 4);
  for (uint32_t i = 0; i < N; i++) {
    xs[i] = (i & 1 ? 0x80000000u : 0) | (rnd() & 0x00ffffffu); /* fp32 subnormals + 2^-126.. */
    wire[i] = (uint16_t)i;
  }
  for (int wi = 0; wi < 2; wi++) {
    nsc_fmt_t w = (nsc_fmt_t)wi;
    nsc_cast_counts cw = {0, 0};
    nsc_cast_impl_scalar.to_wire[w]((float *)xs, want, N, 1.0f, &cw, 0);
    unsigned int csr = _mm_getcsr();
    _mm_setcsr(csr | 0x8040);
    for (int k = 0; k < nsc_cast_nimpls; k++) {
      const nsc_cast_impl *im = nsc_cast_impls[k];
      if (!im->available()) continue;
      nsc_cast_counts c = {0, 0};
      im->to_wire[w]((float *)xs, h, N, 1.0f, &c, 0);
      int same = !memcmp(h, want, N * 2) && c.overflow == cw.overflow && c.underflow == cw.underflow;
      im->from_wire[w](wire, back, N, 1.0f, 0);
      for (uint32_t i = 0; i < N && same; i++) same = f2u(back[i]) == ref_widen(w, (uint16_t)i);
      _mm_setcsr(csr);
      if (!same) fail_msg("%s %s differs under DAZ/FTZ", im->name, wname(w));
      _mm_setcsr(csr | 0x8040);
    }
    _mm_setcsr(csr);
  }
  free(xs);
  free(want);
  free(h);
  free(wire);
  free(back);
}

/* ---- nsc_scale_buffer ------------------------------------------------------ */

static void test_scale_buffer(void **state) {
  (void)state;
  enum { N = 5000 };
  float f[N], f2[N];
  double d[N];
  uint16_t h[N], h2[N];
  for (int i = 0; i < N; i++) {
    f[i] = (float)(i - N / 2) * 0.25f;
    d[i] = (double)(i - N / 2) * 0.125;
  }
  assert_int_equal(nsc_scale_buffer('f', f, f2, N, 4.0), 0);
  for (int i = 0; i < N; i++) assert_true(f2[i] == (float)(i - N / 2));
  assert_int_equal(nsc_scale_buffer('f', f, f, N, 0.5), 0); /* in place */
  for (int i = 0; i < N; i++) assert_true(f[i] == (float)(i - N / 2) * 0.125f);
  assert_int_equal(nsc_scale_buffer('d', d, d, N, 8.0), 0);
  for (int i = 0; i < N; i++) assert_true(d[i] == (double)(i - N / 2));
  for (int wi = 0; wi < 2; wi++) {
    nsc_fmt_t w = (nsc_fmt_t)wi;
    char kind = wi == 0 ? 'h' : 'b';
    /* Integers up to 256 are exact in both wire types; times 0.5 and 4 too. */
    for (int i = 0; i < N; i++) h[i] = ref_narrow(w, (float)(i % 513 - 256));
    assert_int_equal(nsc_scale_buffer(kind, h, h2, N, 0.5), 0);
    for (int i = 0; i < N; i++) assert_true(u2f(ref_widen(w, h2[i])) == (float)(i % 513 - 256) * 0.5f);
    assert_int_equal(nsc_scale_buffer(kind, h, h, N, 4.0), 0); /* in place */
    for (int i = 0; i < N; i++) assert_true(u2f(ref_widen(w, h[i])) == (float)(i % 513 - 256) * 4.0f);
  }
  h[0] = 0x7000; /* 8192 * 16 = 131072: fp16 overflow -> Inf, never clamped */
  assert_int_equal(nsc_scale_buffer('h', h, h, 1, 16.0), 0);
  assert_int_equal(h[0], 0x7c00);
  assert_int_equal(nsc_scale_buffer('x', f, f, N, 1.0), -1);
  assert_int_equal(nsc_scale_buffer('f', f, f, 0, 2.0), 0);
}

int main(void) {
  ref2_init();
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_special_values), cmocka_unit_test(test_widen_all),
      cmocka_unit_test(test_misaligned_tails), cmocka_unit_test(test_scale),
      cmocka_unit_test(test_counts_crafted), cmocka_unit_test(test_threads),
      cmocka_unit_test(test_force_impl),       cmocka_unit_test(test_daz_ftz),
      cmocka_unit_test(test_scale_buffer),     cmocka_unit_test(test_exhaustive_f16),
      cmocka_unit_test(test_exhaustive_bf16),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
