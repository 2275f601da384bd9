/* test_hostnccl_numeric.c — unit test (cmocka) of the host NCCL's datatype
 * conversions and reduction kernels (tests/hostnccl/numeric.c).
 *
 * Oracles independent of the code under test (test_oracle.h): fp16 and bf16
 * by rounding in double (fp16 also against the compiler's _Float16 where it
 * has one), fp8 by a brute-force search of the nearest of the 256 codes. Decoding
 * is checked for every code, encoding on every representable value, every
 * midpoint and its neighbours, and pseudo-random floats.
 *
 * Must not: link MPI or the rest of the host NCCL (numeric.o alone). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <string.h>

#include "hostnccl.h"
#include "test_oracle.h"

static uint32_t f2u(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static float u2f(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint32_t next32(void) {
  rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
  return (uint32_t)(rng >> 16);
}

/* Same value or both NaN (and the same sign of zero). */
static int same(float a, float b) {
  if (isnan(a) || isnan(b)) return isnan(a) && isnan(b);
  return a == b && signbit(a) == signbit(b);
}

/* ---- fp16 ---- */

/* fp16 code of f by the oracle (rounding in double), cross-checked against
 * the compiler's _Float16 where there is one (gcc >= 12 on x86-64). */
static uint16_t o_f16(float f) {
  uint16_t b = o_f16_bits(o_rnd(ncclFloat16, f));
#ifdef __FLT16_MAX__
  _Float16 h = (_Float16)f;
  uint16_t c;
  memcpy(&c, &h, 2);
  if (c != b) fail_msg("oracles disagree on %a: %04x vs _Float16 %04x", (double)f, b, c);
#endif
  return b;
}

static void check_f16_encode(float f) {
  uint16_t got = hn_f32_to_f16(f);
  if (isnan(f)) {
    assert_true((got & 0x7c00) == 0x7c00 && (got & 0x3ff));
    return;
  }
  uint16_t want = o_f16(f);
  if (got != want) fail_msg("f16(%a): got %04x want %04x", (double)f, got, want);
}

static void test_f16(void **state) {
  (void)state;
  for (uint32_t h = 0; h < 0x10000; h++) {
    uint16_t b = (uint16_t)h;
    float f = hn_f16_to_f32(b);
    double o = o_f16_value(b);
    if (!same(f, (float)o)) fail_msg("decode %04x: %a vs %a", h, (double)f, o);
    if (isnan(f)) continue;
    check_f16_encode(f);
    /* midpoint to the next code and its float neighbours */
    if ((h & 0x7fff) < 0x7c00) {
      float mid = (float)(((double)f + o_f16_value((uint16_t)(h + 1))) / 2);
      check_f16_encode(mid);
      check_f16_encode(nextafterf(mid, 0));
      check_f16_encode(nextafterf(mid, INFINITY));
      check_f16_encode(nextafterf(mid, -INFINITY));
    }
  }
  for (int i = 0; i < 2000000; i++) check_f16_encode(u2f(next32()));
  check_f16_encode(65520.0f);   /* ties to even -> Inf */
  check_f16_encode(65519.996f);
  assert_int_equal(hn_f32_to_f16(65520.0f), 0x7c00);
  assert_int_equal(hn_f32_to_f16(-1e30f), 0xfc00);
  assert_int_equal(hn_f32_to_f16(0x1p-25f), 0x0000); /* tie -> even (0) */
  assert_int_equal(hn_f32_to_f16(0x1.000002p-25f), 0x0001);
}

/* ---- bf16 ---- */

static void test_bf16(void **state) {
  (void)state;
  for (uint32_t h = 0; h < 0x10000; h++) {
    float f = hn_bf16_to_f32((uint16_t)h);
    assert_true(same(f, u2f(h << 16)) || (isnan(f) && isnan(u2f(h << 16))));
  }
  for (int i = 0; i < 3000000; i++) {
    uint32_t u = next32();
    if (i % 3 == 0) u = (u & 0xffff0000u) | 0x8000u;              /* exact midpoints */
    if (i % 3 == 1) u = (u & 0xffff0000u) | (0x8000u + (next32() & 1 ? 1u : 0xffffffffu));
    float f = u2f(u);
    uint16_t got = hn_f32_to_bf16(f);
    if (isnan(f)) { assert_true((got & 0x7f80) == 0x7f80 && (got & 0x7f)); continue; }
    double want = o_round_bits((double)f, 8, -126);
    if (fabs(want) > 0x1.fep127) want = copysign(INFINITY, want);
    if (!same(hn_bf16_to_f32(got), (float)want))
      fail_msg("bf16(%a): got %04x (%a) want %a", (double)f, got, (double)hn_bf16_to_f32(got), want);
  }
}

/* ---- fp8 ---- */

static void check_fp8(int e5m2, uint8_t (*enc)(float), float (*dec)(uint8_t)) {
  double max = e5m2 ? 57344.0 : 448.0;
  for (unsigned c = 0; c < 256; c++) {
    double v = o_fp8_value(e5m2, c);
    float d = dec((uint8_t)c);
    if (!same(d, (float)v)) fail_msg("decode %02x: %a vs %a", c, (double)d, v);
  }
  /* every code, every midpoint between neighbours and the floats next to it */
  for (unsigned c = 0; c < 0x7f; c++) {
    double v = o_fp8_value(e5m2, c), w = o_fp8_value(e5m2, c + 1);
    if (!isfinite(v)) continue;
    if (!isfinite(w)) w = v + (v - o_fp8_value(e5m2, c - 1)); /* past the max */
    float mid = (float)((v + w) / 2);
    float xs[] = {(float)v, mid, nextafterf(mid, 0), nextafterf(mid, INFINITY), (float)w * 4};
    for (unsigned k = 0; k < sizeof xs / sizeof xs[0]; k++)
      for (int sgn = -1; sgn <= 1; sgn += 2) {
        float f = xs[k] * (float)sgn;
        double want = o_fp8_round(e5m2, (double)f);
        float got = dec(enc(f));
        if (!same(got, (float)want)) fail_msg("encode %a: got %a want %a", (double)f, (double)got, want);
      }
  }
  for (int i = 0; i < 200000; i++) {
    float f = ldexpf((float)(next32() % 4096) - 2048.0f, (int)(next32() % 40) - 30);
    if (!same(dec(enc(f)), (float)o_fp8_round(e5m2, (double)f)))
      fail_msg("encode %a: got %a", (double)f, (double)dec(enc(f)));
  }
  assert_true(same(dec(enc(INFINITY)), (float)max));  /* saturating */
  assert_true(same(dec(enc(-INFINITY)), (float)-max));
  assert_true(isnan(dec(enc(NAN))));
}

static void test_e4m3(void **state) { (void)state; check_fp8(0, hn_f32_to_e4m3, hn_e4m3_to_f32); }
static void test_e5m2(void **state) { (void)state; check_fp8(1, hn_f32_to_e5m2, hn_e5m2_to_f32); }

/* ---- kernels ---- */

static void test_reduce_rounds_every_call(void **state) {
  (void)state;
  uint16_t a[3] = {hn_f32_to_f16(2048), hn_f32_to_f16(2048), hn_f32_to_f16(-0.0f)};
  uint16_t b[3] = {hn_f32_to_f16(1), hn_f32_to_f16(3), hn_f32_to_f16(0.0f)};
  hn_reduce(a, b, 3, ncclFloat16, HN_SUM);
  assert_true(hn_f16_to_f32(a[0]) == 2048.0f); /* 2049 ties to even */
  assert_true(hn_f16_to_f32(a[1]) == 2052.0f); /* 2051 ties to even */
  assert_true(same(hn_f16_to_f32(a[2]), 0.0f));
  uint16_t c = hn_f32_to_bf16(256), d = hn_f32_to_bf16(1);
  hn_reduce(&c, &d, 1, ncclBfloat16, HN_SUM);
  assert_true(hn_bf16_to_f32(c) == 256.0f);    /* 257 needs 9 bits */
  uint8_t e = hn_f32_to_e4m3(240), f = hn_f32_to_e4m3(240);
  hn_reduce(&e, &f, 1, ncclFloat8e4m3, HN_SUM);
  assert_true(hn_e4m3_to_f32(e) == 448.0f);    /* 480 saturates */
}

static void test_integer_kernels(void **state) {
  (void)state;
  int8_t i8[2] = {127, -100}, j8[2] = {1, -100};
  hn_reduce(i8, j8, 2, ncclInt8, HN_SUM);
  assert_int_equal(i8[0], -128);               /* wraps */
  assert_int_equal(i8[1], 56);
  uint8_t u8 = 200, v8 = 3;
  hn_reduce(&u8, &v8, 1, ncclUint8, HN_PROD);
  assert_int_equal(u8, (600 % 256));
  int64_t m[2] = {-5, 7}, n[2] = {3, -9};
  hn_reduce(m, n, 2, ncclInt64, HN_MAX);
  assert_true(m[0] == 3 && m[1] == 7);
  hn_reduce(m, n, 2, ncclInt64, HN_MIN);
  assert_true(m[0] == 3 && m[1] == -9);
  int32_t q[3] = {-7, 7, 8};
  hn_postdiv(q, 3, ncclInt32, 2);
  assert_true(q[0] == -3 && q[1] == 3 && q[2] == 4); /* truncating */
  uint32_t big = 0xffffffffu, two = 2, s;
  memcpy(&s, &two, 4);
  hn_premul(&big, &big, 1, ncclUint32, &s);
  assert_true(big == 0xfffffffeu);
}

static void test_float_kernels(void **state) {
  (void)state;
  float a[3] = {1.0f, NAN, -3.0f}, b[3] = {NAN, 2.0f, -4.0f};
  hn_reduce(a, b, 3, ncclFloat32, HN_MAX);
  assert_true(isnan(a[0]) && isnan(a[1]) && a[2] == -3.0f); /* NaN propagates */
  double x[2] = {0.1, 1e308}, y[2] = {0.2, 1e308};
  hn_reduce(x, y, 2, ncclFloat64, HN_SUM);
  assert_true(x[0] == 0.1 + 0.2 && isinf(x[1]));
  uint16_t third;
  hn_scalar_from_double(ncclFloat16, 1.0 / 3, &third);
  assert_int_equal(third, o_f16((float)(1.0 / 3)));
  uint16_t h[2] = {hn_f32_to_f16(3), hn_f32_to_f16(6)};
  hn_premul(h, h, 2, ncclFloat16, &third);
  assert_int_equal(h[0], o_f16(3.0f * hn_f16_to_f32(third)));
  assert_int_equal(h[1], o_f16(6.0f * hn_f16_to_f32(third)));
  assert_int_equal(hn_type_size(ncclFloat8e5m2), 1);
  assert_int_equal(hn_type_size(ncclBfloat16), 2);
  assert_int_equal(hn_type_size(ncclUint64), 8);
  assert_true(hn_type_is_float(ncclFloat8e4m3) && !hn_type_is_float(ncclUint8));
  (void)f2u;
}

/* Kernels (table decoding, fast encoding paths) against the oracle's own
 * arithmetic: every code against +0 and pseudo-random pairs, every op. */
static void test_kernels_vs_oracle(void **state) {
  (void)state;
  static const int ftypes[] = {ncclFloat16, ncclBfloat16, ncclFloat8e4m3, ncclFloat8e5m2, ncclFloat32};
  static const int ops[] = {O_SUM, O_PROD, O_MAX, O_MIN};
  enum { N = 1 << 16 };
  static unsigned char a[N * 4], b[N * 4], r[N * 4];
  for (size_t k = 0; k < sizeof ftypes / sizeof ftypes[0]; k++) {
    int t = ftypes[k];
    size_t esz = o_types[t].size, codes = esz == 1 ? 256 : N, m = esz == 1 ? 8192 : N; /* fp8 oracle is slow */
    for (int pass = 0; pass < 3; pass++) {
      for (size_t i = 0; i < N; i++) {
        uint32_t x = pass == 0 ? (uint32_t)(i % codes) : next32(), y = pass == 0 ? 0 : next32();
        if (esz == 4 && pass > 0) { /* fp32: moderate exponents, not all NaN */
          x = (x & 0x807fffffu) | ((100 + x % 50) << 23);
          y = (y & 0x807fffffu) | ((100 + y % 50) << 23);
        }
        memcpy(a + i * esz, &x, esz);
        memcpy(b + i * esz, &y, esz);
      }
      for (size_t o = 0; o < 4; o++) {
        memcpy(r, b, m * esz);
        hn_reduce(r, a, m, (ncclDataType_t)t, (enum hn_redop)ops[o]);
        for (size_t i = 0; i < m; i++) {
          double want = o_op(t, ops[o], o_get(t, a, i), o_get(t, b, i)), got = o_get(t, r, i);
          if (!same((float)got, (float)want) && !(isnan(got) && isnan(want)))
            fail_msg("%s op %d: %a (op) %a = %a, want %a", o_types[t].name, ops[o], o_get(t, a, i),
                     o_get(t, b, i), got, want);
        }
      }
    }
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_f16),
    cmocka_unit_test(test_bf16),
    cmocka_unit_test(test_e4m3),
    cmocka_unit_test(test_e5m2),
    cmocka_unit_test(test_reduce_rounds_every_call),
    cmocka_unit_test(test_kernels_vs_oracle),
    cmocka_unit_test(test_integer_kernels),
    cmocka_unit_test(test_float_kernels),
  };
  return cmocka_run_group_tests_name("hostnccl numeric", tests, NULL, NULL);
}
