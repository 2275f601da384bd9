/* shim_twophase.c — the two-phase compressed collectives over the host NCCL
 * (run with the shim preloaded; the wire format comes from NCCLSHIM_COMPRESS).
 *
 *   shim_twophase exact     all-reduce, inputs exact in the wire format: every
 *                           element exact, all ranks identical bits, in and
 *                           out of place, Sum (and Avg on 2 or 4 ranks), sizes
 *                           1 .. 300001; no all-reduce reaches NCCL for the
 *                           sizes that go two-phase (NCCLSHIM_ALGO=hier on
 *                           nodes of L ranks: one, the fp32 tail, when L does
 *                           not divide the count)
 *   shim_twophase rs        reduce-scatter the same way (in place: recvbuff =
 *                           sendbuff + rank * recvcount; out of place: sendbuff
 *                           untouched)
 *   shim_twophase bound [N] random inputs over many magnitudes: every element
 *                           within the documented bound, all ranks identical;
 *                           prints "maxrel <format> <n> <value> <bound>"
 *                           (max |error| / sum |x|) on rank 0
 *   shim_twophase special   Inf, -Inf, NaN on one rank, Inf - Inf: propagate
 *                           as in fp32 on every rank; the block's finite values
 *                           stay within their bound
 *   shim_twophase fault     one all-reduce and one reduce-scatter; prints
 *                           "rc <allreduce> <reducescatter>" (HOSTNCCL_FAIL_CALL
 *                           set by the caller) and exits 0 if it did not hang
 *   shim_twophase nonblocking  a nonblocking communicator: all-reduce and
 *                           reduce-scatter exact once ncclCommGetAsyncError
 *                           reports success
 *   shim_twophase group[-nb]  two-phase inside a user's (nested) group, with
 *                           fused, forwarded and integer members beside it, on
 *                           a blocking (nonblocking) communicator: exact,
 *                           identical, no two-phase member reaching NCCL's
 *                           all-reduce
 *   shim_twophase digest    random inputs (as bound), three rounds each of an
 *                           all-reduce out of place and in place and a
 *                           reduce-scatter out of place and in place (so
 *                           error feedback carries residuals): prints
 *                           "digest <rank> <hex>", an FNV-1a hash of every
 *                           result, to compare runs whose results must be
 *                           the same bits (NCCLSHIM_TWOPHASE_PIECE_BYTES),
 *                           and "realcalls <rank> <n>", the shim's real calls;
 *                           with SHIMTEST_DEVICE=1 the all-reduces only, on
 *                           device buffers of the CUDA driver double (on host
 *                           memory likewise with TP_DIGEST_NO_RS set; only the
 *                           reduce-scatters with TP_DIGEST_RS_ONLY set; with the
 *                           shim's real calls and wire bytes)
 *   shim_twophase limits    values near the top of fp32's range (issue 26):
 *                           Avg of 3e38 on every rank (all-reduce and
 *                           reduce-scatter) finite, as NCCL's Avg (it scales
 *                           before it sums); sums whose ranks' block maxima add
 *                           up to at most FLT_MAX finite (8-bit formats); six
 *                           calls with FLT_MAX (fp16: 65519, bf16: 3.38e38)
 *                           on rank 0 finite, also with error feedback; every
 *                           result within its relative bound, identical bits
 *   shim_twophase srgroup   stochastic rounding: two two-phase all-reduces of
 *                           one input in one group (and two outside) must
 *                           round independently: at most 90 % of their
 *                           elements agree (about 2/3 when independent)
 *   shim_twophase rspoison  the same for a reduce-scatter (hier's: TMP or the
 *                           stage between nodes unusable), out of and in
 *                           place: no element wrong, the faulty rank's shard
 *                           all NaN, later rounds exact
 *   shim_twophase poison    with NCCLSHIM_FAULT_STAGE on some ranks only: those
 *                           return ncclSystemError, every rank's result is NaN
 *                           in every element (hier: in the same elements on
 *                           every rank, those the failed stage carried; every
 *                           other element exact), the next call is exact
 *
 * Exact inputs: small integers times 1/2, at most 64 (fp16), 31 (bf16, int8)
 * or 3 (fp8) in magnitude per rank, so sums of up to 4 ranks are exact in the
 * format (int8 keeps every integer <= 127 of a block; e4m3 every integer of 4
 * significant bits); int4: -1/2, 0 or 1/2, the same on every rank.
 *
 * Must not: rely on timings or on the shim's internals beyond its documented
 * behaviour (docs/collectives.md, shim/plan/tp_plan.h for the chunk layout). */
#include <dlfcn.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ncclshim.h"
#include "tpcheck.h"
#include "devmirror.h" /* SHIMTEST_DEVICE=1: all-reduces on device buffers of the CUDA driver double */

static void stats(ncclshim_stats_t *st) { /* the preloaded shim's, found at run time */
  int (*get)(ncclshim_stats_t *);
  memset(st, 0, sizeof *st);
  *(void **)&get = dlsym(RTLD_DEFAULT, "ncclshim_get_stats");
  if (get) get(st);
}

int hostnccl_get_type_counters(int datatype, uint64_t *allreduce_calls, uint64_t *allreduce_bytes);



static uint64_t all_ar_calls(void) {
  uint64_t t = 0;
  for (int d = 0; d < 12; d++) {
    uint64_t c = 0;
    hostnccl_get_type_counters(d, &c, NULL);
    t += c;
  }
  return t;
}

/* NCCLSHIM_ALGO=hier on nodes of L >= 2 ranks each (2 or more nodes, found by
 * host name or NCCL_HOSTID, as the shim finds them): L; else 0. Hier sends
 * the last count % L elements through one fp32 ncclAllReduce. */
static int hier_local(void) {
  static int L = -1;
  if (L >= 0) return L;
  const char *a = getenv("NCCLSHIM_ALGO"), *id = getenv("NCCL_HOSTID");
  char me[128] = {0}, *all = calloc((size_t)nranks, sizeof me);
  if (id && *id) snprintf(me, sizeof me, "%s", id);
  else gethostname(me, sizeof me - 1);
  MPI_Allgather(me, sizeof me, MPI_CHAR, all, sizeof me, MPI_CHAR, MPI_COMM_WORLD);
  int nodes = 0, mine = 0, lo = nranks, hi = 0;
  for (int i = 0; i < nranks; i++) {
    int first = 1, cnt = 0;
    for (int j = 0; j < nranks; j++) {
      int same = !strcmp(all + (size_t)i * sizeof me, all + (size_t)j * sizeof me);
      cnt += same;
      if (same && j < i) first = 0;
    }
    if (first) {
      nodes++;
      lo = cnt < lo ? cnt : lo;
      hi = cnt > hi ? cnt : hi;
    }
    if (i == rank) mine = cnt;
  }
  free(all);
  L = a && !strcmp(a, "hier") && nodes >= 2 && lo == hi && mine >= 2 ? mine : 0;
  return L;
}

static const size_t sizes[] = {1, 7, 33, 255, 256, 257, 1000, 4099, 16384, 65537, 300001};
#define NSIZES (sizeof sizes / sizeof sizes[0])

static int cmd_exact(void) {
  size_t maxn = 300001;
  float *s = malloc(maxn * 4), *r = malloc(maxn * 4);
  int pow2 = (nranks & (nranks - 1)) == 0;
  /* warm-up: the first call carries the configuration check */
  for (size_t i = 0; i < 16; i++) s[i] = exact_val(rank, i);
  NCCL_OK(ncclAllReduce(s, r, 16, ncclFloat32, ncclSum, comm, NULL));
  for (int op = 0; op < (pow2 ? 2 : 1); op++)
    for (int inplace = 0; inplace < 2; inplace++)
      for (size_t k = 0; k < NSIZES; k++) {
        size_t n = sizes[k];
        for (size_t i = 0; i < n; i++) s[i] = exact_val(rank, i);
        float *out = inplace ? s : r;
        uint64_t before = all_ar_calls();
        NCCL_OK(ncclAllReduce(s, out, n, ncclFloat32, op ? ncclAvg : ncclSum, comm, NULL));
        uint64_t issued = all_ar_calls() - before;
        uint64_t want_issued = hier_local() ? n % (size_t)hier_local() != 0 : 0; /* hier: the fp32 tail */
        if (n >= 1000) EXPECT(issued == want_issued, "%s n=%zu: %llu all-reduces reached NCCL (want %llu)", fmt, n,
                              (unsigned long long)issued, (unsigned long long)want_issued);
        for (size_t i = 0; i < n; i++) {
          float want = 0;
          for (int q = 0; q < nranks; q++) want += exact_val(q, i);
          if (op) want /= (float)nranks;
          if (f2u(out[i]) != f2u(want) && !(want == 0 && out[i] == 0)) {
            EXPECT(0, "%s %s %s n=%zu: element %zu = %a, want %a", fmt, op ? "avg" : "sum", inplace ? "in" : "out", n,
                   i, out[i], want);
            break;
          }
        }
        EXPECT(identical(out, n), "%s n=%zu: ranks hold different bits", fmt, n);
      }
  free(s);
  free(r);
  return fails != 0;
}

static const size_t rsizes[] = {1, 100, 4097, 70001};

static int cmd_rs(void) {
  size_t maxrc = 70001;
  float *s = calloc(maxrc * nranks, 4), *r = calloc(maxrc, 4);
  int pow2 = (nranks & (nranks - 1)) == 0;
  NCCL_OK(ncclAllReduce(s, r, 1, ncclFloat32, ncclSum, comm, NULL)); /* configuration check */
  for (int op = 0; op < (pow2 ? 2 : 1); op++)
    for (int inplace = 0; inplace < 2; inplace++)
      for (size_t k = 0; k < sizeof rsizes / sizeof rsizes[0]; k++) {
        size_t rc = rsizes[k], tot = rc * (size_t)nranks;
        for (size_t i = 0; i < tot; i++) s[i] = exact_val(rank, i);
        float *out = inplace ? s + (size_t)rank * rc : r;
        uint64_t before = all_ar_calls();
        NCCL_OK(ncclReduceScatter(s, out, rc, ncclFloat32, op ? ncclAvg : ncclSum, comm, NULL));
        (void)before;
        for (size_t i = 0; i < rc; i++) {
          size_t g = (size_t)rank * rc + i;
          float want = 0;
          for (int q = 0; q < nranks; q++) want += exact_val(q, g);
          if (op) want /= (float)nranks;
          if (f2u(out[i]) != f2u(want) && !(want == 0 && out[i] == 0)) {
            EXPECT(0, "rs %s %s %s rc=%zu: element %zu = %a, want %a", fmt, op ? "avg" : "sum",
                   inplace ? "in" : "out", rc, i, out[i], want);
            break;
          }
        }
        if (!inplace)
          for (size_t i = 0; i < tot; i++)
            if (f2u(s[i]) != f2u(exact_val(rank, i))) {
              EXPECT(0, "rs out of place: sendbuff changed at %zu", i);
              break;
            }
      }
  free(s);
  free(r);
  return fails != 0;
}

/* Random inputs over many magnitudes: one exponent per window of 4096
 * elements (2^-30 .. 2^30), mantissas in [0.5, 1), random signs, so within a
 * block (inside a window) amax <= 2 |x|. Count: a multiple of 4096 * n, so
 * every chunk starts at a window. */
static void fill_random(float *x, size_t n, int r) {
  int wide = strcmp(fmt, "fp16") != 0; /* fp16: stay inside its range, 2^-12 .. 2^12 */
  rs_state = 0x9e3779b97f4a7c15ull;
  int e = 0;
  for (size_t i = 0; i < n; i++) {
    if (i % 4096 == 0) e = wide ? (int)(rnd() % 61) - 30 : (int)(rnd() % 25) - 12;
    for (int q = 0; q <= r; q++) rnd(); /* rank-dependent stream, window exponents shared */
    float m = 0.5f + (float)(rnd() >> 8) / (float)(1u << 25);
    x[i] = ldexpf((rnd() & 1) ? -m : m, e);
    for (int q = r + 1; q < 8; q++) rnd();
  }
}

/* The documented bound on max |error| / sum |x| for inputs as above. */
static double bound_for(const char *f, const char *algo, int n) {
  double fp32 = n * ldexp(1, -24);
  if (!strcmp(algo, "ring")) return (n + 1) * ldexp(1, strcmp(f, "bf16") ? -11 : -8);
  if (!strcmp(f, "fp16")) return ldexp(1, -10) + fp32;
  if (!strcmp(f, "bf16")) return ldexp(1, -7) + fp32;
  if (!strcmp(f, "int8")) return 4 / 127.5 + fp32;
  if (!strcmp(f, "int4")) return 4 / 7.5 + fp32; /* int8's derivation with q = 7 (wire_bits.h) */
  if (!strcmp(f, "fp16s")) return ldexp(1, -10) + ldexp(1, -38) + fp32; /* two roundings: 2^-11 each, amax 2^-39 below */
  return ldexp(1, -3) + 2 * ldexp(1, -16) + fp32;
}

static int cmd_bound(size_t n) {
  const char *algo = getenv("NCCLSHIM_ALGO");
  if (!algo) algo = "auto";
  float *s = malloc(n * 4), *r = malloc(n * 4), *t = malloc(n * 4);
  double *sum = calloc(n, sizeof *sum), *abs_sum = calloc(n, sizeof *abs_sum);
  for (int q = 0; q < nranks; q++) {
    fill_random(t, n, q);
    for (size_t i = 0; i < n; i++) {
      sum[i] += t[i];
      abs_sum[i] += fabs(t[i]);
    }
  }
  fill_random(s, n, rank);
  NCCL_OK(ncclAllReduce(s, r, n, ncclFloat32, ncclSum, comm, NULL));
  double worst = 0, b = bound_for(fmt, algo, nranks);
  for (size_t i = 0; i < n; i++) {
    double e = fabs(r[i] - sum[i]) / abs_sum[i];
    if (e > worst) worst = e;
  }
  EXPECT(worst <= b, "%s %s n=%d: max |error|/sum|x| = %.3g beyond the bound %.3g", fmt, algo, nranks, worst, b);
  EXPECT(identical(r, n), "random inputs: ranks hold different bits");
  if (rank == 0) printf("maxrel %s %s %d %.6g %.6g\n", fmt, algo, nranks, worst, b);
  return fails != 0;
}

static uint64_t fnv(uint64_t h, const void *p, size_t bytes) {
  const unsigned char *b = p;
  for (size_t i = 0; i < bytes; i++) h = (h ^ b[i]) * 0x100000001b3ull;
  return h;
}

static int cmd_digest(void) {
  enum { N = 200003, RC = 70001 };
  float *s = malloc((size_t)RC * nranks * 4 > N * 4 ? (size_t)RC * nranks * 4 : N * 4);
  float *r = malloc((size_t)RC * nranks * 4 > N * 4 ? (size_t)RC * nranks * 4 : N * 4);
  uint64_t h = 0xcbf29ce484222325ull;
  const char *dev = getenv("SHIMTEST_DEVICE");
  int rs = !(dev && !strcmp(dev, "1")) && !getenv("TP_DIGEST_NO_RS"); /* devmirror.h mirrors all-reduces only */
  int ar = !getenv("TP_DIGEST_RS_ONLY");
  for (int round = 0; round < 3; round++) {
    if (!ar) goto rs_only;
    fill_random(s, N, rank);
    NCCL_OK(ncclAllReduce(s, r, N, ncclFloat32, ncclSum, comm, NULL));
    h = fnv(h, r, N * 4);
    NCCL_OK(ncclAllReduce(r, r, N, ncclFloat32, ncclAvg, comm, NULL));
    h = fnv(h, r, N * 4);
    if (!rs) continue;
  rs_only:
    fill_random(s, (size_t)RC * nranks, rank);
    NCCL_OK(ncclReduceScatter(s, r, RC, ncclFloat32, ncclSum, comm, NULL));
    h = fnv(h, r, RC * 4);
    NCCL_OK(ncclReduceScatter(s, s + (size_t)rank * RC, RC, ncclFloat32, ncclAvg, comm, NULL));
    h = fnv(h, s + (size_t)rank * RC, RC * 4);
  }
  ncclshim_stats_t st;
  stats(&st);
  printf("digest %d %016llx\nrealcalls %d %llu\nwirebytes %d %llu\n", rank, (unsigned long long)h, rank,
         (unsigned long long)st.real_calls, rank, (unsigned long long)st.wire_bytes);
  free(s);
  free(r);
  return fails != 0;
}

static int cmd_special(void) {
  enum { N = 8192 };
  float *s = malloc(N * 4), *r = malloc(N * 4);
  for (size_t i = 0; i < N; i++) s[i] = exact_val(rank, i);
  if (rank == 0) {
    s[10] = INFINITY;
    s[20] = NAN;
    s[30] = INFINITY;
    s[5000] = -INFINITY;
  }
  if (rank == 1) s[30] = -INFINITY;
  NCCL_OK(ncclAllReduce(s, r, N, ncclFloat32, ncclSum, comm, NULL));
  EXPECT(isinf(r[10]) && r[10] > 0, "Inf on one rank: got %a", r[10]);
  EXPECT(isinf(r[5000]) && r[5000] < 0, "-Inf on one rank: got %a", r[5000]);
  EXPECT(isnan(r[20]), "NaN on one rank: got %a", r[20]);
  EXPECT(isnan(r[30]), "Inf - Inf: got %a", r[30]);
  for (size_t i = 0; i < N; i++) {
    if (i == 10 || i == 20 || i == 30 || i == 5000) continue;
    double want = 0;
    for (int q = 0; q < nranks; q++) want += exact_val(q, i);
    /* finite values of a block holding Inf/NaN: int8 within amax/63 per
     * rounding (exact elsewhere); the others exact */
    double tol = !strcmp(fmt, "int8") ? 3 * nranks * limit() * 0.5 / 63.0 : 0;
    if (fabs(r[i] - want) > tol) {
      EXPECT(0, "special: finite element %zu = %a, want %a", i, r[i], want);
      break;
    }
  }
  EXPECT(identical(r, N), "special values: ranks hold different bits");
  return fails != 0;
}

static int cmd_fault(void) {
  enum { N = 65536 };
  float *s = malloc(N * 4 * 4), *r = malloc(N * 4 * 4);
  for (size_t i = 0; i < (size_t)N * 4; i++) s[i] = exact_val(rank, i);
  ncclResult_t a = ncclAllReduce(s, r, N, ncclFloat32, ncclSum, comm, NULL);
  ncclResult_t b = ncclReduceScatter(s, r, N, ncclFloat32, ncclSum, comm, NULL);
  int mine[2] = {(int)a, (int)b}, lo[2], hi[2];
  MPI_Allreduce(mine, lo, 2, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(mine, hi, 2, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  EXPECT(lo[0] == hi[0] && lo[1] == hi[1], "ranks returned different results (%d %d)", a, b);
  printf("rc %d %d\n", a, b);
  return fails != 0;
}

static int cmd_poison(void) {
  enum { N = 100003 };
  const char *fa = getenv("NCCLSHIM_FAULT_STAGE");
  int faulty = fa && *fa && strcmp(fa, "0") != 0;
  float *s = malloc(N * 4), *r = malloc(N * 4);
  for (size_t i = 0; i < N; i++) s[i] = exact_val(rank, i);
  NCCL_OK(ncclAllReduce(s, r, 16, ncclFloat32, ncclSum, comm, NULL)); /* check */
  for (int round = 0; round < 2; round++) {
    ncclResult_t res = ncclAllReduce(s, r, N, ncclFloat32, ncclSum, comm, NULL);
    if (round == 0) {
      EXPECT(res == (faulty ? ncclSystemError : ncclSuccess), "poisoned round: rank %s returned %d",
             faulty ? "without staging" : "with staging", res);
      size_t nan = 0;
      size_t first_ok = N;
      for (size_t i = 0; i < N; i++) {
        nan += isnan(r[i]) != 0;
        if (!isnan(r[i]) && first_ok == N) first_ok = i;
      }
      if (!hier_local()) {
        EXPECT(nan == N, "poisoned round: %zu of %d elements NaN (first finite: %zu)", nan, N, first_ok);
      } else { /* hier: the shards the poisoned rank's stage between nodes carried are NaN, on every rank; the rest exact */
        unsigned long long lo, hi, mine = nan;
        MPI_Allreduce(&mine, &lo, 1, MPI_UNSIGNED_LONG_LONG, MPI_MIN, MPI_COMM_WORLD);
        MPI_Allreduce(&mine, &hi, 1, MPI_UNSIGNED_LONG_LONG, MPI_MAX, MPI_COMM_WORLD);
        EXPECT(nan > 0 && lo == hi, "hier poisoned round: %zu of %d elements NaN here, %llu..%llu on the ranks", nan, N,
               lo, hi);
        for (size_t i = 0; i < N; i++) {
          float want = 0;
          for (int q = 0; q < nranks; q++) want += exact_val(q, i);
          if (!isnan(r[i]) && r[i] != want) {
            EXPECT(0, "hier poisoned round: element %zu = %a, want %a or NaN", i, r[i], want);
            break;
          }
        }
      }
    } else {
      NCCL_OK(res);
      for (size_t i = 0; i < N; i++) {
        float want = 0;
        for (int q = 0; q < nranks; q++) want += exact_val(q, i);
        if (r[i] != want) {
          EXPECT(0, "after the poisoned call: element %zu = %a, want %a", i, r[i], want);
          break;
        }
      }
    }
  }
  return fails != 0;
}

/* A reduce-scatter (hier on nodes, consecutive or not) with
 * NCCLSHIM_FAULT_STAGE on some ranks: out of place, then in place, then both
 * again with no fault left (the fault point fires once per process). A
 * faulty rank returns ncclSystemError with its whole shard NaN; on every
 * other rank each element is exact or NaN (NaN only where a faulty rank's
 * stage between nodes went), never wrong; the send buffer of an out-of-place
 * call is untouched; the later rounds are exact everywhere. */
static int cmd_rspoison(void) {
  enum { RC = 40001 };
  const char *fa = getenv("NCCLSHIM_FAULT_STAGE");
  int faulty = fa && *fa && strcmp(fa, "0") != 0;
  size_t tot = (size_t)RC * nranks;
  float *s = malloc(tot * 4), *r = malloc(RC * 4);
  int chk[4] = {0};
  NCCL_OK(ncclAllReduce(chk, chk, 4, ncclInt32, ncclSum, comm, NULL)); /* the check, no staging */
  for (int round = 0; round < 4; round++) {
    int inplace = round % 2;
    for (size_t i = 0; i < tot; i++) s[i] = exact_val(rank, i);
    float *out = inplace ? s + (size_t)rank * RC : r;
    ncclResult_t res = ncclReduceScatter(s, out, RC, ncclFloat32, ncclSum, comm, NULL);
    size_t nan = 0, wrong = 0, changed = 0;
    for (size_t i = 0; i < RC; i++) {
      float want = 0;
      for (int q = 0; q < nranks; q++) want += exact_val(q, (size_t)rank * RC + i);
      if (isnan(out[i])) nan++;
      else if (out[i] != want) wrong++;
    }
    if (!inplace)
      for (size_t i = 0; i < tot; i++) changed += s[i] != exact_val(rank, i);
    int first = faulty && round == 0; /* NCCLSHIM_FAULT_STAGE=1: this rank's first take */
    EXPECT(!wrong && !changed, "round %d (%s place): %zu elements wrong, %zu of the send buffer changed", round,
           inplace ? "in" : "out of", wrong, changed);
    if (first) EXPECT(res == ncclSystemError && nan == RC, "faulty rank: returned %d with %zu of %d NaN", res, nan, RC);
    if (round >= 2) EXPECT(res == ncclSuccess && !nan, "round %d: returned %d with %zu NaN", round, res, nan);
  }
  printf("rspoison rank %d ok\n", rank);
  return fails != 0;
}

static int cmd_nonblocking(void) {
  enum { N = 100003, RC = 40001 };
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 0;
  ncclComm_t nb = tm_comm_over_cfg(MPI_COMM_WORLD, &cfg);
  size_t tot = (size_t)RC * nranks > N ? (size_t)RC * nranks : N;
  float *s = malloc(tot * 4), *r = malloc(N * 4);
  for (size_t i = 0; i < tot; i++) s[i] = exact_val(rank, i);
  for (int round = 0; round < 3; round++) {
    ncclResult_t res = round < 2 ? ncclAllReduce(s, r, N, ncclFloat32, ncclSum, nb, NULL)
                                 : ncclReduceScatter(s, r, RC, ncclFloat32, ncclSum, nb, NULL);
    EXPECT(res == ncclSuccess || res == ncclInProgress, "nonblocking round %d: %d", round, res);
    ncclResult_t e = ncclInProgress;
    while (e == ncclInProgress) NCCL_OK(ncclCommGetAsyncError(nb, &e));
    EXPECT(e == ncclSuccess, "nonblocking round %d: async error %d", round, e);
    size_t n = round < 2 ? N : RC, first = round < 2 ? 0 : (size_t)rank * RC;
    for (size_t i = 0; i < n; i++) {
      float want = 0;
      for (int q = 0; q < nranks; q++) want += exact_val(q, first + i);
      if (r[i] != want) {
        EXPECT(0, "nonblocking round %d: element %zu = %a, want %a", round, i, r[i], want);
        break;
      }
    }
  }
  ncclCommDestroy(nb);
  return fails != 0;
}

/* Inside a user's group (nested once), on a blocking or (nb) a nonblocking
 * communicator: two-phase all-reduces in and out of place, a reduce-scatter,
 * a small fp32 call and an int32 call; every two-phase member exact and
 * identical on every rank, and none of them an all-reduce reaching NCCL
 * (only the int32 call and the small one do: 2 per group). */
static int cmd_group(int nbc) {
  enum { N1 = 65537, N2 = 16384, RC = 4097, NSMALL = 3 };
  ncclComm_t cm = comm;
  if (nbc) {
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0;
    cm = tm_comm_over_cfg(MPI_COMM_WORLD, &cfg);
  }
  size_t tot = (size_t)RC * nranks;
  float *a = malloc(N1 * 4), *b = malloc(N2 * 4), *bo = malloc(N2 * 4), *rs = malloc(tot * 4), *ro = malloc(RC * 4);
  float *sm = malloc(NSMALL * 4);
  int32_t iv[5];
  ncclResult_t res = ncclAllReduce(a, a, 1, ncclFloat32, ncclSum, cm, NULL); /* the check, outside the group */
  if (res == ncclInProgress) {
    ncclResult_t e = ncclInProgress;
    while (e == ncclInProgress) NCCL_OK(ncclCommGetAsyncError(cm, &e));
  }
  for (int round = 0; round < 2; round++) {
    for (size_t i = 0; i < N1; i++) a[i] = exact_val(rank, i);
    for (size_t i = 0; i < N2; i++) b[i] = exact_val(rank, i + 7);
    for (size_t i = 0; i < tot; i++) rs[i] = exact_val(rank, i + 3);
    for (size_t i = 0; i < NSMALL; i++) sm[i] = (float)rank;
    for (int i = 0; i < 5; i++) iv[i] = rank + i;
    ncclshim_stats_t st0, st1;
    stats(&st0);
    uint64_t before = all_ar_calls();
    float *rsout = round ? rs + (size_t)rank * RC : ro; /* round 1: in place */
    ncclResult_t g = ncclGroupStart();
    ncclResult_t c1 = ncclAllReduce(a, a, N1, ncclFloat32, ncclSum, cm, NULL);
    ncclResult_t c2 = ncclGroupStart();
    ncclResult_t c3 = ncclAllReduce(sm, sm, NSMALL, ncclFloat32, ncclSum, cm, NULL);
    ncclResult_t c4 = ncclReduceScatter(rs, rsout, RC, ncclFloat32, ncclSum, cm, NULL);
    ncclResult_t c5 = ncclGroupEnd();
    ncclResult_t c6 = ncclAllReduce(iv, iv, 5, ncclInt32, ncclSum, cm, NULL);
    ncclResult_t c7 = ncclAllReduce(b, bo, N2, ncclFloat32, ncclSum, cm, NULL);
    ncclResult_t e = ncclGroupEnd();
    EXPECT(g == ncclSuccess && c1 == ncclSuccess && c2 == ncclSuccess && c3 == ncclSuccess && c4 == ncclSuccess &&
               c5 == ncclSuccess && c6 == ncclSuccess && c7 == ncclSuccess,
           "group round %d: member results %d %d %d %d %d %d %d %d", round, g, c1, c2, c3, c4, c5, c6, c7);
    EXPECT(e == (nbc ? ncclInProgress : ncclSuccess) || (nbc && e == ncclSuccess), "group round %d: group end %d",
           round, e);
    if (nbc) {
      ncclResult_t x = ncclInProgress;
      while (x == ncclInProgress) NCCL_OK(ncclCommGetAsyncError(cm, &x));
      EXPECT(x == ncclSuccess, "group round %d: async error %d", round, x);
    }
    stats(&st1);
    uint64_t issued = all_ar_calls() - before;
    size_t hl = (size_t)hier_local(); /* hier: each two-phase all-reduce's fp32 tail, when L does not divide it */
    uint64_t want = 2 + (hl ? (N1 % hl != 0) + (N2 % hl != 0) : 0);
    EXPECT(issued == want, "group round %d: %llu all-reduces reached NCCL (want %llu: the int32 and the small one%s)",
           round, (unsigned long long)issued, (unsigned long long)want, hl ? ", hier's tails" : "");
    EXPECT(st1.twophase - st0.twophase == 3, "group round %d: %llu two-phase calls (want 3)", round,
           (unsigned long long)(st1.twophase - st0.twophase));
    for (size_t i = 0; i < N1; i++) {
      float want = 0;
      for (int q = 0; q < nranks; q++) want += exact_val(q, i);
      if (f2u(a[i]) != f2u(want) && !(want == 0 && a[i] == 0)) {
        EXPECT(0, "group %s: in-place member element %zu = %a, want %a", fmt, i, a[i], want);
        break;
      }
    }
    for (size_t i = 0; i < N2; i++) {
      float want = 0;
      for (int q = 0; q < nranks; q++) want += exact_val(q, i + 7);
      if (f2u(bo[i]) != f2u(want) && !(want == 0 && bo[i] == 0)) {
        EXPECT(0, "group %s: out-of-place member element %zu = %a, want %a", fmt, i, bo[i], want);
        break;
      }
    }
    for (size_t i = 0; i < RC; i++) {
      float want = 0;
      for (int q = 0; q < nranks; q++) want += exact_val(q, (size_t)rank * RC + i + 3);
      if (f2u(rsout[i]) != f2u(want) && !(want == 0 && rsout[i] == 0)) {
        EXPECT(0, "group %s: reduce-scatter element %zu = %a, want %a", fmt, i, rsout[i], want);
        break;
      }
    }
    EXPECT(sm[0] == (float)(nranks * (nranks - 1) / 2) && iv[0] == nranks * (nranks - 1) / 2,
           "group: forwarded members wrong (%g, %d)", sm[0], iv[0]);
    EXPECT(identical(a, N1) && identical(bo, N2), "group %s: ranks hold different bits", fmt);
  }
  if (nbc) ncclCommDestroy(cm);
  free(a), free(b), free(bo), free(rs), free(ro), free(sm);
  return fails != 0;
}

/* Relative error of one rounding in the format (8-bit: of the block max). */
static double rel_step(void) {
  return !strcmp(fmt, "fp16") || !strcmp(fmt, "fp16s") ? 0x1p-11
         : !strcmp(fmt, "bf16")                          ? 0x1p-8
         : !strcmp(fmt, "int8")                          ? 1.0 / 63
         : !strcmp(fmt, "int4")                          ? 1.0 / 3.25
                                                         : 0x1p-3;
}

static int all_finite(const float *x, size_t n, size_t *first) {
  for (size_t i = 0; i < n; i++)
    if (!isfinite(x[i])) {
      *first = i;
      return 0;
    }
  return 1;
}

static int cmd_limits(void) {
  enum { N = 8192, RC = 4096 };
  int is8 = !strcmp(fmt, "int8") || !strcmp(fmt, "fp8") || !strcmp(fmt, "fp16s") || !strcmp(fmt, "int4"),
      f16 = !strcmp(fmt, "fp16");
  size_t tot = (size_t)RC * nranks > N ? (size_t)RC * nranks : N, bad;
  float *s = calloc(tot, 4), *r = calloc(tot, 4);
  double rel = rel_step();
  NCCL_OK(ncclAllReduce(s, r, 1, ncclFloat32, ncclMax, comm, NULL)); /* the configuration check */
  /* 1. Avg of 3e38 everywhere (fp16 cannot hold it: Inf, its documented overflow) */
  if (!f16) {
    for (size_t i = 0; i < tot; i++) s[i] = 3e38f;
    NCCL_OK(ncclAllReduce(s, r, N, ncclFloat32, ncclAvg, comm, NULL));
    EXPECT(all_finite(r, N, &bad), "%s: Avg of 3e38 on every rank: element %zu = %g", fmt, bad, r[bad]);
    EXPECT(fabs(r[0] - 3e38) <= 2 * rel * 3e38, "%s: Avg of 3e38: %g", fmt, r[0]);
    EXPECT(identical(r, N), "%s: Avg: ranks hold different bits", fmt);
    NCCL_OK(ncclReduceScatter(s, r, RC, ncclFloat32, ncclAvg, comm, NULL));
    EXPECT(all_finite(r, RC, &bad), "%s: reduce-scatter Avg of 3e38 on every rank: element %zu = %g", fmt, bad, r[bad]);
    EXPECT(fabs(r[0] - 3e38) <= 2 * rel * 3e38, "%s: reduce-scatter Avg of 3e38: %g", fmt, r[0]);
  }
  /* 2. 8-bit: regions of 1024 equal values whose ranks add up to at most
   * FLT_MAX (1 - 2^-20): rank 0 holds a share t of it, the others the rest
   * in equal parts; t over (0.05, 0.95) region by region. The guarantee
   * (docs/collectives.md) is about each rank's largest |x| within block - 1 = 255
   * elements of an element (the wire block holding it, wherever the chunk
   * layout puts it): checked 256 elements or more inside a region. */
  if (is8) {
    for (size_t i = 0; i < N; i++) {
      size_t b = i / 1024;
      double tot_v = (double)FLT_MAX * (1 - 0x1p-20), t = 0.05 + 0.9 * (double)((b * 37) % 64) / 63.0;
      s[i] = rank == 0 ? (float)(tot_v * t) : (float)(tot_v * (1 - t) / (nranks - 1) * (1 - 0x1p-22));
    }
    NCCL_OK(ncclAllReduce(s, r, N, ncclFloat32, ncclSum, comm, NULL));
    size_t nbad = 0;
    for (size_t i = 0; i < N; i++) {
      if (i % 1024 < 256 || i % 1024 >= 768) continue;
      if (!isfinite(r[i]) || r[i] < (1 - 4 * rel) * FLT_MAX * (1 - 0x1p-20)) {
        if (!nbad++) EXPECT(0, "%s: maxima summing to at most FLT_MAX: element %zu = %g (rank 0 %g)", fmt, i, r[i], (double)s[i]);
      }
    }
    EXPECT(identical(r, N), "%s: top sums: ranks hold different bits", fmt);
  }
  /* 3. six calls with the format's largest input on rank 0 (fp16: 65519,
   * below the overflow threshold; bf16: 3.38e38, likewise): finite each
   * time, also with error feedback (the residual must not push x + r past
   * the range) */
  float big = f16 ? 65519.0f : !strcmp(fmt, "bf16") ? 3.38e38f : FLT_MAX;
  for (int t = 0; t < 6; t++) {
    for (size_t i = 0; i < N; i++) s[i] = rank == 0 ? (i % 2 ? big : -big) : 0.0f;
    NCCL_OK(ncclAllReduce(s, s, N, ncclFloat32, ncclSum, comm, NULL));
    EXPECT(all_finite(s, N, &bad), "%s: call %d with %g on rank 0: element %zu = %g", fmt, t + 1, (double)big, bad,
           s[bad]);
    EXPECT(fabs(fabs(s[1]) - big) <= 2 * rel * big, "%s: call %d: %g for %g", fmt, t + 1, s[1], (double)big);
  }
  if (rank == 0) printf("limits %s: done\n", fmt);
  free(s);
  free(r);
  return fails != 0;
}

static int cmd_srgroup(void) {
  enum { N = 65536 };
  float *s = malloc(N * 4), *a = calloc(N, 4), *b = calloc(N, 4);
  uint32_t x = 12345u + (uint32_t)rank;
  for (size_t i = 0; i < N; i++) {
    x = x * 1664525u + 1013904223u;
    s[i] = 1.0f + (float)(x >> 8) * 0x1p-24f;
  }
  NCCL_OK(ncclAllReduce(a, a, 1, ncclFloat32, ncclSum, comm, NULL)); /* the configuration check */
  for (int grouped = 0; grouped < 2; grouped++) {
    if (grouped) NCCL_OK(ncclGroupStart());
    NCCL_OK(ncclAllReduce(s, a, N, ncclFloat32, ncclSum, comm, NULL));
    NCCL_OK(ncclAllReduce(s, b, N, ncclFloat32, ncclSum, comm, NULL));
    if (grouped) NCCL_OK(ncclGroupEnd());
    size_t same = 0;
    for (size_t i = 0; i < N; i++) same += f2u(a[i]) == f2u(b[i]);
    EXPECT(same <= N * 9 / 10, "%s: %s: two stochastic roundings of one input agree in %zu of %d elements", fmt,
           grouped ? "in one group" : "outside a group", same, N);
    EXPECT(identical(a, N) && identical(b, N), "%s: ranks hold different bits", fmt);
    if (rank == 0) printf("srgroup %s %s: %zu of %d agree\n", fmt, grouped ? "group" : "single", same, N);
  }
  free(s);
  free(a);
  free(b);
  return fails != 0;
}

static int run(const char *cmd, int argc, char **argv) {
  if (!strcmp(cmd, "exact")) return cmd_exact();
  if (!strcmp(cmd, "rs")) return cmd_rs();
  if (!strcmp(cmd, "bound")) return cmd_bound(argc > 2 ? (size_t)atol(argv[2]) * 4096 * (size_t)nranks : 16384 * (size_t)nranks);
  if (!strcmp(cmd, "special")) return cmd_special();
  if (!strcmp(cmd, "limits")) return cmd_limits();
  if (!strcmp(cmd, "srgroup")) return cmd_srgroup();
  if (!strcmp(cmd, "digest")) return cmd_digest();
  if (!strcmp(cmd, "fault")) return cmd_fault();
  if (!strcmp(cmd, "poison")) return cmd_poison();
  if (!strcmp(cmd, "rspoison")) return cmd_rspoison();
  if (!strcmp(cmd, "nonblocking")) return cmd_nonblocking();
  if (!strcmp(cmd, "group")) return cmd_group(0);
  if (!strcmp(cmd, "group-nb")) return cmd_group(1);
  fprintf(stderr, "unknown command %s\n", cmd);
  return 2;
}

int main(int argc, char **argv) { return tp_main(argc, argv, "exact", run); }
