/* wire_ref.c — the scalar reference of the wire formats (wire.h): one element
 * at a time through the rules of wire_bits.h and the reference casts. The test
 * oracle for the fast host path and the CUDA kernels; never on a hot path.
 *
 * Must not: be clever. Compiled with -ffp-contract=off like wire.c, so a
 * multiply and an add are never fused into one rounding. */
#include <string.h>

#include "wire.h"
#include "wire_bits.h"

static float scaled(float x, float scale) { return scale != 1.0f ? x * scale : x; }

void nsc_fmt_encode_ref(nsc_fmt_t f, size_t block, const float *src, void *dst, size_t n, float scale,
                        nsc_cast_counts *counts) {
  nsc_enc_opt none = {NULL, 0, 0, 0};
  nsc_fmt_encode_opt_ref(f, block, src, dst, n, scale, &none, counts);
}

static float value_ref(nsc_fmt_t f, size_t block, const void *src, size_t n, size_t i) {
  if (f == NSC_FMT_FP16) return nsc_f16_to_f32_ref(((const uint16_t *)src)[i]);
  if (f == NSC_FMT_BF16) return nsc_bf16_to_f32_ref(((const uint16_t *)src)[i]);
  size_t nb = (n + block - 1) / block;
  uint16_t h;
  memcpy(&h, (const uint8_t *)src + 2 * (i / block), 2);
  return nsc_bs_value((int)f, nsc_code_get(f, (const uint8_t *)src + 2 * nb, i), h);
}

void nsc_fmt_decode_ref(nsc_fmt_t f, size_t block, const void *src, float *dst, size_t n, float scale) {
  for (size_t i = 0; i < n; i++) dst[i] = scaled(value_ref(f, block, src, n, i), scale);
}

void nsc_fmt_decode_sum_ref(nsc_fmt_t f, size_t block, const void *base, size_t stride, int m, float *dst,
                            size_t n, float post) {
  for (size_t i = 0; i < n; i++) {
    float s = value_ref(f, block, base, n, i);
    for (int j = 1; j < m; j++) s = s + value_ref(f, block, (const uint8_t *)base + (size_t)j * stride, n, i);
    dst[i] = nsc_canon_nan(scaled(s, post));
  }
}

uint64_t nsc_sr_key(uint64_t seed, uint64_t call, uint32_t rank, uint32_t run) {
  return nsc_mix64(nsc_mix64(nsc_mix64(seed ^ 0x6e63636c7368696dull) + call) + ((uint64_t)rank << 32 | run));
}

/* Element i's value to encode, y = x * scale + r (wire_bits.h). */
static float ef_y(nsc_fmt_t f, const float *src, const nsc_enc_opt *o, float scale, size_t i) {
  float x = scaled(src[i], scale);
  return o->resid && !o->resid_zero ? nsc_ef_in((int)f, x, o->resid[i]) : x;
}

/* Counts: fp16/bf16's overflow and underflow of the value encoded
 * (cast_bits.h), the block-scaled formats' values flushed to zero (wire_bits.h). */
void nsc_fmt_encode_opt_ref(nsc_fmt_t f, size_t block, const float *src, void *dst, size_t n, float scale,
                            const nsc_enc_opt *o, nsc_cast_counts *counts) {
  nsc_enc_opt none = {NULL, 0, 0, 0};
  nsc_cast_counts c = {0, 0};
  if (!o) o = &none;
  int sr = o->stochastic;
  if (!nsc_fmt_blocked(f)) {
    int bf = f == NSC_FMT_BF16;
    uint16_t *d = dst;
    for (size_t i = 0; i < n; i++) {
      float y = ef_y(f, src, o, scale, i);
      uint32_t a = NSC_F2U(y) & 0x7fffffffu;
      c.overflow += nsc_bits_is_overflow(a, bf ? NSC_BF16_OVF_LO : NSC_F16_OVF_LO);
      c.underflow += nsc_bits_is_underflow(a, bf ? NSC_BF16_UNF_HI : NSC_F16_UNF_HI);
      d[i] = sr ? nsc_w16_code_x(bf, y, 1, nsc_sr_bits(o->key, i)) : bf ? nsc_f32_to_bf16_ref(y) : nsc_f32_to_f16_ref(y);
      if (o->resid) o->resid[i] = nsc_ef_resid(y, nsc_w16_value(bf, d[i]));
    }
    if (counts) {
      counts->overflow += c.overflow;
      counts->underflow += c.underflow;
    }
    return;
  }
  size_t nb = (n + block - 1) / block;
  uint8_t *codes = (uint8_t *)dst + 2 * nb;
  for (size_t b = 0; b < nb; b++) {
    size_t lo = b * block, hi = lo + block < n ? lo + block : n;
    uint32_t amax = 0;
    int special = 0;
    for (size_t i = lo; i < hi; i++) {
      uint32_t a = NSC_F2U(ef_y(f, src, o, scale, i)) & 0x7fffffffu;
      if (a >= NSC_F32_INF) special = 1;
      else if (a > amax) amax = a;
    }
    int k = nsc_bs_k((int)f, amax);
    uint32_t lim = nsc_bs_lim((int)f, amax, k, special);
    uint16_t h = nsc_bs_header(k, special);
    memcpy((uint8_t *)dst + 2 * b, &h, 2);
    for (size_t i = lo; i < hi; i++) {
      float y = ef_y(f, src, o, scale, i);
      uint32_t u = sr ? nsc_sr_bits(o->key, i) : 0;
      uint32_t code = nsc_bs_code_x((int)f, y, k, lim, sr, u);
      nsc_code_put(f, codes, i, code);
      if (o->resid) o->resid[i] = nsc_ef_resid(y, nsc_bs_value((int)f, code, h));
      c.underflow += nsc_bs_flushed((int)f, NSC_F2U(y) & 0x7fffffffu, code);
    }
  }
  if (counts) counts->underflow += c.underflow;
}
