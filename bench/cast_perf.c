/* cast_perf.c — throughput of the host casts (compress/cast.h) against memcpy
 * of the same fp32 buffer, measured side by side in one run.
 *
 *   cast_perf [-s MiB] [-n reps] [-t maxthreads]
 *
 * For each direction (fp32 -> wire, wire -> fp32), wire type, implementation
 * the CPU has and thread count 1..maxthreads: the median over reps of the cast
 * and of a memcpy of the fp32 buffer with as many threads, the two timed
 * alternately so both see the same machine state. GB/s counts fp32 bytes
 * (elements x 4). Ends with "# PASS" or "# FAIL" against the goals: the best
 * implementation at >= 1.8x memcpy to the wire and >= 1.4x back, for every
 * thread count. Exit status 0 unless the arguments or an allocation fail.
 *
 * Must not: assert anything about timings (CI runs it only as a smoke test). */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench_median.h"
#include "cast.h"
#include "cast_impl.h"

#define GOAL_TO 1.8
#define GOAL_FROM 1.4
#define MAX_REPS 101

static double now(void) { return bench_seconds(CLOCK_MONOTONIC); }


/* memcpy split over t threads the way the casts split (threads per call). */
typedef struct {
  void *d;
  const void *s;
  size_t n;
} cpy_part;
static void *cpy_run(void *a) {
  cpy_part *p = a;
  memcpy(p->d, p->s, p->n);
  return NULL;
}
static void par_memcpy(void *d, const void *s, size_t bytes, int t) {
  cpy_part parts[64];
  pthread_t tid[64];
  size_t per = (bytes / (size_t)t + 4095) & ~(size_t)4095, off = 0;
  for (int k = 0; k < t; k++) {
    size_t len = bytes - off < per ? bytes - off : per;
    parts[k] = (cpy_part){(char *)d + off, (const char *)s + off, len};
    off += len;
    if (k && pthread_create(&tid[k], NULL, cpy_run, &parts[k])) {
      cpy_run(&parts[k]);
      parts[k].n = 0; /* mark as done inline */
    }
  }
  cpy_run(&parts[0]);
  for (int k = 1; k < t; k++)
    if (parts[k].n) pthread_join(tid[k], NULL);
}

typedef struct {
  float *src, *dst, *cpy;
  uint16_t *wire;
  size_t n;
} bufs;

/* One timed run of the cast described by (to, w). */
static double time_cast(const bufs *b, int to, nsc_fmt_t w) {
  double t0 = now();
  if (to) {
    nsc_cast_counts c = {0, 0};
    nsc_cast_to_wire(w, b->src, b->wire, b->n, 1.0f, &c);
  } else {
    nsc_cast_from_wire(w, b->wire, b->dst, b->n, 1.0f);
  }
  return now() - t0;
}

static void usage(void) {
  fprintf(stderr, "usage: cast_perf [-s MiB (256)] [-n reps (5)] [-t maxthreads (2)]\n");
}

int main(int argc, char **argv) {
  double mib = 256;
  int reps = 5, maxt = 2, opt;
  while ((opt = getopt(argc, argv, "s:n:t:h")) != -1) {
    switch (opt) {
    case 's': mib = atof(optarg); break;
    case 'n': reps = atoi(optarg); break;
    case 't': maxt = atoi(optarg); break;
    default: usage(); return opt == 'h' ? 0 : 2;
    }
  }
  if (mib <= 0 || reps < 1 || reps > MAX_REPS || maxt < 1 || maxt > 64) {
    usage();
    return 2;
  }
  bufs b;
  b.n = ((size_t)(mib * 1048576.0) / 4 + 63) & ~(size_t)63;
  size_t bytes = b.n * 4;
  b.src = aligned_alloc(4096, bytes);
  b.dst = aligned_alloc(4096, bytes);
  b.cpy = aligned_alloc(4096, bytes);
  b.wire = aligned_alloc(4096, bytes / 2);
  if (!b.src || !b.dst || !b.cpy || !b.wire) {
    fprintf(stderr, "cast_perf: cannot allocate 3.5 x %zu bytes\n", bytes);
    return 1;
  }
  /* Gradient-like values, no overflow; every page touched before timing. */
  uint32_t r = 12345;
  for (size_t i = 0; i < b.n; i++) {
    r = r * 1664525u + 1013904223u;
    b.src[i] = ((float)(int32_t)r) * 0x1p-40f;
  }
  memset(b.dst, 0, bytes);
  memset(b.cpy, 0, bytes);
  nsc_cast_to_wire(NSC_FMT_FP16, b.src, b.wire, b.n, 1.0f, NULL);

  const char *auto_impl = nsc_cast_impl_name();
  printf("# cast_perf: %zu MiB of fp32 (%zu elements), %d reps, median, "
         "interleaved with memcpy; automatic implementation: %s\n",
         bytes >> 20, b.n, reps, auto_impl);
  printf("# GB/s counts fp32 bytes; ratio = memcpy time / cast time, same threads\n");
  printf("# %-9s %-5s %-7s %3s %9s %12s %7s\n", "direction", "wire", "impl", "thr", "GB/s",
         "memcpy GB/s", "ratio");

  int pass = 1;
  char misses[1024] = "";
  for (int to = 1; to >= 0; to--)
    for (int wi = 0; wi < 2; wi++)
      for (int t = 1; t <= maxt; t++) {
        nsc_fmt_t w = (nsc_fmt_t)wi;
        double best = 0;
        const char *best_name = "";
        for (int k = 0; k < nsc_cast_nimpls; k++) {
          const nsc_cast_impl *im = nsc_cast_impls[k];
          if (nsc_cast_force_impl(im->name)) continue;
          nsc_cast_set_threads(t);
          double tc[MAX_REPS], tm[MAX_REPS];
          time_cast(&b, to, w); /* warm-up: page tables, thread stacks */
          for (int i = 0; i < reps; i++) {
            double t0 = now();
            par_memcpy(b.cpy, b.src, bytes, t);
            tm[i] = now() - t0;
            tc[i] = time_cast(&b, to, w);
          }
          double mc = bench_median(tc, reps), mm = bench_median(tm, reps), ratio = mm / mc;
          printf("  %-9s %-5s %-7s %3d %9.2f %12.2f %7.2f\n", to ? "to_wire" : "from_wire",
                 wi ? "bf16" : "fp16", im->name, t, (double)bytes / mc * 1e-9,
                 (double)bytes / mm * 1e-9, ratio);
          fflush(stdout);
          if (ratio > best) {
            best = ratio;
            best_name = im->name;
          }
        }
        double goal = to ? GOAL_TO : GOAL_FROM;
        if (best < goal) {
          pass = 0;
          size_t l = strlen(misses);
          snprintf(misses + l, sizeof misses - l, " %s/%s/%dt:%s=%.2f", to ? "to" : "from",
                   wi ? "bf16" : "fp16", t, best_name, best);
        }
      }
  nsc_cast_force_impl(NULL);
  nsc_cast_set_threads(1);
  if (pass)
    printf("# PASS best implementation >= %.1fx memcpy to the wire, >= %.1fx back, "
           "1..%d threads\n", GOAL_TO, GOAL_FROM, maxt);
  else
    printf("# FAIL below %.1fx (to) / %.1fx (from):%s\n", GOAL_TO, GOAL_FROM, misses);
  free(b.src);
  free(b.dst);
  free(b.cpy);
  free(b.wire);
  return 0;
}
