// kernels.cu — the GPU side of wire compression: fp32 <-> fp16/bf16 casts
// (plain and segmented), and dst = src * factor for fp32/fp64/fp16/bf16.
//
// Results are bit-identical to the host (cast_bits.h and x86 arithmetic): bf16
// uses the same integer rounding; fp16 uses the hardware's round-to-nearest-
// even conversion (exact on subnormals, +-Inf on overflow) with NaNs rewritten
// to the reference's quiet NaN; products that are NaN are made x86's NaN.
// Overflow/underflow are counted by the same ranges, summed per block and
// added with one atomicAdd per block and counter, into device memory (cu_ctx.c
// copies the totals out when they are read).
//
// Work is cut into tiles of NSC_K_TILE elements; blocks take tiles in a
// grid-stride loop (size_t indices, any count). A tile whose pointers are
// aligned moves 16-byte (or 8-byte) vectors, with all of a thread's loads in
// flight before its stores; a tile whose pointers are misaligned by the same
// number of elements peels a scalar head and moves vectors after it; only
// pointers misaligned differently go element by element.
//
// Built with `nvcc -fatbin` only (compress/module.mk); launched through the
// driver API by cu_kernels.c. Must not: allocate, synchronise, use the CUDA
// runtime, or let src and dst of a cast overlap (scale kernels may be in place).
#include "cast_bits.h"
#include "formats.h"
#include "cu_abi.h"
#include "wire_bits.h"

typedef unsigned long long u64;

// ---- element conversions ---------------------------------------------------

__device__ __forceinline__ uint16_t d_to_f16(float y) {
  uint32_t u = __float_as_uint(y), a = u & 0x7fffffffu;
  unsigned short h;
#if defined(__CUDA_ARCH__)
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(y));
#else
  h = simt_cvt_rn_f16_f32(y); /* tests/simt: the instruction as the PTX ISA defines it */
#endif
  uint16_t nan = (uint16_t)(((u >> 16) & 0x8000u) | 0x7e00u | ((a >> 13) & 0x3ffu));
  return a > NSC_F32_INF ? nan : (uint16_t)h;
}

// The conversion instruction alone: exact for every finite fp16 and Inf; a
// NaN comes out as the instruction's NaN (callers that keep NaN bits use
// d_from_f16).
__device__ __forceinline__ float d_from_f16_raw(uint16_t h) {
  float f;
#if defined(__CUDA_ARCH__)
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"((unsigned short)h));
#else
  f = simt_cvt_f32_f16(h);
#endif
  return f;
}

__device__ __forceinline__ float d_from_f16(uint16_t h) {
  float f = d_from_f16_raw(h);
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

// Global memory: every load and store of a kernel goes through one of these.
// On the host build (tests/simt) each is counted (loads, stores, bytes: the
// access width tests/unit/kernel_access.c holds every kernel to), and a
// vector one checks its alignment and faults when it is wrong, as the GPU
// does. On the GPU they are plain accesses.
template <typename V> __device__ __forceinline__ V ld_vec(const V *p, size_t i) {
#if !defined(__CUDA_ARCH__)
  simt_mem(p + i, sizeof(V), 0, 1);
#endif
  return p[i];
}
template <typename V> __device__ __forceinline__ void st_vec(V *p, size_t i, const V &v) {
#if !defined(__CUDA_ARCH__)
  simt_mem(p + i, sizeof(V), 1, 1);
#endif
  p[i] = v;
}
template <typename T> __device__ __forceinline__ T gld(const T *p, size_t i) {
#if !defined(__CUDA_ARCH__)
  simt_mem(p + i, sizeof(T), 0, 0);
#endif
  return p[i];
}
template <typename T> __device__ __forceinline__ void gst(T *p, size_t i, T v) {
#if !defined(__CUDA_ARCH__)
  simt_mem(p + i, sizeof(T), 1, 0);
#endif
  p[i] = v;
}

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
    for (int k = 0; k < PER; k++) in[k] = ld_vec(reinterpret_cast<const VI *>(src), t + k * NSC_K_BLOCK);
#pragma unroll
    for (int k = 0; k < PER; k++) {
      VO out;
#pragma unroll
      for (int j = 0; j < V; j++) out.v[j] = op(in[k].v[j]);
      st_vec(reinterpret_cast<VO *>(dst), t + k * NSC_K_BLOCK, out);
    }
    return;
  }
  // Otherwise peel a scalar head up to the first element where both src and
  // dst are vector-aligned (they usually are together: chunks and shards start
  // at element offsets), vectorise from there, finish with a scalar tail.
  // Pointers whose offsets differ modulo V stay scalar.
  size_t head = 0;
  bool vec = aligned;
  if (!aligned && (uintptr_t)src % sizeof(In) == 0 && (uintptr_t)dst % sizeof(Out) == 0) {
    size_t h = (V - ((uintptr_t)src / sizeof(In)) % V) % V;
    vec = h < n && (uintptr_t)(src + h) % sizeof(VI) == 0 && (uintptr_t)(dst + h) % sizeof(VO) == 0;
    head = vec ? h : 0;
  }
  for (size_t i = t; i < head; i += NSC_K_BLOCK) gst(dst, i, op(gld(src, i)));
  size_t first = head;
  if (vec) {
    const VI *vs = reinterpret_cast<const VI *>(src + head);
    VO *vd = reinterpret_cast<VO *>(dst + head);
    size_t nv = (n - head) / V;
    for (size_t i = t; i < nv; i += NSC_K_BLOCK) {
      VI in = ld_vec(vs, i);
      VO out;
#pragma unroll
      for (int j = 0; j < V; j++) out.v[j] = op(in.v[j]);
      st_vec(vd, i, out);
    }
    first = head + nv * V;
  }
  for (size_t i = first + t; i < n; i += NSC_K_BLOCK) gst(dst, i, op(gld(src, i)));
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
// The two-phase kernels: at least 4 blocks of 256 per multiprocessor, so at
// most 64 registers a thread (issue 45; tests/gpu/kernel_regs.py holds them
// to it without a spill).
#define KT extern "C" __global__ void __launch_bounds__(NSC_K_BLOCK, 4)

K nsc_k_to_f16(const float *__restrict__ src, uint16_t *__restrict__ dst, u64 n, float scale,
               u64 *counters) {
  to_wire<NSC_FMT_FP16>(src, dst, n, scale, counters);
}
K nsc_k_to_bf16(const float *__restrict__ src, uint16_t *__restrict__ dst, u64 n, float scale,
                u64 *counters) {
  to_wire<NSC_FMT_BF16>(src, dst, n, scale, counters);
}
K nsc_k_from_f16(const uint16_t *__restrict__ src, float *__restrict__ dst, u64 n, float scale) {
  from_wire<NSC_FMT_FP16>(src, dst, n, scale);
}
K nsc_k_from_bf16(const uint16_t *__restrict__ src, float *__restrict__ dst, u64 n,
                  float scale) {
  from_wire<NSC_FMT_BF16>(src, dst, n, scale);
}

#define SEG_KERNELS(sfx, Tab)                                                          \
  K nsc_k_seg_to_f16_##sfx(const Tab tab, uint16_t *wire, float scale, u64 *counters) {   \
    seg_to_wire<NSC_FMT_FP16>(tab, wire, scale, counters);                                        \
  }                                                                                    \
  K nsc_k_seg_to_bf16_##sfx(const Tab tab, uint16_t *wire, float scale, u64 *counters) {  \
    seg_to_wire<NSC_FMT_BF16>(tab, wire, scale, counters);                                        \
  }                                                                                    \
  K nsc_k_seg_from_f16_##sfx(const Tab tab, const uint16_t *wire, float scale) {        \
    seg_from_wire<NSC_FMT_FP16>(tab, wire, scale);                                                \
  }                                                                                    \
  K nsc_k_seg_from_bf16_##sfx(const Tab tab, const uint16_t *wire, float scale) {       \
    seg_from_wire<NSC_FMT_BF16>(tab, wire, scale);                                                \
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
  MulWire<NSC_FMT_FP16> op{f};
  map_all<uint16_t, uint16_t, 8>(src, dst, n, op);
}
K nsc_k_scale_bf16(const uint16_t *src, uint16_t *dst, u64 n, float f) {
  MulWire<NSC_FMT_BF16> op{f};
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

// The wire runs as the kernels read them: per format the bits of a code,
// the codes of one 16-byte load (a group), and whether a 16-bit header per
// wire block precedes the codes.
// A format's code bits and whether it is block-scaled, read from its row
// (formats.h): the template argument F of every codec kernel below is the
// format's nsc_fmt_t, so a kernel and the row it encodes cannot disagree.
#define NSC_K_BITS(ID, name, bits, blocked, dt, k, bound, zero, doc) bits,
#define NSC_K_BLOCKED(ID, name, bits, blocked, dt, k, bound, zero, doc) blocked,
constexpr int k_bits[NSC_FMT_COUNT] = {NSC_FORMATS(NSC_K_BITS)};
constexpr int k_blocked[NSC_FMT_COUNT] = {NSC_FORMATS(NSC_K_BLOCKED)};
#undef NSC_K_BITS
#undef NSC_K_BLOCKED

template <int F> struct Wide {
  static constexpr int BITS = k_bits[F];   /* per code: the format's row */
  static constexpr int G = 128 / BITS;     /* codes per load */
  static constexpr bool BS = k_blocked[F]; /* block-scaled: a header per wire block */
};

// i / block and i % block along a grid-stride walk (i += step each time),
// with no division in the walk: its start and its step are divided once.
struct BlockWalk {
  u64 b, r, sb, sr, block;
  __device__ __forceinline__ BlockWalk(u64 i, u64 step, u64 blk)
      : b(i / blk), r(i % blk), sb(step / blk), sr(step % blk), block(blk) {}
  __device__ __forceinline__ void next() {
    b += sb;
    r += sr;
    if (r >= block) r -= block, b++;
  }
};

// Element i of a wire run (nb wire blocks: headers, then codes; i in wire
// block b): its value by the element rules of wire_bits.h.
template <int F>
__device__ __forceinline__ float wire_value(const uint8_t *src, u64 nb, u64 b, u64 i) {
  if (F == NSC_FMT_FP16) return d_from_f16(gld((const uint16_t *)src, i));
  if (F == NSC_FMT_BF16) return d_from_bf16(gld((const uint16_t *)src, i));
  uint16_t h = (uint16_t)(gld(src, 2 * b) | (gld(src, 2 * b + 1) << 8));
  uint32_t c = F == NSC_FMT_FP16S   ? (uint32_t)gld((const uint16_t *)(src + 2 * nb), i)
               : F == NSC_FMT_INT4 ? ((uint32_t)gld(src, 2 * nb + i / 2) >> (4 * (i & 1))) & 0xfu /* int4: a nibble */
                        : gld(src, 2 * nb + i);
  return nsc_bs_value(F, c, h);
}

// dst[i] for i = i0, i0 + nt, ... below hi, element by element: a decode
// (DEC: times f, x86's products) or the sum of m runs `stride` bytes apart
// in the order 0..m-1 (times f, NaN made canonical), as the reference.
template <int F, int DEC>
__device__ void decsum_each(const uint8_t *__restrict__ base, u64 stride, u64 m, float *__restrict__ dst, u64 i0,
                            u64 hi, u64 nt, u64 nb, u64 block, float f) {
  if (i0 >= hi) return;
  BlockWalk w(i0, nt, Wide<F>::BS ? block : 1);
  for (u64 i = i0; i < hi; i += nt, w.next()) {
    float s = wire_value<F>(base, nb, w.b, i);
    if (DEC) s = f != 1.0f ? mul_x86(s, f) : s;
    else {
      for (u64 j = 1; j < m; j++) s = __fadd_rn(s, wire_value<F>(base + j * stride, nb, w.b, i));
      if (f != 1.0f) s = __fmul_rn(s, f);
      if (s != s) s = __uint_as_float(NSC_NAN_BITS);
    }
    gst(dst, i, s);
  }
}

// ---- the same, wide: 16 bytes of codes per load ----------------------------
// Each thread takes groups of G consecutive elements (one 16-byte load of
// codes per operand, the header of the group's wire block, or of both blocks
// it straddles, read once) and stores them as float4s where the result is
// aligned (else one by one). The elements before the first 16-byte aligned
// code and after the last whole group go element by element. Taken when
// every operand's codes share one alignment (the stride a multiple of 16, as
// two-phase's slots are), codes and headers are aligned to their width, and
// a wire block holds a whole group at least; else decsum_each does it all.
//
// A group's headers are turned into one factor each (wire_scale: 2^k, a
// normal or subnormal fp32) and its codes into values by one conversion and
// one product each (fast_value); the bits are the element rules'
// (wire_bits.h): nsc_ldexp2's first product is exact for every code (code
// times 2^(k/2) stays normal), its second rounds code * 2^k once, as the one
// product by the exact 2^k does. What those rules treat apart (Inf/NaN in
// the block, an invalid header, a k whose 2^k is no fp32) sends the group's
// operand through the rules themselves, one element a trip (rare: blocks
// holding Inf/NaN, or malformed runs).
typedef Vec<uint32_t, 4> W16;
// Code k of a 16-byte load (little-endian; int4's nibble k % 2 of byte k / 2).
template <int F> __device__ __forceinline__ uint32_t code_of(const W16 &v, int k) {
  typedef Wide<F> X;
  constexpr int PER = 32 / X::BITS;
  return (v.v[k / PER] >> (X::BITS * (k % PER))) & ((1u << X::BITS) - 1u);
}

// A wire block's factor 2^k (a normal or subnormal fp32) and whether the
// fast path may use it: a valid header whose k is a power of two of fp32,
// and for int8/int4 no Inf/NaN in the block (their codes +-q, -q-1 then
// mean Inf/NaN; fp8's and fp16s's Inf/NaN codes are their own: fast_ok).
struct WireScale {
  float p;
  bool fast;
};
template <int F> __device__ __forceinline__ WireScale wire_scale(uint16_t h) {
  const int k = (int)(h & 0x3ffu) - NSC_W8_BIAS;
  const uint32_t bad = F == NSC_FMT_INT8 || F == NSC_FMT_INT4 ? NSC_W8_INVALID | NSC_W8_SPECIAL : NSC_W8_INVALID;
  const uint32_t bits = k >= -126 ? (uint32_t)(k + 127) << 23 : 1u << ((k + 149) & 31);
  return WireScale{__uint_as_float(bits), !(h & bad) && k >= -149 && k <= 127};
}
// fp8: no code of the group is Inf/NaN ((c & 0x7e) == 0x7e), four bytes at a time.
template <int F> __device__ __forceinline__ bool fast_ok(const W16 &v) {
  if (F != NSC_FMT_FP8) return true;
  uint32_t any = 0;
#pragma unroll
  for (int q = 0; q < 4; q++) {
    uint32_t x = (v.v[q] & 0x7e7e7e7eu) ^ 0x7e7e7e7eu; /* a zero byte: an Inf/NaN code (bytes <= 0x7f) */
    any |= (x - 0x01010101u) & 0x80808080u;
  }
  return any == 0;
}
// The value of code c whose block's factor is p (fast path): one conversion,
// one product (fp8: the e4m3 bits placed in fp32's, times 2^120, exact).
// fp16s' Inf and NaN codes come out Inf and NaN (the NaN's bits are made
// canonical by the caller).
template <int F> __device__ __forceinline__ float fast_value(uint32_t c, float p) {
  float x;
  if (F == NSC_FMT_INT8) x = (float)(int)(int8_t)(uint8_t)c;
  else if (F == NSC_FMT_INT4) x = (float)((int)(c << 28) >> 28);
  else if (F == NSC_FMT_FP8) x = __fmul_rn(__uint_as_float(((c & 0x80u) << 24) | ((c & 0x7fu) << 20)), 0x1p120f);
  else x = d_from_f16_raw((uint16_t)c);
  return __fmul_rn(x, p);
}
// fp16/bf16 (no headers): a code's value; in a sum any NaN will do (made
// canonical at the end), a decode keeps the reference's NaN.
template <int F, int DEC> __device__ __forceinline__ float w16_value(uint32_t c) {
  if (F == NSC_FMT_BF16) return __uint_as_float(c << 16);
  return DEC ? d_from_f16((uint16_t)c) : d_from_f16_raw((uint16_t)c);
}

template <int F>
__device__ __forceinline__ bool wide_ok(const uint8_t *base, u64 stride, u64 m, u64 n, u64 block) {
  typedef Wide<F> X;
  u64 nb = X::BS ? (n + block - 1) / block : 0;
  uintptr_t codes = (uintptr_t)(base + 2 * nb);
  return n >= 2 * (u64)X::G && (m < 2 || stride % 16 == 0) && (uintptr_t)base % 2 == 0 &&
         codes % (X::BITS == 16 ? 2 : 1) == 0 && (!X::BS || (block >= (u64)X::G && block <= 0xffffffffu)) &&
         m <= 0xffffffffu && (u64)gridDim.x * blockDim.x * X::G <= 0xffffffffu; /* 32-bit walks */
}

// DEC: a decode (times scale, x86's products), else a decode-and-sum of m
// operands (times post, NaN made canonical).
template <int F, int DEC>
__device__ void decsum_wide(const uint8_t *__restrict__ base, u64 stride, u64 m, float *__restrict__ dst, u64 n,
                            u64 block, float f) {
  typedef Wide<F> X;
  typedef Vec<float, 4> F4;
  constexpr int G = X::G;
  const u64 nb = X::BS ? (n + block - 1) / block : 0;
  const uintptr_t c0 = (uintptr_t)(base + 2 * nb);
  u64 head = ((16 - c0 % 16) % 16) * 8 / X::BITS; /* elements before the first aligned code */
  if (head > n) head = n;
  const u64 ng = (n - head) / G, tail = head + ng * G;
  const bool dvec = (uintptr_t)(dst + head) % 16 == 0;
  const u64 t0 = blockIdx.x * (u64)blockDim.x + threadIdx.x, nt = (u64)gridDim.x * blockDim.x;
  decsum_each<F, DEC>(base, stride, m, dst, t0, head, nt, nb, block, f);        /* before the first aligned code */
  decsum_each<F, DEC>(base, stride, m, dst, tail + t0, n, nt, nb, block, f); /* after the last whole group */
  if (t0 >= ng) return;
  /* This thread's groups g = t0, t0 + nt, ...: their codes in operand 0,
   * their results, and the wire block b of their first element and its
   * place r there (block < 2^32: wide_ok). */
  const W16 *cp = reinterpret_cast<const W16 *>(base + 2 * nb + head * X::BITS / 8) + t0; /* from base: a global load */
  float *out = dst + head + t0 * G, *const end = dst + tail;
  const u64 i00 = head + t0 * G;
  const unsigned gs = (unsigned)nt * G, blk = (unsigned)block; /* < 2^32: wide_ok */
  u64 b = X::BS ? i00 / block : 0;
  unsigned r = X::BS ? (unsigned)(i00 % block) : 0;
  const unsigned sb = X::BS ? gs / blk : 0, sr = X::BS ? gs % blk : 0;
  for (; out < end; out += gs, cp += (unsigned)nt) {
    /* the group's elements k < split lie in wire block b, the others in the next */
    const unsigned split = X::BS && blk - r < (unsigned)G ? blk - r : (unsigned)G;
    float s[G];
#pragma unroll
    for (int k = 0; k < G; k++) s[k] = -0.0f; /* -0 + x is x */
    const uint8_t *bj = base;
    const W16 *cj = cp;
    for (unsigned j = 0; j < (unsigned)m; j++, bj += stride, cj = reinterpret_cast<const W16 *>((const uint8_t *)cj + stride)) {
      const W16 v = ld_vec(cj, 0);
      if (!X::BS) {
#pragma unroll
        for (int k = 0; k < G; k++) {
          float x = w16_value<F, DEC>(code_of<F>(v, k));
          s[k] = DEC ? x : __fadd_rn(s[k], x);
        }
        continue;
      }
      /* split anew for each operand, as far as the compiler knows: else it
       * keeps G comparisons with it live across the operands (registers) */
      unsigned sj = split;
      asm volatile("" : "+r"(sj));
      const uint16_t *hj = reinterpret_cast<const uint16_t *>(bj);
      const uint16_t h0 = gld(hj, b), h1 = sj < (unsigned)G ? gld(hj, b + 1) : h0;
      const WireScale a = wire_scale<F>(h0), z = wire_scale<F>(h1);
      if (a.fast && z.fast && fast_ok<F>(v)) {
#pragma unroll
        for (int k = 0; k < G; k++) {
          float x = fast_value<F>(code_of<F>(v, k), (unsigned)k < sj ? a.p : z.p);
          s[k] = DEC ? x : __fadd_rn(s[k], x);
        }
      } else { /* rare: the element rules themselves, one element a trip */
        W16 c = v;
#pragma unroll 1
        for (unsigned k = 0; k < (unsigned)G; k++) {
          const float x = nsc_bs_value(F, c.v[0] & ((1u << X::BITS) - 1u), k < sj ? h0 : h1);
          const float t = DEC ? x : __fadd_rn(s[0], x);
          /* the next code to the bottom, the sums rotated by one: no register is indexed by k */
#pragma unroll
          for (int q = 0; q < 3; q++) c.v[q] = (c.v[q] >> X::BITS) | (c.v[q + 1] << (32 - X::BITS));
          c.v[3] >>= X::BITS;
#pragma unroll
          for (int q = 0; q < G - 1; q++) s[q] = s[q + 1];
          s[G - 1] = t;
        }
      }
    }
#pragma unroll
    for (int k = 0; k < G; k++) {
      if (DEC) {
        if (X::BS && s[k] != s[k]) s[k] = __uint_as_float(NSC_NAN_BITS);
        s[k] = f != 1.0f ? mul_x86(s[k], f) : s[k];
      } else {
        if (f != 1.0f) s[k] = __fmul_rn(s[k], f);
        if (s[k] != s[k]) s[k] = __uint_as_float(NSC_NAN_BITS);
      }
    }
    if (dvec) {
#pragma unroll
      for (int q = 0; q < G / 4; q++) {
        F4 o;
        o.v[0] = s[4 * q], o.v[1] = s[4 * q + 1], o.v[2] = s[4 * q + 2], o.v[3] = s[4 * q + 3];
        st_vec(reinterpret_cast<F4 *>(out), q, o);
      }
    } else {
#pragma unroll
      for (int k = 0; k < G; k++) gst(out, k, s[k]);
    }
    if (X::BS) { /* the next group's wire block, without a division */
      b += sb;
      r += sr;
      if (r >= blk) r -= blk, b++;
    }
  }
}

#define TP_DEC(sfx, F)                                                                                        \
  KT nsc_k_tp_dec_##sfx(const uint8_t *src, float *dst, u64 n, u64 block, float scale) {                         \
    if (wide_ok<F>(src, 0, 1, n, block)) decsum_wide<F, 1>(src, 0, 1, dst, n, block, scale);                  \
    else decsum_each<F, 1>(src, 0, 1, dst, blockIdx.x * (u64)blockDim.x + threadIdx.x, n,                     \
                           (u64)gridDim.x * blockDim.x, Wide<F>::BS ? (n + block - 1) / block : 0, block, scale); \
  }                                                                                                           \
  KT nsc_k_tp_sum_##sfx(const uint8_t *base, u64 stride, u64 m, float *dst, u64 n, u64 block, float post) {      \
    if (wide_ok<F>(base, stride, m, n, block)) decsum_wide<F, 0>(base, stride, m, dst, n, block, post);       \
    else decsum_each<F, 0>(base, stride, m, dst, blockIdx.x * (u64)blockDim.x + threadIdx.x, n,               \
                           (u64)gridDim.x * blockDim.x, Wide<F>::BS ? (n + block - 1) / block : 0, block, post); \
  }
TP_DEC(f16, NSC_FMT_FP16)
TP_DEC(bf16, NSC_FMT_BF16)
TP_DEC(int8, NSC_FMT_INT8)
TP_DEC(fp8, NSC_FMT_FP8)
TP_DEC(f16s, NSC_FMT_FP16S)
TP_DEC(int4, NSC_FMT_INT4)

// ---- error feedback and stochastic rounding (nsc_fmt_encode_opt_ref) ------

__device__ __forceinline__ float encx_y(int fmt, const float *src, const float *resid, u64 i, float scale,
                                        unsigned fl) {
  float v = gld(src, i), x = scale != 1.0f ? mul_x86(v, scale) : v;
  return (fl & NSC_KENC_EF) && !(fl & NSC_KENC_ZERO) ? nsc_ef_in(fmt, x, gld(resid, i)) : x;
}

// One element's code (and counters) from its y (encx_y).
template <int BF16>
__device__ __forceinline__ uint16_t code16(float y, u64 i, const nsc_kencopt &o, unsigned &ov, unsigned &uf) {
  uint32_t a = __float_as_uint(y) & 0x7fffffffu;
  ov += nsc_bits_is_overflow(a, BF16 ? NSC_BF16_OVF_LO : NSC_F16_OVF_LO);
  uf += nsc_bits_is_underflow(a, BF16 ? NSC_BF16_UNF_HI : NSC_F16_UNF_HI);
  int sr = (o.flags & NSC_KENC_SR) != 0;
  return nsc_w16_code_x(BF16, y, sr, sr ? nsc_sr_bits(o.key, i) : 0u);
}

// Element by element from i0, stride nt, below n.
template <int BF16>
__device__ __forceinline__ void encx16_each(const float *src, float *resid, uint16_t *dst, u64 i0, u64 nt, u64 n,
                                            float scale, const nsc_kencopt &o, unsigned &ov, unsigned &uf) {
  for (u64 i = i0; i < n; i += nt) {
    float y = encx_y(BF16, src, resid, i, scale, o.flags);
    uint16_t h = code16<BF16>(y, i, o, ov, uf);
    gst(dst, i, h);
    if (o.flags & NSC_KENC_EF) gst(resid, i, nsc_ef_resid(y, nsc_w16_value(BF16, h)));
  }
}

// Four consecutive elements per thread where the source (and residuals)
// are 16-byte and the codes 8-byte aligned after the same head: float4
// loads and stores, four codes in one store; the rest element by element.
template <int BF16>
__device__ void encx16(const float *__restrict__ src, float *__restrict__ resid, uint16_t *__restrict__ dst, u64 n,
                       float scale, nsc_kencopt o) {
  typedef Vec<float, 4> F4;
  typedef Vec<uint16_t, 4> H4;
  unsigned ov = 0, uf = 0, fl = o.flags;
  const u64 t0 = blockIdx.x * (u64)blockDim.x + threadIdx.x, nt = (u64)gridDim.x * blockDim.x;
  const bool ef = fl & NSC_KENC_EF, rd = ef && !(fl & NSC_KENC_ZERO);
  u64 head = (uintptr_t)src % 4 ? n : ((16 - (uintptr_t)src % 16) % 16) / 4;
  if (head > n) head = n;
  bool wide = head < n && (uintptr_t)(dst + head) % 8 == 0 && (!ef || (uintptr_t)(resid + head) % 16 == 0);
  if (!wide) {
    encx16_each<BF16>(src, resid, dst, t0, nt, n, scale, o, ov, uf);
  } else {
    const u64 ng = (n - head) / 4, tail = head + 4 * ng;
    encx16_each<BF16>(src, resid, dst, t0, nt, head, scale, o, ov, uf);
    encx16_each<BF16>(src, resid, dst, tail + t0, nt, n, scale, o, ov, uf);
    for (u64 g = t0; g < ng; g += nt) {
      const u64 i0 = head + 4 * g;
      F4 x = ld_vec(reinterpret_cast<const F4 *>(src + i0), 0), r;
      if (rd) r = ld_vec(reinterpret_cast<const F4 *>(resid + i0), 0);
      H4 c;
      F4 out;
#pragma unroll
      for (int k = 0; k < 4; k++) {
        float v = scale != 1.0f ? mul_x86(x.v[k], scale) : x.v[k];
        float y = rd ? nsc_ef_in(BF16, v, r.v[k]) : v;
        c.v[k] = code16<BF16>(y, i0 + k, o, ov, uf);
        out.v[k] = nsc_ef_resid(y, nsc_w16_value(BF16, c.v[k]));
      }
      st_vec(reinterpret_cast<H4 *>(dst + i0), 0, c);
      if (ef) st_vec(reinterpret_cast<F4 *>(resid + i0), 0, out);
    }
  }
  if (o.counters) block_count(ov, uf, (u64 *)o.counters);
}

// The warp's wire block b, once its lanes hold their largest finite |y| (am,
// as bits) and whether any y is Inf/NaN (sp): both reduced over the warp by
// xor-shuffles, the block's exponent k and code limit lim, and lane 0 writes
// the header (one 16-bit store where dst is even). Returns the header.
template <int F>
__device__ __forceinline__ uint16_t warp_block_scale(uint8_t *dst, u64 b, unsigned lane, unsigned am, unsigned sp,
                                                     int &k, uint32_t &lim) {
#pragma unroll
  for (int s = 16; s > 0; s >>= 1) {
    unsigned oa = __shfl_xor_sync(0xffffffffu, am, s), os = __shfl_xor_sync(0xffffffffu, sp, s);
    am = oa > am ? oa : am;
    sp |= os;
  }
  k = nsc_bs_k(F, am);
  lim = nsc_bs_lim(F, am, k, (int)sp);
  uint16_t h = nsc_bs_header(k, (int)sp);
  if (lane == 0) {
    if ((uintptr_t)dst % 2 == 0) gst(reinterpret_cast<uint16_t *>(dst), b, h);
    else {
      gst(dst, 2 * b, (uint8_t)(h & 0xffu));
      gst(dst, 2 * b + 1, (uint8_t)(h >> 8));
    }
  }
  return h;
}

// One warp per wire block of `block` elements (grid-stride over blocks, so
// a CTA encodes NSC_K_WARPS blocks at a time and no __syncthreads is needed):
// the largest finite |y| and "holds Inf/NaN" by xor-shuffle reductions, lane
// 0 writes the header, then one code per element (one byte, fp16s two). The
// plain encode (tp_enc_*) is this with no options.
//
// The wide way (encx8_block): a wire block of 256 or 512 elements, taken
// 256 at a time (a pass), 8 consecutive elements per lane: two float4 loads
// of the source (and of the residuals), the lane's y in registers; the
// header from the warp's maximum over the passes; the lane's 8 codes in one
// wide store (int4: 4 bytes, int8/fp8: 8, fp16s: two of 8), or one by one
// where the codes are not aligned; the residuals back as float4s. A block
// of 512 reads its first pass again for the codes (from L1: the same lines,
// just read; 8 values a lane keep the kernel within 64 registers, where 16
// took 89 to 119). The same element rules as encx8's loop, element for
// element.
template <int F>
__device__ __forceinline__ void encx8_load(const float *src, const float *resid, u64 i0, float scale, bool rd,
                                           float (&y)[8]) {
  typedef Vec<float, 4> F4;
#pragma unroll
  for (int q = 0; q < 2; q++) {
    F4 x = ld_vec(reinterpret_cast<const F4 *>(src + i0), q), r;
    if (rd) r = ld_vec(reinterpret_cast<const F4 *>(resid + i0), q);
#pragma unroll
    for (int k = 0; k < 4; k++) {
      float v = scale != 1.0f ? mul_x86(x.v[k], scale) : x.v[k];
      y[4 * q + k] = rd ? nsc_ef_in(F, v, r.v[k]) : v;
    }
  }
}

template <int F>
__device__ __forceinline__ void encx8_codes(const float (&y)[8], float *resid, uint8_t *codes, u64 i0, int kk,
                                            uint32_t lim, uint16_t h, const nsc_kencopt &o, bool cvec, unsigned &uf) {
  typedef Vec<float, 4> F4;
  typedef Vec<uint8_t, 8> C8;
  const unsigned fl = o.flags;
  const int sr = (fl & NSC_KENC_SR) != 0;
  uint32_t c[8];
#pragma unroll
  for (int k = 0; k < 8; k++) {
    uint32_t u = sr ? nsc_sr_bits(o.key, i0 + k) : 0u;
    c[k] = nsc_bs_code_x(F, y[k], kk, lim, sr, u);
    uf += nsc_bs_flushed(F, __float_as_uint(y[k]) & 0x7fffffffu, c[k]);
  }
  if (F == NSC_FMT_INT4) { /* int4: 4 bytes of two codes each, element 2j in the low nibble */
    typedef Vec<uint8_t, 4> CB;
    CB v;
#pragma unroll
    for (int j = 0; j < 4; j++) v.v[j] = (uint8_t)(c[2 * j] | (c[2 * j + 1] << 4));
    if (cvec) st_vec(reinterpret_cast<CB *>(codes + i0 / 2), 0, v);
    else
#pragma unroll
      for (int j = 0; j < 4; j++) gst(codes, i0 / 2 + j, v.v[j]);
  } else if (cvec) { /* 8 codes (8 or 16 bytes) in 8-byte stores */
#pragma unroll
    for (int q = 0; q < (F == NSC_FMT_FP16S ? 2 : 1); q++) {
      C8 v;
#pragma unroll
      for (int k = 0; k < 8; k++)
        v.v[k] = F == NSC_FMT_FP16S ? (uint8_t)(c[(8 * q + k) / 2] >> ((k & 1) * 8)) : (uint8_t)c[8 * q + k];
      st_vec(reinterpret_cast<C8 *>(codes + i0 * (F == NSC_FMT_FP16S ? 2 : 1)), q, v);
    }
  } else {
#pragma unroll
    for (int k = 0; k < 8; k++) {
      if (F == NSC_FMT_FP16S) gst(reinterpret_cast<uint16_t *>(codes), i0 + k, (uint16_t)c[k]);
      else gst(codes, i0 + k, (uint8_t)c[k]);
    }
  }
  if (fl & NSC_KENC_EF) {
#pragma unroll
    for (int q = 0; q < 2; q++) {
      F4 out;
#pragma unroll
      for (int k = 0; k < 4; k++) out.v[k] = nsc_ef_resid(y[4 * q + k], nsc_bs_value(F, c[4 * q + k], h));
      st_vec(reinterpret_cast<F4 *>(resid + i0), q, out);
    }
  }
}

template <int F>
__device__ __forceinline__ void encx8_block(const float *src, float *resid, uint8_t *dst, uint8_t *codes, u64 b,
                                            u64 lo, u64 block, float scale, const nsc_kencopt &o, bool cvec,
                                            unsigned &uf) {
  const unsigned lane = threadIdx.x & 31u, fl = o.flags;
  const bool rd = (fl & NSC_KENC_EF) && !(fl & NSC_KENC_ZERO);
  const unsigned passes = (unsigned)(block / 256); /* 1 or 2 */
  float y[8];
  unsigned am = 0, sp = 0;
#pragma unroll 1
  for (unsigned p = 0; p < passes; p++) {
    encx8_load<F>(src, resid, lo + 256 * p + 8 * lane, scale, rd, y);
#pragma unroll
    for (int k = 0; k < 8; k++) {
      unsigned a = __float_as_uint(y[k]) & 0x7fffffffu;
      if (a >= NSC_F32_INF) sp = 1;
      else am = a > am ? a : am;
    }
  }
  int kk;
  uint32_t lim;
  const uint16_t h = warp_block_scale<F>(dst, b, lane, am, sp, kk, lim);
  /* the last pass's y are in registers; an earlier pass is read again */
#pragma unroll 1
  for (unsigned p = passes; p-- > 0;) {
    const u64 i0 = lo + 256 * p + 8 * lane;
    if (p + 1 < passes) encx8_load<F>(src, resid, i0, scale, rd, y);
    encx8_codes<F>(y, resid, codes, i0, kk, lim, h, o, cvec, uf);
  }
}

template <int F>
__device__ void encx8(const float *__restrict__ src, float *__restrict__ resid, uint8_t *__restrict__ dst, u64 n,
                      u64 block, float scale, nsc_kencopt o) {
  unsigned fl = o.flags, uf = 0;
  int sr = (fl & NSC_KENC_SR) != 0;
  const unsigned lane = threadIdx.x & 31u, wpb = blockDim.x >> 5;
  const u64 nwarps = (u64)gridDim.x * wpb;
  u64 nb = (n + block - 1) / block;
  uint8_t *codes = dst + 2 * nb;
  /* Whole wire blocks of 256 or 512 go the wide way (encx8_block) where the
   * source and residuals are 16-byte aligned; their codes in wide stores
   * where those are aligned too. Warp-uniform: a launch's choice. */
  const bool ef = fl & NSC_KENC_EF;
  const bool wide = (block == 256 || block == 512) && (uintptr_t)src % 16 == 0 && (!ef || (uintptr_t)resid % 16 == 0);
  const bool cvec = (uintptr_t)codes % 8 == 0;
  for (u64 b = (u64)blockIdx.x * wpb + (threadIdx.x >> 5); b < nb; b += nwarps) { /* warp-uniform */
    u64 lo = b * block, hi = lo + block < n ? lo + block : n;
    if (wide && hi - lo == block) {
      encx8_block<F>(src, resid, dst, codes, b, lo, block, scale, o, cvec, uf);
      continue;
    }
    unsigned am = 0, sp = 0;
    for (u64 i = lo + lane; i < hi; i += 32) {
      unsigned a = __float_as_uint(encx_y(F, src, resid, i, scale, fl)) & 0x7fffffffu;
      if (a >= NSC_F32_INF) sp = 1;
      else am = a > am ? a : am;
    }
    int k;
    uint32_t lim;
    const uint16_t h = warp_block_scale<F>(dst, b, lane, am, sp, k, lim);
    if (F == NSC_FMT_INT4) { /* int4: a lane writes whole bytes, elements 2p and 2p + 1 (lo is even: config.c) */
      for (u64 p = lo / 2 + lane; 2 * p < hi; p += 32) {
        uint32_t byte = 0;
        for (u64 i = 2 * p; i < 2 * p + 2 && i < hi; i++) {
          float y = encx_y(F, src, resid, i, scale, fl);
          uint32_t u = sr ? nsc_sr_bits(o.key, i) : 0u;
          uint32_t c = nsc_bs_code_x(F, y, k, lim, sr, u);
          byte |= c << (4 * (i & 1));
          uf += nsc_bs_flushed(F, __float_as_uint(y) & 0x7fffffffu, c);
          if (fl & NSC_KENC_EF) gst(resid, i, nsc_ef_resid(y, nsc_bs_value(F, c, h)));
        }
        gst(codes, p, (uint8_t)byte);
      }
    } else {
      for (u64 i = lo + lane; i < hi; i += 32) {
        float y = encx_y(F, src, resid, i, scale, fl);
        uint32_t u = sr ? nsc_sr_bits(o.key, i) : 0u;
        uint32_t c = nsc_bs_code_x(F, y, k, lim, sr, u);
        if (F == NSC_FMT_FP16S) gst((uint16_t *)codes, i, (uint16_t)c);
        else gst(codes, i, (uint8_t)c);
        uf += nsc_bs_flushed(F, __float_as_uint(y) & 0x7fffffffu, c);
        if (fl & NSC_KENC_EF) gst(resid, i, nsc_ef_resid(y, nsc_bs_value(F, c, h)));
      }
    }
  }
  if (o.counters) block_count(0, uf, (u64 *)o.counters); /* every thread of the CTA reaches it */
}

KT nsc_k_tp_encx_f16(const float *src, float *resid, uint8_t *dst, u64 n, u64 block, float scale, nsc_kencopt o) {
  (void)block;
  encx16<NSC_FMT_FP16>(src, resid, (uint16_t *)dst, n, scale, o);
}
KT nsc_k_tp_encx_bf16(const float *src, float *resid, uint8_t *dst, u64 n, u64 block, float scale, nsc_kencopt o) {
  (void)block;
  encx16<NSC_FMT_BF16>(src, resid, (uint16_t *)dst, n, scale, o);
}
KT nsc_k_tp_enc_int8(const float *src, uint8_t *dst, u64 n, u64 block, float scale, u64 *counters) {
  encx8<NSC_FMT_INT8>(src, NULL, dst, n, block, scale, nsc_kencopt{0, (uint64_t)counters, 0, 0});
}
KT nsc_k_tp_enc_fp8(const float *src, uint8_t *dst, u64 n, u64 block, float scale, u64 *counters) {
  encx8<NSC_FMT_FP8>(src, NULL, dst, n, block, scale, nsc_kencopt{0, (uint64_t)counters, 0, 0});
}
KT nsc_k_tp_enc_f16s(const float *src, uint8_t *dst, u64 n, u64 block, float scale, u64 *counters) {
  encx8<NSC_FMT_FP16S>(src, NULL, dst, n, block, scale, nsc_kencopt{0, (uint64_t)counters, 0, 0});
}
KT nsc_k_tp_encx_f16s(const float *src, float *resid, uint8_t *dst, u64 n, u64 block, float scale, nsc_kencopt o) {
  encx8<NSC_FMT_FP16S>(src, resid, dst, n, block, scale, o);
}
KT nsc_k_tp_encx_int8(const float *src, float *resid, uint8_t *dst, u64 n, u64 block, float scale, nsc_kencopt o) {
  encx8<NSC_FMT_INT8>(src, resid, dst, n, block, scale, o);
}
KT nsc_k_tp_encx_fp8(const float *src, float *resid, uint8_t *dst, u64 n, u64 block, float scale, nsc_kencopt o) {
  encx8<NSC_FMT_FP8>(src, resid, dst, n, block, scale, o);
}
KT nsc_k_tp_enc_int4(const float *src, uint8_t *dst, u64 n, u64 block, float scale, u64 *counters) {
  encx8<NSC_FMT_INT4>(src, NULL, dst, n, block, scale, nsc_kencopt{0, (uint64_t)counters, 0, 0});
}
KT nsc_k_tp_encx_int4(const float *src, float *resid, uint8_t *dst, u64 n, u64 block, float scale, nsc_kencopt o) {
  encx8<NSC_FMT_INT4>(src, resid, dst, n, block, scale, o);
}
