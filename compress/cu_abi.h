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

#include <stdint.h>

#define NSC_K_BLOCK 256   /* threads per block, every kernel */
#define NSC_K_WARPS (NSC_K_BLOCK / 32) /* block-scaled encodes: a warp per wire block */
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
 * and per format of formats.h (its kernel suffix k: f16, bf16, int8, fp8, f16s, int4):
 *   tp_enc_<k>  block-scaled formats only (const float *src, uint8_t *dst, u64 n, u64 block, float scale)
 *   tp_dec_<k>  (const uint8_t *src, float *dst, u64 n, u64 block, float scale)
 *   tp_sum_<k>  (const uint8_t *base, u64 stride, u64 m, float *dst, u64 n, u64 block, float post)
 *   tp_encx_<k> (const float *src, float *resid, uint8_t *dst, u64 n, u64 block, float scale,
 *                nsc_kencopt opt)
 * counters (may be NULL): [0] overflow, [1] underflow, one atomicAdd per block. */
#define NSC_KERNEL_NAMES(X)                                                            \
  X(to_f16) X(to_bf16) X(from_f16) X(from_bf16)                                        \
  X(seg_to_f16_s) X(seg_to_bf16_s) X(seg_from_f16_s) X(seg_from_bf16_s)                \
  X(seg_to_f16_l) X(seg_to_bf16_l) X(seg_from_f16_l) X(seg_from_bf16_l)                \
  X(scale_f32) X(scale_f64) X(scale_f16) X(scale_bf16)                                \
  X(tp_enc_int8) X(tp_enc_fp8) X(tp_dec_f16) X(tp_dec_bf16) X(tp_dec_int8) X(tp_dec_fp8) \
  X(tp_sum_f16) X(tp_sum_bf16) X(tp_sum_int8) X(tp_sum_fp8)                           \
  X(tp_encx_f16) X(tp_encx_bf16) X(tp_encx_int8) X(tp_encx_fp8)                       \
  X(tp_enc_f16s) X(tp_dec_f16s) X(tp_sum_f16s) X(tp_encx_f16s)                       \
  X(tp_enc_int4) X(tp_dec_int4) X(tp_sum_int4) X(tp_encx_int4)

#endif
