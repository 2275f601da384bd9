/* test_oracle.h — the host NCCL tests' own view of NCCL datatypes: decode an
 * element to double, store an exactly representable value, round a value to
 * the datatype, and the reduction as the host NCCL documents it (16- and
 * 8-bit floats widened to fp32, rounded back after every operation).
 *
 * Written independently of numeric.c on purpose (fp16 and bf16 by rounding
 * in double with frexp/nearbyint, fp8 by searching the 256 codes; the unit
 * test adds the compiler's _Float16 where it has one), so the tests judge the
 * library rather than repeat it.
 *
 * Must not: include hostnccl.h internals or call the library under test. */
#ifndef HOSTNCCL_TEST_ORACLE_H
#define HOSTNCCL_TEST_ORACLE_H

#include <math.h>
#include <stdint.h>
#include <string.h>
#include <nccl.h>

static const struct { const char *name; size_t size; int is_float; } o_types[ncclNumTypes] = {
  {"int8", 1, 0},     {"uint8", 1, 0},   {"int32", 4, 0},   {"uint32", 4, 0},
  {"int64", 8, 0},    {"uint64", 8, 0},  {"float16", 2, 1}, {"float32", 4, 1},
  {"float64", 8, 1},  {"bfloat16", 2, 1}, {"e4m3", 1, 1},   {"e5m2", 1, 1},
};

/* fp8 by definition: mantissa bits, bias, whether the top exponent is Inf/NaN. */
static inline double o_fp8_value(int e5m2, unsigned code) {
  int mb = e5m2 ? 2 : 3, bias = e5m2 ? 15 : 7, emax = e5m2 ? 31 : 15;
  int s = (code >> 7) & 1, e = (code >> mb) & emax, m = code & ((1 << mb) - 1);
  if (e5m2 && e == emax) return m ? NAN : (s ? -INFINITY : INFINITY);
  if (!e5m2 && e == emax && m == (1 << mb) - 1) return NAN;
  double v = e ? ldexp(1.0 + (double)m / (1 << mb), e - bias) : ldexp((double)m / (1 << mb), 1 - bias);
  return s ? -v : v;
}

/* Nearest finite fp8 value, ties to the even code, saturating at the max. */
static inline double o_fp8_round(int e5m2, double x) {
  double max = e5m2 ? 57344.0 : 448.0, best = 0, bestd = INFINITY;
  unsigned bestc = 0;
  if (isnan(x)) return NAN;
  if (fabs(x) >= max) return copysign(max, x);
  for (unsigned c = 0; c < 256; c++) {
    double v = o_fp8_value(e5m2, c);
    if (!isfinite(v)) continue;
    double d = fabs(v - x);
    if (d < bestd || (d == bestd && !(c & 1) && (bestc & 1))) { best = v; bestd = d; bestc = c; }
  }
  return best == 0 ? copysign(0.0, x) : best;
}

/* x rounded to p significant bits, min normal exponent emin, ties to even. */
static inline double o_round_bits(double x, int p, int emin) {
  if (x == 0 || !isfinite(x)) return x;
  int e;
  frexp(x, &e);
  if (e - 1 < emin) e = emin + 1;
  return ldexp(nearbyint(ldexp(x, p - e)), e - p);
}

/* fp16 by definition (bias 15, 10 mantissa bits, exponent 31 = Inf/NaN). */
static inline double o_f16_value(uint16_t h) {
  int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
  double v = e == 31 ? (m ? NAN : INFINITY) : e ? ldexp(1024 + m, e - 25) : ldexp(m, -24);
  return s ? -v : v;
}

/* The fp16 code of v, which must be representable (or +-Inf). */
static inline uint16_t o_f16_bits(double v) {
  uint16_t s = signbit(v) ? 0x8000 : 0;
  double a = fabs(v);
  if (isinf(a)) return (uint16_t)(s | 0x7c00);
  if (a < 0x1p-14) return (uint16_t)(s | (uint16_t)ldexp(a, 24));
  int e;
  double m = frexp(a, &e); /* a = m * 2^e, 0.5 <= m < 1 */
  return (uint16_t)(s | (uint16_t)((e + 14) << 10) | (uint16_t)(ldexp(m, 11) - 1024));
}

static inline double o_get(int t, const void *buf, size_t i) {
  const char *p = (const char *)buf + i * o_types[t].size;
  switch (t) {
  case ncclInt8: return *(const int8_t *)p;
  case ncclUint8: return *(const uint8_t *)p;
  case ncclInt32: return *(const int32_t *)p;
  case ncclUint32: return *(const uint32_t *)p;
  case ncclInt64: return (double)*(const int64_t *)p;
  case ncclUint64: return (double)*(const uint64_t *)p;
  case ncclFloat16: return o_f16_value(*(const uint16_t *)p);
  case ncclFloat32: return *(const float *)p;
  case ncclFloat64: return *(const double *)p;
  case ncclBfloat16: { uint32_t u = (uint32_t)*(const uint16_t *)p << 16; float f; memcpy(&f, &u, 4); return f; }
  case ncclFloat8e4m3: return o_fp8_value(0, *(const uint8_t *)p);
  default: return o_fp8_value(1, *(const uint8_t *)p);
  }
}

/* Store v, which must be exactly representable in t. */
static inline void o_put(int t, void *buf, size_t i, double v) {
  char *p = (char *)buf + i * o_types[t].size;
  switch (t) {
  case ncclInt8: *(int8_t *)p = (int8_t)v; break;
  case ncclUint8: *(uint8_t *)p = (uint8_t)v; break;
  case ncclInt32: *(int32_t *)p = (int32_t)v; break;
  case ncclUint32: *(uint32_t *)p = (uint32_t)v; break;
  case ncclInt64: *(int64_t *)p = (int64_t)v; break;
  case ncclUint64: *(uint64_t *)p = (uint64_t)v; break;
  case ncclFloat16: *(uint16_t *)p = o_f16_bits(v); break;
  case ncclFloat32: *(float *)p = (float)v; break;
  case ncclFloat64: *(double *)p = v; break;
  case ncclBfloat16: { float f = (float)v; uint32_t u; memcpy(&u, &f, 4); *(uint16_t *)p = (uint16_t)(u >> 16); break; }
  default:
    for (unsigned c = 0; c < 256; c++)
      if (o_fp8_value(t == ncclFloat8e5m2, c) == v && (v != 0 || !(c & 0x80) == !signbit(v))) {
        *(uint8_t *)p = (uint8_t)c;
        break;
      }
  }
}

/* v rounded to t (v is a value of the type operated in: fp32 for the small floats). */
static inline double o_rnd(int t, double v) {
  switch (t) {
  case ncclFloat16: {
    double r = o_round_bits((float)v, 11, -14);
    return fabs(r) > 65504.0 ? copysign(INFINITY, r) : r;
  }
  case ncclFloat32: return (float)v;
  case ncclBfloat16: {
    double r = o_round_bits((float)v, 8, -126);
    return fabs(r) > 0x1.fep127 ? copysign(INFINITY, r) : r;
  }
  case ncclFloat8e4m3: return o_fp8_round(0, (float)v);
  case ncclFloat8e5m2: return o_fp8_round(1, (float)v);
  default: return v; /* fp64 and the (small, exact) integers */
  }
}

enum { O_SUM, O_PROD, O_MAX, O_MIN };

/* a (op) b as the host NCCL computes it for type t, rounded to t (max and
 * min of floats propagate NaN). */
static inline double o_op(int t, int op, double a, double b) {
  if ((op == O_MAX || op == O_MIN) && (isnan(a) || isnan(b))) return NAN;
  if (t == ncclFloat64 || !o_types[t].is_float) {
    switch (op) {
    case O_SUM: return a + b;
    case O_PROD: return a * b;
    case O_MAX: return a > b ? a : b;
    default: return a < b ? a : b;
    }
  }
  float fa = (float)a, fb = (float)b, r;
  switch (op) {
  case O_SUM: r = fa + fb; break;
  case O_PROD: r = fa * fb; break;
  case O_MAX: r = fa > fb ? fa : fb; break;
  default: r = fa < fb ? fa : fb; break;
  }
  return o_rnd(t, r);
}

#endif
