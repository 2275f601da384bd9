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
 *       run with NCCLSHIM_FAULT_CAST on some ranks only (MPMD): a rank whose
 *       cast fails returns ncclSystemError, every rank's result of that call
 *       (group: of the members that cast was for) is NaN in every element,
 *       nobody hangs, the next call is exact everywhere; pipelined
 *       (NCCLSHIM_CHUNK_BYTES), per chunk: from the failed chunk on NaN
 *   shimfault nbqueue     nonblocking, 6 calls and 6 groups queued without a
 *       poll (fresh blocks two deep, then parked work run first; also with
 *       NCCLSHIM_FAULT_ALLOC on some ranks): every result exact
 *   shimfault stagefail single|group [FAULTY]
 *       staging is allocated only where every rank agrees (issue 23, defect
 *       3): with NCCLSHIM_FAULT_ALLOC on some ranks (MPMD) compression stops
 *       on every rank, every call succeeds and is exact, no rank compresses
 *       any more; without, calls that outgrow NCCLSHIM_STAGING_BYTES are
 *       forwarded twice, then compressed once the block has grown
 *   The same collectives on every rank (the host NCCL aborts on a mismatch):
 *   shimfault nbmix       blocking on even ranks, nonblocking on odd ones
 *   shimfault streams     group members on two streams here, one elsewhere
 *   shimfault groupmix    rank 0 groups what the others issue one by one
 *   shimfault badsetting  MPMD, an invalid setting on some ranks: every rank
 *       gets ncclInvalidUsage, grouped first call, second communicator
 *   shimfault faultoob    MPMD, NCCLSHIM_FAULT_OOB=1 on some ranks
 *   shimfault offcalls    NCCLSHIM_COMPRESS=off: one extra call per communicator
 *
 * Must not: rely on timings, or on anything but documented behaviour of the
 * shim (ncclshim.h, shim/config/config.def) and of the host NCCL (docs/emulation.md and
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

/* ---- nbqueue ------------------------------------------------------------------ */

/* A nonblocking communicator and QN compressed calls queued without a poll,
 * twice (single calls, then groups of two): each call's cast-back is parked
 * while the block it reads is in use, so the next call moves to a fresh
 * block, at most two deep; from the third on (or when a fresh block cannot
 * be had: NCCLSHIM_FAULT_ALLOC on some ranks) the shim runs the parked work
 * first. Every result exact after the poll, the poll says success, on every
 * rank. */
static int cmd_nbqueue(void) {
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 0;
  ncclComm_t nb = tm_comm_over_cfg(MPI_COMM_WORLD, &cfg);
  enum { QN = 6 };
  float *s[2 * QN], *r[2 * QN];
  for (int q = 0; q < 2 * QN; q++) s[q] = malloc(N * 4), r[q] = malloc(N * 4);
  for (int grouped = 0; grouped < 2; grouped++) {
    int n = grouped ? 2 * QN : QN;
    for (int q = 0; q < n; q++) sf_fill(s[q], N, rank, 200 + q), sf_poison(r[q], N);
    for (int q = 0; q < n; q += grouped ? 2 : 1) {
      if (grouped) NCCL_OK(ncclGroupStart());
      for (int m = q; m < q + (grouped ? 2 : 1); m++) {
        ncclResult_t res = ncclAllReduce(s[m], r[m], N, ncclFloat32, ncclSum, nb, NULL);
        EXPECT(res == ncclSuccess || res == ncclInProgress, "queued call %d returned %d", m, (int)res);
      }
      if (grouped) {
        ncclResult_t ge = ncclGroupEnd();
        EXPECT(ge == ncclSuccess || ge == ncclInProgress, "queued group %d returned %d", q / 2, (int)ge);
      }
    }
    EXPECT(sf_poll(nb) == ncclSuccess, "poll after %d queued %s", n, grouped ? "group members" : "calls");
    for (int q = 0; q < n; q++) sf_check(r[q], N, 200 + q, nranks, 0, "queued call after completion");
  }
  if (rank == 0) printf("nbqueue: %d single calls and %d groups of two queued, every result exact\n", QN, QN);
  NCCL_OK(ncclCommDestroy(nb));
  for (int q = 0; q < 2 * QN; q++) free(s[q]), free(r[q]);
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

  /* a) one call out of place, b) one in place: with the shim untouched until
   * the poll says done (its cast-back is parked until then); plain NCCL may
   * complete queued work before any poll (the host NCCL does too, on its
   * progress thread), so the control checks the results after the poll only. */
  int shim = sf_shim_loaded();
  for (int inplace = 0; inplace < 2; inplace++) {
    int salt = 30 + inplace;
    sf_fill(s[0], N, rank, salt);
    sf_poison(r[0], N);
    float *out = inplace ? s[0] : r[0];
    ncclResult_t res = ncclAllReduce(s[0], out, N, ncclFloat32, ncclSum, nb, NULL);
    EXPECT(res == ncclInProgress, "nonblocking call did not answer ncclInProgress (%d)", (int)res);
    if (shim && inplace) sf_check_input(s[0], N, salt, "in-place buffer right after ncclInProgress (cast-back ran early?)");
    else if (shim) EXPECT(sf_count_not(r[0], N, SF_SENTINEL) == 0,
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
  for (int q = 0; q < Q && shim; q++) EXPECT(sf_count_not(r[q], N, SF_SENTINEL) == 0, "queued call %d wrote early", q);
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
  for (int q = 0; q < 2 && shim; q++) EXPECT(sf_count_not(r[q], N, SF_SENTINEL) == 0, "group member %d written early", q);
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
static int env_set(const char *name) {
  const char *v = getenv(name);
  return v && *v && strcmp(v, "0") != 0;
}

/* Elements of a pipelined call come in chunks (NCCLSHIM_CHUNK_BYTES, when
 * set): a local failure from chunk k on poisons chunks k.. on every rank. */
static size_t chunk_of(void) {
  const char *v = getenv("NCCLSHIM_CHUNK_BYTES");
  char *e = NULL;
  size_t b = v ? (size_t)strtoull(v, &e, 10) : 0;
  if (e && (*e == 'K' || *e == 'k')) b <<= 10;
  else if (e && (*e == 'M' || *e == 'm')) b <<= 20;
  size_t ce = b / 4;
  return ce && ce < N ? ce : N;
}

/* Member x (salt) after a local failure somewhere: each chunk exact or all
 * NaN; returns 1 when any chunk is NaN. A faulty rank's own result is NaN
 * throughout when any chunk is. */
static int exact_or_nan(const float *x, int salt, int faulty) {
  size_t ce = chunk_of(), nan_chunks = 0;
  for (size_t off = 0; off < N; off += ce) {
    size_t n = N - off < ce ? N - off : ce;
    if (count_nan(x + off, n) == n) nan_chunks++;
    else {
      float *want = malloc(n * 4);
      for (size_t i = 0; i < n; i++) want[i] = sf_want(off + i, salt, nranks, 0);
      size_t wrong = 0;
      for (size_t i = 0; i < n; i++) wrong += x[off + i] != want[i];
      EXPECT(wrong == 0, "chunk at %zu: %zu of %zu elements neither exact nor NaN", off, wrong, n);
      free(want);
    }
  }
  EXPECT(!faulty || nan_chunks == 0 || nan_chunks * ce >= N, "faulty rank: only %zu chunks NaN", nan_chunks);
  return nan_chunks > 0;
}

static int cmd_faultalloc(int grouped) { /* cast faults: allocation faults are stagefail's */
  int faulty = env_set("NCCLSHIM_FAULT_CAST");
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
      if (round == 0) nan_members |= exact_or_nan(out, 80 + q, faulty && res != ncclSuccess) << q;
      else sf_check(out, N, 80 + q, nranks, 0, "the call after the failed allocation");
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

/* ---- stagefail ------------------------------------------------------------------ */

static uint64_t compressed_so_far(void) {
  int (*get)(ncclshim_stats_t *) = (int (*)(ncclshim_stats_t *))dlsym(RTLD_DEFAULT, "ncclshim_get_stats");
  ncclshim_stats_t st;
  memset(&st, 0, sizeof st);
  EXPECT(get && get(&st) == 0, "ncclshim_get_stats found and answered");
  return st.compressed + st.fused;
}

/* Five rounds of one call (group: three members) of N fp32 elements, exact
 * inputs; the shim's compressed count after each round, the same on every
 * rank: with a fault anywhere, nothing is ever compressed; without, rounds
 * 1 to 3 go in fp32 when the calls outgrow the initial block
 * (NCCLSHIM_STAGING_BYTES below their need: `grow` = 1: the agreement, then
 * its confirmation, each read a round later) and rounds 4.. are
 * compressed. */
static int cmd_stagefail(int grouped, int grow) {
  int mine = env_set("NCCLSHIM_FAULT_ALLOC"), any = 0;
  MPI_Allreduce(&mine, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  enum { M = 3, ROUNDS = 5 };
  float *s[M], *r[M];
  for (int q = 0; q < M; q++) s[q] = malloc(N * 4), r[q] = malloc(N * 4);
  int n = grouped ? M : 1;
  /* A small first call outside any group: the check (and the initial
   * block) before the rounds, grouped or not. */
  NCCL_OK(ncclAllReduce(s[0], r[0], 16, ncclFloat32, ncclSum, comm, NULL));
  uint64_t c0 = compressed_so_far();
  for (int round = 1; round <= ROUNDS; round++) {
    for (int q = 0; q < n; q++) sf_fill(s[q], N, rank, 90 + q + 3 * round), sf_poison(r[q], N);
    if (grouped) NCCL_OK(ncclGroupStart());
    for (int q = 0; q < n; q++) NCCL_OK(ncclAllReduce(s[q], r[q], N, ncclFloat32, ncclSum, comm, NULL));
    if (grouped) NCCL_OK(ncclGroupEnd());
    for (int q = 0; q < n; q++) sf_check(r[q], N, 90 + q + 3 * round, nranks, 0, "a round after a staging fault");
    uint64_t c = compressed_so_far() - c0, lo = 0, hi = 0;
    MPI_Allreduce(&c, &lo, 1, MPI_UINT64_T, MPI_MIN, MPI_COMM_WORLD);
    MPI_Allreduce(&c, &hi, 1, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD);
    EXPECT(lo == hi, "round %d: ranks compressed differently (%llu..%llu)", round, (unsigned long long)lo,
           (unsigned long long)hi);
    uint64_t want = any ? 0 : (uint64_t)n * (uint64_t)(grow ? (round > 3 ? round - 3 : 0) : round);
    EXPECT(c == want, "round %d: %llu compressed so far, expected %llu (%s)", round, (unsigned long long)c,
           (unsigned long long)want, any ? "a rank could not get staging" : grow ? "growing" : "no fault");
  }
  if (rank == 0) printf("stagefail: %s, fault %s: every round exact\n", grouped ? "group" : "single", any ? "yes" : "no");
  for (int q = 0; q < M; q++) free(s[q]), free(r[q]);
  return 0;
}

/* ---- the same collectives on every rank ---------------------------------------- */

/* A communicator blocking on even ranks and nonblocking on odd ones: the same
 * program, where on a real NCCL ncclSuccess vs ncclInProgress is timing.
 * Run with NCCLSHIM_FUSE_BYTES=256K, NCCLSHIM_STAGING_BYTES=128K (the initial block) and
 * NCCLSHIM_CHUNK_BYTES=64K: a grouped first call (deferred check), a group
 * that outgrows the staging block (forwarded, then grown by an agreement
 * whose answer and confirmation are read at the next two group ends, so the
 * grown block serves from the group after those), the same group three times
 * more, two pipelined calls. Every result exact. */
static int cmd_nbmix(void) {
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = rank % 2 == 0;
  ncclComm_t c = tm_comm_over_cfg(MPI_COMM_WORLD, &cfg);
  float *s[2], *r[2];
  for (int q = 0; q < 2; q++) s[q] = malloc(N * 4), r[q] = malloc(N * 4);
  for (int step = 0; step < 7; step++) {
    int members = step == 0 ? 1 : step <= 4 ? 2 : 1, grouped = step <= 4;
    for (int q = 0; q < members; q++) sf_fill(s[q], N, rank, 100 + 10 * step + q), sf_poison(r[q], N);
    ncclResult_t res = ncclSuccess;
    if (grouped) NCCL_OK(ncclGroupStart());
    for (int q = 0; q < members; q++) {
      ncclResult_t m = ncclAllReduce(s[q], r[q], N, ncclFloat32, ncclSum, c, NULL);
      if (res == ncclSuccess || res == ncclInProgress) res = m;
    }
    if (grouped) res = ncclGroupEnd();
    EXPECT(res == ncclSuccess || res == ncclInProgress, "step %d returned %d", step, (int)res);
    EXPECT(sf_poll(c) == ncclSuccess, "step %d: poll", step);
    for (int q = 0; q < members; q++) {
      char what[48];
      snprintf(what, sizeof what, "nbmix step %d member %d", step, q);
      sf_check(r[q], N, 100 + 10 * step + q, nranks, 0, what);
    }
  }
  ncclshim_stats_t st = sf_stats();
  long long fused = (long long)st.fused, lo = 0, hi = 0;
  MPI_Allreduce(&fused, &lo, 1, MPI_LONG_LONG, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(&fused, &hi, 1, MPI_LONG_LONG, MPI_MAX, MPI_COMM_WORLD);
  /* step 1: two buckets of 128 KiB wire, the first fits the initial block, the
   * second is forwarded and the growth agreement starts; steps 2 and 3: the
   * same (the answer is read at the end of 2, its confirmation at the end
   * of 3); step 4: both fused: 1 + 1 + 1 + 2 */
  EXPECT(lo == hi && (!sf_shim_loaded() || hi == 5), "fused members differ between ranks or are not 5: %lld..%lld", lo, hi);
  NCCL_OK(ncclCommDestroy(c));
  for (int q = 0; q < 2; q++) free(s[q]), free(r[q]);
  return 0;
}

/* A group whose members use two streams on rank 0 and one stream elsewhere
 * (legal: streams are local to a rank), then the streams swapped: the shim
 * must fuse alike on every rank. Streams are handles the host NCCL ignores. */
static int cmd_streams(void) {
  float *s[3], *r[3];
  for (int q = 0; q < 3; q++) s[q] = malloc(N * 4), r[q] = malloc(N * 4);
  for (int round = 0; round < 3; round++) {
    for (int q = 0; q < 3; q++) sf_fill(s[q], N, rank, 150 + 3 * round + q), sf_poison(r[q], N);
    NCCL_OK(ncclGroupStart());
    for (int q = 0; q < 3; q++) {
      uintptr_t h = rank == 0 ? (uintptr_t)(1 + (q + round) % 2) : (uintptr_t)(3 + round);
      NCCL_OK(ncclAllReduce(s[q], r[q], N, ncclFloat32, ncclSum, comm, (cudaStream_t)h));
    }
    NCCL_OK(ncclGroupEnd());
    for (int q = 0; q < 3; q++) sf_check(r[q], N, 150 + 3 * round + q, nranks, 0, "member of a mixed-stream group");
  }
  for (int q = 0; q < 3; q++) free(s[q]), free(r[q]);
  return 0;
}

/* Rank 0 groups three calls (fp32 over several chunks, int32, fp32) that the
 * other ranks issue one by one, after a first ungrouped call. Supported with
 * NCCLSHIM_FUSE_BYTES=0 (exact); with fusion on it is not (docs/collectives.md's rules). */
static int cmd_groupmix(void) {
  enum { NB = 100003 };
  float *a = malloc(NB * 4), *ra = malloc(NB * 4), *b = malloc(N * 4), *rb = malloc(N * 4);
  int32_t is[NINT], ir[NINT];
  sf_fill(a, NB, rank, 170);
  NCCL_OK(ncclAllReduce(a, ra, NB, ncclFloat32, ncclSum, comm, NULL));
  sf_check(ra, NB, 170, nranks, 0, "first, ungrouped call");
  sf_fill(a, NB, rank, 171), sf_fill(b, N, rank, 172), sf_poison(ra, NB), sf_poison(rb, N);
  for (int i = 0; i < NINT; i++) is[i] = rank + i, ir[i] = -7;
  if (rank == 0) NCCL_OK(ncclGroupStart());
  NCCL_OK(ncclAllReduce(a, ra, NB, ncclFloat32, ncclSum, comm, NULL));
  NCCL_OK(ncclAllReduce(is, ir, NINT, ncclInt32, ncclSum, comm, NULL));
  NCCL_OK(ncclAllReduce(b, rb, N, ncclFloat32, ncclSum, comm, NULL));
  if (rank == 0) NCCL_OK(ncclGroupEnd());
  sf_check(ra, NB, 171, nranks, 0, "large call, grouped on rank 0 only");
  sf_check(rb, N, 172, nranks, 0, "second call, grouped on rank 0 only");
  EXPECT(ir[1] == nranks * (nranks - 1) / 2 + nranks, "int32 call %d", ir[1]);
  free(a), free(ra), free(b), free(rb);
  return 0;
}

/* A setting may be invalid on some ranks only: every rank's first call on
 * each communicator (grouped or not) and every later one returns
 * ncclInvalidUsage (5), and nobody waits for the bad rank. */
static int cmd_badsetting(void) {
  float *x = malloc(N * 4), *y = malloc(N * 4);
  sf_fill(x, N, rank, 180);
  NCCL_OK(ncclGroupStart());
  ncclResult_t m = ncclAllReduce(x, y, N, ncclFloat32, ncclSum, comm, NULL);
  ncclResult_t g = ncclGroupEnd();
  EXPECT((m == ncclSuccess || m == ncclInvalidUsage) && (m != ncclSuccess || g == ncclInvalidUsage),
         "grouped first call: member %d, group end %d (expected ncclInvalidUsage)", (int)m, (int)g);
  ncclComm_t other = tm_comm_world();
  ncclResult_t r = ncclAllReduce(x, y, N, ncclFloat32, ncclSum, other, NULL);
  EXPECT(r == ncclInvalidUsage, "first call on a second communicator returned %d", (int)r);
  r = ncclAllReduce(x, y, N, ncclFloat32, ncclSum, comm, NULL);
  EXPECT(r == ncclInvalidUsage, "later call returned %d", (int)r);
  NCCL_OK(ncclCommDestroy(other));
  free(x), free(y);
  return 0;
}

/* NCCLSHIM_FAULT_OOB=1 on some ranks: the first call's configuration check
 * has no exchange buffer there; every rank fails that call with
 * ncclSystemError (recvbuff untouched), the next call checks again: exact. */
static int cmd_faultoob(void) {
  float *x = malloc(N * 4), *y = malloc(N * 4);
  sf_fill(x, N, rank, 190);
  sf_poison(y, N);
  ncclResult_t r = ncclAllReduce(x, y, N, ncclFloat32, ncclSum, comm, NULL);
  EXPECT(r == ncclSystemError, "first call returned %d, expected ncclSystemError on every rank", (int)r);
  EXPECT(sf_count_not(y, N, SF_SENTINEL) == 0, "the failed first call wrote recvbuff");
  NCCL_OK(ncclAllReduce(x, y, N, ncclFloat32, ncclSum, comm, NULL));
  sf_check(y, N, 190, nranks, 0, "the call after the failed check");
  free(x), free(y);
  return 0;
}

/* NCCLSHIM_COMPRESS=off: what the shim adds is exactly one configuration
 * check (two real all-reduces: the exchange and its confirmation) per communicator (the host NCCL counts the all-reduces it accepted). */
static int cmd_offcalls(void) {
  float *x = malloc(N * 4), *y = malloc(N * 4);
  sf_fill(x, N, rank, 195);
  uint64_t before = sf_host_calls();
  ncclComm_t other = tm_comm_world();
  for (int k = 0; k < 3; k++) {
    NCCL_OK(ncclAllReduce(x, y, N, ncclFloat32, ncclSum, comm, NULL));
    NCCL_OK(ncclGroupStart());
    NCCL_OK(ncclAllReduce(x, y, N, ncclFloat32, ncclSum, other, NULL));
    NCCL_OK(ncclAllReduce(x, y, N, ncclFloat32, ncclSum, other, NULL));
    NCCL_OK(ncclGroupEnd());
  }
  uint64_t got = sf_host_calls() - before, want = 9 + (sf_shim_loaded() ? 4 : 0); /* check + confirmation each */
  EXPECT(got == want, "%llu real all-reduces for 9 calls on 2 communicators, expected %llu",
         (unsigned long long)got, (unsigned long long)want);
  sf_check(y, N, 195, nranks, 0, "COMPRESS=off result");
  NCCL_OK(ncclCommDestroy(other));
  free(x), free(y);
  return 0;
}

int main(int argc, char **argv) {
  sf_init(&argc, &argv, 0);
  const char *cmd = argc > 1 ? argv[1] : "";
  if (strcmp(cmd, "inprogress") != 0 && strcmp(cmd, "nbmix") != 0) comm = tm_comm_world();
  partial_ok = argc > 5 && !strcmp(argv[5], "chunked");
  if (!strcmp(cmd, "failcall") && argc >= 5)
    cmd_failcall(atoi(argv[2]), strtoull(argv[3], NULL, 10), strtoull(argv[4], NULL, 10));
  else if (!strcmp(cmd, "failgroup")) cmd_failgroup();
  else if (!strcmp(cmd, "inprogress")) cmd_inprogress();
  else if (!strcmp(cmd, "faultalloc") && argc == 3) cmd_faultalloc(!strcmp(argv[2], "group"));
  else if (!strcmp(cmd, "nbqueue")) cmd_nbqueue();
  else if (!strcmp(cmd, "stagefail") && argc >= 3)
    cmd_stagefail(!strcmp(argv[2], "group"), argc > 3 && !strcmp(argv[3], "grow"));
  else if (!strcmp(cmd, "nbmix")) cmd_nbmix();
  else if (!strcmp(cmd, "streams")) cmd_streams();
  else if (!strcmp(cmd, "groupmix")) cmd_groupmix();
  else if (!strcmp(cmd, "badsetting")) cmd_badsetting();
  else if (!strcmp(cmd, "faultoob")) cmd_faultoob();
  else if (!strcmp(cmd, "offcalls")) cmd_offcalls();
  else EXPECT(0, "usage: shimfault failcall K HOSTD SHIMD [chunked] | failgroup | inprogress | "
                 "faultalloc single|group | nbmix | streams | groupmix | badsetting | faultoob | offcalls");
  if (comm) ncclCommDestroy(comm);
  return sf_finish();
}
