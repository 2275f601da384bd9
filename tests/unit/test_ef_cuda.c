/* test_ef_cuda.c — the error-feedback / stochastic encode of the CUDA
 * backend (compress/kernels.cu tp_encx_*, launched by cu_kernels.c) on the
 * CUDA driver test double, whose host implementation of each kernel is the
 * reference (nsc_fmt_encode_opt_ref), against the host's fast path
 * (nsc_fmt_encode_opt): encoded bytes and residuals bit for bit, for every
 * format, with and without error feedback (first call: residuals read as
 * zero; then carried), nearest and stochastic, and the plain encode
 * (tp_enc_*, which shares the 8-bit kernel body), on inputs with Inf, NaN,
 * zeros and subnormals, lengths that end inside a block, scale 1 and not.
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

int main(void) {
  DRV(cuInit(0));
  CUcontext ctx;
  DRV(cuDevicePrimaryCtxRetain(&ctx, 0));
  DRV(cuCtxSetCurrent(ctx));
  const nsc_backend *be = nsc_backend_cuda();
  if (!be) {
    printf("not ok - the CUDA backend loads: %s\nBail out!\n", nsc_backend_error());
    return 1;
  }
  CUstream s;
  DRV(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  if (!be->usable((nsc_stream)s)) {
    printf("not ok - the kernels load: %s\nBail out!\n", nsc_backend_error());
    return 1;
  }
  static const nsc_fmt_t fmts[] = {NSC_FMT_FP16, NSC_FMT_BF16, NSC_FMT_INT8, NSC_FMT_FP8, NSC_FMT_FP16S};
  static const size_t lens[] = {1, 255, 1000, 70001};
  const size_t maxn = 70001, maxe = 2 * maxn + 2 * maxn;
  float *x = malloc(maxn * 4), *rh = malloc(maxn * 4), *rd = malloc(maxn * 4);
  uint8_t *eh = malloc(maxe), *ed = malloc(maxe);
  CUdeviceptr dx, dr, de;
  DRV(cuMemAlloc(&dx, maxn * 4));
  DRV(cuMemAlloc(&dr, maxn * 4));
  DRV(cuMemAlloc(&de, maxe));
  for (int fi = 0; fi < (int)(sizeof fmts / sizeof fmts[0]); fi++)
    for (int mode = 0; mode < 4; mode++) { /* 0: EF nearest, 1: stochastic only, 2: EF + stochastic, 3: plain */
      int ok = 1;
      for (size_t li = 0; li < 4 && ok; li++) {
        nsc_fmt_t f = fmts[fi];
        size_t n = lens[li], block = li == 3 ? 256 : 16, eb = nsc_fmt_bytes(f, n, block);
        float scale = li == 2 ? 0.25f : 1.0f;
        int ef = mode == 0 || mode == 2;
        for (int call = 0; call < 3 && ok; call++) {
          fill(x, n);
          DRV(cuMemcpyHtoD(dx, x, n * 4));
          nsc_enc_opt oh = {ef ? rh : NULL, call == 0, mode == 1 || mode == 2, nsc_sr_key(5, (uint64_t)call, 1, (uint32_t)li)};
          nsc_enc_opt od = oh;
          od.resid = ef ? (float *)(uintptr_t)dr : NULL;
          nsc_fmt_encode_opt(f, block, x, eh, n, scale, &oh, NULL);
          if (be->fmt_encode_opt((nsc_stream)s, f, block, (const float *)(uintptr_t)dx, (void *)(uintptr_t)de, n,
                                 scale, &od)) {
            printf("# launch failed: %s\n", nsc_backend_error());
            ok = 0;
            break;
          }
          DRV(cuStreamSynchronize(s));
          DRV(cuMemcpyDtoH(ed, de, eb));
          if (memcmp(eh, ed, eb)) {
            printf("# %s mode %d n %zu call %d: encoded bytes differ\n", nsc_fmt_name(f), mode, n, call);
            ok = 0;
          }
          if (ef) {
            DRV(cuMemcpyDtoH(rd, dr, n * 4));
            if (memcmp(rh, rd, n * 4)) {
              printf("# %s mode %d n %zu call %d: residuals differ\n", nsc_fmt_name(f), mode, n, call);
              ok = 0;
            }
          }
        }
      }
      char what[160];
      snprintf(what, sizeof what, "%s %s: CUDA kernel = host fast path = reference, bytes and residuals, 3 calls",
               nsc_fmt_name(fmts[fi]), mode == 0   ? "error feedback"
               : mode == 1 ? "stochastic"
               : mode == 2 ? "error feedback + stochastic"
                           : "no options (tp_enc_* / to_* casts)");
      report(ok, what);
    }
  cuMemFree(dx);
  cuMemFree(dr);
  cuMemFree(de);
  cuStreamDestroy(s);
  free(x); free(rh); free(rd); free(eh); free(ed);
  return failures != 0;
}
