/* shimfault.c — faults under the shim: the real collective failing, group
 * ends failing, nonblocking communicators answering ncclInProgress, and the
 * staging allocation failing on some ranks only.
 *
 *   shimfault failcall K HOSTD SHIMD [chunked]
 *       run with HOSTNCCL_FAIL_CALL=N on every rank; user call K is the one
 *       that fails: it must return ncclSystemError with its outputs untouched
 *       (chunked: pipelined, chunks before the failed one may be final),
 *       the host NCCL must have accepted HOSTD calls during it and the shim
 *       must have attempted SHIMD (no retry); every other call must be exact
 *       with as many attempts as acceptances; staging must not leak after it
 *   shimfault failgroup        run with HOSTNCCL_FAIL_GROUP_END=1: the first
 *       group fails as a whole (outputs untouched), later groups are exact
 *   shimfault inprogress       nonblocking communicator: results appear only
 *       after ncclCommGetAsyncError reports success (single, queued, grouped,
 *       finalize)
 *   shimfault faultalloc single|group
 *       run with NCCLSHIM_FAULT_ALLOC on some ranks only (MPMD): a rank whose
 *       staging allocation fails returns ncclSystemError, every rank's result
 *       of that call (group: of the members that allocation was for) is NaN
 *       in every element, nobody hangs, the next call is exact everywhere
 *
 * Must not: rely on timings, or on anything but documented behaviour of the
 * shim (ncclshim.h, shim/misc/config.def) and of the host NCCL (its README and
 * hostnccl_hooks.h). */
#include "shimfault_util.h"

static ncclComm_t comm;

enum { N = 65536, NBIG = 1 << 20, NINT = 1000, LEAK_ROUNDS = 12 };

/* Staging must be returned after a failure: later calls reuse it. A leaked
 * region keeps the arena live, so every later call would add a block (2 MiB
 * here per call, 20 MiB over the rounds measured); the slack covers noise. */
static void leak_rounds(const char *after, int grouped) {
  float *s = malloc((size_t)NBIG * 4), *r = malloc((size_t)NBIG * 4), *r2 = malloc((size_t)NBIG * 4);
  sf_fill(s, NBIG, rank, 11);
  long rss0 = 0;
  for (int k = 0; k < LEAK_ROUNDS; k++) {
    if (k == 2) rss0 = sf_rss_kib();
    if (grouped) NCCL_OK(ncclGroupStart());
    NCCL_OK(ncclAllReduce(s, r, NBIG, ncclFloat32, ncclSum, comm, NULL));
    if (grouped) {
      NCCL_OK(ncclAllReduce(s, r2, NBIG, ncclFloat32, ncclSum, comm, NULL));
      NCCL_OK(ncclGroupEnd());
    }
  }
  sf_check(r, NBIG, 11, nranks, 0, "call after the leak rounds");
  long grown = sf_rss_kib() - rss0;
  EXPECT(!sf_plain_run() || grown < 8 * 1024,
         "after %s: VmRSS grew by %ld KiB over %d rounds of 2 MiB staging (a leak)", after, grown, LEAK_ROUNDS - 2);
  free(s);
  free(r);
  free(r2);
}

/* ---- failcall ------------------------------------------------------------- */

typedef struct {
  float *s, *r, *ip;  /* fp32 send/recv and an in-place buffer */
  int32_t *is, *ir;
} bufs;

static void fresh(bufs *b, int salt) {
  sf_fill(b->s, N, rank, salt);
  sf_fill(b->ip, N, rank, salt + 2);
  sf_poison(b->r, N);
  for (int i = 0; i < NINT; i++) b->is[i] = rank * 3 + i, b->ir[i] = -7;
}

/* A pipelined call (NCCLSHIM_CHUNK_BYTES) casts each chunk back before the
 * next chunk's collective, so when chunk i fails chunks < i are already
 * final: each element must then be untouched or exact, never anything else. */
static int partial_ok;

static void failed_output(const float *x, int inplace, int salt, const char *what) {
  size_t bad = 0, written = 0;
  for (size_t i = 0; i < N; i++) {
    uint32_t u;
    memcpy(&u, &x[i], 4);
    int untouched = inplace ? x[i] == sf_val(rank, i, salt) : u == SF_SENTINEL;
    if (untouched) continue;
    written++;
    bad += !partial_ok || x[i] != sf_want(i, salt, nranks, 0);
  }
  EXPECT(bad == 0, "%s: %zu elements written (%zu neither untouched nor the exact result)", what, written, bad);
}

/* Outputs of call k (salt) exact, or untouched when it failed. */
static void verify(const bufs *b, int k, int salt, int failed) {
  char what[64];
  snprintf(what, sizeof what, "call %d", k);
  switch (k) {
  case 1: case 2:
    if (failed) failed_output(b->r, 0, salt, "failed out-of-place call: recvbuff");
    else sf_check(b->r, N, salt, nranks, 0, what);
    break;
  case 3:
    for (int i = 0; i < NINT; i++) {
      int32_t want = failed ? -7 : 3 * nranks * (nranks - 1) / 2 + nranks * i;
      if (b->ir[i] != want) { EXPECT(0, "call 3 int32 [%d] = %d, expected %d", i, b->ir[i], want); break; }
    }
    break;
  case 4:
    if (failed) failed_output(b->ip, 1, salt + 2, "failed in-place call: its buffer");
    else sf_check(b->ip, N, salt + 2, nranks, 0, what);
    break;
  default: /* groups: r (out-of-place) and ip (in-place) */
    if (failed) {
      EXPECT(sf_count_not(b->r, N, SF_SENTINEL) == 0, "failed group %d wrote recvbuff", k);
      sf_check_input(b->ip, N, salt + 2, "failed group: its in-place member");
    } else {
      sf_check(b->r, N, salt, nranks, 0, what);
      sf_check(b->ip, N, salt + 2, nranks, 0, what);
    }
  }
}

/* User call k (1-based); returns the status the call reports (a group: its end). */
static ncclResult_t user_call(bufs *b, int k, ncclResult_t *first) {
  *first = ncclSuccess;
  switch (k) {
  case 1: case 2: return ncclAllReduce(b->s, b->r, N, ncclFloat32, ncclSum, comm, NULL);
  case 3: return ncclAllReduce(b->is, b->ir, NINT, ncclInt32, ncclSum, comm, NULL);
  case 4: return ncclAllReduce(b->ip, b->ip, N, ncclFloat32, ncclSum, comm, NULL);
  default:
    NCCL_OK(ncclGroupStart());
    *first = ncclAllReduce(b->s, b->r, N, ncclFloat32, ncclSum, comm, NULL);
    ncclResult_t second = ncclAllReduce(b->ip, b->ip, N, ncclFloat32, ncclSum, comm, NULL);
    if (*first == ncclSuccess) *first = second;
    return ncclGroupEnd();
  }
}

static int cmd_failcall(int K, uint64_t hostd, uint64_t shimd) {
  bufs b = {malloc(N * 4), malloc(N * 4), malloc(N * 4), malloc(NINT * 4), malloc(NINT * 4)};
  int shim = sf_shim_loaded();
  for (int k = 1; k <= 6; k++) {
    int salt = 100 + k;
    fresh(&b, salt);
    uint64_t h0 = sf_host_calls(), s0 = sf_stats().real_calls;
    ncclResult_t inner, r = user_call(&b, k, &inner);
    uint64_t hd = sf_host_calls() - h0, sd = sf_stats().real_calls - s0;
    if (k == K) {
      EXPECT(r == ncclSystemError, "call %d: returned %d, expected ncclSystemError (2) unchanged", k, (int)r);
      EXPECT(inner == ncclSuccess || inner == ncclSystemError, "call %d: a member returned %d", k, (int)inner);
      EXPECT(hd == hostd, "call %d: the host NCCL accepted %llu calls during it, expected %llu", k,
             (unsigned long long)hd, (unsigned long long)hostd);
      if (shim)
        EXPECT(sd == shimd, "call %d: the shim attempted %llu real calls, expected %llu (a retry?)", k,
               (unsigned long long)sd, (unsigned long long)shimd);
    } else {
      EXPECT(r == ncclSuccess && inner == ncclSuccess, "call %d: returned %d/%d", k, (int)r, (int)inner);
      if (shim)
        EXPECT(sd == hd, "call %d: the shim attempted %llu real calls, the host NCCL accepted %llu", k,
               (unsigned long long)sd, (unsigned long long)hd);
    }
    verify(&b, k, salt, k == K);
  }
  leak_rounds("a failed call", 0);
  free(b.s), free(b.r), free(b.ip), free(b.is), free(b.ir);
  return 0;
}

/* ---- failgroup -------------------------------------------------------------- */

static ncclResult_t one_group(float *s, float *r, float *ip, int32_t *is, int32_t *ir, float *small_s,
                              float *small_r, int nested) {
  NCCL_OK(ncclGroupStart());
  NCCL_OK(ncclAllReduce(s, r, N, ncclFloat32, ncclSum, comm, NULL));
  if (nested) NCCL_OK(ncclGroupStart());
  NCCL_OK(ncclAllReduce(ip, ip, N, ncclFloat32, ncclSum, comm, NULL));
  NCCL_OK(ncclAllReduce(is, ir, NINT, ncclInt32, ncclSum, comm, NULL));
  if (nested) NCCL_OK(ncclGroupEnd());
  NCCL_OK(ncclAllReduce(small_s, small_r, 7, ncclFloat32, ncclSum, comm, NULL));
  return ncclGroupEnd();
}

static int cmd_failgroup(void) {
  float *s = malloc(N * 4), *r = malloc(N * 4), *ip = malloc(N * 4), ss[7], sr[7];
  int32_t is[NINT], ir[NINT];
  /* Warm-up outside a group: the communicator is checked before the groups. */
  sf_fill(s, N, rank, 1);
  NCCL_OK(ncclAllReduce(s, r, N, ncclFloat32, ncclSum, comm, NULL));
  sf_check(r, N, 1, nranks, 0, "warm-up");
  for (int g = 0; g < 3; g++) {
    int salt = 20 + g;
    sf_fill(s, N, rank, salt);
    sf_fill(ip, N, rank, salt + 1);
    sf_fill(ss, 7, rank, salt + 2);
    sf_poison(r, N);
    sf_poison(sr, 7);
    for (int i = 0; i < NINT; i++) is[i] = rank + i, ir[i] = -7;
    uint64_t h0 = sf_host_calls(), s0 = sf_stats().real_calls;
    ncclResult_t res = one_group(s, r, ip, is, ir, ss, sr, g == 2);
    uint64_t hd = sf_host_calls() - h0, sd = sf_stats().real_calls - s0;
    if (sf_shim_loaded())
      EXPECT(sd == hd, "group %d: the shim attempted %llu real calls, the host NCCL accepted %llu", g,
             (unsigned long long)sd, (unsigned long long)hd);
    if (g == 0) {
      EXPECT(res == ncclSystemError, "failing group end returned %d, expected ncclSystemError (2)", (int)res);
      EXPECT(sf_count_not(r, N, SF_SENTINEL) == 0, "failed group: a cast-back wrote recvbuff");
      EXPECT(sf_count_not(sr, 7, SF_SENTINEL) == 0, "failed group: the small member wrote recvbuff");
      sf_check_input(ip, N, salt + 1, "failed group: its in-place member");
      EXPECT(ir[0] == -7 && ir[NINT - 1] == -7, "failed group: the int32 member wrote recvbuff");
    } else {
      char what[48];
      snprintf(what, sizeof what, "group %d after the failed one%s", g, g == 2 ? " (nested)" : "");
      EXPECT(res == ncclSuccess, "%s returned %d", what, (int)res);
      sf_check(r, N, salt, nranks, 0, what);
      sf_check(ip, N, salt + 1, nranks, 0, what);
      sf_check(sr, 7, salt + 2, nranks, 0, what);
      int32_t want = nranks * (nranks - 1) / 2 + nranks * (NINT - 1);
      EXPECT(ir[NINT - 1] == want, "%s: int32 member %d, expected %d", what, ir[NINT - 1], want);
    }
  }
  leak_rounds("a failed group end", 1);
  free(s), free(r), free(ip);
  return 0;
}

/* ---- inprogress ------------------------------------------------------------- */

static int cmd_inprogress(void) {
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 0;
  ncclComm_t nb = tm_comm_over_cfg(MPI_COMM_WORLD, &cfg);
  enum { Q = 3 };
  float *s[Q], *r[Q];
  for (int q = 0; q < Q; q++) s[q] = malloc(N * 4), r[q] = malloc(N * 4);
  int32_t is[NINT], ir[NINT];

  /* a) one call out of place, b) one in place: untouched until the poll says done. */
  for (int inplace = 0; inplace < 2; inplace++) {
    int salt = 30 + inplace;
    sf_fill(s[0], N, rank, salt);
    sf_poison(r[0], N);
    float *out = inplace ? s[0] : r[0];
    ncclResult_t res = ncclAllReduce(s[0], out, N, ncclFloat32, ncclSum, nb, NULL);
    EXPECT(res == ncclInProgress, "nonblocking call did not answer ncclInProgress (%d)", (int)res);
    if (inplace) sf_check_input(s[0], N, salt, "in-place buffer right after ncclInProgress (cast-back ran early?)");
    else EXPECT(sf_count_not(r[0], N, SF_SENTINEL) == 0,
                "recvbuff written before completion was reported (cast-back ran early)");
    EXPECT(sf_poll(nb) == ncclSuccess, "poll did not report success");
    sf_check(out, N, salt, nranks, 0, inplace ? "in-place after completion" : "out-of-place after completion");
  }

  /* c) several calls queued, one poll loop. */
  for (int q = 0; q < Q; q++) {
    sf_fill(s[q], N, rank, 40 + q);
    sf_poison(r[q], N);
    ncclResult_t res = ncclAllReduce(s[q], r[q], N, ncclFloat32, ncclSum, nb, NULL);
    EXPECT(res == ncclInProgress, "queued call %d returned %d", q, (int)res);
  }
  for (int q = 0; q < Q; q++) EXPECT(sf_count_not(r[q], N, SF_SENTINEL) == 0, "queued call %d wrote early", q);
  EXPECT(sf_poll(nb) == ncclSuccess, "poll after queued calls");
  for (int q = 0; q < Q; q++) sf_check(r[q], N, 40 + q, nranks, 0, "queued call after completion");

  /* d) a group (fused by default, cast-backs parked with FUSE_BYTES=0). */
  for (int q = 0; q < 2; q++) sf_fill(s[q], N, rank, 50 + q), sf_poison(r[q], N);
  for (int i = 0; i < NINT; i++) is[i] = rank + i, ir[i] = -7;
  NCCL_OK(ncclGroupStart());
  for (int q = 0; q < 2; q++) {
    ncclResult_t m = ncclAllReduce(s[q], r[q], N, ncclFloat32, ncclSum, nb, NULL);
    EXPECT(m == ncclSuccess || m == ncclInProgress, "group member returned %d", (int)m);
  }
  ncclResult_t m = ncclAllReduce(is, ir, NINT, ncclInt32, ncclSum, nb, NULL);
  EXPECT(m == ncclSuccess || m == ncclInProgress, "int32 group member returned %d", (int)m);
  ncclResult_t ge = ncclGroupEnd();
  EXPECT(ge == ncclInProgress, "nonblocking group end returned %d", (int)ge);
  for (int q = 0; q < 2; q++) EXPECT(sf_count_not(r[q], N, SF_SENTINEL) == 0, "group member %d written early", q);
  EXPECT(sf_poll(nb) == ncclSuccess, "poll after the group");
  for (int q = 0; q < 2; q++) sf_check(r[q], N, 50 + q, nranks, 0, "group member after completion");
  EXPECT(ir[1] == nranks * (nranks - 1) / 2 + nranks, "int32 group member %d", ir[1]);

  /* e) a call, then ncclCommFinalize; completion reported by the polls. */
  sf_fill(s[0], N, rank, 60);
  sf_poison(r[0], N);
  ncclResult_t res = ncclAllReduce(s[0], r[0], N, ncclFloat32, ncclSum, nb, NULL);
  EXPECT(res == ncclInProgress, "call before finalize returned %d", (int)res);
  res = ncclCommFinalize(nb);
  EXPECT(res == ncclInProgress || res == ncclSuccess, "finalize returned %d", (int)res);
  EXPECT(sf_poll(nb) == ncclSuccess, "poll after finalize");
  sf_check(r[0], N, 60, nranks, 0, "call completed through ncclCommFinalize");
  NCCL_OK(ncclCommDestroy(nb));
  for (int q = 0; q < Q; q++) free(s[q]), free(r[q]);
  return 0;
}

/* ---- faultalloc --------------------------------------------------------------- */

static size_t count_nan(const float *x, size_t n) {
  size_t k = 0;
  for (size_t i = 0; i < n; i++) k += isnan(x[i]) != 0;
  return k;
}

/* Round 0: the staging allocation fails on the faulty ranks; every member
 * must come back exact or NaN in every element (never partly or silently
 * wrong), the same way on every rank, and at least one must be NaN. A fused
 * group is one allocation, so all its members are NaN; without fusion only
 * the member whose allocation failed is. Round 1: exact everywhere. */
static int cmd_faultalloc(int grouped) {
  const char *fa = getenv("NCCLSHIM_FAULT_ALLOC");
  int faulty = fa && *fa && strcmp(fa, "0") != 0;
  enum { M = 3 };
  float *s[M], *r[M];
  for (int q = 0; q < M; q++) s[q] = malloc(N * 4), r[q] = malloc(N * 4);
  if (grouped) { /* allocation 1 (this call) works; the group needs allocation 2 */
    sf_fill(s[0], N, rank, 70);
    NCCL_OK(ncclAllReduce(s[0], r[0], N, ncclFloat32, ncclSum, comm, NULL));
    sf_check(r[0], N, 70, nranks, 0, "call before the failing allocation");
  }
  for (int round = 0; round < 2; round++) {
    int n = grouped ? M : 1;
    ncclResult_t res = ncclSuccess;
    for (int q = 0; q < n; q++) sf_fill(s[q], N, rank, 80 + q), sf_poison(r[q], N);
    if (grouped) NCCL_OK(ncclGroupStart());
    for (int q = 0; q < n; q++) {
      ncclResult_t mr = ncclAllReduce(s[q], q == 1 ? s[q] : r[q], N, ncclFloat32, ncclSum, comm, NULL);
      if (res == ncclSuccess) res = mr;
    }
    if (grouped) {
      ncclResult_t ge = ncclGroupEnd();
      if (res == ncclSuccess) res = ge;
    }
    ncclResult_t want = round == 0 && faulty ? ncclSystemError : ncclSuccess;
    EXPECT(res == want, "%s round %d on a %s rank returned %d, expected %d", grouped ? "group" : "call", round,
           faulty ? "faulty" : "healthy", (int)res, (int)want);
    int nan_members = 0;
    for (int q = 0; q < n; q++) {
      float *out = q == 1 ? s[q] : r[q];
      size_t nn = count_nan(out, N);
      if (round == 0 && nn == N) nan_members |= 1 << q;
      else sf_check(out, N, 80 + q, nranks, 0, round ? "the call after the failed allocation"
                                                   : "a member neither exact nor all NaN");
    }
    if (round == 0) {
      int lo = 0, hi = 0;
      MPI_Allreduce(&nan_members, &lo, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
      MPI_Allreduce(&nan_members, &hi, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
      EXPECT(lo == hi, "ranks disagree on which members are NaN (mask %#x here, %#x..%#x)", nan_members, lo, hi);
      EXPECT(nan_members != 0, "no member came back NaN after a failed staging allocation");
      if (rank == 0) printf("NaN members after the failed allocation: mask %#x\n", nan_members);
    }
  }
  for (int q = 0; q < M; q++) free(s[q]), free(r[q]);
  return 0;
}

int main(int argc, char **argv) {
  sf_init(&argc, &argv, 0);
  const char *cmd = argc > 1 ? argv[1] : "";
  if (strcmp(cmd, "inprogress") != 0) comm = tm_comm_world();
  partial_ok = argc > 5 && !strcmp(argv[5], "chunked");
  if (!strcmp(cmd, "failcall") && argc >= 5)
    cmd_failcall(atoi(argv[2]), strtoull(argv[3], NULL, 10), strtoull(argv[4], NULL, 10));
  else if (!strcmp(cmd, "failgroup")) cmd_failgroup();
  else if (!strcmp(cmd, "inprogress")) cmd_inprogress();
  else if (!strcmp(cmd, "faultalloc") && argc == 3) cmd_faultalloc(!strcmp(argv[2], "group"));
  else EXPECT(0, "usage: shimfault failcall K HOSTD SHIMD [chunked] | failgroup | inprogress | "
                 "faultalloc single|group");
  if (comm) ncclCommDestroy(comm);
  return sf_finish();
}
