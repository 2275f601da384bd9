/* wire_bits.h — the element-level rules of the block-scaled wire formats
 * (int8, fp8 e4m3 and fp16s, each with one power-of-two scale per block), shared by
 * the host reference (wire_ref.c), the host fast path (wire.c) and the CUDA
 * kernels (kernels.cu), which therefore agree bit for bit.
 *
 * A block of B elements gets a 16-bit header: bits 0..9 the scale exponent k
 * plus 512 (scale 2^k), bit 15 "the block holds Inf or NaN", bits 10..14 zero
 * (any of them set: the whole block decodes as NaN, so a rank that fills its
 * wire buffer with 0xff contributes NaN, as it does in fp16/bf16). k comes from
 * the largest finite |x| of the block (amax, E = floor(log2 amax)), and so
 * does lim, the block's largest code magnitude.
 *   int8: k = E - 6 (amax * 2^-k in [64, 128)), lim 127 (126 in a block with
 *         Inf/NaN, where 127 = +Inf, -127 = -Inf, -128 = NaN); codes
 *         rint(x * 2^-k) clamped to +-lim: |error| <= amax/127.5 per element
 *         (amax/63 in a block with Inf/NaN).
 *   fp8:  k = E - 7: amax * 2^-k in [128, 256), rounded to e4m3 (steps of
 *         16 there), lim 256 (so 448 is free for Inf): relative error
 *         <= 2^-4 for |x| >= amax·2^-14, absolute <= amax·2^-17 below;
 *         0x7e = +Inf, 0xfe = -Inf, 0x7f = NaN.
 * Top blocks, amax >= 2^111 (k >= 105 int8, 104 fp8): lim is amax's own
 * code rounded toward zero, so no value of the block decodes above amax
 * (round to nearest could lift every rank's value by half a step and make
 * Inf of a sum whose exact value is finite). The elements above
 * lim * 2^k (within one step below amax) round down there: |error| < 2^k <=
 * amax/64 (int8), relative < 2^-3 (fp8). Below 2^111 nothing changes, and
 * any n <= 2^16 such values sum below 2^127. So an element's sum over n
 * ranks is finite wherever the ranks' largest |x| within block - 1 elements
 * of it (the wire block holding it lies there) add up to at most
 * FLT_MAX (1 - n 2^-24) when each is at least 2^111, and at most
 * FLT_MAX (1 - n 2^-24) / (1 + e) otherwise, e = 2^-7 (int8), 2^-4 (fp8).
 * Power-of-two scales are exact: values that are small integers times a power
 * of two within the block's range come back exact (what the exactness tests
 * use), and -k, k never leave [-156, 156] (fp16s: [-163, 163]).
 *
 * Arithmetic: fp32 multiplies by powers of two and round-to-nearest-even to an
 * integer (rintf; __fmul_rn and rintf on the GPU): the defaults every
 * framework runs with (no flush-to-zero, round to nearest). NaN results are
 * the canonical quiet NaN 0x7fc00000 on every path.
 *
 * Must not: touch memory beyond its arguments or hold state. */
#ifndef NSC_WIRE_BITS_H
#define NSC_WIRE_BITS_H

#include <stdint.h>

#include "cast_bits.h"
#include "formats.h"

#if defined(__CUDA_ARCH__)
#define NSC_U2F(u) __uint_as_float(u)
#define NSC_F2U(f) __float_as_uint(f)
#define NSC_FMUL(a, b) __fmul_rn((a), (b))
#define NSC_FADD(a, b) __fadd_rn((a), (b))
#define NSC_FSUB(a, b) __fsub_rn((a), (b))
#define NSC_FDIV(a, b) __fdiv_rn((a), (b))
#define NSC_RINT(x) rintf(x)
#else
#if !defined(__CUDACC__)
#include <math.h>
#endif
NSC_HD float nsc_u2f_(uint32_t u) { float f; __builtin_memcpy(&f, &u, 4); return f; }
NSC_HD uint32_t nsc_f2u_(float f) { uint32_t u; __builtin_memcpy(&u, &f, 4); return u; }
#define NSC_U2F(u) nsc_u2f_(u)
#define NSC_F2U(f) nsc_f2u_(f)
#define NSC_FMUL(a, b) ((a) * (b))
#define NSC_FADD(a, b) ((a) + (b))
#define NSC_FSUB(a, b) ((a) - (b))
#define NSC_FDIV(a, b) ((a) / (b))
#define NSC_RINT(x) rintf(x)
#endif

/* An 8-bit code c of |y| (bits a) flushed a finite non-zero value to zero:
 * counted as an underflow (the 16-bit formats' "non-zero, becomes +-0"). */
NSC_HD uint32_t nsc_w8_flushed(int int8, uint32_t a, uint8_t c) {
  return (a - 1u) < (NSC_F32_INF - 1u) && (int8 ? c == 0u : (c & 0x7fu) == 0u);
}

#define NSC_W8_BIAS 512
#define NSC_W8_SPECIAL 0x8000u
#define NSC_W8_INVALID 0x7c00u
#define NSC_NAN_BITS 0x7fc00000u

/* 2^e for e in [-126, 127]. */
NSC_HD float nsc_pow2(int e) { return NSC_U2F((uint32_t)(e + 127) << 23); }
/* The two factors x is multiplied by for x * 2^e, |e| <= 163: the first
 * product never rounds where it matters, so the result is x * 2^e rounded
 * once (results below the codes' resolution aside). */
NSC_HD int nsc_pow2_split(int e) { return e / 2; }
NSC_HD float nsc_ldexp2(float x, int e) {
  int e1 = nsc_pow2_split(e);
  return NSC_FMUL(NSC_FMUL(x, nsc_pow2(e1)), nsc_pow2(e - e1));
}

/* floor(log2 |x|) of finite non-zero |bits| a. */
NSC_HD int nsc_ilog2_bits(uint32_t a) {
  return a >= 0x800000u ? (int)(a >> 23) - 127 : (31 - (int)NSC_CLZ32(a)) - 149;
}

/* ---- int8 and int4: integers -q..q times the block's 2^k (q = 127, or 7
 * for int4) ----
 * k = E - 6 (int8: amax * 2^-k in [64, 128)) or E - 2 (int4: in [4, 8)); lim
 * q (q - 1 in a block with Inf/NaN, where q = +Inf, -q = -Inf, -q-1 = NaN);
 * codes rint(x * 2^-k) clamped to +-lim. |error| <= amax/(q + 0.5) per
 * element: half a step (2^k/2 <= amax/(q + 1)) where x * 2^-k <= q + 0.5,
 * and where it lies above, clamped to q, less than 2^k < amax/(q + 0.5);
 * in a block with Inf/NaN (lim q - 1) less than 2 * 2^k. int4's codes are
 * stored two per byte, as 4-bit two's complement (nsc_nib). */
NSC_HD int nsc_intq_k(int q, uint32_t amax) { return amax ? nsc_ilog2_bits(amax) - (q == 127 ? 6 : 2) : 0; }
#define NSC_W8_TOP_BITS 0x77000000u /* 2^111: a top block's amax (bits) */
/* The block's largest code magnitude: q (q - 1 with Inf/NaN), and in a top
 * block floor(amax * 2^-k) (exact: a power of two times amax, in [q/2, q+1)). */
NSC_HD int nsc_intq_lim(int q, uint32_t amax, int k, int special) {
  int m = special ? q - 1 : q;
  if (amax < NSC_W8_TOP_BITS) return m;
  int t = (int)nsc_ldexp2(NSC_U2F(amax), -k);
  return t < m ? t : m;
}
NSC_HD float nsc_clampf(float v, float lim) { return v > lim ? lim : v < -lim ? -lim : v; }
/* Inf and NaN only occur in a block with Inf/NaN (lim <= q - 1 there). */
NSC_HD int8_t nsc_intq_code(int q, float y, int k, int lim) {
  uint32_t u = NSC_F2U(y), a = u & 0x7fffffffu;
  if (a > NSC_F32_INF) return (int8_t)(-q - 1);
  if (a == NSC_F32_INF) return (int8_t)((u >> 31) ? -q : q);
  return (int8_t)(int)nsc_clampf(NSC_RINT(nsc_ldexp2(y, -k)), (float)lim);
}
NSC_HD float nsc_intq_value(int q, int8_t c, uint16_t h) {
  if (h & NSC_W8_INVALID) return NSC_U2F(NSC_NAN_BITS);
  if (h & NSC_W8_SPECIAL) {
    if (c == -q - 1) return NSC_U2F(NSC_NAN_BITS);
    if (c == q) return NSC_U2F(NSC_F32_INF);
    if (c == -q) return NSC_U2F(NSC_F32_INF | 0x80000000u);
  }
  return nsc_ldexp2((float)c, (int)(h & 0x3ffu) - NSC_W8_BIAS);
}
NSC_HD int nsc_int8_k(uint32_t amax) { return nsc_intq_k(127, amax); }
NSC_HD int nsc_int8_lim(uint32_t amax, int k, int special) { return nsc_intq_lim(127, amax, k, special); }
NSC_HD int8_t nsc_int8_code(float y, int k, int lim) { return nsc_intq_code(127, y, k, lim); }
NSC_HD float nsc_int8_value(int8_t c, uint16_t h) { return nsc_intq_value(127, c, h); }
/* int4's 4-bit code (two's complement in a nibble) and back. */
NSC_HD uint32_t nsc_nib(int8_t c) { return (uint32_t)(uint8_t)c & 0xfu; }
NSC_HD int8_t nsc_unnib(uint32_t n) { return (int8_t)((int)((n & 0xfu) ^ 0x8u) - 8); }

/* ---- fp8 e4m3 ---- */
NSC_HD int nsc_fp8_k(uint32_t amax) { return amax ? nsc_ilog2_bits(amax) - 7 : 0; }
/* The block's largest code magnitude: 256 (0x78), and in a top block
 * amax * 2^-k (in [128, 256), exact) rounded down to an e4m3 code 0x70 + m
 * (128 + 16 m, m <= 7). */
NSC_HD uint32_t nsc_fp8_lim(uint32_t amax, int k) {
  if (amax < NSC_W8_TOP_BITS) return 0x78u;
  float t = nsc_ldexp2(NSC_U2F(amax), -k);
  return 0x70u + (uint32_t)(int)NSC_FMUL(NSC_FSUB(t, 128.0f), 0.0625f);
}
/* |v| <= 256, finite: e4m3 round to nearest even (subnormals in units of 2^-9). */
NSC_HD uint8_t nsc_e4m3_bits(float v) {
  uint32_t u = NSC_F2U(v), sign = (u >> 24) & 0x80u, a = u & 0x7fffffffu, r;
  if (a < 0x3c800000u) {
    uint32_t e = a >> 23, s = 141u - e < 31u ? 141u - e : 31u;
    uint32_t m = (a & 0x7fffffu) | 0x800000u;
    r = (m + (1u << (s - 1u)) - 1u + ((m >> s) & 1u)) >> s;
  } else {
    r = (a - 0x3c000000u + 0x7ffffu + ((a >> 20) & 1u)) >> 20;
  }
  return (uint8_t)(sign | r);
}
NSC_HD uint8_t nsc_fp8_code(float y, int k, uint32_t lim) {
  uint32_t u = NSC_F2U(y), a = u & 0x7fffffffu;
  if (a > NSC_F32_INF) return 0x7f;
  if (a == NSC_F32_INF) return (uint8_t)((u >> 31) ? 0xfe : 0x7e);
  uint8_t c = nsc_e4m3_bits(nsc_ldexp2(y, -k));
  return (uint8_t)((c & 0x80u) | ((c & 0x7fu) > lim ? lim : (c & 0x7fu)));
}
/* The e4m3 code as fp32 before scaling (0x7e/0xfe: +-Inf, 0x7f/0xff: NaN). */
NSC_HD float nsc_e4m3_value(uint8_t b) {
  uint32_t s = (uint32_t)(b & 0x80u) << 24, e = (b >> 3) & 15u, m = b & 7u, r;
  if ((b & 0x7fu) == 0x7fu) return NSC_U2F(NSC_NAN_BITS);
  if ((b & 0x7fu) == 0x7eu) r = NSC_F32_INF;
  else if (e == 0u) r = NSC_F2U(NSC_FMUL((float)m, nsc_pow2(-9)));
  else r = ((e + 120u) << 23) | (m << 20);
  return NSC_U2F(s | r);
}
NSC_HD float nsc_fp8_value(uint8_t c, uint16_t h) {
  if (h & NSC_W8_INVALID) return NSC_U2F(NSC_NAN_BITS);
  float v = nsc_e4m3_value(c);
  if ((c & 0x7eu) == 0x7eu) return v; /* Inf, NaN: never multiplied (GPU NaNs differ) */
  return nsc_ldexp2(v, (int)(h & 0x3ffu) - NSC_W8_BIAS);
}

/* ---- fp16s: fp16 codes with a power-of-two scale per block ----
 * The header of the 8-bit formats (k + 512; bit 15: the block holds Inf or
 * NaN; bits 10..14: invalid, the block decodes as NaN), then 2-byte codes.
 * k = E - 14: amax * 2^-k in [2^14, 2^15), so no finite value rounds to
 * fp16's Inf (2^15 is the most a code can round to). Codes are fp16(x * 2^-k),
 * round to nearest even; Inf is fp16's Inf, NaN fp16's 0x7e00 (decoded as
 * the canonical NaN). Error: relative <= 2^-11 for |x| >= amax * 2^-28
 * (fp16's normal range), absolute <= amax * 2^-39 below (half fp16's
 * subnormal step, 2^-25 * 2^k), flushed to +-0 at or below that (counted as
 * underflows): fp16's 11 bits over the 29 binades under each block's
 * largest value, anywhere in fp32's range. -k, k never leave [-163, 163].
 * Top blocks (amax >= 2^111), as the 8-bit formats: lim is amax's own code
 * rounded toward zero, so no value decodes above amax (error of the elements
 * above lim * 2^k: relative < 2^-10); elsewhere lim = 0x7800 (2^15) never
 * clamps. The finiteness rule of the 8-bit formats holds with e = 2^-11. */
#define NSC_F16S_LIM 0x7800u
NSC_HD int nsc_f16s_k(uint32_t amax) { return amax ? nsc_ilog2_bits(amax) - 14 : 0; }
NSC_HD uint32_t nsc_f16s_lim(uint32_t amax, int k) {
  if (amax < NSC_W8_TOP_BITS) return NSC_F16S_LIM;
  return (NSC_F2U(nsc_ldexp2(NSC_U2F(amax), -k)) - 0x38000000u) >> 13; /* exact, in [2^14, 2^15): truncated */
}
NSC_HD float nsc_f16_bits_value(uint16_t c) { return NSC_U2F(nsc_bits_f16_to_f32(c)); }
NSC_HD uint16_t nsc_f16s_code(float y, int k, uint32_t lim) {
  uint32_t u = NSC_F2U(y), a = u & 0x7fffffffu;
  if (a > NSC_F32_INF) return 0x7e00u;
  if (a == NSC_F32_INF) return (uint16_t)(((u >> 16) & 0x8000u) | 0x7c00u);
  uint16_t c = nsc_bits_f32_to_f16(NSC_F2U(nsc_ldexp2(y, -k)));
  return (uint16_t)((c & 0x8000u) | ((c & 0x7fffu) > lim ? lim : (c & 0x7fffu)));
}
NSC_HD float nsc_f16s_value(uint16_t c, uint16_t h) {
  if (h & NSC_W8_INVALID) return NSC_U2F(NSC_NAN_BITS);
  if ((c & 0x7c00u) == 0x7c00u) return (c & 0x3ffu) ? NSC_U2F(NSC_NAN_BITS) : nsc_f16_bits_value(c);
  return nsc_ldexp2(nsc_f16_bits_value(c), (int)(h & 0x3ffu) - NSC_W8_BIAS);
}

NSC_HD float nsc_canon_nan(float x) { return x != x ? NSC_U2F(NSC_NAN_BITS) : x; }

/* ---- error feedback and stochastic rounding (wire.h nsc_enc_opt) ----
 *
 * Error feedback: the value encoded is y = x + r (x already multiplied by the
 * encode's scale; r the residual this element kept from its bucket's last
 * call; x itself when r is 0 or x is NaN, so -0 and NaN payloads are those of
 * the plain encode), clamped to the format's largest finite value where x
 * alone encodes finite but x + r would not (fp16 at 65520, bf16 at its
 * rounding threshold 0x7f7f8000, the 8-bit formats at fp32's overflow: a
 * residual never turns a finite input into Inf; an input that
 * overflows by itself still does), and the new residual is y - v, v the value the chosen
 * code decodes to (before any decode scale): exact in fp32 for round to
 * nearest (v lies within a factor 2 of y). Where y or v is not finite (Inf,
 * NaN, fp16 overflow) the residual is 0, so one overflowing step never
 * poisons the later ones.
 *
 * Stochastic rounding: the nearest code is computed as without it; if its
 * value v is not y, the neighbouring code w on the other side of y (one step
 * of magnitude) is taken with probability p = |y - v| / |w - v| (exact: the
 * step is a power of two), decided by 24 random bits u: w iff u < p * 2^24,
 * so P(w) = ceil(p * 2^24) / 2^24, at most 2^-24 above p (exactly p when p is
 * a multiple of 2^-24, e.g. 1/2 for a value halfway). A neighbour beyond the
 * format's range (a code beyond the block's lim, int8 and fp8; fp16/bf16
 * Inf) is never taken, nor is anything
 * done for Inf/NaN. The random bits of element i are a pure function of the
 * encode's key and i (SplitMix64): the same on host and GPU, on every run. */
NSC_HD int nsc_finite_f(float x) { return (NSC_F2U(x) & 0x7fffffffu) < NSC_F32_INF; }
/* fmt: an nsc_fmt_t (formats.h). */
NSC_HD float nsc_ef_in(int fmt, float x, float r) {
  if (r == 0.0f || x != x) return x;
  float y = NSC_FADD(x, r);
  uint32_t ovf = fmt == NSC_FMT_FP16 ? 0x477ff000u : fmt == NSC_FMT_BF16 ? 0x7f7f8000u : NSC_F32_INF;
  uint32_t uy = NSC_F2U(y);
  if ((uy & 0x7fffffffu) >= ovf && (NSC_F2U(x) & 0x7fffffffu) < ovf)
    y = NSC_U2F((uy & 0x80000000u) |
                (fmt == NSC_FMT_FP16 ? 0x477fe000u : fmt == NSC_FMT_BF16 ? 0x7f7f0000u : 0x7f7fffffu));
  return y;
}
NSC_HD float nsc_ef_resid(float y, float v) {
  return nsc_finite_f(y) && nsc_finite_f(v) ? NSC_FSUB(y, v) : 0.0f;
}

NSC_HD uint64_t nsc_mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
/* 24 random bits for element i of the encode with this key. */
NSC_HD uint32_t nsc_sr_bits(uint64_t key, uint64_t i) {
  return (uint32_t)(nsc_mix64(key + (i + 1u) * 0x9e3779b97f4a7c15ull) >> 40);
}
/* 1: take the neighbour w of y's nearest value v (v != y, both finite). */
NSC_HD int nsc_sr_take(float y, float v, float w, uint32_t u24) {
  float d = NSC_FSUB(y, v), s = NSC_FSUB(w, v);
  float p = NSC_FDIV(d < 0.0f ? -d : d, s < 0.0f ? -s : s);
  return (float)u24 < NSC_FMUL(p, 16777216.0f);
}

/* int8 code of y (scale 2^k): nearest, or stochastic with random bits u24. */
/* An integer format's code of y (scale 2^k, q 127 or 7): nearest, or
 * stochastic with random bits u24 (c in -lim..lim there, so c +- 1 is a code). */
NSC_HD int8_t nsc_intq_code_x(int q, float y, int k, int lim, int sr, uint32_t u24) {
  int8_t c = nsc_intq_code(q, y, k, lim);
  if (!sr || !nsc_finite_f(y)) return c;
  float t = nsc_ldexp2(y, -k), v = (float)c;
  if (t == v) return c;
  int o = t > v ? c + 1 : c - 1;
  if (o > lim || o < -lim) return c;
  return nsc_sr_take(t, v, (float)o, u24) ? (int8_t)o : c;
}
NSC_HD int8_t nsc_int8_code_x(float y, int k, int lim, int sr, uint32_t u24) {
  return nsc_intq_code_x(127, y, k, lim, sr, u24);
}

/* A neighbouring code one step of magnitude from `code` towards y (whose
 * nearest code it is): `sign` the sign bit, `mag` the magnitude bits of code.
 * When code is a zero, the step goes to the smallest magnitude with y's sign. */
NSC_HD uint32_t nsc_sr_neighbour(uint32_t code, uint32_t sign, uint32_t mag, int up, int y_neg) {
  if (mag == 0u) return (y_neg ? sign : 0u) | 1u;
  return (code & sign) | (up ? mag + 1u : mag - 1u);
}

/* The neighbour of code c (value v, nearest to the scaled value t != v) that
 * stochastic rounding may take, into *o; 0 when there is none (it would pass
 * the block's limit lim). sign: the code's sign bit. */
NSC_HD int nsc_sr_other(float t, float v, uint32_t c, uint32_t sign, uint32_t lim, uint32_t *o) {
  int up = (t < 0.0f ? -t : t) > (v < 0.0f ? -v : v);
  uint32_t mag = c & (sign - 1u);
  if (up && mag >= lim) return 0;
  *o = nsc_sr_neighbour(c, sign, mag, up, t < 0.0f);
  return 1;
}

NSC_HD uint8_t nsc_fp8_code_x(float y, int k, uint32_t lim, int sr, uint32_t u24) {
  uint8_t c = nsc_fp8_code(y, k, lim);
  if (!sr || (c & 0x7eu) == 0x7eu) return c;
  float t = nsc_ldexp2(y, -k), v = nsc_e4m3_value(c);
  uint32_t o;
  if (t == v || !nsc_sr_other(t, v, c, 0x80u, lim, &o)) return c;
  return nsc_sr_take(t, v, nsc_e4m3_value((uint8_t)o), u24) ? (uint8_t)o : c;
}

NSC_HD uint16_t nsc_f16s_code_x(float y, int k, uint32_t lim, int sr, uint32_t u24) {
  uint16_t c = nsc_f16s_code(y, k, lim);
  if (!sr || (c & 0x7c00u) == 0x7c00u) return c;
  float t = nsc_ldexp2(y, -k), v = nsc_f16_bits_value(c);
  uint32_t o;
  if (t == v || !nsc_sr_other(t, v, c, 0x8000u, lim, &o)) return c;
  return nsc_sr_take(t, v, nsc_f16_bits_value((uint16_t)o), u24) ? (uint16_t)o : c;
}

/* ---- the block-scaled formats together: f an nsc_fmt_t (formats.h) of a
 * blocked row (int8, fp8, fp16s, int4); codes of 1 byte (8-bit), 2 (fp16s), or a nibble (int4: c is
 * the 4-bit two's complement, nsc_nib) ---- */
NSC_HD int nsc_bs_k(int f, uint32_t amax) {
  return f == NSC_FMT_INT8  ? nsc_int8_k(amax)
         : f == NSC_FMT_FP8 ? nsc_fp8_k(amax)
         : f == NSC_FMT_INT4 ? nsc_intq_k(7, amax)
                             : nsc_f16s_k(amax);
}
NSC_HD uint32_t nsc_bs_lim(int f, uint32_t amax, int k, int special) {
  return f == NSC_FMT_INT8   ? (uint32_t)nsc_int8_lim(amax, k, special)
         : f == NSC_FMT_FP8  ? nsc_fp8_lim(amax, k)
         : f == NSC_FMT_INT4 ? (uint32_t)nsc_intq_lim(7, amax, k, special)
                             : nsc_f16s_lim(amax, k);
}
NSC_HD uint32_t nsc_bs_code_x(int f, float y, int k, uint32_t lim, int sr, uint32_t u24) {
  if (f == NSC_FMT_INT8) return (uint8_t)nsc_int8_code_x(y, k, (int)lim, sr, u24);
  if (f == NSC_FMT_FP8) return nsc_fp8_code_x(y, k, lim, sr, u24);
  if (f == NSC_FMT_INT4) return nsc_nib(nsc_intq_code_x(7, y, k, (int)lim, sr, u24));
  return nsc_f16s_code_x(y, k, lim, sr, u24);
}
NSC_HD float nsc_bs_value(int f, uint32_t c, uint16_t h) {
  if (f == NSC_FMT_INT8) return nsc_int8_value((int8_t)(uint8_t)c, h);
  if (f == NSC_FMT_FP8) return nsc_fp8_value((uint8_t)c, h);
  if (f == NSC_FMT_INT4) return nsc_intq_value(7, nsc_unnib(c), h);
  return nsc_f16s_value((uint16_t)c, h);
}
/* A finite non-zero |y| (bits a) whose code c is a zero (an underflow). */
NSC_HD uint32_t nsc_bs_flushed(int f, uint32_t a, uint32_t c) {
  if (f == NSC_FMT_FP16S) return (a - 1u) < (NSC_F32_INF - 1u) && (c & 0x7fffu) == 0u;
  if (f == NSC_FMT_INT4) return (a - 1u) < (NSC_F32_INF - 1u) && c == 0u;
  return nsc_w8_flushed(f == NSC_FMT_INT8, a, (uint8_t)c);
}
/* The block's header: k and the "holds Inf/NaN" bit. */
NSC_HD uint16_t nsc_bs_header(int k, int special) {
  return (uint16_t)((unsigned)(k + NSC_W8_BIAS) | (special ? NSC_W8_SPECIAL : 0u));
}

/* fp16 (bf16 = 0) or bf16 (bf16 = 1) code of y and its value. */
NSC_HD float nsc_w16_value(int bf16, uint16_t h) {
  return NSC_U2F(bf16 ? nsc_bits_bf16_to_f32(h) : nsc_bits_f16_to_f32(h));
}
NSC_HD uint16_t nsc_w16_code_x(int bf16, float y, int sr, uint32_t u24) {
  uint32_t u = NSC_F2U(y);
  uint16_t h = bf16 ? nsc_bits_f32_to_bf16(u) : nsc_bits_f32_to_f16(u);
  uint32_t inf = bf16 ? 0x7f80u : 0x7c00u, mag = h & 0x7fffu;
  if (!sr || mag >= inf) return h;
  float v = nsc_w16_value(bf16, h);
  if (y == v) return h;
  int up = (y < 0.0f ? -y : y) > (v < 0.0f ? -v : v);
  if (up && mag + 1u >= inf) return h;
  uint16_t o = (uint16_t)nsc_sr_neighbour(h, 0x8000u, mag, up, y < 0.0f);
  return nsc_sr_take(y, v, nsc_w16_value(bf16, o), u24) ? o : h;
}

#endif
