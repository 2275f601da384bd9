/* cast_scalar.c — the scalar reference conversions of cast.h and the scalar
 * buffer implementation, which every vector path uses for its unaligned head
 * and its tail and which the tests treat as the oracle.
 *
 * The conversions themselves live in cast_bits.h (shared with the CUDA
 * kernels); this file adds the buffer loops: the optional fp32 multiply by
 * scale and the exact overflow/underflow counts on the scaled value.
 *
 * Must not: use floating-point comparisons for the counts (they would change
 * with denormals-are-zero), or depend on anything outside compress/. */
#include <string.h>

#include "cast_bits.h"
#include "cast_impl.h"

static inline uint32_t f2u(float x) {
  uint32_t u;
  memcpy(&u, &x, sizeof u);
  return u;
}
static inline float u2f(uint32_t u) {
  float x;
  memcpy(&x, &u, sizeof x);
  return x;
}

uint16_t nsc_f32_to_f16_ref(float x) { return nsc_bits_f32_to_f16(f2u(x)); }
float nsc_f16_to_f32_ref(uint16_t h) { return u2f(nsc_bits_f16_to_f32(h)); }
uint16_t nsc_f32_to_bf16_ref(float x) { return nsc_bits_f32_to_bf16(f2u(x)); }
float nsc_bf16_to_f32_ref(uint16_t h) { return u2f(nsc_bits_bf16_to_f32(h)); }

/* One loop for both wire types; the flags are compile-time constants at each
 * call below, so the compiler emits a specialised loop without per-element
 * tests of scale or counts. */
static inline __attribute__((always_inline)) void
to_wire_loop(nsc_fmt_t w, const float *src, uint16_t *dst, size_t n, float scale,
             nsc_cast_counts *c, int do_scale, int do_count) {
  uint32_t ovf_lo = w == NSC_FMT_FP16 ? NSC_F16_OVF_LO : NSC_BF16_OVF_LO;
  uint32_t unf_hi = w == NSC_FMT_FP16 ? NSC_F16_UNF_HI : NSC_BF16_UNF_HI;
  uint64_t ovf = 0, unf = 0;
  size_t i = 0;
  /* bf16: blocks of a fixed 16 let the compiler vectorise the branch-free
   * conversion even at -O2's cheapest cost model (2-3x faster); fp16, with
   * its range branches, is faster as the plain loop below. */
  for (; w == NSC_FMT_BF16 && i + 16 <= n; i += 16) {
    uint32_t o = 0, un = 0;
    for (size_t j = i; j < i + 16; j++) {
      uint32_t u = f2u(do_scale ? src[j] * scale : src[j]);
      dst[j] = w == NSC_FMT_FP16 ? nsc_bits_f32_to_f16(u) : nsc_bits_f32_to_bf16(u);
      uint32_t a = u & 0x7fffffffu;
      o += nsc_bits_is_overflow(a, ovf_lo);
      un += nsc_bits_is_underflow(a, unf_hi);
    }
    if (do_count) {
      ovf += o;
      unf += un;
    }
  }
  for (; i < n; i++) {
    uint32_t u = f2u(do_scale ? src[i] * scale : src[i]);
    dst[i] = w == NSC_FMT_FP16 ? nsc_bits_f32_to_f16(u) : nsc_bits_f32_to_bf16(u);
    if (do_count) {
      uint32_t a = u & 0x7fffffffu;
      ovf += nsc_bits_is_overflow(a, ovf_lo);
      unf += nsc_bits_is_underflow(a, unf_hi);
    }
  }
  if (do_count) {
    c->overflow += ovf;
    c->underflow += unf;
  }
}

#define TO_WIRE_SCALAR(fn, W)                                                        \
  static void fn(const float *src, uint16_t *dst, size_t n, float scale,            \
                 nsc_cast_counts *c, int nt) {                                       \
    (void)nt;                                                                        \
    int sc = scale != 1.0f;                                                          \
    if (c && sc) to_wire_loop(W, src, dst, n, scale, c, 1, 1);                       \
    else if (c) to_wire_loop(W, src, dst, n, scale, c, 0, 1);                        \
    else if (sc) to_wire_loop(W, src, dst, n, scale, c, 1, 0);                       \
    else to_wire_loop(W, src, dst, n, scale, c, 0, 0);                               \
  }
TO_WIRE_SCALAR(scalar_to_f16, NSC_FMT_FP16)
TO_WIRE_SCALAR(scalar_to_bf16, NSC_FMT_BF16)

static inline __attribute__((always_inline)) void
from_wire_loop(nsc_fmt_t w, const uint16_t *src, float *dst, size_t n, float scale,
               int do_scale) {
  for (size_t i = 0; i < n; i++) {
    float x = u2f(w == NSC_FMT_FP16 ? nsc_bits_f16_to_f32(src[i])
                                     : nsc_bits_bf16_to_f32(src[i]));
    dst[i] = do_scale ? x * scale : x;
  }
}

static void scalar_from_f16(const uint16_t *src, float *dst, size_t n, float scale,
                            int nt) {
  (void)nt;
  if (scale != 1.0f) from_wire_loop(NSC_FMT_FP16, src, dst, n, scale, 1);
  else from_wire_loop(NSC_FMT_FP16, src, dst, n, scale, 0);
}

static void scalar_from_bf16(const uint16_t *src, float *dst, size_t n, float scale,
                             int nt) {
  (void)nt;
  if (scale != 1.0f) from_wire_loop(NSC_FMT_BF16, src, dst, n, scale, 1);
  else from_wire_loop(NSC_FMT_BF16, src, dst, n, scale, 0);
}

static int always(void) { return 1; }

const nsc_cast_impl nsc_cast_impl_scalar = {
    .name = "scalar",
    .available = always,
    .to_wire = {scalar_to_f16, scalar_to_bf16},
    .from_wire = {scalar_from_f16, scalar_from_bf16},
};
