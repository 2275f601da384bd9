/* shim_half.c — bf16 and fp16 all-reduces and reduce-scatters through the
 * shim over the host NCCL (run with the shim preloaded; the input type from
 * argv[2], bf16 or fp16; the wire from NCCLSHIM_COMPRESS):
 *
 *   shim_half exact DT        inputs whose sums are exact in fp32, in the
 *                             input type and in the wire: every element of
 *                             every result exact, all ranks the same bits,
 *                             all-reduce and reduce-scatter, in and out of
 *                             place (sendbuff untouched), Sum (and Avg on a
 *                             power-of-two rank count); with EXPECT_TP=1 no
 *                             all-reduce of the input type reaches NCCL for
 *                             the sizes from 1000 (they went two-phase)
 *   shim_half group DT        six rounds of a user group of two all-reduces
 *                             and a reduce-scatter of exact inputs: exact
 *                             whether a call runs in two phases after the
 *                             group end or is forwarded for want of staging
 *   shim_half bound DT N KIND random (KIND random: magnitudes 2^-20..2^20 for
 *                             bf16, 2^-8..2^8 for fp16, one per window of 4096
 *                             elements; cancel: the same with the sign
 *                             alternating over the ranks, so sums cancel) N
 *                             all-reduce elements per rank, Sum: the error of
 *                             every element against the exact (fp64) sum of
 *                             the 16-bit inputs; prints, on rank 0,
 *                             "acc DT WIRE ALGO n KIND maxrel medrel off"
 *                             (rel: |error| / sum |x|; off: the share of
 *                             elements that are not the exact sum rounded
 *                             once to the input type; then the result's
 *                             digest, FNV-1a of its bits); with
 *                             CHECK_BOUND=1 every element within the bound of
 *                             its wire (bound_ok below); all ranks the same
 *                             bits, always
 *
 * The bounds: the input's own wire (two phases, fp32 sums): one rounding of
 * an fp32 sum, |error| <= 1/2 ulp_DT(exact) + (n-1) 2^-24 sum|x|; a
 * block-scaled wire: its two-phase bound as a fraction of sum|x|
 * (shim_twophase.c's, from formats.h's bounds, for inputs whose block maximum
 * is at most twice each |x|) plus the narrowing's 2^-8 (bf16) or 2^-11
 * (fp16) of the result.
 *
 * With SHIMTEST_DEVICE=1 (devmirror.h) the all-reduces run on device
 * buffers of the CUDA driver double (and the reduce-scatters are left out,
 * as devmirror.h mirrors all-reduces only), so the shim's CUDA backend and kernels
 * (run on the CPU by the double) widen, encode, sum and narrow them.
 *
 * Must not: rely on timings or on the shim's internals; its conversions are
 * its own (bf16 by bits, fp16 through the compiler's _Float16), never the
 * shim's. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ncclshim.h"
#include "tpcheck.h"
#include "devmirror.h" /* SHIMTEST_DEVICE=1: the all-reduces on device buffers of the CUDA driver double */

int hostnccl_get_type_counters(int datatype, uint64_t *allreduce_calls, uint64_t *allreduce_bytes);

static int is_bf; /* the input type: bf16 (else fp16) */
static ncclDataType_t dt;

static float h2f(uint16_t h) {
  if (is_bf) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
  }
  _Float16 x;
  memcpy(&x, &h, 2);
  return (float)x;
}

/* round to nearest even; NaN stays NaN */
static uint16_t f2h(float f) {
  if (is_bf) {
    uint32_t u = f2u(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
  }
  _Float16 x = (_Float16)f;
  uint16_t h;
  memcpy(&h, &x, 2);
  return h;
}

/* x (a double) rounded once to the input type, to nearest even: the float
 * cast's answer or a neighbour of it (a double rounding moves it by one at
 * most) */
static uint16_t round16(double x) {
  uint16_t h = f2h((float)x), best = h;
  if ((h & 0x7fffu) == 0 || (h & 0x7fffu) >= (is_bf ? 0x7f80u : 0x7c00u)) return h;
  for (int d = -1; d <= 1; d += 2) {
    uint16_t c = (uint16_t)(h + d);
    double ec = fabs(h2f(c) - x), eb = fabs(h2f(best) - x);
    if (ec < eb || (ec == eb && !(c & 1))) best = c;
  }
  return best;
}

/* ulp of the input type at |x| (its subnormal spacing at the bottom) */
static double ulp16(double x) {
  int mant = is_bf ? 8 : 11, emin = is_bf ? -126 : -14;
  int e = x == 0 ? emin : ilogb(x);
  if (e < emin) e = emin;
  return ldexp(1, e - mant + 1);
}

/* Identical bits on every rank (16-bit words). */
static int identical16(const uint16_t *x, size_t n) {
  uint64_t h = 1469598103934665603ull, lo, hi;
  for (size_t i = 0; i < n; i++) h = (h ^ x[i]) * 1099511628211ull;
  MPI_Allreduce(&h, &lo, 1, MPI_UINT64_T, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(&h, &hi, 1, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD);
  return lo == hi;
}

/* Exact inputs: tpcheck.h's exact_val (halves of small integers whose sums
 * over up to 4 ranks are exact in fp32, in the wire and, at most 128 in
 * magnitude, in bf16 and fp16 as well). */

static int tp_expected(void) {
  const char *e = getenv("EXPECT_TP");
  return e && !strcmp(e, "1");
}

static uint64_t dt_ar_calls(void) {
  uint64_t c = 0;
  hostnccl_get_type_counters((int)dt, &c, NULL);
  return c;
}

/* result element i against the exact sum of exact_val over the ranks at
 * global index g (Avg: over n) */
static int check_elem(const uint16_t *out, size_t i, size_t g, int avg, const char *what, size_t n) {
  double want = 0;
  for (int q = 0; q < nranks; q++) want += exact_val(q, g);
  if (avg) want /= nranks;
  uint16_t w = f2h((float)want);
  if (out[i] == w || (want == 0 && h2f(out[i]) == 0)) return 1;
  EXPECT(0, "%s %s %s n=%zu: element %zu = %a, want %a", what, is_bf ? "bf16" : "fp16", fmt, n, i, (double)h2f(out[i]),
         want);
  return 0;
}

static const size_t sizes[] = {1, 7, 1000, 4099, 65537, 300001};
static const size_t rsizes[] = {1, 100, 4097, 70001};

static int cmd_exact(void) {
  size_t maxn = 300001, maxrs = 70001 * (size_t)nranks;
  size_t cap = maxn > maxrs ? maxn : maxrs;
  uint16_t *s = malloc(cap * 2), *r = malloc(cap * 2), *keep = malloc(cap * 2);
  int pow2 = (nranks & (nranks - 1)) == 0;
  for (size_t i = 0; i < 16; i++) s[i] = f2h(exact_val(rank, i));
  NCCL_OK(ncclAllReduce(s, r, 16, dt, ncclSum, comm, NULL)); /* the configuration check */
  for (int op = 0; op < (pow2 ? 2 : 1); op++)
    for (int inplace = 0; inplace < 2; inplace++) {
      for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) {
        size_t n = sizes[k];
        for (size_t i = 0; i < n; i++) s[i] = f2h(exact_val(rank, i));
        uint16_t *out = inplace ? s : r;
        uint64_t before = dt_ar_calls();
        NCCL_OK(ncclAllReduce(s, out, n, dt, op ? ncclAvg : ncclSum, comm, NULL));
        if (n >= 1000 && tp_expected())
          EXPECT(dt_ar_calls() == before, "n=%zu: %llu all-reduces of the input type reached NCCL", n,
                 (unsigned long long)(dt_ar_calls() - before));
        for (size_t i = 0; i < n; i++)
          if (!check_elem(out, i, i, op, op ? "ar avg" : "ar sum", n)) break;
        EXPECT(identical16(out, n), "ar n=%zu: ranks hold different bits", n);
      }
      for (size_t k = 0; k < sizeof rsizes / sizeof *rsizes && !dm_on(); k++) { /* devmirror: all-reduces only */
        size_t rc = rsizes[k], tot = rc * (size_t)nranks;
        for (size_t i = 0; i < tot; i++) s[i] = keep[i] = f2h(exact_val(rank, i));
        uint16_t *out = inplace ? s + (size_t)rank * rc : r;
        NCCL_OK(ncclReduceScatter(s, out, rc, dt, op ? ncclAvg : ncclSum, comm, NULL));
        for (size_t i = 0; i < rc; i++)
          if (!check_elem(out, i, (size_t)rank * rc + i, op, op ? "rs avg" : "rs sum", rc)) break;
        if (!inplace) EXPECT(!memcmp(s, keep, tot * 2), "rs out of place rc=%zu: sendbuff changed", rc);
      }
    }
  free(s);
  free(r);
  free(keep);
  return fails != 0;
}

/* Six rounds of a group of two all-reduces (bf16/fp16, in and out of
 * place) and a reduce-scatter: run after the real group end, the first
 * forwarded in the input's own type where the agreed staging has no room
 * yet (NCCLSHIM_STAGING_BYTES small), then in two phases once it has grown;
 * every result exact either way. */
static int cmd_group(void) {
  size_t n = 300001, rc = 70001, cap = rc * (size_t)nranks > n ? rc * (size_t)nranks : n;
  uint16_t *a = malloc(n * 2), *b = malloc(n * 2), *ra = malloc(n * 2), *s = malloc(cap * 2), *r = malloc(rc * 2);
  NCCL_OK(ncclAllReduce(a, ra, 1, dt, ncclSum, comm, NULL)); /* the configuration check */
  for (int round = 0; round < 6; round++) {
    for (size_t i = 0; i < n; i++) a[i] = b[i] = f2h(exact_val(rank, i));
    for (size_t i = 0; i < rc * (size_t)nranks; i++) s[i] = f2h(exact_val(rank, i));
    NCCL_OK(ncclGroupStart());
    NCCL_OK(ncclAllReduce(a, ra, n, dt, ncclSum, comm, NULL));
    NCCL_OK(ncclAllReduce(b, b, n, dt, ncclSum, comm, NULL));
    if (!dm_on()) NCCL_OK(ncclReduceScatter(s, r, rc, dt, ncclSum, comm, NULL));
    NCCL_OK(ncclGroupEnd());
    for (size_t i = 0; i < n; i++)
      if (!check_elem(ra, i, i, 0, "group ar out", n) || !check_elem(b, i, i, 0, "group ar in", n)) break;
    for (size_t i = 0; i < rc && !dm_on(); i++)
      if (!check_elem(r, i, (size_t)rank * rc + i, 0, "group rs", rc)) break;
  }
  free(a);
  free(b);
  free(ra);
  free(s);
  free(r);
  return fails != 0;
}

/* ---- random inputs ---- */


/* Rank r's input: one exponent per window of 4096 elements (shared by the
 * ranks), mantissas in [0.5, 1) of the rank's own, random signs (cancel:
 * the sign of element i alternates over the ranks). */
static void fill(uint16_t *x, size_t n, int r, int cancel) {
  int span = is_bf ? 20 : 8;
  rs_state = 0x9e3779b97f4a7c15ull;
  int e = 0;
  for (size_t i = 0; i < n; i++) {
    if (i % 4096 == 0) e = (int)(rnd() % (uint32_t)(2 * span + 1)) - span;
    uint32_t mine = 0, sign = rnd() & 1;
    for (int q = 0; q < 8; q++) {
      uint32_t v = rnd();
      if (q == r) mine = v;
    }
    float m = 0.5f + (float)(mine >> 8) / (float)(1u << 25);
    int neg = cancel ? (int)((sign + (uint32_t)r) & 1) : (int)(mine & 1);
    x[i] = f2h(ldexpf(neg ? -m : m, e));
  }
}

/* A block-scaled wire's two-phase bound, a fraction of sum|x| (as
 * shim_twophase.c), and the narrowing's: the whole bound; 0: none known. */
static double blocked_bound(int n) {
  double fp32 = n * ldexp(1, -24), narrow = ldexp(1, is_bf ? -8 : -11);
  if (!strcmp(fmt, "int8")) return 4 / 127.5 + fp32 + narrow;
  if (!strcmp(fmt, "int4")) return 4 / 7.5 + fp32 + narrow;
  if (!strcmp(fmt, "fp8")) return ldexp(1, -3) + 2 * ldexp(1, -16) + fp32 + narrow;
  if (!strcmp(fmt, "fp16s")) return ldexp(1, -10) + ldexp(1, -38) + fp32 + narrow;
  return 0;
}

static int own_wire(void) { return !strcmp(fmt, "bf16") || !strcmp(fmt, "fp16"); }

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static int cmd_bound(size_t n, int cancel) {
  const char *algo = getenv("NCCLSHIM_ALGO"), *check = getenv("CHECK_BOUND");
  const char *wire = getenv("NCCLSHIM_DISABLE") ? "plain" : fmt;
  if (!algo) algo = "auto";
  uint16_t *s = malloc(n * 2), *r = malloc(n * 2), *t = malloc(n * 2);
  double *sum = calloc(n, sizeof *sum), *abs_sum = calloc(n, sizeof *abs_sum), *rel = malloc(n * sizeof *rel);
  for (int q = 0; q < nranks; q++) {
    fill(t, n, q, cancel);
    for (size_t i = 0; i < n; i++) {
      sum[i] += h2f(t[i]);
      abs_sum[i] += fabs(h2f(t[i]));
    }
  }
  fill(s, n, rank, cancel);
  NCCL_OK(ncclAllReduce(s, s, 1, dt, ncclSum, comm, NULL)); /* the configuration check */
  fill(s, n, rank, cancel);
  NCCL_OK(ncclAllReduce(s, r, n, dt, ncclSum, comm, NULL));
  double worst = 0, bb = blocked_bound(nranks);
  size_t beyond = 0, off = 0;
  for (size_t i = 0; i < n; i++) {
    double e = fabs(h2f(r[i]) - sum[i]);
    rel[i] = e / abs_sum[i];
    if (rel[i] > worst) worst = rel[i];
    off += r[i] != round16(sum[i]) && !(sum[i] == 0 && h2f(r[i]) == 0); /* not the exact sum rounded once */
    double b = own_wire() ? 0.5 * ulp16(fabs(sum[i])) + (nranks - 1) * ldexp(1, -24) * abs_sum[i] : bb * abs_sum[i];
    if (check && !strcmp(check, "1") && e > b && beyond++ < 3)
      EXPECT(0, "%s wire %s, %d ranks: element %zu = %a, exact %a, |error| %.3g beyond %.3g", is_bf ? "bf16" : "fp16",
             fmt, nranks, i, (double)h2f(r[i]), sum[i], e, b);
  }
  EXPECT(identical16(r, n), "random inputs: ranks hold different bits");
  qsort(rel, n, sizeof *rel, cmp_double); /* the median */
  uint64_t h = 1469598103934665603ull; /* the result's digest: runs that must agree bit for bit */
  for (size_t i = 0; i < n; i++) h = (h ^ r[i]) * 1099511628211ull;
  if (rank == 0)
    printf("acc %s %s %s %d %s %.4g %.4g %.4g %016llx\n", is_bf ? "bf16" : "fp16", wire, algo, nranks,
           cancel ? "cancel" : "random", worst, rel[n / 2], (double)off / (double)n, (unsigned long long)h);
  free(s);
  free(r);
  free(t);
  free(sum);
  free(abs_sum);
  free(rel);
  return fails != 0;
}

static int run(const char *cmd, int argc, char **argv) {
  const char *d = argc > 2 ? argv[2] : "bf16";
  is_bf = strcmp(d, "fp16") != 0;
  dt = is_bf ? ncclBfloat16 : ncclFloat16;
  if (!strcmp(cmd, "exact")) return cmd_exact();
  if (!strcmp(cmd, "group")) return cmd_group();
  if (!strcmp(cmd, "bound"))
    return cmd_bound(argc > 3 ? strtoul(argv[3], NULL, 10) : 65536, argc > 4 && !strcmp(argv[4], "cancel"));
  fprintf(stderr, "usage: shim_half exact|group|bound DT [N random|cancel]\n");
  return 2;
}

int main(int argc, char **argv) { return tp_main(argc, argv, "exact", run); }
