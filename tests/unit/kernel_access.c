/* kernel_access.c — how many global memory accesses each CUDA kernel makes
 * per element (issue 34): every kernel of compress/kernels.cu, launched
 * through the shim's CUDA backend on the CUDA driver test double, which runs
 * kernels.cu itself compiled for the CPU (tests/simt) and counts every load
 * and store the kernels make through their own accessors (gld, gst, ld_vec,
 * st_vec), with their bytes.
 *
 * A kernel is bound by the bytes it moves; on a GPU it reaches them only
 * when its accesses are wide (a 16-byte vector moves four fp32 values in
 * one instruction, a byte load one code). So the count per element is the
 * access width made a number: a change that makes a kernel narrower (more
 * accesses per element) fails here, in CI, before any GPU sees it. Each
 * kernel runs on 2^16 elements from fresh allocations (aligned, as a
 * chunk's start usually is); the block-scaled formats with wire blocks of
 * 256; decode-and-sum with 2 and 4 operands.
 *
 *   kernel_access [--table]   TAP lines, one per kernel: its loads and stores
 *                             per element against its recorded most; --table
 *                             prints the table for tests/README.md
 *
 * Must not: time anything (the double's timings say nothing about a GPU),
 * or be linked into the shim. */
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "cudadrv_hooks.h"
#include "tap_drv.h"
#include "wire.h"

enum { N = 1 << 16, BLOCK = 256 };

/* The recorded most accesses (loads + stores) per element of each kernel,
 * and the ideal bytes per element (what it must read and write); the
 * "before" column is 2026-12-04 before issue 34's rework (tests/README.md). */
typedef struct {
  const char *name;
  double most;
} limit;
static const limit limits[] = {
#include "kernel_access.def"
};

/* KERNEL_ACCESS_SCALE=f scales every limit (46-ef runs f = 0.9 to see
 * every check fail: the limits are tight). */
static double most_of(const char *name) {
  const char *e = getenv("KERNEL_ACCESS_SCALE");
  double f = e ? atof(e) : 1.0;
  for (size_t i = 0; i < sizeof limits / sizeof *limits; i++)
    if (!strcmp(limits[i].name, name)) return limits[i].most * f;
  return -1;
}

static CUstream S;
static int table;

/* Runs one launch (fn, on the stream, synchronised) and reports it. */
#define MEASURE(name, call)                                                               \
  do {                                                                                    \
    cudadrv_reset_stats();                                                                \
    int rc_ = (call);                                                                     \
    DRV(cuStreamSynchronize(S));                                                          \
    cudadrv_stats st_;                                                                    \
    cudadrv_get_stats(&st_);                                                              \
    report_one(name, rc_, &st_);                                                          \
  } while (0)

static void report_one(const char *name, int rc, const cudadrv_stats *st) {
  double ld = (double)st->kernel_loads / N, sd = (double)st->kernel_stores / N;
  double lb = (double)st->kernel_load_bytes / N, sb = (double)st->kernel_store_bytes / N;
  double acc = ld + sd, most = most_of(name);
  if (table)
    printf("| `%s` | %.6f | %.6f | %.2f | %.2f | %.5f |\n", name, ld, sd, lb, sb, most);
  else
    check(rc == 0 && st->illegal_accesses == 0 && most >= 0 && acc <= most + 1e-9,
          "%s: %.3f loads + %.3f stores per element (%.2f + %.2f bytes), at most %.3f", name, ld, sd, lb, sb,
          most);
}

int main(int argc, char **argv) {
  table = argc > 1 && !strcmp(argv[1], "--table");
  const nsc_backend *be = drv_backend(&S);
  if (!table) report(1, "the CUDA backend and its kernels load on the double");
  nsc_stream s = (nsc_stream)S;
  CUdeviceptr dx, dy, dw, dr;
  DRV(cuMemAlloc(&dx, N * 8));
  DRV(cuMemAlloc(&dy, N * 8));
  DRV(cuMemAlloc(&dw, 16 * (size_t)N));
  DRV(cuMemAlloc(&dr, N * 4));
  float *hx = malloc(N * 8);
  for (int i = 0; i < N; i++) hx[i] = (float)((i % 97) - 48) * 0.125f;
  DRV(cuMemcpyHtoD(dx, hx, N * 4));
  DRV(cuMemsetD8(dr, 0, N * 4));
  float *x = (float *)(uintptr_t)dx, *y = (float *)(uintptr_t)dy, *r = (float *)(uintptr_t)dr;
  void *w = (void *)(uintptr_t)dw;
  if (table) printf("| kernel | loads | stores | bytes read | bytes written | most (loads + stores) |\n|---|---|---|---|---|---|\n");

  static const char *wn[] = {"f16", "bf16"};
  for (int b = 0; b < 2; b++) {
    char name[64];
    nsc_fmt_t wt = b ? NSC_FMT_BF16 : NSC_FMT_FP16;
    snprintf(name, sizeof name, "to_%s", wn[b]);
    MEASURE(name, be->to_wire(s, wt, x, w, N, 1.0f));
    snprintf(name, sizeof name, "from_%s", wn[b]);
    MEASURE(name, be->from_wire(s, wt, w, y, N, 1.0f));
    /* two segments of N/2, as fusion packs two members */
    nsc_seg segs[2] = {{x, y, N / 2, 0}, {x + N / 2, y + N / 2, N / 2, N / 2}};
    snprintf(name, sizeof name, "seg_to_%s", wn[b]);
    MEASURE(name, be->seg_to_wire(s, wt, segs, 2, w, 1.0f));
    snprintf(name, sizeof name, "seg_from_%s", wn[b]);
    MEASURE(name, be->seg_from_wire(s, wt, segs, 2, w, 1.0f));
  }
  MEASURE("scale_f32", be->scale(s, 'f', x, y, N, 2.0));
  MEASURE("scale_f64", be->scale(s, 'd', x, y, N, 2.0));
  MEASURE("scale_f16", be->scale(s, 'h', w, w, N, 2.0));
  MEASURE("scale_bf16", be->scale(s, 'b', w, w, N, 2.0));

  static const nsc_fmt_t fmts[] = {NSC_FMT_FP16, NSC_FMT_BF16, NSC_FMT_INT8, NSC_FMT_FP8, NSC_FMT_FP16S, NSC_FMT_INT4};
  for (size_t fi = 0; fi < sizeof fmts / sizeof *fmts; fi++) {
    nsc_fmt_t f = fmts[fi];
    const char *fname = nsc_fmt_name(f);
    size_t one = (nsc_fmt_bytes(f, N, BLOCK) + 15) / 16 * 16; /* operands a slot apart, as two-phase lays them */
    char name[64];
    snprintf(name, sizeof name, "enc_%s", fname);
    MEASURE(name, be->fmt_encode(s, f, BLOCK, x, w, N, 1.0f));
    nsc_enc_opt o = {r, 0, 0, 0}; /* error feedback, residuals carried */
    snprintf(name, sizeof name, "encx_%s (error feedback)", fname);
    MEASURE(name, be->fmt_encode_opt(s, f, BLOCK, x, w, N, 1.0f, &o));
    for (int j = 1; j < 4; j++) /* four encoded operands */
      DRV(cuMemcpyDtoD(dw + (CUdeviceptr)(j * one), dw, one));
    snprintf(name, sizeof name, "dec_%s", fname);
    MEASURE(name, be->fmt_decode(s, f, BLOCK, w, y, N, 1.0f));
    snprintf(name, sizeof name, "sum_%s (2 operands)", fname);
    MEASURE(name, be->fmt_decode_sum(s, f, BLOCK, w, one, 2, y, N, 1.0f));
    snprintf(name, sizeof name, "sum_%s (4 operands)", fname);
    MEASURE(name, be->fmt_decode_sum(s, f, BLOCK, w, one, 4, y, N, 1.0f));
  }
  free(hx);
  if (!table) printf("%d failed\n", failures);
  return failures != 0;
}
