/* cast.h — the numeric core of wire compression on the host: fp32 <-> fp16/bf16.
 *
 * Plain C, no NCCL and no CUDA. The scalar functions are the reference and the
 * test oracle (also for the GPU kernels); the buffer functions dispatch once to
 * the fastest implementation the CPU supports (scalar, F16C/AVX2, AVX-512) and
 * give bit-identical results whichever runs. Rounding is round-to-nearest-even;
 * NaN stays NaN (quiet), +-Inf stays +-Inf, values beyond the wire type's range
 * become +-Inf (never clamped), fp16 subnormals are exact.
 *
 * Must not: allocate on the hot path, print, or depend on anything in shim/. */
#ifndef NSC_CAST_H
#define NSC_CAST_H

#include <stddef.h>
#include <stdint.h>

#include "formats.h"

/* What a cast to the wire type lost, counted per call (added to, never reset).
 * overflow: finite fp32 values that became +-Inf; underflow: non-zero values
 * that became +-0. Both judged on the value being rounded, i.e. after the
 * multiply by scale (a value the multiply itself makes Inf is not counted). */
typedef struct {
  uint64_t overflow;
  uint64_t underflow;
} nsc_cast_counts;

/* Scalar reference conversions (exact IEEE semantics as above). */
uint16_t nsc_f32_to_f16_ref(float x);
float nsc_f16_to_f32_ref(uint16_t h);
uint16_t nsc_f32_to_bf16_ref(float x);
float nsc_bf16_to_f32_ref(uint16_t h);

/* Buffer casts. `scale` multiplies each fp32 value before it is rounded
 * (to_wire) or after it is widened (from_wire); scale == 1.0f does no multiply.
 * Any alignment, any n including 0. counts may be NULL. Never fail. src and dst
 * must not overlap. w: NSC_FMT_FP16 or NSC_FMT_BF16 (the casts are those
 * two rows' codecs). fp16 -> fp32 quiets NaNs (as F16C does); bf16 -> fp32
 * is the exact bit extension. */
void nsc_cast_to_wire(nsc_fmt_t w, const float *src, uint16_t *dst, size_t n,
                      float scale, nsc_cast_counts *counts);
void nsc_cast_from_wire(nsc_fmt_t w, const uint16_t *src, float *dst, size_t n,
                        float scale);

/* dst[i] = src[i] * factor for a floating NCCL-like datatype given by element
 * size and kind, used for results of skipped (accumulated) calls; src == dst
 * allowed. kind: 'f' fp32, 'd' fp64, 'h' fp16, 'b' bf16. Returns 0, or -1 for an
 * unknown kind. fp32 multiplies by (float)factor in fp32, fp64 in fp64;
 * fp16/bf16 are widened, multiplied by (float)factor in fp32 and rounded back. */
int nsc_scale_buffer(char kind, const void *src, void *dst, size_t n, double factor);

/* Which implementation the buffer casts use ("scalar", "f16c", "avx512"), and a
 * way for tests and benchmarks to force one (returns -1 if the CPU lacks it;
 * NULL or "auto" restores the automatic choice).
 * nsc_cast_set_threads(t): use up to t threads for buffers of >= 4 MiB (default 1). */
const char *nsc_cast_impl_name(void);
int nsc_cast_force_impl(const char *name);
void nsc_cast_set_threads(int t);

#endif
