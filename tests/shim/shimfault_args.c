/* shimfault_args.c — arguments and values at the edges, under the shim.
 *
 *   shimfault_args codes        a table of calls (count 0, 1, odd, threshold
 *                               +-1, NULL buffers, invalid op and datatype,
 *                               NULL communicator, PreMulSum, inside groups);
 *                               rank 0 prints one line per call with the result
 *                               codes and a hash of send and receive buffers,
 *                               so a script can diff a run with the shim
 *                               against one without (inputs are exact in the
 *                               wire type, so even compressed results match)
 *   shimfault_args misaligned   send/recv pointers offset by 0..3 elements, in
 *                               and out of place: exact results, sendbuff
 *                               unchanged, nothing written around recvbuff
 *   shimfault_args big COUNT f32|i8 compressed|passthrough|limit
 *                               one in-place Sum of COUNT elements (sizes past
 *                               2^31 elements and 2^32 bytes): exact, with the
 *                               shim's byte counters matching 64-bit sizes;
 *                               `limit`: refused with ncclInvalidUsage on every
 *                               rank (NCCLSHIM_MAX_STAGING_BYTES), buffer intact
 *   shimfault_args staging group|poll
 *                               under a small NCCLSHIM_MAX_STAGING_BYTES (64K,
 *                               fp16, no fusion): two calls that each fit, a
 *                               two-phase reduce-scatter (64000 bytes of
 *                               staging at 2 ranks) and a ring all-reduce
 *                               (40000), whose regions would not fit together;
 *                               `group`: both in one group, on one stream on
 *                               rank 0 and on two on rank 1; `poll`: on a
 *                               nonblocking communicator, the all-reduce first,
 *                               polled to completion on rank 0 only (its
 *                               cast-back stays parked on rank 1). Either way
 *                               every rank must decide the same: both calls
 *                               succeed everywhere, results exact
 *   shimfault_args staging sum  two such all-reduces in one group, on one
 *                               stream on rank 0 and on two on rank 1: the
 *                               group needs 80000 bytes, so the second is
 *                               refused (ncclInvalidUsage, buffer intact) on
 *                               every rank and the first is exact
 *   shimfault_args special sum|avg
 *                               Inf, NaN, -0, subnormals, fp16 overflow: the
 *                               same bits on every rank, equal to plain NCCL on
 *                               the wire-type values, overflow/underflow counted
 *
 * Must not: depend on the shim being loaded for the `codes` table (it is also
 * run without it), or use inputs whose sums are inexact in fp16/bf16 where
 * bit-exact results are asserted. */
#include <sys/mman.h>

#include "shimfault_util.h"
#include "devmirror.h" /* SHIMTEST_DEVICE=1: device buffers on the CUDA driver double */

static ncclComm_t comm;

/* ---- codes ------------------------------------------------------------------ */

enum { NB = 100003, GUARD = 16, OP_PREMUL = 1000 };

static uint64_t fnv(const void *p, size_t n) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; i++) h = (h ^ ((const unsigned char *)p)[i]) * 1099511628211ull;
  return h;
}

typedef struct {
  const char *name;
  int send, recv;       /* 0: NULL, 1: the buffer, 2: recv = send (in place) */
  size_t count;
  int dtype, op;        /* OP_PREMUL: the PreMulSum operator created below */
  int null_comm, grouped, compressed; /* grouped 2: a valid compressed member first */
} arg_case;

static int cmd_codes(void) {
  static const arg_case cases[] = {
      {"count 0", 1, 1, 0, ncclFloat32, ncclSum, 0, 0, 0},
      {"count 0, NULL buffers", 0, 0, 0, ncclFloat32, ncclSum, 0, 0, 0},
      {"count 1", 1, 1, 1, ncclFloat32, ncclSum, 0, 0, 0},
      {"count 7 (odd)", 1, 1, 7, ncclFloat32, ncclSum, 0, 0, 0},
      {"threshold - 1 element", 1, 1, 16383, ncclFloat32, ncclSum, 0, 0, 0},
      {"threshold", 1, 1, 16384, ncclFloat32, ncclSum, 0, 0, 1},
      {"threshold + 1 element (odd)", 1, 1, 16385, ncclFloat32, ncclSum, 0, 0, 1},
      {"count 100003 (odd)", 1, 1, NB, ncclFloat32, ncclSum, 0, 0, 1},
      {"count 100003 in place", 1, 2, NB, ncclFloat32, ncclSum, 0, 0, 1},
      {"Avg", 1, 1, NB, ncclFloat32, ncclAvg, 0, 0, 1},
      {"Max (not compressed)", 1, 1, NB, ncclFloat32, ncclMax, 0, 0, 0},
      {"PreMulSum operator", 1, 1, NB, ncclFloat32, OP_PREMUL, 0, 0, 0},
      {"NULL sendbuff", 0, 1, NB, ncclFloat32, ncclSum, 0, 0, 0},
      {"NULL recvbuff", 1, 0, NB, ncclFloat32, ncclSum, 0, 0, 0},
      {"NULL send and recv", 0, 0, NB, ncclFloat32, ncclSum, 0, 0, 0},
      {"NULL sendbuff, Avg", 0, 1, NB, ncclFloat32, ncclAvg, 0, 0, 0},
      {"op 99", 1, 1, NB, ncclFloat32, 99, 0, 0, 0},
      {"op -1", 1, 1, NB, ncclFloat32, -1, 0, 0, 0},
      {"datatype 42", 1, 1, NB, 42, ncclSum, 0, 0, 0},
      {"datatype ncclNumTypes", 1, 1, NB, ncclNumTypes, ncclSum, 0, 0, 0},
      {"datatype -1", 1, 1, NB, -1, ncclSum, 0, 0, 0},
      {"NULL communicator", 1, 1, NB, ncclFloat32, ncclSum, 1, 0, 0},
      {"NULL communicator, count 0", 1, 1, 0, ncclFloat32, ncclSum, 1, 0, 0},
      {"grouped: count 100003", 1, 1, NB, ncclFloat32, ncclSum, 0, 1, 1},
      {"grouped: NULL sendbuff", 0, 1, NB, ncclFloat32, ncclSum, 0, 1, 0},
      {"grouped: op 99", 1, 1, NB, ncclFloat32, 99, 0, 1, 0},
      {"grouped: datatype 42", 1, 1, NB, 42, ncclSum, 0, 1, 0},
      {"grouped: NULL communicator", 1, 1, NB, ncclFloat32, ncclSum, 1, 1, 0},
      {"grouped: count 0", 1, 1, 0, ncclFloat32, ncclSum, 0, 1, 0},
      {"grouped: valid member + NULL sendbuff", 0, 1, NB, ncclFloat32, ncclSum, 0, 2, 1},
      {"grouped: valid member + op 99", 1, 1, NB, ncclFloat32, 99, 0, 2, 1},
      {"grouped: valid member + count 0", 1, 1, 0, ncclFloat32, ncclSum, 0, 2, 1},
      {"after the bad calls: count 100003", 1, 1, NB, ncclFloat32, ncclSum, 0, 0, 1},
  };
  float *S = malloc((NB + 2 * GUARD) * 4), *R = malloc((NB + 2 * GUARD) * 4), *P = malloc(NB * 4);
  float two = 2.0f;
  ncclRedOp_t premul;
  NCCL_OK(ncclRedOpCreatePreMulSum(&premul, &two, ncclFloat32, ncclScalarHostImmediate, comm));
  int shim = sf_shim_loaded();
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    const arg_case *c = &cases[k];
    int salt = (int)k;
    sf_fill(S, NB + 2 * GUARD, rank, salt);
    sf_poison(R, NB + 2 * GUARD);
    sf_fill(P, NB, rank, salt + 1);
    float *s = S + GUARD, *r = R + GUARD;
    const void *send = c->send ? s : NULL;
    void *recv = c->recv == 2 ? s : c->recv ? r : NULL;
    ncclRedOp_t op = c->op == OP_PREMUL ? premul : (ncclRedOp_t)c->op;
    ncclComm_t cm = c->null_comm ? NULL : comm;
    uint64_t before = sf_stats().compressed + sf_stats().fused;
    ncclResult_t r1, r2 = ncclSuccess, r0 = ncclSuccess;
    if (c->grouped) r0 = ncclGroupStart();
    if (c->grouped == 2) NCCL_OK(ncclAllReduce(P, P, NB, ncclFloat32, ncclSum, comm, NULL));
    r1 = ncclAllReduce(send, recv, c->count, (ncclDataType_t)c->dtype, op, cm, NULL);
    if (c->grouped) r2 = ncclGroupEnd();
    uint64_t transformed = sf_stats().compressed + sf_stats().fused - before;
    if (shim)
      EXPECT(transformed == (uint64_t)c->compressed, "'%s': the shim transformed %llu calls, expected %d", c->name,
             (unsigned long long)transformed, c->compressed);
    if (rank == 0)
      printf("%-40s start %d call %d end %d  send %016llx recv %016llx other %016llx\n", c->name, (int)r0, (int)r1,
             (int)r2, (unsigned long long)fnv(S, (NB + 2 * GUARD) * 4),
             (unsigned long long)fnv(R, (NB + 2 * GUARD) * 4), (unsigned long long)fnv(P, NB * 4));
  }
  /* Group calls out of balance. */
  ncclResult_t unbalanced = ncclGroupEnd();
  if (rank == 0) printf("%-40s end %d\n", "ncclGroupEnd without ncclGroupStart", (int)unbalanced);
  NCCL_OK(ncclRedOpDestroy(premul, comm));
  free(S);
  free(R);
  free(P);
  return 0;
}

/* ---- misaligned ------------------------------------------------------------- */

/* Offsets are in elements from a 64-byte aligned base (0 = aligned). */
static void one_misaligned(size_t n, size_t soff, size_t roff, int inplace, int salt) {
  size_t len = n + 2 * GUARD;
  float *S = NULL, *R = NULL;
  EXPECT(posix_memalign((void **)&S, 64, len * 4) == 0 && posix_memalign((void **)&R, 64, len * 4) == 0,
         "out of memory");
  sf_poison(R, len);
  sf_poison(S, len);
  float *s = S + GUARD + soff, *r = inplace ? s : R + GUARD + roff;
  sf_fill(s, n, rank, salt);
  NCCL_OK(ncclAllReduce(s, r, n, ncclFloat32, ncclSum, comm, NULL));
  char what[96];
  snprintf(what, sizeof what, "n=%zu send+%zu recv+%zu %s", n, soff, inplace ? soff : roff,
           inplace ? "in place" : "out of place");
  sf_check(r, n, salt, nranks, 0, what);
  if (!inplace) sf_check_input(s, n, salt, "sendbuff after an out-of-place call");
  float *base = inplace ? S : R;
  size_t before = (size_t)(r - base), after = len - before - n;
  EXPECT(sf_count_not(base, before, SF_SENTINEL) == 0 && sf_count_not(r + n, after, SF_SENTINEL) == 0,
         "%s: something was written next to the buffer", what);
  free(S);
  free(R);
}

static int cmd_misaligned(void) {
  static const size_t sizes[] = {16385, 100003};
  int salt = 0;
  for (size_t k = 0; k < 2; k++)
    for (size_t so = 0; so < 4; so++) {
      one_misaligned(sizes[k], so, 0, 1, salt++);
      for (size_t ro = 0; ro < 4; ro++) one_misaligned(sizes[k], so, ro, 0, salt++);
    }
  return 0;
}

/* ---- big -------------------------------------------------------------------- */
/* Inputs repeat with a short period, so the buffers are filled and checked by
 * copying and comparing whole blocks (a few seconds for 8 GiB). */

enum { PERIOD = 17 * 4096 };

static void *block_of(int f32, int r, int want_result) {
  void *b = malloc((size_t)PERIOD * 4);
  for (size_t i = 0; i < PERIOD; i++) {
    if (f32) ((float *)b)[i] = want_result ? sf_want(i, 3, nranks, 0) : sf_val(r, i, 3);
    else {
      int v = 0;
      for (int q = 0; q < (want_result ? nranks : 1); q++) v += (int)((i + (size_t)(want_result ? q : r)) % 5) - 2;
      ((int8_t *)b)[i] = (int8_t)v;
    }
  }
  return b;
}

static size_t blocks_differ(const char *buf, size_t bytes, const char *blk, size_t bbytes) {
  size_t bad = 0;
  for (size_t off = 0; off < bytes; off += bbytes) {
    size_t len = bytes - off < bbytes ? bytes - off : bbytes;
    bad += memcmp(buf + off, blk, len) != 0;
  }
  return bad;
}

static int cmd_big(size_t count, int f32, const char *expect) {
  size_t es = f32 ? 4 : 1, bytes = count * es, bbytes = (size_t)PERIOD * es;
  /* Huge pages where the kernel allows them: first-touch faults of 4 KiB
   * pages dominate the run time on small VMs. */
  char *buf = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  EXPECT(buf != MAP_FAILED, "cannot map %zu bytes for the test buffer", bytes);
  if (buf == MAP_FAILED) return 1;
  madvise(buf, bytes, MADV_HUGEPAGE);
  void *in = block_of(f32, rank, 0), *want = block_of(f32, rank, 1);
  for (size_t off = 0; off < bytes; off += bbytes) memcpy(buf + off, in, bytes - off < bbytes ? bytes - off : bbytes);
  ncclshim_stats_t s0 = sf_stats();
  ncclResult_t r = ncclAllReduce(buf, buf, count, f32 ? ncclFloat32 : ncclInt8, ncclSum, comm, NULL);
  ncclshim_stats_t s1 = sf_stats();
  int limit = !strcmp(expect, "limit");
  EXPECT(r == (limit ? ncclInvalidUsage : ncclSuccess), "count %zu: returned %d", count, (int)r);
  if (limit && sf_shim_loaded()) {
    const char *le = ncclGetLastError(comm);
    EXPECT(le && strstr(le, "NCCLSHIM_MAX_STAGING_BYTES"), "ncclGetLastError after the refusal: '%s'", le ? le : "(null)");
  }
  size_t bad = blocks_differ(buf, bytes, limit ? in : want, bbytes);
  EXPECT(bad == 0, "count %zu: %zu blocks of %d elements %s", count, bad, (int)PERIOD,
         limit ? "changed by a refused call" : "wrong");
  if (sf_shim_loaded() && !limit) {
    int comp = !strcmp(expect, "compressed");
    uint64_t lb = s1.logical_bytes - s0.logical_bytes, wb = s1.wire_bytes - s0.wire_bytes;
    EXPECT(lb == bytes, "logical bytes counted %llu, expected %zu", (unsigned long long)lb, bytes);
    EXPECT(wb == (comp ? count * 2 : bytes), "wire bytes counted %llu, expected %zu", (unsigned long long)wb,
           comp ? count * 2 : bytes);
    EXPECT(s1.compressed - s0.compressed == (uint64_t)comp, "compressed count moved by %llu",
           (unsigned long long)(s1.compressed - s0.compressed));
  }
  if (rank == 0) printf("count %zu (%zu bytes): returned %d, %zu bad blocks\n", count, bytes, (int)r, bad);
  free(in);
  free(want);
  munmap(buf, bytes);
  return 0;
}

/* ---- special ------------------------------------------------------------------ */

static float wire_round(float x, int bf) {
  if (!bf) return (float)(_Float16)x;
  uint32_t u;
  memcpy(&u, &x, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return x; /* NaN stays NaN */
  u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
  memcpy(&x, &u, 4);
  return x;
}

static float special_val(int r, size_t i) {
  switch (i % 16) {
  case 0: return r == 0 ? INFINITY : 1.0f;
  case 1: return r == 1 ? NAN : 2.0f;
  case 2: return -0.0f;
  case 3: return r == 0 ? -0.0f : 0.0f;
  case 4: return 1e-40f;                  /* fp32 subnormal */
  case 5: return 6e-8f * (float)(r + 1);  /* fp16 subnormals */
  case 6: return 70000.0f;                /* beyond fp16 */
  case 7: return -70000.0f;
  case 8: return r == 0 ? -INFINITY : INFINITY;
  case 9: return 65504.0f;                /* fp16 max: the wire sum overflows */
  case 10: return 0.5f;
  case 11: return r == 0 ? -1.5f : 1.5f;  /* cancels to +0 (two ranks) */
  case 12: return 1e-30f;                 /* 0 in fp16, kept by bf16 */
  case 13: return 65520.0f;               /* rounds to Inf in fp16 */
  case 14: return 65519.0f;               /* rounds to 65504 */
  default: return -3.0f;
  }
}

static int cmd_special(int avg) {
  enum { NS = 16 * 2048 };
  const char *w = getenv("NCCLSHIM_COMPRESS");
  int bf = w && !strcmp(w, "bf16");
  float *x = malloc(NS * 4), *all = malloc((size_t)NS * 4 * nranks);
  uint16_t *ref = malloc(NS * 2);
  uint64_t want_over = 0, want_under = 0;
  for (size_t i = 0; i < NS; i++) {
    x[i] = special_val(rank, i);
    float q = wire_round(x[i], bf);
    want_over += isfinite(x[i]) && isinf(q);
    want_under += x[i] != 0 && q == 0;
    if (bf) { uint32_t u; memcpy(&u, &q, 4); ref[i] = (uint16_t)(u >> 16); }
    else { _Float16 h = (_Float16)x[i]; memcpy(&ref[i], &h, 2); }
  }
  ncclRedOp_t op = avg ? ncclAvg : ncclSum;
  ncclshim_stats_t s0 = sf_stats();
  NCCL_OK(ncclAllReduce(x, x, NS, ncclFloat32, op, comm, NULL));
  ncclshim_stats_t s1 = sf_stats();
  /* Plain NCCL on the wire-type values (never transformed by the shim). */
  NCCL_OK(ncclAllReduce(ref, ref, NS, bf ? ncclBfloat16 : ncclFloat16, op, comm, NULL));
  MPI_Allgather(x, NS * 4, MPI_BYTE, all, NS * 4, MPI_BYTE, MPI_COMM_WORLD);
  for (int q = 1; q < nranks; q++)
    EXPECT(memcmp(all, all + (size_t)q * NS, NS * 4) == 0, "ranks 0 and %d disagree on special values", q);
  size_t wrong = 0, first = 0;
  float first_want = 0;
  for (size_t i = 0; i < NS; i++) {
    float want;
    if (bf) { uint32_t u = (uint32_t)ref[i] << 16; memcpy(&want, &u, 4); }
    else { _Float16 h; memcpy(&h, &ref[i], 2); want = (float)h; }
    int same = isnan(want) ? isnan(x[i]) != 0 : memcmp(&want, &x[i], 4) == 0;
    if (!same && !wrong++) first = i, first_want = want;
  }
  EXPECT(wrong == 0, "%zu lanes differ from NCCL on the wire type; first lane %zu (kind %zu): %g, expected %g", wrong,
         first, first % 16, x[first], first_want);
  /* What the documentation promises, lane by lane (first period). */
  EXPECT(isinf(x[0]) && x[0] > 0, "+Inf lost: %g", x[0]);
  EXPECT(nranks < 2 || isnan(x[1]), "NaN lost: %g", x[1]);
  EXPECT(x[2] == 0 && signbit(x[2]), "-0 + -0 is not -0: %g", x[2]);
  EXPECT(nranks < 2 || (x[3] == 0 && !signbit(x[3])), "-0 + 0 is not +0: %g", x[3]);
  EXPECT(bf || (isinf(x[6]) && x[6] > 0 && isinf(x[7]) && x[7] < 0), "fp16 overflow not +-Inf: %g %g", x[6], x[7]);
  EXPECT(nranks < 2 || isnan(x[8]), "-Inf + Inf is not NaN: %g", x[8]);
  EXPECT(!bf || (isfinite(x[6]) && isfinite(x[13])), "bf16 made a finite value Inf");
  if (sf_shim_loaded()) {
    EXPECT(s1.overflow - s0.overflow == want_over, "overflow counted %llu, expected %llu",
           (unsigned long long)(s1.overflow - s0.overflow), (unsigned long long)want_over);
    EXPECT(s1.underflow - s0.underflow == want_under, "underflow counted %llu, expected %llu",
           (unsigned long long)(s1.underflow - s0.underflow), (unsigned long long)want_under);
  }
  free(x);
  free(all);
  free(ref);
  return 0;
}

/* ---- staging ------------------------------------------------------------------ */

enum { ST_AR = 20000, ST_RS = 8000 };

static ncclResult_t st_wait(ncclComm_t c, ncclResult_t r) {
  return r == ncclInProgress ? sf_poll(c) : r;
}

static int cmd_staging(int poll) {
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 0;
  ncclComm_t c = poll ? tm_comm_over_cfg(MPI_COMM_WORLD, &cfg) : comm;
  float *a = malloc(ST_AR * 4), *s = malloc((size_t)ST_RS * (size_t)nranks * 4), *r = malloc(ST_RS * 4);
  for (size_t i = 0; i < ST_AR; i++) a[i] = (float)((i + (size_t)rank) % 16);
  for (size_t i = 0; i < (size_t)ST_RS * (size_t)nranks; i++) s[i] = (float)((3 * i + (size_t)rank) % 32);
  /* the configuration check first, alike everywhere */
  NCCL_OK(st_wait(c, ncclAllReduce(r, r, 1, ncclFloat32, ncclSum, c, NULL)));
  cudaStream_t sa = NULL, sr = NULL;
  if (!poll && rank == 1) {
    sa = (cudaStream_t)0x10;
    sr = (cudaStream_t)0x20;
  }
  ncclResult_t ra, rr;
  if (poll) {
    ra = ncclAllReduce(a, a, ST_AR, ncclFloat32, ncclSum, c, sa);
    if (rank == 0) ra = st_wait(c, ra); /* rank 1 leaves the cast-back parked */
    rr = st_wait(c, ncclReduceScatter(s, r, ST_RS, ncclFloat32, ncclSum, c, sr));
    ra = st_wait(c, ra);
  } else {
    NCCL_OK(ncclGroupStart());
    rr = ncclReduceScatter(s, r, ST_RS, ncclFloat32, ncclSum, c, sr);
    ra = ncclAllReduce(a, a, ST_AR, ncclFloat32, ncclSum, c, sa);
    ncclResult_t g = ncclGroupEnd();
    if (g != ncclSuccess) ra = rr = g;
  }
  EXPECT(ra == ncclSuccess && rr == ncclSuccess, "staging %s: all-reduce %d, reduce-scatter %d", poll ? "poll" : "group",
         (int)ra, (int)rr);
  size_t bad = 0;
  for (size_t i = 0; i < ST_AR; i++) {
    float want = 0;
    for (int q = 0; q < nranks; q++) want += (float)((i + (size_t)q) % 16);
    bad += a[i] != want;
  }
  for (size_t i = 0; i < ST_RS; i++) {
    size_t k = (size_t)rank * ST_RS + i;
    float want = 0;
    for (int q = 0; q < nranks; q++) want += (float)((3 * k + (size_t)q) % 32);
    bad += r[i] != want;
  }
  EXPECT(bad == 0, "staging %s: %zu wrong elements", poll ? "poll" : "group", bad);
  if (rank == 0) printf("staging %s: all-reduce %d, reduce-scatter %d, %zu wrong\n", poll ? "poll" : "group", (int)ra,
                        (int)rr, bad);
  if (poll) NCCL_OK(ncclCommDestroy(c));
  free(a);
  free(s);
  free(r);
  return 0;
}

/* Two ring all-reduces in one group that need more than the limit together:
 * the second is refused on every rank, whatever the streams. */
static int cmd_staging_sum(void) {
  float *a = malloc(ST_AR * 4), *b = malloc(ST_AR * 4);
  for (size_t i = 0; i < ST_AR; i++) a[i] = b[i] = (float)((i + (size_t)rank) % 16);
  NCCL_OK(ncclAllReduce(a, a, 1, ncclFloat32, ncclMax, comm, NULL)); /* the configuration check */
  a[0] = (float)(rank % 16);
  cudaStream_t sb = rank == 1 ? (cudaStream_t)0x30 : NULL;
  NCCL_OK(ncclGroupStart());
  ncclResult_t ra = ncclAllReduce(a, a, ST_AR, ncclFloat32, ncclSum, comm, NULL);
  ncclResult_t rb = ncclAllReduce(b, b, ST_AR, ncclFloat32, ncclSum, comm, sb);
  ncclResult_t g = ncclGroupEnd();
  EXPECT(ra == ncclSuccess && rb == ncclInvalidUsage && g == ncclSuccess,
         "staging sum: first %d, second %d (want %d), group end %d", (int)ra, (int)rb, (int)ncclInvalidUsage, (int)g);
  size_t bad = 0;
  for (size_t i = 0; i < ST_AR; i++) {
    float want = 0;
    for (int q = 0; q < nranks; q++) want += (float)((i + (size_t)q) % 16);
    bad += a[i] != want;
    bad += b[i] != (float)((i + (size_t)rank) % 16);
  }
  EXPECT(bad == 0, "staging sum: %zu wrong elements", bad);
  if (rank == 0) printf("staging sum: %d %d %d, %zu wrong\n", (int)ra, (int)rb, (int)g, bad);
  free(a);
  free(b);
  return 0;
}

int main(int argc, char **argv) {
  sf_init(&argc, &argv, 0);
  const char *cmd = argc > 1 ? argv[1] : "";
  comm = tm_comm_world();
  if (!strcmp(cmd, "codes")) cmd_codes();
  else if (!strcmp(cmd, "misaligned")) cmd_misaligned();
  else if (!strcmp(cmd, "big") && argc == 5) cmd_big(strtoull(argv[2], NULL, 0), !strcmp(argv[3], "f32"), argv[4]);
  else if (!strcmp(cmd, "special") && argc == 3) cmd_special(!strcmp(argv[2], "avg"));
  else if (!strcmp(cmd, "staging") && argc == 3 && !strcmp(argv[2], "sum")) cmd_staging_sum();
  else if (!strcmp(cmd, "staging") && argc == 3) cmd_staging(!strcmp(argv[2], "poll"));
  else EXPECT(0, "usage: shimfault_args codes | misaligned | big COUNT f32|i8 compressed|passthrough|limit | "
                 "special sum|avg | staging group|poll|sum");
  NCCL_OK(ncclCommDestroy(comm));
  return sf_finish();
}
