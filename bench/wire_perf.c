/* wire_perf.c — single-thread throughput of the host wire-format paths of the
 * two-phase collectives (compress/wire.h) against memcpy of the same fp32
 * buffer, side by side in one run: encode (fp32 -> wire), decode (wire ->
 * fp32) and decode_sum of 4 runs (the owner's step at 4 ranks), for the fast
 * path and the scalar reference, per format.
 *
 *   wire_perf [-s MiB (16)] [-n reps (5)] [-b block (256)]
 *
 * GB/s counts fp32 bytes (elements x 4; decode_sum: of its output) per
 * second of this thread's CPU time (CLOCK_THREAD_CPUTIME_ID: on a shared,
 * loaded machine the time the code ran, not the time it waited for a core).
 * Each cell is the median over reps, the operation and a memcpy timed
 * alternately; the "x memcpy" column is their ratio. Inputs: random full-mantissa values in
 * [-1, 1) times 2^-8..2^8 per block. Must not: assert anything about time. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench_median.h"
#include "wire.h"

#define MAX_REPS 101
#define SUMS 4

static double now(void) { return bench_seconds(CLOCK_THREAD_CPUTIME_ID); }

static size_t n, blk;
static float *src, *dst, *cpy;
static uint8_t *enc;

enum { ENC, DEC, SUM, NOPS };
static const char *const opname[] = {"encode", "decode", "decode_sum4"};

static void op(nsc_fmt_t f, int which, int ref) {
  size_t stride = nsc_fmt_bytes(f, n, blk);
  switch (which) {
  case ENC:
    if (ref) nsc_fmt_encode_ref(f, blk, src, enc, n, 1.0f, NULL);
    else nsc_fmt_encode(f, blk, src, enc, n, 1.0f, NULL);
    break;
  case DEC:
    if (ref) nsc_fmt_decode_ref(f, blk, enc, dst, n, 1.0f);
    else nsc_fmt_decode(f, blk, enc, dst, n, 1.0f);
    break;
  default:
    if (ref) nsc_fmt_decode_sum_ref(f, blk, enc, stride, SUMS, dst, n, 1.0f);
    else nsc_fmt_decode_sum(f, blk, enc, stride, SUMS, dst, n, 1.0f);
  }
}

int main(int argc, char **argv) {
  double mib = 16;
  int reps = 5, opt;
  blk = 256;
  while ((opt = getopt(argc, argv, "s:n:b:h")) != -1) {
    switch (opt) {
    case 's': mib = atof(optarg); break;
    case 'n': reps = atoi(optarg); break;
    case 'b': blk = (size_t)atoi(optarg); break;
    default: fprintf(stderr, "usage: wire_perf [-s MiB] [-n reps] [-b block]\n"); return opt == 'h' ? 0 : 2;
    }
  }
  n = (size_t)(mib * (1 << 20)) / 4;
  if (n == 0 || reps < 1 || reps > MAX_REPS || blk < 16 || blk > 4096) {
    fprintf(stderr, "wire_perf: need -s > 0, 1 <= -n <= %d, 16 <= -b <= 4096\n", MAX_REPS);
    return 2;
  }
  src = malloc(n * 4);
  dst = malloc(n * 4);
  cpy = malloc(n * 4);
  enc = malloc(SUMS * nsc_fmt_bytes(NSC_FMT_FP16S, n, blk));
  if (!src || !dst || !cpy || !enc) return 1;
  uint64_t s = 88172645463325252ull;
  for (size_t i = 0; i < n; i++) {
    s ^= s << 13, s ^= s >> 7, s ^= s << 17;
    float m = (float)(int64_t)(s >> 40) / (float)(1 << 23) - 1.0f;
    src[i] = m * (float)(1 << ((i / blk) % 17)) / 256.0f;
  }
  memset(enc, 0, SUMS * nsc_fmt_bytes(NSC_FMT_FP16S, n, blk));
  printf("# wire_perf: %.1f MiB fp32, block %zu, median of %d, 1 thread; GB/s of fp32 bytes per CPU second\n", mib, blk, reps);
  printf("# %-5s %-12s %9s %9s %9s %9s %9s\n", "fmt", "op", "fast", "ref", "memcpy", "fast/ref", "x memcpy");
  for (int f = 0; f < NSC_FMT_COUNT; f++) {
    nsc_fmt_encode((nsc_fmt_t)f, blk, src, enc, n, 1.0f, NULL);
    size_t stride = nsc_fmt_bytes((nsc_fmt_t)f, n, blk);
    for (int j = 1; j < SUMS; j++) memcpy(enc + j * stride, enc, stride);
    for (int w = 0; w < NOPS; w++) {
      double t[3][MAX_REPS];
      for (int r = 0; r < reps; r++) {
        for (int ref = 0; ref < 2; ref++) {
          double t0 = now();
          op((nsc_fmt_t)f, w, ref);
          t[ref][r] = now() - t0;
        }
        double t0 = now();
        memcpy(cpy, src, n * 4);
        t[2][r] = now() - t0;
      }
      double gb = n * 4.0 / 1e9, fast = gb / bench_median(t[0], reps), ref = gb / bench_median(t[1], reps),
             mc = gb / bench_median(t[2], reps);
      printf("  %-5s %-12s %9.2f %9.2f %9.2f %9.2f %9.2f\n", nsc_fmt_name((nsc_fmt_t)f), opname[w], fast, ref, mc,
             fast / ref, fast / mc);
    }
  }
  return 0;
}
