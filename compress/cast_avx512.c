/* cast_avx512.c — the AVX-512 buffer casts ("avx512"), 32 elements a step.
 *
 * fp16 through the EVEX forms of vcvtps2ph/vcvtph2ps (same rounding and NaN
 * rules as F16C); bf16 by the reference's integer round-to-nearest-even on 16
 * lanes, narrowed with vpmovdw. Deliberately not vcvtneps2bf16 (AVX512_BF16):
 * it flushes fp32 subnormals to zero, which is not round-to-nearest-even.
 * Counts through mask registers into 32-bit lanes, folded every
 * NSC_CAST_COUNT_BLOCK elements.
 *
 * Must not: be called on a CPU without AVX512F/BW, or compare floats for the
 * counts (denormals-are-zero would change them). */
#include <immintrin.h>

#include "cast_bits.h"
#include "cast_impl.h"

#define TGT __attribute__((target("avx512f,avx512bw")))
#define STEP 32

static TGT inline __m256i bf16_16(__m512i u) {
  __m512i hi = _mm512_srli_epi32(u, 16);
  __m512i r = _mm512_add_epi32(u, _mm512_set1_epi32(0x7fff));
  r = _mm512_srli_epi32(_mm512_add_epi32(r, _mm512_and_si512(hi, _mm512_set1_epi32(1))), 16);
  __m512i a = _mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff));
  __mmask16 nan = _mm512_cmpgt_epu32_mask(a, _mm512_set1_epi32((int)NSC_F32_INF));
  r = _mm512_mask_mov_epi32(r, nan, _mm512_or_si512(hi, _mm512_set1_epi32(0x40)));
  return _mm512_cvtepi32_epi16(r);
}

/* Adds 1 to the lanes of cnt where a is overflow (or underflow): the same
 * single unsigned compares as nsc_bits_is_overflow/underflow. */
static TGT inline __m512i count_ovf(__m512i cnt, __m512i a, uint32_t lo) {
  __mmask16 k = _mm512_cmplt_epu32_mask(_mm512_sub_epi32(a, _mm512_set1_epi32((int)lo)),
                                        _mm512_set1_epi32((int)(NSC_F32_INF - lo)));
  return _mm512_mask_add_epi32(cnt, k, cnt, _mm512_set1_epi32(1));
}
static TGT inline __m512i count_unf(__m512i cnt, __m512i a, uint32_t hi) {
  __mmask16 k = _mm512_cmplt_epu32_mask(_mm512_sub_epi32(a, _mm512_set1_epi32(1)),
                                        _mm512_set1_epi32((int)hi));
  return _mm512_mask_add_epi32(cnt, k, cnt, _mm512_set1_epi32(1));
}

static TGT inline __attribute__((always_inline)) size_t
to_wire_vec(nsc_fmt_t w, const float *src, uint16_t *dst, size_t n, float scale,
            nsc_cast_counts *c, int DS, int DC, int NT) {
  const __m512 vs = _mm512_set1_ps(scale);
  const __m512i absm = _mm512_set1_epi32(0x7fffffff);
  uint32_t olo = w == NSC_FMT_FP16 ? NSC_F16_OVF_LO : NSC_BF16_OVF_LO;
  uint32_t uhi = w == NSC_FMT_FP16 ? NSC_F16_UNF_HI : NSC_BF16_UNF_HI;
  size_t i = 0, nv = n - n % STEP;
  while (i < nv) {
    size_t end = nv - i > NSC_CAST_COUNT_BLOCK ? i + NSC_CAST_COUNT_BLOCK : nv;
    __m512i co = _mm512_setzero_si512(), cu = _mm512_setzero_si512();
    for (; i < end; i += STEP) {
      __m512 x0 = _mm512_loadu_ps(src + i), x1 = _mm512_loadu_ps(src + i + 16);
      if (DS) {
        x0 = _mm512_mul_ps(x0, vs);
        x1 = _mm512_mul_ps(x1, vs);
      }
      __m512i u0 = _mm512_castps_si512(x0), u1 = _mm512_castps_si512(x1);
      __m256i o0, o1;
      if (w == NSC_FMT_FP16) {
        o0 = _mm512_cvtps_ph(x0, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        o1 = _mm512_cvtps_ph(x1, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      } else {
        o0 = bf16_16(u0);
        o1 = bf16_16(u1);
      }
      __m512i out = _mm512_inserti64x4(_mm512_castsi256_si512(o0), o1, 1);
      if (DC) {
        __m512i a0 = _mm512_and_si512(u0, absm), a1 = _mm512_and_si512(u1, absm);
        co = count_ovf(count_ovf(co, a0, olo), a1, olo);
        cu = count_unf(count_unf(cu, a0, uhi), a1, uhi);
      }
      if (NT) _mm512_stream_si512((void *)(dst + i), out);
      else _mm512_storeu_si512((void *)(dst + i), out);
    }
    if (DC) {
      /* Each lane holds at most NSC_CAST_COUNT_BLOCK / 16 per block. */
      c->overflow += (uint32_t)_mm512_reduce_add_epi32(co);
      c->underflow += (uint32_t)_mm512_reduce_add_epi32(cu);
    }
  }
  if (NT) _mm_sfence();
  return nv;
}

static TGT inline __attribute__((always_inline)) size_t
from_wire_vec(nsc_fmt_t w, const uint16_t *src, float *dst, size_t n, float scale, int DS,
              int NT) {
  const __m512 vs = _mm512_set1_ps(scale);
  size_t nv = n - n % STEP;
  for (size_t i = 0; i < nv; i += STEP) {
    __m256i h0 = _mm256_loadu_si256((const __m256i *)(src + i));
    __m256i h1 = _mm256_loadu_si256((const __m256i *)(src + i + 16));
    __m512 x0, x1;
    if (w == NSC_FMT_FP16) {
      x0 = _mm512_cvtph_ps(h0);
      x1 = _mm512_cvtph_ps(h1);
    } else {
      x0 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h0), 16));
      x1 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h1), 16));
    }
    if (DS) {
      x0 = _mm512_mul_ps(x0, vs);
      x1 = _mm512_mul_ps(x1, vs);
    }
    if (NT) {
      _mm512_stream_ps(dst + i, x0);
      _mm512_stream_ps(dst + i + 16, x1);
    } else {
      _mm512_storeu_ps(dst + i, x0);
      _mm512_storeu_ps(dst + i + 16, x1);
    }
  }
  if (NT) _mm_sfence();
  return nv;
}

NSC_DEFINE_VEC_WIRE(TGT, 64, NSC_FMT_FP16, f16)
NSC_DEFINE_VEC_WIRE(TGT, 64, NSC_FMT_BF16, bf16)

static int have_avx512(void) {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw");
}

const nsc_cast_impl nsc_cast_impl_avx512 = {
    .name = "avx512",
    .available = have_avx512,
    .to_wire = {to_f16, to_bf16},
    .from_wire = {from_f16, from_bf16},
};
