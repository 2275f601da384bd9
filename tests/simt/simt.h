/* simt.h — the part of CUDA's execution model that compress/kernels.cu uses,
 * so that the kernel source itself compiles with g++ and runs on the CPU
 * (tests/simt/kernels_host.cc, launched by the CUDA driver test double).
 *
 * What it models:
 *   - every thread of a block is a fiber with its own stack (simt.cc); the
 *     blocks of a grid run one after another, each to completion, which is
 *     one legal schedule of independent blocks;
 *   - __syncthreads() is a barrier of the whole block; a barrier some thread
 *     never reaches is a deadlock, reported as a fault (the GPU hangs);
 *   - warp shuffles exchange through the warp's 32 lanes in lockstep: every
 *     lane of the mask must arrive, the mask must be the whole warp;
 *   - __shared__ variables are one copy per block (per OS thread, and an OS
 *     thread runs one block at a time);
 *   - atomics are atomic (shared and global memory);
 *   - vector loads and stores (ld_vec/st_vec in kernels.cu) fault when
 *     misaligned, as the GPU's do (CUDA_ERROR_MISALIGNED_ADDRESS);
 *   - every global memory access of the kernels goes through their own
 *     accessors, which count loads and stores and their bytes here (the
 *     access width a test holds each kernel to; not a timing);
 *   - fp16 conversions as the PTX ISA defines cvt.rn.f16.f32 and
 *     cvt.f32.f16 (round to nearest even, the canonical NaN 0x7fff /
 *     0x7fffffff for any NaN), through the compiler's own _Float16;
 *   - fp32 arithmetic without contraction (built with -ffp-contract=off, as
 *     the fatbin is with --fmad=false).
 * What it does not model: timing and occupancy, memory ordering between
 * threads beyond barriers (a fiber runs until it waits), shared memory
 * starting uninitialised (a block sees what the last block of that OS thread
 * left), registers and spills, warp divergence inside one lane's code.
 *
 * Must not: be included by anything but the host build of kernels.cu, or
 * pretend to be the CUDA runtime (no cudaMalloc, no <<< >>>). */
#ifndef NSC_SIMT_H
#define NSC_SIMT_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline __attribute__((always_inline))
#define __launch_bounds__(...)
#define __shared__ static thread_local

struct simt_dim3 {
  unsigned x, y, z;
};
struct simt_lane {
  simt_dim3 tid, bid, bdim, gdim; /* threadIdx, blockIdx, blockDim, gridDim */
};
/* The lane the calling fiber runs (simt.cc). */
extern thread_local simt_lane *simt_cur;
#define threadIdx (simt_cur->tid)
#define blockIdx (simt_cur->bid)
#define blockDim (simt_cur->bdim)
#define gridDim (simt_cur->gdim)

extern "C" {
void simt_syncthreads(void);
/* mode 0: __shfl_down_sync (arg = delta), 1: __shfl_xor_sync (arg = lane mask) */
uint64_t simt_shfl(int mode, unsigned mask, uint64_t bits, unsigned arg, int width);
void simt_vec_access(const void *p, size_t bytes); /* faults when misaligned */
/* One global memory access of the kernels (kernels.cu's gld/gst/ld_vec/
 * st_vec): counted as a load or a store of `bytes`; a vector one (vec)
 * faults when misaligned. */
void simt_mem(const void *p, size_t bytes, int store, int vec);
uint16_t simt_cvt_rn_f16_f32(float x);
float simt_cvt_f32_f16(uint16_t h);
}

static inline void __syncthreads(void) { simt_syncthreads(); }

template <typename T> static inline T simt_shfl_t(int mode, unsigned mask, T v, unsigned arg, int width) {
  static_assert(sizeof(T) <= 8, "shuffles move up to 64 bits");
  uint64_t bits = 0;
  memcpy(&bits, &v, sizeof v);
  bits = simt_shfl(mode, mask, bits, arg, width);
  memcpy(&v, &bits, sizeof v);
  return v;
}
template <typename T> static inline T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32) {
  return simt_shfl_t(0, mask, v, delta, width);
}
template <typename T> static inline T __shfl_xor_sync(unsigned mask, T v, unsigned lane_mask, int width = 32) {
  return simt_shfl_t(1, mask, v, lane_mask, width);
}

template <typename T> static inline T atomicAdd(T *p, T v) { return __atomic_fetch_add(p, v, __ATOMIC_RELAXED); }
template <typename T> static inline T atomicMax(T *p, T v) {
  T old = __atomic_load_n(p, __ATOMIC_RELAXED);
  while (old < v && !__atomic_compare_exchange_n(p, &old, v, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
  }
  return old;
}

static inline uint32_t __float_as_uint(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}
static inline float __uint_as_float(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}
static inline long long __double_as_longlong(double d) {
  long long u;
  memcpy(&u, &d, 8);
  return u;
}
static inline double __longlong_as_double(long long u) {
  double d;
  memcpy(&d, &u, 8);
  return d;
}
/* Round-to-nearest fp32 operations, never contracted (the TU is built with
 * -ffp-contract=off; x86-64 has no excess precision). */
static inline float __fadd_rn(float a, float b) { return a + b; }
static inline float __fsub_rn(float a, float b) { return a - b; }
static inline float __fmul_rn(float a, float b) { return a * b; }
static inline float __fdiv_rn(float a, float b) { return a / b; }

#endif
