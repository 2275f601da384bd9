/* bench_median.h — a clock in seconds and the median of a few timings
 * (sorted in place), for the single-process benchmarks (cast_perf,
 * wire_perf). Must not: allocate. */
#ifndef NSC_BENCH_MEDIAN_H
#define NSC_BENCH_MEDIAN_H
#include <stdlib.h>
#include <time.h>

static inline double bench_seconds(clockid_t clk) {
  struct timespec ts;
  clock_gettime(clk, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static inline int bench_cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}
static inline double bench_median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, bench_cmp_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}
#endif
