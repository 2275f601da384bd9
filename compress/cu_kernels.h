/* cu_kernels.h — launching the kernels of kernels.cu on a caller's stream:
 * the GPU counterparts of the buffer casts and nsc_scale_buffer.
 *
 * Pointers are device pointers (or anything the kernels may dereference);
 * every call enqueues on stream s of context c and returns at once. Counts of
 * to-wire casts go to c's host-mapped counters.
 *
 * Must not: synchronise, allocate, or copy memory: the segment table travels
 * inside the kernel parameters (cu_abi.h), so launches stay legal and
 * self-contained under CUDA graph capture. */
#ifndef NSC_CU_KERNELS_H
#define NSC_CU_KERNELS_H

#include <stddef.h>

#include "cast.h"
#include "wire.h"
#include "cu_ctx.h"

/* One fp32 tensor of a fused group: the same fields, in the same order, as
 * nsc_seg in shim/backend/backend.h (which asserts it). */
typedef struct {
  const float *src;
  float *dst;
  size_t count;
  size_t off;
} nsc_cu_seg;

/* Returns CUDA_SUCCESS or the failing call's result, *what naming it. */
CUresult nsc_cuk_to_wire(nsc_cuctx *c, CUstream s, nsc_fmt_t w, const float *src, void *dst,
                         size_t n, float scale, const char **what);
CUresult nsc_cuk_from_wire(nsc_cuctx *c, CUstream s, nsc_fmt_t w, const void *src,
                           float *dst, size_t n, float scale, const char **what);
/* All segments' fp32 data to (to_wire) or from the wire buffer at their
 * offsets: one launch per up to NSC_KSEG_LARGE non-empty segments. */
CUresult nsc_cuk_seg(nsc_cuctx *c, CUstream s, int to_wire, nsc_fmt_t w,
                     const nsc_cu_seg *segs, int nseg, void *wire, float scale,
                     const char **what);
/* dst = src * factor; kind 'f', 'd', 'h', 'b' (CUDA_ERROR_INVALID_VALUE for
 * others). fp32/fp16/bf16 multiply by (float)factor in fp32, fp64 in fp64. */
CUresult nsc_cuk_scale(nsc_cuctx *c, CUstream s, char kind, const void *src, void *dst,
                       size_t n, double factor, const char **what);

/* The two-phase wire formats (wire.h): encode (fp16/bf16: the casts above),
 * decode, and decode-and-sum of m runs `stride` bytes apart. */
CUresult nsc_cuk_fmt_encode(nsc_cuctx *c, CUstream s, nsc_fmt_t f, size_t block, const float *src,
                            void *dst, size_t n, float scale, const char **what);
CUresult nsc_cuk_fmt_decode(nsc_cuctx *c, CUstream s, nsc_fmt_t f, size_t block, const void *src,
                            float *dst, size_t n, float scale, const char **what);
CUresult nsc_cuk_fmt_decode_sum(nsc_cuctx *c, CUstream s, nsc_fmt_t f, size_t block, const void *base,
                                size_t stride, int m, float *dst, size_t n, float post, const char **what);
/* nsc_fmt_encode_opt on the GPU (error feedback, stochastic rounding): one
 * launch whatever the options; resid a device buffer of n floats when
 * o->resid. Without either option it is nsc_cuk_fmt_encode. */
CUresult nsc_cuk_fmt_encode_opt(nsc_cuctx *c, CUstream s, nsc_fmt_t f, size_t block, const float *src,
                                void *dst, size_t n, float scale, const nsc_enc_opt *o, const char **what);

#endif
