/* test_ef_cuda.c — the two-phase kernels of the CUDA backend
 * (compress/kernels.cu tp_enc_*, tp_encx_*, tp_dec_*, tp_sum_*, launched by
 * cu_kernels.c) on the CUDA driver test double, which runs kernels.cu itself
 * compiled for the CPU (tests/simt), bit for bit against the scalar
 * reference (nsc_fmt_encode_opt_ref, nsc_fmt_decode_ref,
 * nsc_fmt_decode_sum_ref) and the host's fast path:
 *   - encode: bytes, residuals and the underflow counter, every format, with
 *     and without error feedback (first call: residuals read as zero; then
 *     carried), nearest and stochastic, and the plain encode;
 *   - decode (times a scale) and decode-and-sum of 1 or 3 contributions
 *     (times post), every format;
 * on inputs with Inf, NaN, zeros and subnormals (and, for the decoders,
 * blocks scaled down to 2^-120..2^-140, whose scales are fp32 subnormals or
 * below them), lengths that end inside a
 * block and more wire blocks than the grid has thread blocks, wire blocks of
 * 16 and 256, and operands at element offsets 0..3 from an allocation (the
 * pieces and shards of real calls start anywhere).
 * The double counts any access outside the buffers (exit 86 then).
 *
 *   test_ef_cuda     (TAP lines; exit 1 on any failure)
 *
 * On a GPU the same program checks the real kernels against the host path
 * (tests/gpu runs it). Must not: be linked into the shim. */
#include <cuda.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "tap_drv.h"
#include "wire.h"


static uint64_t rs = 0x243f6a8885a308d3ull;
static uint32_t rnd(void) {
  rs ^= rs >> 12; rs ^= rs << 25; rs ^= rs >> 27;
  return (uint32_t)((rs * 0x2545f4914f6cdd1dull) >> 32);
}
static float u2f(uint32_t u) { float x; memcpy(&x, &u, 4); return x; }

static void fill(float *x, size_t n) {
  for (size_t i = 0; i < n; i++) {
    uint32_t r = rnd() % 1000;
    if (r == 0) x[i] = INFINITY;
    else if (r == 1) x[i] = NAN;
    else if (r < 10) x[i] = 0.0f;
    else if (r < 14) x[i] = u2f(rnd() & 0x807fffffu);
    else x[i] = ldexpf((float)(rnd() % (1u << 24)) / (1u << 24) + 0.5f, (int)(rnd() % 40) - 20) * ((rnd() & 1) ? -1.f : 1.f);
  }
}

/* Decode (times a scale) and decode-and-sum of m = 1 or 3 contributions
 * (times post) of every format against the references, wire and result at
 * element offsets from their allocations. x and w are host scratch of the
 * sizes main allocates; dx, dw device scratch. */
static void dec_and_sum(const nsc_backend *be, CUstream s, float *x, uint8_t *w, CUdeviceptr dx, CUdeviceptr dw) {
  static const size_t lens[] = {1, 255, 4097, 70001};
  for (int fi = 0; fi < NSC_FMT_COUNT; fi++) { /* every row of compress/formats.h */
    nsc_fmt_t f = (nsc_fmt_t)fi;
    int ok = 1;
    for (size_t li = 0; li < 8 && ok; li++)
      for (int m = 1; m <= 3 && ok; m += 2) {
        /* operands 4 bytes apart at least (the scalar kernels), or a multiple
         * of 16, as two-phase's slots are (the wide ones, issue 34) */
        size_t n = lens[li % 4], block = li & 1 ? 256 : 16, one = nsc_fmt_bytes(f, n, block);
        size_t stride = li < 4 ? (one + 3) & ~(size_t)3 : (one + 15) & ~(size_t)15;
        size_t ow = (li + (size_t)m) % 2, od = (li + 1) % 4;
        float post = li % 4 == 2 ? 0.5f : 1.0f;
        for (int j = 0; j < m; j++) {
          fill(x, n);
          if (li >= 6) /* tiny blocks: scales 2^k below fp32's normal powers (the wide decoders' subnormal factors) */
            for (size_t i = 0; i < n; i++) x[i] *= 0x1p-120f;
          nsc_fmt_encode_ref(f, block, x, w + ow * 2 + (size_t)j * stride, n, 1.0f, NULL);
        }
        float *want = malloc(n * 4), *got = malloc(n * 4);
        DRV(cuMemcpyHtoD(dw, w, ow * 2 + (size_t)m * stride));
        CUdeviceptr pw = dw + ow * 2, pd = dx + od * 4;
        const char *what = m == 1 ? "decode" : "decode-and-sum";
        int rc = m == 1 ? be->fmt_decode((nsc_stream)s, f, block, (const void *)(uintptr_t)pw, (float *)(uintptr_t)pd,
                                         n, post)
                        : be->fmt_decode_sum((nsc_stream)s, f, block, (const void *)(uintptr_t)pw, stride, m,
                                             (float *)(uintptr_t)pd, n, post);
        if (m == 1) nsc_fmt_decode_ref(f, block, w + ow * 2, want, n, post);
        else nsc_fmt_decode_sum_ref(f, block, w + ow * 2, stride, m, want, n, post);
        if (rc) {
          printf("# %s %s: launch failed: %s\n", nsc_fmt_name(f), what, nsc_backend_error());
          ok = 0;
        } else {
          DRV(cuStreamSynchronize(s));
          DRV(cuMemcpyDtoH(got, pd, n * 4));
          if (memcmp(want, got, n * 4)) {
            size_t i = 0;
            while (i < n && !memcmp(want + i, got + i, 4)) i++;
            printf("# %s %s n %zu m %d block %zu: element %zu is %a, the reference %a\n", nsc_fmt_name(f), what, n, m,
                   block, i, (double)got[i], (double)want[i]);
            ok = 0;
          }
        }
        free(want);
        free(got);
      }
    char d[160];
    snprintf(d, sizeof d, "%s: decode and decode-and-sum (1 and 3 contributions) = reference, misaligned operands, "
             "slots 4 and 16 bytes apart", nsc_fmt_name(f));
    report(ok, d);
  }
}

int main(void) {
  CUstream s;
  const nsc_backend *be = drv_backend(&s);
  static const size_t lens[] = {1, 255, 1000, 70001};
  const size_t maxn = 70001 + 8, maxe = 8 * maxn; /* three wire runs of 70001 at most */
  float *x = malloc(maxn * 4), *rh = malloc(maxn * 4), *rd = malloc(maxn * 4), *rf = malloc(maxn * 4);
  uint8_t *eh = malloc(maxe), *ed = malloc(maxe), *ef_ = malloc(maxe);
  CUdeviceptr dx, dr, de;
  DRV(cuMemAlloc(&dx, maxn * 4));
  DRV(cuMemAlloc(&dr, maxn * 4));
  DRV(cuMemAlloc(&de, maxe));

  for (int fi = 0; fi < NSC_FMT_COUNT; fi++) /* every row of compress/formats.h */
    for (int mode = 0; mode < 4; mode++) { /* 0: EF nearest, 1: stochastic only, 2: EF + stochastic, 3: plain */
      int ok = 1;
      for (size_t li = 0; li < 7 && ok; li++) {
        nsc_fmt_t f = (nsc_fmt_t)fi;
        /* li 0-3: offsets that vary; 4-6 (issue 34's wide kernels): source and
         * residuals aligned, wire blocks of 256 and 512, the codes aligned or
         * not (li 6: the wire 2 bytes past its allocation) */
        static const size_t wlens[3] = {65536, 70001, 70001}, wblocks[3] = {256, 512, 256};
        size_t n = li < 4 ? lens[li] : wlens[li - 4], block = li < 4 ? (li == 3 ? 256 : 16) : wblocks[li - 4];
        size_t eb = nsc_fmt_bytes(f, n, block);
        float scale = li == 2 || li == 5 ? 0.25f : 1.0f;
        int ef = mode == 0 || mode == 2;
        /* element offsets of source, residuals and wire from their allocations */
        size_t ox = li < 4 ? (li + (size_t)mode) % 4 : 0, orr = li < 4 ? (li + 1) % 4 : 0, ow = li < 4 ? li % 2 : li == 6;
        CUdeviceptr px = dx + ox * 4, pr = dr + orr * 4, pe = de + ow * 2;
        for (int call = 0; call < 3 && ok; call++) {
          fill(x, n);
          DRV(cuMemcpyHtoD(px, x, n * 4));
          nsc_enc_opt oh = {ef ? rh : NULL, call == 0, mode == 1 || mode == 2, nsc_sr_key(5, (uint64_t)call, 1, (uint32_t)li)};
          nsc_enc_opt of = oh, od = oh;
          if (ef) {
            memcpy(rf, rh, n * 4);
            of.resid = rf;
          }
          od.resid = ef ? (float *)(uintptr_t)pr : NULL;
          nsc_cast_counts ch = {0, 0};
          nsc_fmt_encode_opt_ref(f, block, x, eh, n, scale, &oh, &ch);
          nsc_fmt_encode_opt(f, block, x, ef_, n, scale, &of, NULL);
          int rc = mode == 3 ? be->fmt_encode((nsc_stream)s, f, block, (const float *)(uintptr_t)px,
                                              (void *)(uintptr_t)pe, n, scale)
                             : be->fmt_encode_opt((nsc_stream)s, f, block, (const float *)(uintptr_t)px,
                                                  (void *)(uintptr_t)pe, n, scale, &od);
          if (rc) {
            printf("# launch failed: %s\n", nsc_backend_error());
            ok = 0;
            break;
          }
          DRV(cuStreamSynchronize(s));
          DRV(cuMemcpyDtoH(ed, pe, eb));
          if (memcmp(eh, ed, eb) || memcmp(eh, ef_, eb)) {
            printf("# %s mode %d n %zu call %d: encoded bytes differ (kernel %d, fast path %d)\n", nsc_fmt_name(f),
                   mode, n, call, !!memcmp(eh, ed, eb), !!memcmp(eh, ef_, eb));
            ok = 0;
          }
          if (ef) {
            DRV(cuMemcpyDtoH(rd, pr, n * 4));
            if (memcmp(rh, rd, n * 4) || memcmp(rh, rf, n * 4)) {
              printf("# %s mode %d n %zu call %d: residuals differ\n", nsc_fmt_name(f), mode, n, call);
              ok = 0;
            }
          }
        }
      }
      char what[160];
      snprintf(what, sizeof what, "%s %s: CUDA kernel = host fast path = reference, bytes and residuals, 3 calls, "
               "scalar and wide", 
               nsc_fmt_name((nsc_fmt_t)fi), mode == 0   ? "error feedback"
               : mode == 1 ? "stochastic"
               : mode == 2 ? "error feedback + stochastic"
                           : "no options (tp_enc_* / to_* casts)");
      report(ok, what);
    }
  dec_and_sum(be, s, x, eh, dx, de);
  cuMemFree(dx);
  cuMemFree(dr);
  cuMemFree(de);
  cuStreamDestroy(s);
  free(x); free(rh); free(rd); free(rf); free(eh); free(ed); free(ef_);
  return failures != 0;
}
