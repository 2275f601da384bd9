/* cast_avx2.c — the F16C/AVX2 buffer casts ("f16c"), 16 elements a step.
 *
 * fp16 uses the F16C instructions (vcvtps2ph with round-to-nearest-even,
 * vcvtph2ps), which match the scalar reference bit for bit, NaNs included;
 * bf16 does the reference's integer round-to-nearest-even on eight lanes.
 * Counts are kept in 32-bit lanes and folded every NSC_CAST_COUNT_BLOCK
 * elements. Compiled with target attributes only: the rest of the library
 * keeps the baseline ISA and cast.c calls in here only if the CPU has both
 * features.
 *
 * Must not: be called on a CPU without AVX2 and F16C, or use compare
 * instructions on floats for the counts (denormals-are-zero would change them). */
#include <immintrin.h>

#include "cast_bits.h"
#include "cast_impl.h"

#define TGT __attribute__((target("avx2,f16c")))
#define STEP 16

static TGT inline __m256i bf16_lanes(__m256 x) {
  __m256i u = _mm256_castps_si256(x);
  __m256i hi = _mm256_srli_epi32(u, 16);
  __m256i r = _mm256_add_epi32(u, _mm256_set1_epi32(0x7fff));
  r = _mm256_srli_epi32(_mm256_add_epi32(r, _mm256_and_si256(hi, _mm256_set1_epi32(1))), 16);
  __m256i a = _mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff));
  __m256i nan = _mm256_cmpgt_epi32(a, _mm256_set1_epi32((int)NSC_F32_INF));
  return _mm256_blendv_epi8(r, _mm256_or_si256(hi, _mm256_set1_epi32(0x40)), nan);
}

/* Lanes with lo <= a <= hi as -1 (a and the bounds are below 2^31). */
static TGT inline __m256i in_range(__m256i a, uint32_t lo, uint32_t hi) {
  return _mm256_and_si256(_mm256_cmpgt_epi32(a, _mm256_set1_epi32((int)lo - 1)),
                          _mm256_cmpgt_epi32(_mm256_set1_epi32((int)hi + 1), a));
}

static TGT inline uint64_t hsum(__m256i v) {
  uint32_t l[8];
  _mm256_storeu_si256((__m256i *)l, v);
  uint64_t s = 0;
  for (int i = 0; i < 8; i++) s += l[i];
  return s;
}

static TGT inline __attribute__((always_inline)) size_t
to_wire_vec(nsc_fmt_t w, const float *src, uint16_t *dst, size_t n, float scale,
            nsc_cast_counts *c, int DS, int DC, int NT) {
  const __m256 vs = _mm256_set1_ps(scale);
  const __m256i absm = _mm256_set1_epi32(0x7fffffff);
  uint32_t olo = w == NSC_FMT_FP16 ? NSC_F16_OVF_LO : NSC_BF16_OVF_LO;
  uint32_t uhi = w == NSC_FMT_FP16 ? NSC_F16_UNF_HI : NSC_BF16_UNF_HI;
  size_t i = 0, nv = n - n % STEP;
  while (i < nv) {
    size_t end = nv - i > NSC_CAST_COUNT_BLOCK ? i + NSC_CAST_COUNT_BLOCK : nv;
    __m256i co = _mm256_setzero_si256(), cu = _mm256_setzero_si256();
    for (; i < end; i += STEP) {
      __m256 x0 = _mm256_loadu_ps(src + i), x1 = _mm256_loadu_ps(src + i + 8);
      if (DS) {
        x0 = _mm256_mul_ps(x0, vs);
        x1 = _mm256_mul_ps(x1, vs);
      }
      __m256i out;
      if (w == NSC_FMT_FP16) {
        __m128i h0 = _mm256_cvtps_ph(x0, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        __m128i h1 = _mm256_cvtps_ph(x1, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        out = _mm256_set_m128i(h1, h0);
      } else {
        /* packus interleaves 128-bit lanes; the permute restores the order. */
        out = _mm256_packus_epi32(bf16_lanes(x0), bf16_lanes(x1));
        out = _mm256_permute4x64_epi64(out, 0xd8);
      }
      if (DC) {
        __m256i a0 = _mm256_and_si256(_mm256_castps_si256(x0), absm);
        __m256i a1 = _mm256_and_si256(_mm256_castps_si256(x1), absm);
        co = _mm256_sub_epi32(co, in_range(a0, olo, NSC_F32_INF - 1));
        co = _mm256_sub_epi32(co, in_range(a1, olo, NSC_F32_INF - 1));
        cu = _mm256_sub_epi32(cu, in_range(a0, 1, uhi));
        cu = _mm256_sub_epi32(cu, in_range(a1, 1, uhi));
      }
      if (NT) _mm256_stream_si256((__m256i *)(dst + i), out);
      else _mm256_storeu_si256((__m256i *)(dst + i), out);
    }
    if (DC) {
      c->overflow += hsum(co);
      c->underflow += hsum(cu);
    }
  }
  if (NT) _mm_sfence();
  return nv;
}

static TGT inline __attribute__((always_inline)) size_t
from_wire_vec(nsc_fmt_t w, const uint16_t *src, float *dst, size_t n, float scale, int DS,
              int NT) {
  const __m256 vs = _mm256_set1_ps(scale);
  size_t nv = n - n % STEP;
  for (size_t i = 0; i < nv; i += STEP) {
    __m128i h0 = _mm_loadu_si128((const __m128i *)(src + i));
    __m128i h1 = _mm_loadu_si128((const __m128i *)(src + i + 8));
    __m256 x0, x1;
    if (w == NSC_FMT_FP16) {
      x0 = _mm256_cvtph_ps(h0);
      x1 = _mm256_cvtph_ps(h1);
    } else {
      x0 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h0), 16));
      x1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h1), 16));
    }
    if (DS) {
      x0 = _mm256_mul_ps(x0, vs);
      x1 = _mm256_mul_ps(x1, vs);
    }
    if (NT) {
      _mm256_stream_ps(dst + i, x0);
      _mm256_stream_ps(dst + i + 8, x1);
    } else {
      _mm256_storeu_ps(dst + i, x0);
      _mm256_storeu_ps(dst + i + 8, x1);
    }
  }
  if (NT) _mm_sfence();
  return nv;
}

NSC_DEFINE_VEC_WIRE(TGT, 32, NSC_FMT_FP16, f16)
NSC_DEFINE_VEC_WIRE(TGT, 32, NSC_FMT_BF16, bf16)

static int have_f16c(void) {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c");
}

const nsc_cast_impl nsc_cast_impl_f16c = {
    .name = "f16c",
    .available = have_f16c,
    .to_wire = {to_f16, to_bf16},
    .from_wire = {from_f16, from_bf16},
};
