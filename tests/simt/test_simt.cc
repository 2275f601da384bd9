/* test_simt.cc — the execution model of tests/simt on small kernels of its
 * own: results that need barriers, lockstep shuffles and atomics to come
 * out right, and the faults a GPU would raise (a barrier not every thread
 * reaches, a shuffle mask that leaves lanes out, a misaligned vector
 * access), each a fault message and never a wrong answer or a hang.
 *
 *   test_simt    (TAP lines, "N passed, N failed"; exit 1 on any failure)
 *
 * Must not: test compress/kernels.cu (tests/unit/test_ef_cuda and
 * tests/gpu/check_kernels do, through the driver double). */
#include "simt.h"

#include <stdio.h>
#include <string.h>

#include "simt_kernels.h"

static int passed, failed;
static void report(int ok, const char *what) {
  printf("%s - %s\n", ok ? "ok" : "not ok", what);
  (ok ? passed : failed)++;
}

/* out[block * n + t] = sum over the warp of (t + 1), by a shuffle tree; then
 * every thread reads its right neighbour's value through shared memory. */
__global__ void k_reduce(unsigned *out) {
  __shared__ unsigned s[256];
  unsigned t = threadIdx.x, v = t + 1;
  for (int k = 16; k > 0; k >>= 1) v += __shfl_down_sync(0xffffffffu, v, k);
  v = __shfl_down_sync(0xffffffffu, v, 0); /* delta 0: its own */
  s[t] = (t & 31) == 0 ? v : 0;
  __syncthreads();
  out[blockIdx.x * blockDim.x + t] = s[(t + 32) % blockDim.x & ~31u];
}

__global__ void k_atomics(unsigned *out) {
  __shared__ unsigned mx, sum;
  if (threadIdx.x == 0) mx = sum = 0;
  __syncthreads();
  atomicMax(&mx, (threadIdx.x * 37u) % 251u);
  atomicAdd(&sum, 1u);
  __syncthreads();
  if (threadIdx.x == 0) {
    out[2 * blockIdx.x] = mx;
    out[2 * blockIdx.x + 1] = sum;
  }
}

__global__ void k_divergent_barrier(unsigned *out) {
  if (threadIdx.x < 200) __syncthreads();
  out[threadIdx.x] = 1;
}

__global__ void k_partial_mask(unsigned *out) {
  out[threadIdx.x] = __shfl_down_sync(0x0000ffffu, threadIdx.x, 1);
}

struct alignas(16) v4 {
  float v[4];
};
__global__ void k_vec(const float *src, float *dst) {
  const v4 *s = reinterpret_cast<const v4 *>(src);
  simt_vec_access(s + threadIdx.x, sizeof(v4));
  v4 x = s[threadIdx.x];
  dst[threadIdx.x] = x.v[0];
}

template <typename... A> struct tramp {
  template <void (*F)(A...)> static void run(void *const *args) { F(*static_cast<A *>(args[0])...); }
};
#define KERNEL(fn, ...) simt_kernel{#fn, 1, {0}, {8}, 8, &tramp<__VA_ARGS__>::run<fn>}

int main(void) {
  static unsigned out[4 * 256];
  simt_kernel reduce = KERNEL(k_reduce, unsigned *);
  unsigned *po = out;
  void *a1[] = {&po};
  const char *why = simt_launch(&reduce, 4, 256, a1);
  int ok = !why;
  /* warp w's sum of t + 1 over t in [32w, 32w + 32) = 1024 w + 528 */
  for (unsigned b = 0; b < 4 && ok; b++)
    for (unsigned t = 0; t < 256 && ok; t++) {
      unsigned w = ((t + 32) % 256) / 32;
      ok = out[b * 256 + t] == 1024 * w + 528;
    }
  report(ok, "shuffle-tree sums per warp through shared memory after __syncthreads, 4 blocks of 256");

  simt_kernel atom = KERNEL(k_atomics, unsigned *);
  memset(out, 0, sizeof out);
  why = simt_launch(&atom, 3, 256, a1);
  ok = !why;
  for (unsigned b = 0; b < 3; b++) ok = ok && out[2 * b] == 250 && out[2 * b + 1] == 256;
  report(ok, "shared-memory atomicMax and atomicAdd, 3 blocks");

  simt_kernel div = KERNEL(k_divergent_barrier, unsigned *);
  why = simt_launch(&div, 1, 256, a1);
  report(why && strstr(why, "deadlock: 200 of 256 threads wait at __syncthreads"),
         "a __syncthreads that 56 threads skip faults as a deadlock, not a result");
  if (why) printf("#   %s\n", why);

  simt_kernel mask = KERNEL(k_partial_mask, unsigned *);
  why = simt_launch(&mask, 1, 64, a1);
  report(why && strstr(why, "mask 0xffff"), "a shuffle whose mask leaves lanes out faults");
  if (why) printf("#   %s\n", why);

  static float buf[2048] __attribute__((aligned(16)));
  float *src = buf, *dst = buf + 1024;
  void *a2[] = {&src, &dst};
  simt_kernel vec{"k_vec", 2, {0, 8}, {8, 8}, 16, &tramp<const float *, float *>::run<k_vec>};
  why = simt_launch(&vec, 1, 32, a2);
  report(!why, "aligned 16-byte vector loads run");
  src = buf + 1;
  why = simt_launch(&vec, 1, 32, a2);
  report(why && strstr(why, "misaligned 16-byte vector access"), "a misaligned 16-byte vector load faults");
  if (why) printf("#   %s\n", why);

  ok = 1;
  static const float xs[] = {0.0f, -0.0f, 1.0f, 65504.0f, 65520.0f, 65519.99f, 5.96e-8f, 2.98e-8f, 2.99e-8f,
                             1e-10f, 3.0517578e-05f, -1.5f};
  static const uint16_t hs[] = {0x0000, 0x8000, 0x3c00, 0x7bff, 0x7c00, 0x7bff, 0x0001, 0x0000, 0x0001,
                                0x0000, 0x0200, 0xbe00};
  for (size_t i = 0; i < sizeof xs / sizeof xs[0]; i++)
    if (simt_cvt_rn_f16_f32(xs[i]) != hs[i]) {
      printf("#   cvt.rn.f16.f32(%a) = %#x, want %#x\n", (double)xs[i], simt_cvt_rn_f16_f32(xs[i]), hs[i]);
      ok = 0;
    }
  ok = ok && simt_cvt_rn_f16_f32(__uint_as_float(0x7fa00001u)) == 0x7fff &&
       __float_as_uint(simt_cvt_f32_f16(0x7e01)) == 0x7fffffffu && simt_cvt_f32_f16(0x0001) == 0x1p-24f;
  report(ok, "cvt.rn.f16.f32 / cvt.f32.f16: nearest even, ties, subnormals, overflow, canonical NaNs");

  simt_counts c;
  simt_get_counts(&c);
  report(c.faults == 3 && c.launches == 6, "counts: 6 launches, 3 faults");
  printf("%d passed, %d failed\n", passed, failed);
  return failed != 0;
}
