/* kernels_rtc.h — the start of the kernels' source as NVRTC compiles it
 * (compress/module.mk appends cast_bits.h, wire_bits.h, cu_abi.h and kernels.cu with their
 * #include lines removed): NVRTC has no C library headers, so the fixed-width
 * types those files take from <stdint.h> are declared here, with the sizes
 * the CUDA ABI gives them on 64-bit Linux.
 *
 * Must not: be included by C code, or declare anything but these types. */
typedef signed char int8_t;
typedef unsigned char uint8_t;
typedef short int16_t;
typedef unsigned short uint16_t;
typedef int int32_t;
typedef unsigned int uint32_t;
typedef long long int64_t;
typedef unsigned long long uint64_t;
typedef unsigned long long uintptr_t;
/* cast_bits.h — the conversions between fp32 and fp16/bf16 as integer
 * operations on bit patterns, shared by the host C code and the CUDA kernels
 * (compiled by both gcc and nvcc), plus the ranges that define overflow and
 * underflow.
 *
 * Integer-only on purpose: the result never depends on the floating-point
 * environment (rounding mode, flush-to-zero, denormals-are-zero), so the host
 * reference, the vector paths and the GPU agree bit for bit. Every function is
 * branch-light: ties and the common ranges go through arithmetic and mask
 * selects; at most one well-predicted branch on the rare subnormal range.
 *
 * Must not: include anything beyond <stdint.h>, touch memory, or hold state. */
#ifndef NSC_CAST_BITS_H
#define NSC_CAST_BITS_H


#if defined(__CUDACC__)
#define NSC_HD static __host__ __device__ __forceinline__
#if defined(__CUDA_ARCH__)
#define NSC_CLZ32(x) __clz((int)(x))
#else
#define NSC_CLZ32(x) __builtin_clz(x)
#endif
#else
#define NSC_HD static inline __attribute__((always_inline))
#define NSC_CLZ32(x) __builtin_clz(x)
#endif

/* |bits| of fp32 values, the thresholds of the lossy ranges. With a = bits &
 * 0x7fffffff of the value being rounded:
 *   overflow  (finite, becomes +-Inf): NSC_*_OVF_LO <= a < NSC_F32_INF
 *   underflow (non-zero, becomes +-0): 1 <= a <= NSC_*_UNF_HI
 * fp16: 65520 (halfway above 65504, ties to even go up) and 2^-25 (half the
 * smallest subnormal, ties go down to 0). bf16: halfway above 0x7f7f and half of
 * the smallest bf16 subnormal 2^-133. */
#define NSC_F32_INF 0x7f800000u
#define NSC_F16_OVF_LO 0x477ff000u
#define NSC_F16_UNF_HI 0x33000000u
#define NSC_BF16_OVF_LO 0x7f7f8000u
#define NSC_BF16_UNF_HI 0x00008000u

/* One unsigned compare each: a - lo wraps for a < lo, a - 1 wraps for a == 0. */
NSC_HD uint32_t nsc_bits_is_overflow(uint32_t a, uint32_t lo) {
  return (a - lo) < (NSC_F32_INF - lo);
}
NSC_HD uint32_t nsc_bits_is_underflow(uint32_t a, uint32_t hi) { return (a - 1u) < hi; }

/* fp32 -> fp16, round to nearest even. NaN: sign and the top 9 payload bits
 * kept, quiet bit set (what F16C's vcvtps2ph does). Zeros and normals, which
 * interleave in real data, share one branch-free path; subnormals and
 * overflow/Inf/NaN are rare ranges with a branch each. */
NSC_HD uint16_t nsc_bits_f32_to_f16(uint32_t u) {
  uint32_t sign = (u >> 16) & 0x8000u;
  uint32_t a = u & 0x7fffffffu;
  uint32_t r;
  if (a - 1u < 0x387fffffu) {
    /* 0 < |x| < 2^-14: the significand with its implicit bit shifted right by
     * 126 - e (shifts past 25 all round to 0, so clamp at 31), rounded to
     * nearest even by adding half - 1 plus the kept lsb. */
    uint32_t e = a >> 23;
    uint32_t s = 126u - e < 31u ? 126u - e : 31u;
    uint32_t m = (a & 0x7fffffu) | 0x800000u;
    r = (m + (1u << (s - 1u)) - 1u + ((m >> s) & 1u)) >> s;
  } else if (a >= NSC_F16_OVF_LO) {
    r = a > NSC_F32_INF ? 0x7e00u | ((a >> 13) & 0x3ffu) : 0x7c00u;
  } else {
    /* Rebias the exponent (127 -> 15) and round away 13 bits the same way; a
     * carry out of the mantissa lands in the exponent, the right next binade.
     * a == 0 is masked to 0. */
    r = (a - 0x38000000u + 0x0fffu + ((a >> 13) & 1u)) >> 13;
    r &= 0u - (uint32_t)(a != 0u);
  }
  return (uint16_t)(sign | r);
}

/* fp16 -> fp32, exact. NaN: payload kept, quiet bit set (as vcvtph2ps). The
 * only branch is on the rare subnormals. */
NSC_HD uint32_t nsc_bits_f16_to_f32(uint16_t h) {
  uint32_t sign = ((uint32_t)h & 0x8000u) << 16;
  uint32_t e = ((uint32_t)h >> 10) & 0x1fu;
  uint32_t m = (uint32_t)h & 0x3ffu;
  uint32_t r;
  if (e == 0u && m != 0u) {
    /* m * 2^-24: the top set bit p of m becomes the implicit bit. */
    uint32_t p = 31u - (uint32_t)NSC_CLZ32(m);
    r = ((p + 103u) << 23) | ((m << (23u - p)) & 0x7fffffu);
  } else {
    uint32_t norm = (((uint32_t)h & 0x7fffu) << 13) + 0x38000000u;
    uint32_t special = NSC_F32_INF | (m << 13) | (m ? 0x400000u : 0u);
    uint32_t m_spec = 0u - (uint32_t)(e == 31u);
    r = (special & m_spec) | (norm & ~m_spec);
    r &= 0u - (uint32_t)(e != 0u); /* +-0 */
  }
  return sign | r;
}

/* fp32 -> bf16, round to nearest even; NaN keeps sign and top payload bits and
 * gets the quiet bit (so a NaN whose top 7 mantissa bits are 0 stays NaN). */
NSC_HD uint16_t nsc_bits_f32_to_bf16(uint32_t u) {
  uint32_t a = u & 0x7fffffffu;
  uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  uint32_t m_nan = 0u - (uint32_t)(a > NSC_F32_INF);
  return (uint16_t)((((u >> 16) | 0x40u) & m_nan) | (r & ~m_nan));
}

/* bf16 -> fp32: the bits are the top half of an fp32, exact (NaNs unchanged). */
NSC_HD uint32_t nsc_bits_bf16_to_f32(uint16_t h) { return (uint32_t)h << 16; }

#endif
/* wire_bits.h — the element-level rules of the 8-bit block-scaled wire
 * formats (int8 and fp8 e4m3 with one power-of-two scale per block), shared by
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
 * Inf of a sum whose exact value is finite: issue 26). The elements above
 * lim * 2^k (within one step below amax) round down there: |error| < 2^k <=
 * amax/64 (int8), relative < 2^-3 (fp8). Below 2^111 nothing changes, and
 * any n <= 2^16 such values sum below 2^127. So an element's sum over n
 * ranks is finite wherever the ranks' largest |x| within block - 1 elements
 * of it (the wire block holding it lies there) add up to at most
 * FLT_MAX (1 - n 2^-24) when each is at least 2^111, and at most
 * FLT_MAX (1 - n 2^-24) / (1 + e) otherwise, e = 2^-7 (int8), 2^-4 (fp8).
 * Power-of-two scales are exact: values that are small integers times a power
 * of two within the block's range come back exact (what the exactness tests
 * use), and -k, k never leave [-156, 156].
 *
 * Arithmetic: fp32 multiplies by powers of two and round-to-nearest-even to an
 * integer (rintf; __fmul_rn and rintf on the GPU): the defaults every
 * framework runs with (no flush-to-zero, round to nearest). NaN results are
 * the canonical quiet NaN 0x7fc00000 on every path.
 *
 * Must not: touch memory beyond its arguments or hold state. */
#ifndef NSC_WIRE_BITS_H
#define NSC_WIRE_BITS_H



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

#define NSC_W8_BIAS 512
#define NSC_W8_SPECIAL 0x8000u
#define NSC_W8_INVALID 0x7c00u
#define NSC_NAN_BITS 0x7fc00000u

/* 2^e for e in [-126, 127]. */
NSC_HD float nsc_pow2(int e) { return NSC_U2F((uint32_t)(e + 127) << 23); }
/* The two factors x is multiplied by for x * 2^e, |e| <= 156: the first
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

/* ---- int8 ---- */
NSC_HD int nsc_int8_k(uint32_t amax) { return amax ? nsc_ilog2_bits(amax) - 6 : 0; }
#define NSC_W8_TOP_BITS 0x77000000u /* 2^111: a top block's amax (bits) */
/* The block's largest code magnitude: 127 (126 with Inf/NaN), and in a top
 * block floor(amax * 2^-k) (exact: a power of two times amax, in [64, 128)). */
NSC_HD int nsc_int8_lim(uint32_t amax, int k, int special) {
  int m = special ? 126 : 127;
  if (amax < NSC_W8_TOP_BITS) return m;
  int t = (int)nsc_ldexp2(NSC_U2F(amax), -k);
  return t < m ? t : m;
}
NSC_HD float nsc_clampf(float v, float lim) { return v > lim ? lim : v < -lim ? -lim : v; }
/* Inf and NaN only occur in a block with Inf/NaN (lim <= 126 there). */
NSC_HD int8_t nsc_int8_code(float y, int k, int lim) {
  uint32_t u = NSC_F2U(y), a = u & 0x7fffffffu;
  if (a > NSC_F32_INF) return (int8_t)-128;
  if (a == NSC_F32_INF) return (int8_t)((u >> 31) ? -127 : 127);
  return (int8_t)(int)nsc_clampf(NSC_RINT(nsc_ldexp2(y, -k)), (float)lim);
}
NSC_HD float nsc_int8_value(int8_t c, uint16_t h) {
  if (h & NSC_W8_INVALID) return NSC_U2F(NSC_NAN_BITS);
  if (h & NSC_W8_SPECIAL) {
    if (c == -128) return NSC_U2F(NSC_NAN_BITS);
    if (c == 127) return NSC_U2F(NSC_F32_INF);
    if (c == -127) return NSC_U2F(NSC_F32_INF | 0x80000000u);
  }
  return nsc_ldexp2((float)c, (int)(h & 0x3ffu) - NSC_W8_BIAS);
}

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

NSC_HD float nsc_canon_nan(float x) { return x != x ? NSC_U2F(NSC_NAN_BITS) : x; }

/* ---- error feedback and stochastic rounding (wire.h nsc_enc_opt) ----
 *
 * Error feedback: the value encoded is y = x + r (x already multiplied by the
 * encode's scale; r the residual this element kept from its bucket's last
 * call; x itself when r is 0 or x is NaN, so -0 and NaN payloads are those of
 * the plain encode), clamped to the format's largest finite value where x
 * alone encodes finite but x + r would not (fp16 at 65520, bf16 at its
 * rounding threshold 0x7f7f8000, the 8-bit formats at fp32's overflow: a
 * residual never turns a finite input into Inf, issue 26; an input that
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
/* fmt: 0 fp16, 1 bf16, 2 int8, 3 fp8 (nsc_fmt_t). */
NSC_HD float nsc_ef_in(int fmt, float x, float r) {
  if (r == 0.0f || x != x) return x;
  float y = NSC_FADD(x, r);
  uint32_t ovf = fmt == 0 ? 0x477ff000u : fmt == 1 ? 0x7f7f8000u : NSC_F32_INF;
  uint32_t uy = NSC_F2U(y);
  if ((uy & 0x7fffffffu) >= ovf && (NSC_F2U(x) & 0x7fffffffu) < ovf)
    y = NSC_U2F((uy & 0x80000000u) | (fmt == 0 ? 0x477fe000u : fmt == 1 ? 0x7f7f0000u : 0x7f7fffffu));
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
NSC_HD int8_t nsc_int8_code_x(float y, int k, int lim, int sr, uint32_t u24) {
  int8_t c = nsc_int8_code(y, k, lim);
  if (!sr || !nsc_finite_f(y)) return c;
  float t = nsc_ldexp2(y, -k), v = (float)c;
  if (t == v) return c;
  int o = t > v ? c + 1 : c - 1;
  if (o > lim || o < -lim) return c;
  return nsc_sr_take(t, v, (float)o, u24) ? (int8_t)o : c;
}

/* A neighbouring code one step of magnitude from `code` towards y (whose
 * nearest code it is): `sign` the sign bit, `mag` the magnitude bits of code.
 * When code is a zero, the step goes to the smallest magnitude with y's sign. */
NSC_HD uint32_t nsc_sr_neighbour(uint32_t code, uint32_t sign, uint32_t mag, int up, int y_neg) {
  if (mag == 0u) return (y_neg ? sign : 0u) | 1u;
  return (code & sign) | (up ? mag + 1u : mag - 1u);
}

NSC_HD uint8_t nsc_fp8_code_x(float y, int k, uint32_t lim, int sr, uint32_t u24) {
  uint8_t c = nsc_fp8_code(y, k, lim);
  if (!sr || (c & 0x7eu) == 0x7eu) return c;
  float t = nsc_ldexp2(y, -k), v = nsc_e4m3_value(c);
  if (t == v) return c;
  int up = (t < 0.0f ? -t : t) > (v < 0.0f ? -v : v);
  if (up && (c & 0x7fu) >= lim) return c;
  uint8_t o = (uint8_t)nsc_sr_neighbour(c, 0x80u, c & 0x7fu, up, t < 0.0f);
  return nsc_sr_take(t, v, nsc_e4m3_value(o), u24) ? o : c;
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
/* cu_abi.h — what the CUDA kernels (kernels.cu, nvcc) and their host-side
 * launchers (cu_kernels.c, gcc) must agree on: block and tile sizes, the
 * segment table passed by value as a kernel parameter, and the kernel names.
 *
 * The segment table travels inside the kernel's parameters rather than through
 * a device copy: parameters are captured by value into CUDA graphs, need no
 * staging memory or host-to-device copy, and are ordered with the launch.
 * Small tables use a 2.6 KB parameter block (within the classic 4 KB limit);
 * larger ones the 32 KB parameters of CUDA 12.1+ drivers (which any driver
 * that loads this CUDA 13 fatbin has); beyond that, one launch per table.
 *
 * Must not: use anything but fixed-size integer types (layout must be the same
 * for both compilers) or include CUDA headers. */
#ifndef NSC_CU_ABI_H
#define NSC_CU_ABI_H


#define NSC_K_BLOCK 256   /* threads per block, every kernel */
#define NSC_K_TILE 4096   /* elements per tile: the unit a block takes at a time */
#define NSC_K_BLOCKS_PER_SM 8

/* One segment, device pointers; tile0 is the index of its first tile in the
 * table (prefix sum of ceil(count / NSC_K_TILE)). */
typedef struct {
  uint64_t src, dst; /* const float * / float * on the fp32 side */
  uint64_t count;    /* elements */
  uint64_t off;      /* element offset in the wire buffer */
  uint64_t tile0;
} nsc_kseg;

#define NSC_KSEG_SMALL 64
#define NSC_KSEG_LARGE 800 /* 32 000 bytes; the driver's limit is 32 764 for all params */

#define NSC_DEFINE_SEGTAB(name, cap)                                                   \
  typedef struct {                                                                     \
    uint32_t nseg, pad;                                                                \
    uint64_t ntiles;                                                                   \
    nsc_kseg s[cap];                                                                   \
  } name;
NSC_DEFINE_SEGTAB(nsc_ksegtab_small, NSC_KSEG_SMALL)
NSC_DEFINE_SEGTAB(nsc_ksegtab_large, NSC_KSEG_LARGE)

/* The options of an error-feedback / stochastic encode (tp_encx_*), one
 * parameter: flags NSC_KENC_EF (resid is read and rewritten), NSC_KENC_ZERO
 * (resid holds nothing yet: read as 0), NSC_KENC_SR (stochastic rounding
 * with the random stream key); counters as for the casts (may be 0). */
typedef struct {
  uint64_t key;
  uint64_t counters;
  uint32_t flags, pad;
} nsc_kencopt;
#define NSC_KENC_EF 1u
#define NSC_KENC_ZERO 2u
#define NSC_KENC_SR 4u

/* Kernel names (extern "C"), with their parameters:
 *   to_{f16,bf16}      (const float *src, uint16_t *dst, u64 n, float scale, u64 *counters)
 *   from_{f16,bf16}    (const uint16_t *src, float *dst, u64 n, float scale)
 *   seg_to_{f16,bf16}_{s,l}   (segtab tab, uint16_t *wire, float scale, u64 *counters)
 *   seg_from_{f16,bf16}_{s,l} (segtab tab, const uint16_t *wire, float scale)
 *   scale_{f32,f16,bf16} (const T *src, T *dst, u64 n, float f)
 *   scale_f64            (const double *src, double *dst, u64 n, double f)
 *   tp_enc_{int8,fp8}    (const float *src, uint8_t *dst, u64 n, u64 block, float scale)
 *   tp_dec_{f16,bf16,int8,fp8} (const uint8_t *src, float *dst, u64 n, u64 block, float scale)
 *   tp_sum_{f16,bf16,int8,fp8} (const uint8_t *base, u64 stride, u64 m, float *dst, u64 n,
 *                               u64 block, float post)
 *   tp_encx_{f16,bf16,int8,fp8} (const float *src, float *resid, uint8_t *dst, u64 n, u64 block,
 *                               float scale, nsc_kencopt opt)
 * counters (may be NULL): [0] overflow, [1] underflow, one atomicAdd per block. */
#define NSC_KERNEL_NAMES(X)                                                            \
  X(to_f16) X(to_bf16) X(from_f16) X(from_bf16)                                        \
  X(seg_to_f16_s) X(seg_to_bf16_s) X(seg_from_f16_s) X(seg_from_bf16_s)                \
  X(seg_to_f16_l) X(seg_to_bf16_l) X(seg_from_f16_l) X(seg_from_bf16_l)                \
  X(scale_f32) X(scale_f64) X(scale_f16) X(scale_bf16)                                \
  X(tp_enc_int8) X(tp_enc_fp8) X(tp_dec_f16) X(tp_dec_bf16) X(tp_dec_int8) X(tp_dec_fp8) \
  X(tp_sum_f16) X(tp_sum_bf16) X(tp_sum_int8) X(tp_sum_fp8)                           \
  X(tp_encx_f16) X(tp_encx_bf16) X(tp_encx_int8) X(tp_encx_fp8)

#endif
// kernels.cu — the GPU side of wire compression: fp32 <-> fp16/bf16 casts
// (plain and segmented), and dst = src * factor for fp32/fp64/fp16/bf16.
//
// Results are bit-identical to the host (cast_bits.h and x86 arithmetic): bf16
// uses the same integer rounding; fp16 uses the hardware's round-to-nearest-
// even conversion (exact on subnormals, +-Inf on overflow) with NaNs rewritten
// to the reference's quiet NaN; products that are NaN are made x86's NaN.
// Overflow/underflow are counted by the same ranges, summed per block and
// added with one atomicAdd per block and counter.
//
// Work is cut into tiles of NSC_K_TILE elements; blocks take tiles in a
// grid-stride loop (size_t indices, any count). A tile whose pointers are
// aligned moves 16-byte (or 8-byte) vectors, with all of a thread's loads in
// flight before its stores; any other tile goes element by element.
//
// Built with `nvcc -fatbin` only (compress/module.mk); launched through the
// driver API by cu_kernels.c. Must not: allocate, synchronise, use the CUDA
// runtime, or let src and dst of a cast overlap (scale kernels may be in place).

typedef unsigned long long u64;

// ---- element conversions ---------------------------------------------------

__device__ __forceinline__ uint16_t d_to_f16(float y) {
  uint32_t u = __float_as_uint(y), a = u & 0x7fffffffu;
  unsigned short h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(y));
  uint16_t nan = (uint16_t)(((u >> 16) & 0x8000u) | 0x7e00u | ((a >> 13) & 0x3ffu));
  return a > NSC_F32_INF ? nan : (uint16_t)h;
}

__device__ __forceinline__ float d_from_f16(uint16_t h) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"((unsigned short)h));
  uint32_t nan = (((uint32_t)h & 0x8000u) << 16) | 0x7fc00000u | (((uint32_t)h & 0x3ffu) << 13);
  return ((uint32_t)h & 0x7fffu) > 0x7c00u ? __uint_as_float(nan) : f;
}

__device__ __forceinline__ uint16_t d_to_bf16(float y) {
  return nsc_bits_f32_to_bf16(__float_as_uint(y));
}
__device__ __forceinline__ float d_from_bf16(uint16_t h) {
  return __uint_as_float(nsc_bits_bf16_to_f32(h));
}

// Products as x86 SSE forms them, so scaled results match the host bit for
// bit: the GPU returns one canonical NaN for any NaN product, x86 the NaN
// operand made quiet (the first if both are) or, for Inf * 0, the default NaN
// with the sign set. Only NaN products take the slow branch.
__device__ __forceinline__ float mul_x86(float x, float s) {
  float r = x * s;
  if (r != r) {
    uint32_t ux = __float_as_uint(x), us = __float_as_uint(s);
    r = __uint_as_float((ux & 0x7fffffffu) > NSC_F32_INF   ? ux | 0x400000u
                        : (us & 0x7fffffffu) > NSC_F32_INF ? us | 0x400000u
                                                           : 0xffc00000u);
  }
  return r;
}
__device__ __forceinline__ double mul_x86(double x, double s) {
  double r = x * s;
  if (r != r) {
    const u64 inf = 0x7ff0000000000000ull, q = 0x0008000000000000ull, m = ~(1ull << 63);
    u64 ux = (u64)__double_as_longlong(x), us = (u64)__double_as_longlong(s);
    r = __longlong_as_double((long long)((ux & m) > inf   ? ux | q
                                         : (us & m) > inf ? us | q
                                                          : 0xfff8000000000000ull));
  }
  return r;
}

// ---- element operations (functors with per-thread counters) --------------

template <int BF16> struct ToWire {
  float scale;
  bool do_scale;
  unsigned ov = 0, uf = 0;
  __device__ uint16_t operator()(float x) {
    float y = do_scale ? mul_x86(x, scale) : x;
    uint32_t a = __float_as_uint(y) & 0x7fffffffu;
    ov += nsc_bits_is_overflow(a, BF16 ? NSC_BF16_OVF_LO : NSC_F16_OVF_LO);
    uf += nsc_bits_is_underflow(a, BF16 ? NSC_BF16_UNF_HI : NSC_F16_UNF_HI);
    return BF16 ? d_to_bf16(y) : d_to_f16(y);
  }
};

template <int BF16> struct FromWire {
  float scale;
  bool do_scale;
  __device__ float operator()(uint16_t h) {
    float x = BF16 ? d_from_bf16(h) : d_from_f16(h);
    return do_scale ? mul_x86(x, scale) : x;
  }
};

template <typename T> struct Mul {
  T f;
  __device__ T operator()(T x) { return mul_x86(x, f); }
};
// fp16/bf16: widen, multiply in fp32, round back (as nsc_scale_buffer).
template <int BF16> struct MulWire {
  float f;
  __device__ uint16_t operator()(uint16_t h) {
    float x = mul_x86(BF16 ? d_from_bf16(h) : d_from_f16(h), f);
    return BF16 ? d_to_bf16(x) : d_to_f16(x);
  }
};

// ---- one tile ----------------------------------------------------------------

template <typename T, int V> struct alignas(sizeof(T) * V) Vec {
  T v[V];
};

// dst[i] = op(src[i]) for i < n (n <= NSC_K_TILE), by the whole block.
template <typename In, typename Out, int V, typename Op>
__device__ __forceinline__ void map_tile(const In *src, Out *dst, size_t n, Op &op) {
  typedef Vec<In, V> VI;
  typedef Vec<Out, V> VO;
  const int t = threadIdx.x;
  bool aligned = ((uintptr_t)src % sizeof(VI)) == 0 && ((uintptr_t)dst % sizeof(VO)) == 0;
  if (aligned && n == NSC_K_TILE) {
    // Full aligned tile: every load of this thread issued before any store.
    constexpr int PER = NSC_K_TILE / (V * NSC_K_BLOCK);
    VI in[PER];
#pragma unroll
    for (int k = 0; k < PER; k++) in[k] = reinterpret_cast<const VI *>(src)[t + k * NSC_K_BLOCK];
#pragma unroll
    for (int k = 0; k < PER; k++) {
      VO out;
#pragma unroll
      for (int j = 0; j < V; j++) out.v[j] = op(in[k].v[j]);
      reinterpret_cast<VO *>(dst)[t + k * NSC_K_BLOCK] = out;
    }
    return;
  }
  size_t first = 0;
  if (aligned) {
    size_t nv = n / V;
    for (size_t i = t; i < nv; i += NSC_K_BLOCK) {
      VI in = reinterpret_cast<const VI *>(src)[i];
      VO out;
#pragma unroll
      for (int j = 0; j < V; j++) out.v[j] = op(in.v[j]);
      reinterpret_cast<VO *>(dst)[i] = out;
    }
    first = nv * V;
  }
  for (size_t i = first + t; i < n; i += NSC_K_BLOCK) dst[i] = op(src[i]);
}

// ---- counters ------------------------------------------------------------------

__device__ __forceinline__ void block_count(unsigned ov, unsigned uf, u64 *counters) {
  __shared__ u64 s_ov[NSC_K_BLOCK / 32], s_uf[NSC_K_BLOCK / 32];
  u64 o = ov, u = uf;
#pragma unroll
  for (int k = 16; k > 0; k >>= 1) {
    o += __shfl_down_sync(0xffffffffu, o, k);
    u += __shfl_down_sync(0xffffffffu, u, k);
  }
  if ((threadIdx.x & 31) == 0) {
    s_ov[threadIdx.x >> 5] = o;
    s_uf[threadIdx.x >> 5] = u;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    o = u = 0;
    for (int w = 0; w < NSC_K_BLOCK / 32; w++) {
      o += s_ov[w];
      u += s_uf[w];
    }
    if (o) atomicAdd(&counters[0], o);
    if (u) atomicAdd(&counters[1], u);
  }
}

// ---- plain kernels ---------------------------------------------------------------

template <typename In, typename Out, int V, typename Op>
__device__ __forceinline__ void map_all(const In *src, Out *dst, u64 n, Op &op) {
  u64 ntiles = (n + NSC_K_TILE - 1) / NSC_K_TILE;
  for (u64 tile = blockIdx.x; tile < ntiles; tile += gridDim.x) {
    u64 start = tile * NSC_K_TILE;
    u64 len = n - start < NSC_K_TILE ? n - start : NSC_K_TILE;
    map_tile<In, Out, V>(src + start, dst + start, (size_t)len, op);
  }
}

template <int BF16>
__device__ __forceinline__ void to_wire(const float *src, uint16_t *dst, u64 n, float scale,
                                        u64 *counters) {
  ToWire<BF16> op{scale, scale != 1.0f};
  map_all<float, uint16_t, 4>(src, dst, n, op);
  if (counters) block_count(op.ov, op.uf, counters);
}

template <int BF16>
__device__ __forceinline__ void from_wire(const uint16_t *src, float *dst, u64 n, float scale) {
  FromWire<BF16> op{scale, scale != 1.0f};
  map_all<uint16_t, float, 4>(src, dst, n, op);
}

// ---- segmented kernels -----------------------------------------------------------

// The segment holding tile t: the last with tile0 <= t (the host drops empty
// segments, so that one has tiles).
template <typename Tab> __device__ __forceinline__ int find_seg(const Tab &tab, u64 t) {
  int lo = 0, hi = (int)tab.nseg - 1;
  while (lo < hi) {
    int mid = (lo + hi + 1) >> 1;
    if (tab.s[mid].tile0 <= t) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

template <int BF16, typename Tab>
__device__ __forceinline__ void seg_to_wire(const Tab &tab, uint16_t *wire, float scale,
                                            u64 *counters) {
  ToWire<BF16> op{scale, scale != 1.0f};
  for (u64 t = blockIdx.x; t < tab.ntiles; t += gridDim.x) {
    const nsc_kseg sg = tab.s[find_seg(tab, t)];
    u64 start = (t - sg.tile0) * NSC_K_TILE;
    u64 len = sg.count - start < NSC_K_TILE ? sg.count - start : NSC_K_TILE;
    map_tile<float, uint16_t, 4>((const float *)sg.src + start, wire + sg.off + start,
                                 (size_t)len, op);
  }
  if (counters) block_count(op.ov, op.uf, counters);
}

template <int BF16, typename Tab>
__device__ __forceinline__ void seg_from_wire(const Tab &tab, const uint16_t *wire,
                                              float scale) {
  FromWire<BF16> op{scale, scale != 1.0f};
  for (u64 t = blockIdx.x; t < tab.ntiles; t += gridDim.x) {
    const nsc_kseg sg = tab.s[find_seg(tab, t)];
    u64 start = (t - sg.tile0) * NSC_K_TILE;
    u64 len = sg.count - start < NSC_K_TILE ? sg.count - start : NSC_K_TILE;
    map_tile<uint16_t, float, 4>(wire + sg.off + start, (float *)sg.dst + start, (size_t)len,
                                 op);
  }
}

// ---- entry points ------------------------------------------------------------------

#define K extern "C" __global__ void __launch_bounds__(NSC_K_BLOCK)

K nsc_k_to_f16(const float *__restrict__ src, uint16_t *__restrict__ dst, u64 n, float scale,
               u64 *counters) {
  to_wire<0>(src, dst, n, scale, counters);
}
K nsc_k_to_bf16(const float *__restrict__ src, uint16_t *__restrict__ dst, u64 n, float scale,
                u64 *counters) {
  to_wire<1>(src, dst, n, scale, counters);
}
K nsc_k_from_f16(const uint16_t *__restrict__ src, float *__restrict__ dst, u64 n, float scale) {
  from_wire<0>(src, dst, n, scale);
}
K nsc_k_from_bf16(const uint16_t *__restrict__ src, float *__restrict__ dst, u64 n,
                  float scale) {
  from_wire<1>(src, dst, n, scale);
}

#define SEG_KERNELS(sfx, Tab)                                                          \
  K nsc_k_seg_to_f16_##sfx(const Tab tab, uint16_t *wire, float scale, u64 *counters) {   \
    seg_to_wire<0>(tab, wire, scale, counters);                                        \
  }                                                                                    \
  K nsc_k_seg_to_bf16_##sfx(const Tab tab, uint16_t *wire, float scale, u64 *counters) {  \
    seg_to_wire<1>(tab, wire, scale, counters);                                        \
  }                                                                                    \
  K nsc_k_seg_from_f16_##sfx(const Tab tab, const uint16_t *wire, float scale) {        \
    seg_from_wire<0>(tab, wire, scale);                                                \
  }                                                                                    \
  K nsc_k_seg_from_bf16_##sfx(const Tab tab, const uint16_t *wire, float scale) {       \
    seg_from_wire<1>(tab, wire, scale);                                                \
  }
SEG_KERNELS(s, nsc_ksegtab_small)
SEG_KERNELS(l, nsc_ksegtab_large)

// Scale kernels may run in place (src == dst): no __restrict__.
K nsc_k_scale_f32(const float *src, float *dst, u64 n, float f) {
  Mul<float> op{f};
  map_all<float, float, 4>(src, dst, n, op);
}
K nsc_k_scale_f64(const double *src, double *dst, u64 n, double f) {
  Mul<double> op{f};
  map_all<double, double, 2>(src, dst, n, op);
}
K nsc_k_scale_f16(const uint16_t *src, uint16_t *dst, u64 n, float f) {
  MulWire<0> op{f};
  map_all<uint16_t, uint16_t, 8>(src, dst, n, op);
}
K nsc_k_scale_bf16(const uint16_t *src, uint16_t *dst, u64 n, float f) {
  MulWire<1> op{f};
  map_all<uint16_t, uint16_t, 8>(src, dst, n, op);
}

// ---- two-phase wire formats (wire.h, element rules in wire_bits.h) --------
// The same element rules as the host reference, so results are bit-identical:
// products by scale/post as x86 forms them, sums with __fadd_rn in the order
// 0..m-1, NaN sums made the canonical 0x7fc00000. Host implementation of each
// kernel (for a CUDA driver double, and the oracle a GPU check compares to):
// tp_enc_* = nsc_fmt_encode_ref, tp_dec_* = nsc_fmt_decode_ref, tp_sum_* =
// nsc_fmt_decode_sum_ref (compress/wire_ref.c), same arguments; tp_encx_* =
// nsc_fmt_encode_opt_ref (error feedback, stochastic rounding; the element
// rules of wire_bits.h), run on the driver double by tests/t/16-cuda-backend.

template <int F>
__device__ __forceinline__ float fmt_value(const uint8_t *src, u64 n, u64 block, u64 i) {
  if (F == 0) return d_from_f16(((const uint16_t *)src)[i]);
  if (F == 1) return d_from_bf16(((const uint16_t *)src)[i]);
  u64 nb = (n + block - 1) / block, b = i / block;
  uint16_t h = (uint16_t)(src[2 * b] | (src[2 * b + 1] << 8));
  uint8_t c = src[2 * nb + i];
  return F == 2 ? nsc_int8_value((int8_t)c, h) : nsc_fp8_value(c, h);
}

template <int F>
__device__ void dec(const uint8_t *__restrict__ src, float *__restrict__ dst, u64 n, u64 block,
                    float scale) {
  for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x) {
    float v = fmt_value<F>(src, n, block, i);
    dst[i] = scale != 1.0f ? mul_x86(v, scale) : v;
  }
}

template <int F>
__device__ void decsum(const uint8_t *__restrict__ base, u64 stride, u64 m, float *__restrict__ dst, u64 n,
                       u64 block, float post) {
  for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x) {
    float s = fmt_value<F>(base, n, block, i);
    for (u64 j = 1; j < m; j++) s = __fadd_rn(s, fmt_value<F>(base + j * stride, n, block, i));
    if (post != 1.0f) s = __fmul_rn(s, post);
    dst[i] = s != s ? __uint_as_float(NSC_NAN_BITS) : s;
  }
}

#define TP_DEC(sfx, F)                                                                                        \
  K nsc_k_tp_dec_##sfx(const uint8_t *src, float *dst, u64 n, u64 block, float scale) {                         \
    dec<F>(src, dst, n, block, scale);                                                                        \
  }                                                                                                           \
  K nsc_k_tp_sum_##sfx(const uint8_t *base, u64 stride, u64 m, float *dst, u64 n, u64 block, float post) {      \
    decsum<F>(base, stride, m, dst, n, block, post);                                                          \
  }
TP_DEC(f16, 0)
TP_DEC(bf16, 1)
TP_DEC(int8, 2)
TP_DEC(fp8, 3)

// ---- error feedback and stochastic rounding (nsc_fmt_encode_opt_ref) ------

__device__ __forceinline__ float encx_y(int fmt, const float *src, const float *resid, u64 i, float scale,
                                        unsigned fl) {
  float x = scale != 1.0f ? mul_x86(src[i], scale) : src[i];
  return (fl & NSC_KENC_EF) && !(fl & NSC_KENC_ZERO) ? nsc_ef_in(fmt, x, resid[i]) : x;
}

template <int BF16>
__device__ void encx16(const float *__restrict__ src, float *__restrict__ resid, uint16_t *__restrict__ dst, u64 n,
                       float scale, nsc_kencopt o) {
  unsigned ov = 0, uf = 0, fl = o.flags;
  for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x) {
    float y = encx_y(BF16, src, resid, i, scale, fl);
    uint32_t a = __float_as_uint(y) & 0x7fffffffu;
    ov += nsc_bits_is_overflow(a, BF16 ? NSC_BF16_OVF_LO : NSC_F16_OVF_LO);
    uf += nsc_bits_is_underflow(a, BF16 ? NSC_BF16_UNF_HI : NSC_F16_UNF_HI);
    int sr = (fl & NSC_KENC_SR) != 0;
    uint16_t h = nsc_w16_code_x(BF16, y, sr, sr ? nsc_sr_bits(o.key, i) : 0u);
    dst[i] = h;
    if (fl & NSC_KENC_EF) resid[i] = nsc_ef_resid(y, nsc_w16_value(BF16, h));
  }
  if (o.counters) block_count(ov, uf, (u64 *)o.counters);
}

// One CTA per block of `block` elements (grid-stride over blocks): the
// largest finite |y| by a shared atomicMax, then one code per element. The
// plain encode (tp_enc_*) is this with no options.
template <int F>
__device__ void encx8(const float *__restrict__ src, float *__restrict__ resid, uint8_t *__restrict__ dst, u64 n,
                      u64 block, float scale, nsc_kencopt o) {
  __shared__ unsigned s_amax;
  __shared__ int s_spec;
  unsigned fl = o.flags;
  int sr = (fl & NSC_KENC_SR) != 0;
  u64 nb = (n + block - 1) / block;
  uint8_t *codes = dst + 2 * nb;
  for (u64 b = blockIdx.x; b < nb; b += gridDim.x) {
    u64 lo = b * block, hi = lo + block < n ? lo + block : n;
    if (threadIdx.x == 0) {
      s_amax = 0;
      s_spec = 0;
    }
    __syncthreads();
    unsigned am = 0;
    int sp = 0;
    for (u64 i = lo + threadIdx.x; i < hi; i += blockDim.x) {
      unsigned a = __float_as_uint(encx_y(F, src, resid, i, scale, fl)) & 0x7fffffffu;
      if (a >= NSC_F32_INF) sp = 1;
      else am = a > am ? a : am;
    }
    atomicMax(&s_amax, am);
    if (sp) s_spec = 1;
    __syncthreads();
    unsigned amax = s_amax;
    int special = s_spec;
    int k = F == 2 ? nsc_int8_k(amax) : nsc_fp8_k(amax);
    uint32_t lim = F == 2 ? (uint32_t)nsc_int8_lim(amax, k, special) : nsc_fp8_lim(amax, k);
    uint16_t h = (uint16_t)((unsigned)(k + NSC_W8_BIAS) | (special ? NSC_W8_SPECIAL : 0u));
    if (threadIdx.x == 0) {
      dst[2 * b] = (uint8_t)(h & 0xffu);
      dst[2 * b + 1] = (uint8_t)(h >> 8);
    }
    for (u64 i = lo + threadIdx.x; i < hi; i += blockDim.x) {
      float y = encx_y(F, src, resid, i, scale, fl);
      uint32_t u = sr ? nsc_sr_bits(o.key, i) : 0u;
      uint8_t c = F == 2 ? (uint8_t)nsc_int8_code_x(y, k, (int)lim, sr, u) : nsc_fp8_code_x(y, k, lim, sr, u);
      codes[i] = c;
      if (fl & NSC_KENC_EF) resid[i] = nsc_ef_resid(y, F == 2 ? nsc_int8_value((int8_t)c, h) : nsc_fp8_value(c, h));
    }
    __syncthreads();
  }
}

K nsc_k_tp_encx_f16(const float *src, float *resid, uint8_t *dst, u64 n, u64 block, float scale, nsc_kencopt o) {
  (void)block;
  encx16<0>(src, resid, (uint16_t *)dst, n, scale, o);
}
K nsc_k_tp_encx_bf16(const float *src, float *resid, uint8_t *dst, u64 n, u64 block, float scale, nsc_kencopt o) {
  (void)block;
  encx16<1>(src, resid, (uint16_t *)dst, n, scale, o);
}
K nsc_k_tp_enc_int8(const float *src, uint8_t *dst, u64 n, u64 block, float scale) {
  encx8<2>(src, NULL, dst, n, block, scale, nsc_kencopt{0, 0, 0, 0});
}
K nsc_k_tp_enc_fp8(const float *src, uint8_t *dst, u64 n, u64 block, float scale) {
  encx8<3>(src, NULL, dst, n, block, scale, nsc_kencopt{0, 0, 0, 0});
}
K nsc_k_tp_encx_int8(const float *src, float *resid, uint8_t *dst, u64 n, u64 block, float scale, nsc_kencopt o) {
  encx8<2>(src, resid, dst, n, block, scale, o);
}
K nsc_k_tp_encx_fp8(const float *src, float *resid, uint8_t *dst, u64 n, u64 block, float scale, nsc_kencopt o) {
  encx8<3>(src, resid, dst, n, block, scale, o);
}
