/* wire_error.c — what each wire format does to small values: the error of
 * one encode and decode (compress/wire.h, the rules the CUDA kernels share)
 * on values log-uniform over 1e-9..1e-2, decade by decade, side by side for
 * fp16, bf16 and fp16s (and the 8-bit formats for reference). DDP divides
 * gradients by the world size before the all-reduce, so at 256 ranks many of
 * them sit in the lower decades (issue 21 part 5).
 *
 *   wire_error [-n values per decade (65536)] [-b block (256)] [-r decades per block (7)]
 *
 * Each block mixes values from -r decades (a bucket's elements span several;
 * the default 7 puts all seven in every block, the hardest case for a
 * per-block scale: the block maximum sits 5-7 decades above its smallest
 * values).
 * Per decade and format: the median and largest relative error |y - x| / |x|
 * and the share of values flushed to zero. Prints numbers only; asserts
 * nothing (test_wire checks the bounds). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "wire.h"

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
  size_t per = 65536, blk = 256;
  int span = 7, opt;
  while ((opt = getopt(argc, argv, "n:b:r:h")) != -1) {
    switch (opt) {
    case 'n': per = (size_t)atol(optarg); break;
    case 'b': blk = (size_t)atol(optarg); break;
    case 'r': span = atoi(optarg); break;
    default: fprintf(stderr, "usage: wire_error [-n per decade] [-b block] [-r decades per block]\n"); return opt == 'h' ? 0 : 2;
    }
  }
  if (per < blk || blk < 16 || blk > 4096 || span < 1 || span > 7) {
    fprintf(stderr, "wire_error: need -n >= -b, 16 <= -b <= 4096, 1 <= -r <= 7\n");
    return 2;
  }
  enum { DECADES = 7 }; /* 1e-9 .. 1e-2 */
  size_t n = per * DECADES;
  float *x = malloc(n * 4), *y = malloc(n * 4);
  double *rel = malloc(per * sizeof *rel);
  uint8_t *e = malloc(nsc_fmt_bytes(NSC_FMT_FP16S, n, blk));
  if (!x || !y || !rel || !e) return 1;
  /* element i: decade d(i), one of `span` decades from the block's first
   * (cyclically), every decade getting `per` values */
  uint64_t s = 88172645463325252ull;
  int *dec = malloc(n * sizeof *dec);
  size_t fill[DECADES] = {0};
  for (size_t i = 0; i < n; i++) {
    s ^= s << 13, s ^= s >> 7, s ^= s << 17;
    int top = (int)((i / blk) % DECADES), d = top - (int)((s >> 20) % (uint64_t)span);
    if (d < 0) d += DECADES;
    while (fill[d] >= per) d = (d + 1) % DECADES;
    fill[d]++;
    dec[i] = d;
    double u = (double)(s >> 11) / 9007199254740992.0;
    x[i] = (float)(pow(10.0, -9.0 + d + u) * ((s >> 63) ? -1 : 1));
  }
  static const nsc_fmt_t fmts[] = {NSC_FMT_FP16, NSC_FMT_BF16, NSC_FMT_FP16S, NSC_FMT_INT8, NSC_FMT_FP8};
  printf("# wire_error: %zu values per decade, log-uniform, blocks of %zu spanning %d decades; "
         "relative error of one encode + decode\n", per, blk, span);
  printf("# %-6s %-9s %12s %12s %10s\n", "fmt", "decade", "median_rel", "max_rel", "flushed");
  for (size_t fi = 0; fi < sizeof fmts / sizeof fmts[0]; fi++) {
    nsc_fmt_t f = fmts[fi];
    nsc_fmt_encode(f, blk, x, e, n, 1.0f, NULL);
    nsc_fmt_decode(f, blk, e, y, n, 1.0f);
    for (int d = 0; d < DECADES; d++) {
      size_t m = 0, z = 0;
      for (size_t i = 0; i < n; i++) {
        if (dec[i] != d) continue;
        rel[m++] = fabs((double)y[i] - x[i]) / fabs((double)x[i]);
        z += y[i] == 0.0f;
      }
      qsort(rel, m, sizeof *rel, cmp_d);
      printf("  %-6s 1e%-+4d..  %12.3e %12.3e %9.2f%%\n", nsc_fmt_name(f), d - 9, rel[m / 2], rel[m - 1],
             100.0 * (double)z / (double)m);
    }
  }
  free(x), free(y), free(rel), free(e), free(dec);
  return 0;
}
