/* shim_ef.c — error feedback and stochastic rounding of the two-phase
 * collectives over the host NCCL (run with the shim preloaded,
 * NCCLSHIM_ALGO=twophase; the wire format from NCCLSHIM_COMPRESS).
 *
 *   shim_ef converge N [ef]  one bucket of M elements, the same input on
 *                         every call, N calls (in place, refilled as DDP's
 *                         bucket is): with ef, N * |mean of the results - the
 *                         fp32 sum| <= B in every element (B below); without,
 *                         some element's mean stays off by more than B / N
 *                         (the bias of round to nearest stays); every call's
 *                         result identical on every rank. Prints
 *                         "converge <fmt> <N> <max N*|err|> <B>" on rank 0.
 *   shim_ef fresh N [ef] [equal] [group]  fresh buffers, equal-size
 *                         buckets (cmd_fresh below).
 *   shim_ef models N [ef] [twice]  two models on one communicator with
 *                         buckets of equal sizes, each bucket a buffer of
 *                         its own (cmd_models below).
 *   shim_ef shared N [ef] two buckets X and Y of one size, each with a send
 *                         buffer of its own, all-reduced out of place into
 *                         one receive buffer, alternately, N passes; Y's
 *                         inputs 1024 times X's: every call within its own
 *                         bucket's bound B (in its own scale; a residual
 *                         of the other bucket's shows as ~1000 B), each
 *                         mean converges with ef (cmd_shared below).
 *   shim_ef spike         a bucket whose fifth call holds one finite spike
 *                         (1e6 on rank 0; block-scaled formats), error
 *                         feedback on: every call's every element within
 *                         the per-call bound that includes the carried
 *                         residuals, and the running sum within the last
 *                         residuals (cmd_spike below).
 *   shim_ef reset         passes [A, B] x 3, [A, C], [A, B] x 2 (C another
 *                         count at B's position): B's third result differs
 *                         from its first (residuals exist from a bucket's
 *                         second call and are fed back from its third), its
 *                         two results after the change are bit-identical to
 *                         its first (the state was dropped, and is made again
 *                         only from the second call); a reduce-scatter
 *                         bucket likewise carries its residual.
 *
 * With SHIMTEST_DEVICE=1 (tests/shim/devmirror.h) the all-reduces run on
 * device memory of the CUDA driver double: the CUDA backend's kernels and
 * residuals in device memory, end to end.
 *
 * Inputs: x_r[i] = base(i) + k * u, base in {1, 1.25, 1.5}, k = (7i + 3r)
 * mod 8, u = hs(1) / 8 (an eighth of the format's half step at 1, so the
 * nearest code of x is always its base): exact in fp32, not in the wire
 * format (k > 0), which rounds them to their base; every sum and
 * residual below is then exact in fp32, so the telescoping sum of the
 * results is exact: N * (mean - S) = the error of the bucket's first call
 * (which keeps no residual, ef.h) - (the sum over ranks of the last input
 * residuals + the owner's last output residual); each of the two parts is
 * at most half a step per rounding at twice the magnitude, so
 * B = 2 (n hs(2 * 1.5) + hs(2 * 1.5n)),
 * hs(v) = 2^(floor(log2 v) - m), m = 11 fp16 and fp16s, 8 bf16, 7 int8, 4 fp8,
 * 3 int4 (its step at a block largest in [1, 2) is 2^-2).
 *
 * Must not: rely on timings. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats.h"
#include "tpcheck.h"
/* SHIMTEST_DEVICE=1: the all-reduces on device buffers of the CUDA driver
 * double (its group wrappers are not used here) */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#include "devmirror.h"
#pragma GCC diagnostic pop

static double hs(double v);
/* Bucket b's input (b = 0: the converge mode's): its own pattern of k. */
static float xvalb(int b, int r, size_t i) {
  return 1.0f + 0.25f * (float)((i + (size_t)b) % 3) +
         (float)((7 * i + 3 * (size_t)r + 5 * (size_t)b) % 8) * (float)(hs(1.0) / 8);
}
static float xval(int r, size_t i) { return xvalb(0, r, i); }
static double sum_xb(int b, size_t i) {
  double s = 0;
  for (int q = 0; q < nranks; q++) s += xvalb(b, q, i);
  return s;
}
static double sum_x(size_t i) { return sum_xb(0, i); }

static double hs(double v) {
  int m = !strcmp(fmt, "fp16") || !strcmp(fmt, "fp16s") ? 11
          : !strcmp(fmt, "bf16")                         ? 8
          : !strcmp(fmt, "int8")                         ? 7
          : !strcmp(fmt, "int4")                         ? 3
                                                         : 4;
  return ldexp(1.0, (int)floor(log2(v)) - m);
}

static int cmd_converge(int N, int ef) {
  const size_t M = 4096;
  float *b = malloc(M * 4);
  double *acc = calloc(M, sizeof *acc);
  double B = 2 * (nranks * hs(2 * 1.5) + hs(2 * 1.5 * nranks));
  NCCL_OK(ncclAllReduce(b, b, 1, ncclFloat32, ncclSum, comm, NULL)); /* the configuration check */
  for (int t = 0; t < N; t++) {
    for (size_t i = 0; i < M; i++) b[i] = xval(rank, i);
    NCCL_OK(ncclAllReduce(b, b, M, ncclFloat32, ncclSum, comm, NULL));
    for (size_t i = 0; i < M; i++) acc[i] += b[i];
    EXPECT(identical(b, M), "call %d: ranks hold different bits", t);
  }
  double worst = 0;
  for (size_t i = 0; i < M; i++) {
    double e = fabs(acc[i] - N * sum_x(i)); /* N * |mean - S|, exact */
    if (e > worst) worst = e;
  }
  if (ef) EXPECT(worst <= B, "%s: N*|mean - sum| = %g > B = %g with error feedback", fmt, worst, B);
  else EXPECT(worst > B, "%s: N*|mean - sum| = %g <= B = %g without error feedback (the test cannot fail)", fmt,
              worst, B);
  if (rank == 0) printf("converge %s %d %g %g\n", fmt, N, worst, B);
  free(b);
  free(acc);
  return fails != 0;
}

/* reset: base + 3/8 of a step on every rank: the first call rounds it
 * down (residual 3/8 step), the second up (3/4 step): the results differ. */
static void fill(float *b, size_t n, size_t first) {
  for (size_t i = 0; i < n; i++) b[i] = 1.0f + 0.25f * (float)((first + i) % 3) + (float)(0.75 * hs(1.0));
}

static int cmd_reset(void) {
  const size_t NA = 3000, NB = 5000, NC = 5001, RC = 2000;
  float *a = malloc(NA * 4), *b = malloc(NC * 4), *b1 = malloc(NB * 4), *s = malloc(RC * nranks * 4),
        *r = malloc(RC * 4), *r1 = malloc(RC * 4);
  NCCL_OK(ncclAllReduce(a, a, 1, ncclFloat32, ncclSum, comm, NULL)); /* the configuration check */
  for (int pass = 0; pass < 6; pass++) {
    size_t nb = pass == 3 ? NC : NB;
    fill(a, NA, 0);
    NCCL_OK(ncclAllReduce(a, a, NA, ncclFloat32, ncclSum, comm, NULL));
    fill(b, nb, 0);
    NCCL_OK(ncclAllReduce(b, b, nb, ncclFloat32, ncclSum, comm, NULL));
    EXPECT(identical(b, nb), "pass %d: ranks hold different bits", pass);
    if (pass == 0) memcpy(b1, b, NB * 4);
    if (pass == 2) EXPECT(memcmp(b, b1, NB * 4) != 0, "pass 2: B's result equals its first: no residual carried");
    if (pass >= 4) EXPECT(memcmp(b, b1, NB * 4) == 0, "pass %d: B after a changed sequence differs from its first "
                                                      "result: its state was not dropped", pass);
  }
  /* A reduce-scatter bucket of its own communicator's sequence: the second
   * call carries the first one's residual. */
  for (int t = 0; t < 3; t++) {
    fill(s, RC * nranks, 0);
    NCCL_OK(ncclReduceScatter(s, r, RC, ncclFloat32, ncclSum, comm, NULL));
    if (t == 0) memcpy(r1, r, RC * 4);
  }
  EXPECT(memcmp(r, r1, RC * 4) != 0, "reduce-scatter: the third result equals the first: no residual carried");
  free(a);
  free(b);
  free(b1);
  free(s);
  free(r);
  free(r1);
  return fails != 0;
}

/* fresh: FSDP2's pattern. Each pass: three buckets of M elements (equal
 * layers) then one of M/2 (a unique one; with `equal` M too: a pass of only
 * equal calls), each call in a buffer of its own (allocated up front, none
 * ever passed twice), every bucket its own inputs
 * (xvalb). After W = 14 warm-up passes (learning, then the probation of
 * buffers that change on every call, NSC_EF_PROBATION, ef.h) the telescoping bound
 * of the converge mode holds per bucket: (N - W) |mean - its fp32 sum| <= B.
 * A bucket fed another's residual for good does not converge to its own sum
 * (the `equal` pass shows it: its buckets share a slot, the documented
 * limit, and the check fails). With `group` each pass is one user group
 * (two-phase calls run after the group end in call order, docs/collectives.md). */
static int cmd_fresh(int N, int ef, int equal, int group) {
  const size_t M = 4096;
  const int K = 4, W = 14;
  size_t cnt[4] = {M, M, M, equal ? M : M / 2};
  float **pool = malloc((size_t)(K * N + 1) * sizeof *pool); /* every call its own, kept to the end */
  for (int q = 0; q < K * N + 1; q++) pool[q] = malloc(cnt[q % K] * 4 + 4);
  double *acc = calloc((size_t)K * M, sizeof *acc);
  double B = 2 * (nranks * hs(2 * 1.5) + hs(2 * 1.5 * nranks));
  NCCL_OK(ncclAllReduce(pool[0], pool[0], 1, ncclFloat32, ncclSum, comm, NULL)); /* the configuration check */
  int next = 0;
  for (int t = 0; t < N; t++) {
    float *buf[4];
    for (int b = 0; b < K; b++) {
      buf[b] = pool[next++];
      for (size_t i = 0; i < cnt[b]; i++) buf[b][i] = xvalb(b, rank, i);
    }
    if (group) NCCL_OK(ncclGroupStart());
    for (int b = 0; b < K; b++) NCCL_OK(ncclAllReduce(buf[b], buf[b], cnt[b], ncclFloat32, ncclSum, comm, NULL));
    if (group) NCCL_OK(ncclGroupEnd());
    for (int b = 0; b < K; b++) {
      EXPECT(identical(buf[b], cnt[b]), "pass %d bucket %d: ranks hold different bits", t, b);
      if (t >= W)
        for (size_t i = 0; i < cnt[b]; i++) acc[(size_t)b * M + i] += buf[b][i];
    }
  }
  double worst = 0;
  int wb = 0;
  for (int b = 0; b < K; b++)
    for (size_t i = 0; i < cnt[b]; i++) {
      double e = fabs(acc[(size_t)b * M + i] - (N - W) * sum_xb(b, i));
      if (e > worst) {
        worst = e;
        wb = b;
      }
    }
  int want = ef && !equal;
  if (want) EXPECT(worst <= B, "%s: bucket %d: (N-W)*|mean - its sum| = %g > B = %g with error feedback", fmt, wb, worst, B);
  else EXPECT(worst > B, "%s: (N-W)*|mean - sum| = %g <= B = %g (%s: the check above cannot fail)", fmt, worst, B,
              ef ? "buckets sharing a slot" : "no error feedback");
  if (rank == 0) printf("fresh %s %d%s%s %g %g (bucket %d)\n", fmt, N, equal ? " equal" : "", group ? " group" : "", worst, B, wb);
  for (int q = 0; q < K * N + 1; q++) free(pool[q]);
  free(pool);
  free(acc);
  return fails != 0;
}

/* models: two models on one communicator, X (A 20000, B 30000) and Y (C
 * 20000, D 30000, values 1024 times X's), each bucket a stable buffer of its
 * own, passes interleaved (X Y, or with `twice` X X Y): the keys repeat
 * every two calls, the buffers every pass of both. A bucket fed another's
 * residual is off by the other's rounding steps: every call of every bucket
 * must stay within its own per-call bound (B times its scale: the
 * residuals in, at most B, minus those out), identical on every rank, and
 * with error feedback, after W warm-up passes (learning), the telescoping
 * bound of the converge mode holds per bucket: (calls - W) |mean - its
 * fp32 sum| <= B times its scale. */
static int cmd_models(int N, int ef, int twice) {
  const int K = 4, W = 6;
  const size_t cnt[4] = {20000, 30000, 20000, 30000};
  const float scale[4] = {1, 1, 1024, 1024};
  float *buf[4];
  double *acc[4];
  long calls[4] = {0};
  for (int b = 0; b < K; b++) {
    buf[b] = malloc(cnt[b] * 4);
    acc[b] = calloc(cnt[b], sizeof *acc[b]);
  }
  double B = 2 * (nranks * hs(2 * 1.5) + hs(2 * 1.5 * nranks)), worst_call = 0, worst = 0;
  NCCL_OK(ncclAllReduce(buf[0], buf[0], 1, ncclFloat32, ncclSum, comm, NULL)); /* the configuration check */
  const int order[3] = {0, twice ? 0 : 1, 1}, per = twice ? 3 : 2;
  for (int t = 0; t < N; t++)
    for (int q = 0; q < per; q++) {
      int m = order[q];
      for (int b = 2 * m; b < 2 * m + 2; b++) {
        for (size_t i = 0; i < cnt[b]; i++) buf[b][i] = scale[b] * xvalb(b, rank, i);
        NCCL_OK(ncclAllReduce(buf[b], buf[b], cnt[b], ncclFloat32, ncclSum, comm, NULL));
        EXPECT(identical(buf[b], cnt[b]), "pass %d bucket %d: ranks hold different bits", t, b);
        double wc = 0;
        for (size_t i = 0; i < cnt[b]; i++) {
          double e = fabs(buf[b][i] - scale[b] * sum_xb(b, i)) / scale[b];
          if (e > wc) wc = e;
          if (t >= W) acc[b][i] += buf[b][i];
        }
        EXPECT(wc <= B, "%s: pass %d bucket %d: |result - its sum| = %g > B = %g (in its own scale): another "
               "bucket's residual", fmt, t, b, wc, B);
        if (wc > worst_call) worst_call = wc;
        calls[b] += t >= W;
      }
    }
  for (int b = 0; b < K; b++)
    for (size_t i = 0; i < cnt[b] && ef; i++) {
      double e = fabs(acc[b][i] - (double)calls[b] * scale[b] * sum_xb(b, i)) / scale[b];
      if (e > worst) worst = e;
    }
  if (ef) EXPECT(worst <= B, "%s: (calls - W) |mean - its sum| = %g > B = %g with error feedback", fmt, worst, B);
  if (rank == 0) printf("models %s %d%s: worst call %g, worst mean %g, B %g\n", fmt, N, twice ? " twice" : "",
                        worst_call, worst, B);
  for (int b = 0; b < K; b++) {
    free(buf[b]);
    free(acc[b]);
  }
  return fails != 0;
}

/* Two buckets, their own send buffers, one receive buffer (a script that
 * reduces its gradients into one scratch buffer; the red team's case, where
 * hier's middle stage keyed both buckets' residuals by that buffer alone). */
static int cmd_shared(int N, int ef) {
  const size_t n = 30000;
  const float scale[2] = {1, 1024};
  const int W = 6;
  float *send[2], *recv = malloc(n * 4);
  double *acc[2];
  long calls = 0;
  for (int b = 0; b < 2; b++) {
    send[b] = malloc(n * 4);
    acc[b] = calloc(n, sizeof *acc[b]);
  }
  double B = 2 * (nranks * hs(2 * 1.5) + hs(2 * 1.5 * nranks)), worst_call = 0, worst = 0;
  NCCL_OK(ncclAllReduce(recv, recv, 1, ncclFloat32, ncclSum, comm, NULL)); /* the configuration check */
  for (int t = 0; t < N; t++) {
    for (int b = 0; b < 2; b++) {
      for (size_t i = 0; i < n; i++) send[b][i] = scale[b] * xvalb(b, rank, i);
      NCCL_OK(ncclAllReduce(send[b], recv, n, ncclFloat32, ncclSum, comm, NULL));
      EXPECT(identical(recv, n), "pass %d bucket %d: ranks hold different bits", t, b);
      double wc = 0;
      for (size_t i = 0; i < n; i++) {
        double e = fabs(recv[i] - scale[b] * sum_xb(b, i)) / scale[b];
        if (e > wc) wc = e;
        if (t >= W) acc[b][i] += recv[i];
      }
      EXPECT(wc <= B, "%s: pass %d bucket %c: |result - its sum| = %g > B = %g (in its own scale): the other "
             "bucket's residual", fmt, t, "XY"[b], wc, B);
      if (wc > worst_call) worst_call = wc;
    }
    calls += t >= W;
  }
  for (int b = 0; b < 2 && ef; b++)
    for (size_t i = 0; i < n; i++) {
      double e = fabs(acc[b][i] - (double)calls * scale[b] * sum_xb(b, i)) / scale[b];
      if (e > worst) worst = e;
    }
  if (ef) EXPECT(worst <= B, "%s: (calls - W) |mean - its sum| = %g > B = %g with error feedback", fmt, worst, B);
  if (rank == 0) printf("shared %s %d: worst call %g, worst mean %g, B %g\n", fmt, N, worst_call, worst, B);
  for (int b = 0; b < 2; b++) {
    free(send[b]);
    free(acc[b]);
  }
  free(recv);
  return fails != 0;
}

/* One rounding's largest error at a block whose largest magnitude is A:
 * the format's row (formats.h: a fraction of the block's largest). */
static double one_rounding(double A) {
#define ROW(ID, name, bits, blocked, dt, k, bound, zero, doc) if (!strcmp(fmt, name)) return (bound) * A;
  NSC_FORMATS(ROW)
#undef ROW
  return INFINITY;
}

/* A finite spike under error feedback (the red team: int4 carried a spike's
 * rounding into the next 4 calls, its whole block off by more than 1
 * meanwhile). What a call with a carried residual promises
 * (docs/collectives.md, "What a call promises with a carried residual"),
 * checked element by element: with e(A) one rounding's bound at a block
 * whose largest magnitude is A, each rank's input residual after call t is
 * at most R_t = e(max over its block of |x_t| + R_t-1) (what it encodes is
 * x + its carried residual), the owner's output residual at most
 * O_t = e(max over the block of |sum x_t| + sum_r (R_t-1 + R_t) + O_t-1),
 * and
 *   |result_t - sum_r x_r,t| <= sum_r (R_r,t-1 + R_r,t) + O_t-1 + O_t
 * (the sum's own fp32 rounding aside: the inputs here sum exactly). So a
 * spike's rounding is carried, shrinking by e() a call; and the running sum
 * is off by the last residuals only: |sum_t (result_t - sum_r x_r,t)| <=
 * sum_r R_r,T + O_T. Blocks of 256 elements; M / n a multiple of 256, so
 * blocks lie alike for every chunk and piece. */
static float spike_x(int r, int t, size_t i) {
  if (t == 4 && r == 0 && i == 300) return 1e6f;
  return (float)((int)((i * 7 + (size_t)r * 3 + (size_t)t) % 9) - 4) * 0.25f;
}

static int cmd_spike(void) {
  enum { M = 4096, BL = 256, NB = M / BL, T = 14 };
  float *b = calloc(M, 4);
  double *err_sum = calloc(M, sizeof *err_sum);
  double R[64][NB] = {{0}}, O[NB] = {0}; /* bounds after the previous call, per rank and block */
  double worst_ratio = 0;
  NCCL_OK(ncclAllReduce(b, b, 1, ncclFloat32, ncclSum, comm, NULL)); /* the configuration check */
  for (int t = 0; t < T; t++) {
    for (size_t i = 0; i < M; i++) b[i] = spike_x(rank, t, i);
    NCCL_OK(ncclAllReduce(b, b, M, ncclFloat32, ncclSum, comm, NULL));
    EXPECT(identical(b, M), "call %d: ranks hold different bits", t);
    double block_err[NB] = {0};
    for (int k = 0; k < NB; k++) {
      double Rn[64], carried = 0, fresh = 0, amax_sum = 0;
      for (int r = 0; r < nranks; r++) {
        double ax = 0;
        for (size_t i = (size_t)k * BL; i < (size_t)(k + 1) * BL; i++) ax = fmax(ax, fabs(spike_x(r, t, i)));
        Rn[r] = one_rounding(ax + R[r][k]);
        carried += R[r][k];
        fresh += Rn[r];
      }
      for (size_t i = (size_t)k * BL; i < (size_t)(k + 1) * BL; i++) {
        double S = 0;
        for (int r = 0; r < nranks; r++) S += spike_x(r, t, i);
        amax_sum = fmax(amax_sum, fabs(S));
      }
      double On = one_rounding(amax_sum + carried + fresh + O[k]);
      double bound = carried + fresh + O[k] + On;
      double own = 0; /* the call's own roundings alone, nothing carried */
      for (int r = 0; r < nranks; r++) {
        double ax = 0;
        for (size_t i = (size_t)k * BL; i < (size_t)(k + 1) * BL; i++) ax = fmax(ax, fabs(spike_x(r, t, i)));
        own += one_rounding(ax);
      }
      own += one_rounding(amax_sum + own);
      for (size_t i = (size_t)k * BL; i < (size_t)(k + 1) * BL; i++) {
        double S = 0;
        for (int r = 0; r < nranks; r++) S += spike_x(r, t, i);
        double e = fabs((double)b[i] - S);
        err_sum[i] += (double)b[i] - S;
        block_err[k] = fmax(block_err[k], e);
        if (bound > 0) worst_ratio = fmax(worst_ratio, e / bound);
        EXPECT(e <= bound, "%s: call %d element %zu: |result - sum| = %g above the bound with carried residuals %g", fmt,
               t, i, e, bound);
      }
      for (int r = 0; r < nranks; r++) R[r][k] = Rn[r];
      O[k] = On;
      /* the call after the spike carries its rounding: beyond its own (the
       * check above could fail if residuals were dropped or mixed) */
      if (t == 5 && k == 300 / BL)
        EXPECT(block_err[k] > own, "%s: the call after the spike is within its own roundings' bound %g (%g): nothing "
               "carried", fmt, own, block_err[k]);
    }
    if (rank == 0 && t >= 3 && t <= 9) printf("spike %s call %d: the spike's block off by at most %g\n", fmt, t, block_err[300 / BL]);
  }
  for (int k = 0; k < NB; k++) { /* the running sum: off by the last residuals only */
    double last = O[k];
    for (int r = 0; r < nranks; r++) last += R[r][k];
    for (size_t i = (size_t)k * BL; i < (size_t)(k + 1) * BL; i++)
      EXPECT(fabs(err_sum[i]) <= last, "%s: element %zu: the %d calls' results sum %g off, above the last residuals' bound %g",
             fmt, i, T, fabs(err_sum[i]), last);
  }
  if (rank == 0) printf("spike %s: every element within its bound (at most %.3f of it)\n", fmt, worst_ratio);
  free(b);
  free(err_sum);
  return fails != 0;
}

static int has(int argc, char **argv, const char *w) {
  for (int i = 3; i < argc; i++)
    if (!strcmp(argv[i], w)) return 1;
  return 0;
}

static int run(const char *cmd, int argc, char **argv) {
  if (!strcmp(cmd, "converge")) return cmd_converge(argc > 2 ? atoi(argv[2]) : 64, argc > 3 && !strcmp(argv[3], "ef"));
  if (!strcmp(cmd, "reset")) return cmd_reset();
  if (!strcmp(cmd, "models"))
    return cmd_models(argc > 2 ? atoi(argv[2]) : 30, has(argc, argv, "ef"), has(argc, argv, "twice"));
  if (!strcmp(cmd, "spike")) return cmd_spike();
  if (!strcmp(cmd, "shared")) return cmd_shared(argc > 2 ? atoi(argv[2]) : 30, has(argc, argv, "ef"));
  if (!strcmp(cmd, "fresh"))
    return cmd_fresh(argc > 2 ? atoi(argv[2]) : 64, has(argc, argv, "ef"), has(argc, argv, "equal"), has(argc, argv, "group"));
  fprintf(stderr, "unknown command %s\n", cmd);
  return 2;
}

int main(int argc, char **argv) { return tp_main(argc, argv, "converge", run); }
