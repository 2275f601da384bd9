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

#include <stdint.h>

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
