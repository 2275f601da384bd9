/* cast_ref2.h — a second, independent fp32 -> fp16/bf16 reference for the
 * exhaustive tests: rounding is done by the FPU in double precision on the
 * value's quantum (no bit manipulation of the fp32 mantissa), NaN/Inf found
 * by classification; and exact widening from the wire value's integer
 * significand and exponent.
 *
 * Both narrowing functions rely on one observation: with q the exponent of the
 * quantum (ulp) of |x| in the wire type, clamped at the subnormal quantum,
 * m = rint(|x| / 2^q) and the encoding is ((q - qmin) << mbits) + m, which also
 * covers subnormals (q = qmin, m < 2^mbits) and a round-up into the next binade.
 *
 * Must not: share code with compress/ (it is the oracle for it). */
#ifndef NSC_CAST_REF2_H
#define NSC_CAST_REF2_H

#include <math.h>
#include <stdint.h>
#include <string.h>

/* 2^k for k in [-200, 200] as doubles, filled by ref2_init(). */
static double ref2_pow2[401];
static void ref2_init(void) {
  for (int k = -200; k <= 200; k++) ref2_pow2[k + 200] = ldexp(1.0, k);
}

/* rint() in round-to-nearest-even for 0 <= v < 2^52, by the FPU's addition
 * (without -ffast-math the compiler may not fold the two operations). */
static inline double ref2_rint(double v) { return (v + 0x1p52) - 0x1p52; }

/* mbits: stored mantissa bits; qmin: exponent of the smallest subnormal;
 * inf: the encoding of +Inf; qnan: the quiet NaN pattern with the payload
 * shift from fp32. */
static inline uint16_t ref2_narrow(float x, int mbits, int qmin, uint16_t inf,
                                   uint16_t qnan, int payload_shift, uint16_t payload_mask) {
  uint32_t u;
  memcpy(&u, &x, 4);
  uint16_t sign = (uint16_t)((u >> 31) << 15);
  if (isnan(x)) return sign | qnan | (uint16_t)((u >> payload_shift) & payload_mask);
  if (isinf(x)) return sign | inf;
  double a = fabs((double)x);
  if (a == 0.0) return sign;
  uint64_t d;
  memcpy(&d, &a, 8);
  int E = (int)((d >> 52) & 0x7ff) - 1023; /* floor(log2 a); a is a normal double */
  int q = E - mbits < qmin ? qmin : E - mbits;
  double m = ref2_rint(a * ref2_pow2[200 - q]);
  uint32_t h = ((uint32_t)(q - qmin) << mbits) + (uint32_t)m;
  return sign | (uint16_t)(h >= inf ? inf : h);
}

static inline uint16_t ref2_f32_to_f16(float x) {
  return ref2_narrow(x, 10, -24, 0x7c00, 0x7e00, 13, 0x3ff);
}
static inline uint16_t ref2_f32_to_bf16(float x) {
  return ref2_narrow(x, 7, -133, 0x7f80, 0x7fc0, 16, 0x7f);
}

/* The same for the 65536 fp32 values whose high 16 bits are hi (the test's
 * chunk), with what is constant in a chunk hoisted: sign, binade, quantum.
 * Chunks of fp32 subnormals (exponent 0) or of Inf/NaN (255) go element by
 * element through ref2_narrow. */
static inline void ref2_narrow_chunk(uint32_t hi, int bf16, uint16_t *out) {
  int mbits = bf16 ? 7 : 10, qmin = bf16 ? -133 : -24;
  uint16_t inf = bf16 ? 0x7f80 : 0x7c00;
  int e = (int)((hi >> 7) & 0xff);
  if (e == 0 || e == 255) {
    for (uint32_t i = 0; i < 65536; i++) {
      uint32_t u = hi << 16 | i;
      float x;
      memcpy(&x, &u, 4);
      out[i] = bf16 ? ref2_f32_to_bf16(x) : ref2_f32_to_f16(x);
    }
    return;
  }
  uint16_t sign = (uint16_t)((hi >> 15) << 15);
  int q = e - 127 - mbits < qmin ? qmin : e - 127 - mbits;
  double inv = ref2_pow2[200 - q];
  uint32_t base = (uint32_t)(q - qmin) << mbits;
  for (uint32_t i = 0; i < 65536; i++) {
    uint32_t u = hi << 16 | i;
    float x;
    memcpy(&x, &u, 4);
    uint32_t h = base + (uint32_t)ref2_rint(fabs((double)x) * inv);
    out[i] = sign | (uint16_t)(h >= inf ? inf : h);
  }
}

/* Widening: value = m * 2^(e - bias - mbits) from the fields, built in double.
 * NaN: payload moved up, quiet bit set when quiet (fp16, as F16C) or not (bf16
 * is the exact bit extension). */
static inline uint32_t ref2_widen(uint16_t h, int mbits, int ebits, int quiet) {
  int emax = (1 << ebits) - 1, bias = emax >> 1;
  int e = (h >> mbits) & emax;
  uint32_t m = h & ((1u << mbits) - 1);
  uint32_t sign = (uint32_t)(h >> 15) << 31;
  if (e == emax) return sign | 0x7f800000u | (m << (23 - mbits)) | (m && quiet ? 0x400000u : 0);
  double v = e ? (double)(m | (1u << mbits)) * ldexp(1.0, e - bias - mbits)
               : (double)m * ldexp(1.0, 1 - bias - mbits);
  float f = (float)v; /* exact: fp32 holds every fp16/bf16 value */
  uint32_t r;
  memcpy(&r, &f, 4);
  return sign | r;
}

#endif
