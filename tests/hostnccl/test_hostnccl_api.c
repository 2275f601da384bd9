/* test_hostnccl_api.c — the host NCCL's API semantics, one case per run:
 *   mpirun -np N test_hostnccl_api CASE [ARG]
 * basic [VERSION]  queries, version, error strings, invalid arguments, counters
 * group            deferral to the outermost group end, order, several comms
 * comms            two communicators, reordered ranks, split, many inits
 * threads single|multiple   threads each with their own communicator
 * nonblocking      the ncclInProgress protocol (init, calls, groups, split, finalize);
 *                  queued work completes without polls, as on NCCL
 * failcall         run with HOSTNCCL_FAIL_CALL=3
 * failgroup        run with HOSTNCCL_FAIL_GROUP_END=2
 * link             HOSTNCCL_LINK_*: calls take at least the modelled time
 * fabric [MIB]     HOSTNCCL_LINK_GBPS/INTRA_GBPS/NIC_PER on ranks grouped into
 *                  nodes by host name: a ring all-reduce and an all-to-all take
 *                  at least what their bytes cost on the links they cross (the
 *                  model here is derived independently from the host names);
 *                  prints measured / modelled per operation
 * bigcount         2^31 + 5 elements (MPI counts are int)
 * abort            ncclCommAbort from another thread unblocks a waiting call
 * mismatch CASE    ranks calling different collectives (CASE: count, datatype,
 *                  op, root, kind, count0): the job is aborted with a report;
 *                  premul: Sum here and PreMulSum elsewhere is no mismatch
 * selfinit FILE    the program never calls MPI_Init: the host NCCL initialises
 *                  MPI (and finalises it at exit); the id travels through FILE
 * Rank 0 prints one "ok - ..." / "not ok - ..." line per check.
 *
 * Must not: assert an upper bound on time (the link case checks lower bounds
 * that the emulation guarantees), or depend on the real NCCL. */
#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "test_report.h"

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static float *floats(size_t n, float v) {
  float *p = malloc(n * sizeof *p + 1);
  for (size_t i = 0; i < n; i++) p[i] = v;
  return p;
}

/* All n elements equal v? */
static int all_eq(const float *p, size_t n, float v) {
  for (size_t i = 0; i < n; i++)
    if (p[i] != v) return 0;
  return 1;
}

/* Sum over ranks r of (r + 1) * k. */
static float ranksum(float k) { return k * (float)(t_nranks * (t_nranks + 1) / 2); }

/* returns(call, want, what): the call returned want. */
#define returns(call, want, what)                                                      \
  do {                                                                                 \
    ncclResult_t got_ = (call);                                                        \
    expect(got_ == (want), "%s: returned %d, want %d", what, (int)got_, (int)(want));  \
  } while (0)

/* Poll a nonblocking comm until it stops answering ncclInProgress; returns
 * the final answer and how many polls said ncclInProgress. */
static ncclResult_t poll_done(ncclComm_t c, int *inprogress) {
  ncclResult_t a = ncclInProgress;
  *inprogress = 0;
  double t0 = MPI_Wtime();
  while (a == ncclInProgress && MPI_Wtime() - t0 < 60) {
    if (ncclCommGetAsyncError(c, &a) != ncclSuccess) return ncclInternalError;
    *inprogress += a == ncclInProgress;
    if (a == ncclInProgress) sched_yield();
  }
  return a;
}

/* Wait, without polling, until x holds v everywhere (queued work runs by
 * itself, as on NCCL); 0 after 60 s. */
static int settles(const float *x, size_t n, float v) {
  double t0 = MPI_Wtime();
  while (MPI_Wtime() - t0 < 60) {
    if (all_eq((float *)x, n, v)) return 1;
    usleep(1000);
  }
  return 0;
}

/* ------------------------------------------------------------------ basic */

static void case_basic(const char *want_version) {
  ncclComm_t comm = t_comm(t_rank, NULL);
  int v = 0, x = -1;
  NCCL_OK(ncclGetVersion(&v));
  int want = want_version ? atoi(want_version) : NCCL_VERSION_CODE;
  expect(v == want, "ncclGetVersion %d, want %d", v, want);
  expect(ncclGetVersion(NULL) == ncclInvalidArgument, "ncclGetVersion(NULL)");
  NCCL_OK(ncclCommCount(comm, &x));
  expect(x == t_nranks, "count %d", x);
  NCCL_OK(ncclCommUserRank(comm, &x));
  expect(x == t_rank, "user rank %d", x);
  NCCL_OK(ncclCommCuDevice(comm, &x));
  expect(x == 0, "cuda device %d", x);
  for (int r = 0; r < ncclNumResults; r++)
    expect(ncclGetErrorString((ncclResult_t)r) && ncclGetErrorString((ncclResult_t)r)[0], "string %d", r);
  expect(strstr(ncclGetErrorString(ncclInProgress), "progress") != NULL, "in progress string");
  report(want_version ? "version override and queries" : "version and queries");
  if (want_version) return; /* the pretend-old-NCCL run checks the gates below */

  float *buf = floats(8, 1), *out = floats(8, 0);
  ncclRedOp_t fop;
  float scalar = 2;
  NCCL_OK(ncclRedOpCreatePreMulSum(&fop, &scalar, ncclFloat32, ncclScalarHostImmediate, comm));
  /* One call per line, in order (an initializer list would not fix the order). */
  returns(ncclAllReduce(buf, out, 8, ncclFloat32, ncclSum, NULL, NULL), ncclInvalidArgument, "NULL comm");
  returns(ncclAllReduce(buf, out, 8, ncclNumTypes, ncclSum, comm, NULL), ncclInvalidArgument, "datatype ncclNumTypes");
  returns(ncclAllReduce(buf, out, 8, (ncclDataType_t)-1, ncclSum, comm, NULL), ncclInvalidArgument, "datatype -1");
  returns(ncclAllReduce(buf, out, 8, ncclFloat32, (ncclRedOp_t)(ncclNumOps + 1), comm, NULL), ncclInvalidArgument, "op 6 (not created)");
  returns(ncclAllReduce(buf, out, 8, ncclFloat32, (ncclRedOp_t)(ncclNumOps + 40), comm, NULL), ncclInvalidArgument, "op 45");
  returns(ncclAllReduce(buf, out, 8, ncclFloat32, (ncclRedOp_t)-1, comm, NULL), ncclInvalidArgument, "op -1");
  returns(ncclAllReduce(buf, out, 8, ncclFloat64, fop, comm, NULL), ncclInvalidArgument, "PreMulSum op of another type");
  returns(ncclAllReduce(NULL, out, 8, ncclFloat32, ncclSum, comm, NULL), ncclInvalidArgument, "NULL sendbuff");
  returns(ncclAllReduce(buf, NULL, 8, ncclFloat32, ncclSum, comm, NULL), ncclInvalidArgument, "NULL recvbuff");
  returns(ncclReduceScatter(buf, NULL, 1, ncclFloat32, ncclSum, comm, NULL), ncclInvalidArgument, "reducescatter NULL recvbuff");
  returns(ncclAllGather(NULL, out, 1, ncclFloat32, comm, NULL), ncclInvalidArgument, "allgather NULL sendbuff");
  returns(ncclBroadcast(buf, out, 8, ncclFloat32, t_nranks, comm, NULL), ncclInvalidArgument, "broadcast root nranks");
  returns(ncclBcast(buf, 8, ncclFloat32, -1, comm, NULL), ncclInvalidArgument, "bcast root -1");
  returns(ncclReduce(buf, out, 8, ncclFloat32, ncclSum, t_nranks, comm, NULL), ncclInvalidArgument, "reduce root nranks");
  returns(ncclSend(buf, 8, ncclFloat32, t_nranks, comm, NULL), ncclInvalidArgument, "send peer nranks");
  returns(ncclRecv(out, 8, ncclFloat32, -1, comm, NULL), ncclInvalidArgument, "recv peer -1");
  returns(ncclRecv(NULL, 8, ncclFloat32, 0, comm, NULL), ncclInvalidArgument, "recv NULL buffer");
  returns(ncclCommCount(NULL, &x), ncclInvalidArgument, "count of NULL comm");
  returns(ncclCommUserRank(comm, NULL), ncclInvalidArgument, "user rank to NULL");
  returns(ncclRedOpDestroy(ncclSum, comm), ncclInvalidArgument, "destroy a built-in op");
  returns(ncclRedOpCreatePreMulSum(&fop, NULL, ncclFloat32, ncclScalarDevice, comm), ncclInvalidArgument, "PreMulSum NULL scalar");
  returns(ncclGroupEnd(), ncclInvalidUsage, "group end without start");
  returns(ncclAllReduce(NULL, NULL, 0, ncclFloat32, ncclSum, comm, NULL), ncclSuccess, "count 0 with NULL buffers");
  returns(ncclSend(NULL, 0, ncclInt8, 0, comm, NULL), ncclSuccess, "send of 0 to self, NULL buffer");
  expect(all_eq(out, 8, 0), "an invalid call wrote recvbuff");
  expect(strlen(ncclGetLastError(comm)) > 0, "no last error message");
  NCCL_OK(ncclRedOpDestroy(fop, comm));
  expect(ncclRedOpDestroy(fop, comm) == ncclInvalidArgument, "op destroyed twice");
  expect(ncclAllReduce(buf, out, 8, ncclFloat32, fop, comm, NULL) == ncclInvalidArgument, "use of a destroyed op");
  ncclComm_t c2 = (ncclComm_t)1;
  ncclUniqueId zero;
  memset(&zero, 0, sizeof zero);
  expect(ncclCommInitRank(&c2, t_nranks, zero, t_rank) == ncclInvalidArgument && c2 == NULL, "foreign unique id");
  ncclConfig_t bad = NCCL_CONFIG_INITIALIZER;
  bad.magic = 0;
  expect(ncclCommInitRankConfig(&c2, t_nranks, zero, t_rank, &bad) == ncclInvalidArgument, "uninitialised config");
  expect(ncclCommInitRank(&c2, t_nranks, zero, t_nranks) == ncclInvalidArgument, "rank out of range");
  report("invalid arguments return ncclInvalidArgument/ncclInvalidUsage, nothing written");

  /* An invalid call inside a group fails the group end, which drops the rest. */
  NCCL_OK(ncclGroupStart());
  NCCL_OK(ncclAllReduce(buf, out, 8, ncclFloat32, ncclSum, comm, NULL));
  expect(ncclAllReduce(buf, out, 8, ncclNumTypes, ncclSum, comm, NULL) == ncclInvalidArgument, "in group");
  expect(ncclGroupEnd() == ncclInvalidArgument, "group end after an invalid call");
  expect(all_eq(out, 8, 0), "dropped group ran");
  NCCL_OK(ncclAllReduce(buf, out, 8, ncclFloat32, ncclSum, comm, NULL));
  expect(all_eq(out, 8, (float)t_nranks), "allreduce after a failed group");
  report("an invalid call fails its group end and drops the group");

  int (*get)(uint64_t *, uint64_t *) = (int (*)(uint64_t *, uint64_t *))dlsym(RTLD_DEFAULT, "hostnccl_get_counters");
  int (*get_t)(int, uint64_t *, uint64_t *) =
      (int (*)(int, uint64_t *, uint64_t *))dlsym(RTLD_DEFAULT, "hostnccl_get_type_counters");
  expect(get && get_t, "hooks not exported");
  if (get && get_t) {
    uint64_t c0, b0, c1, b1, h0, hb0, h1, hb1;
    get(&c0, &b0);
    get_t(ncclFloat16, &h0, &hb0);
    for (int i = 0; i < 3; i++) NCCL_OK(ncclAllReduce(buf, out, 8, ncclFloat32, ncclSum, comm, NULL));
    NCCL_OK(ncclAllReduce(buf, buf, 3, ncclFloat16, ncclMax, comm, NULL));
    NCCL_OK(ncclBroadcast(buf, out, 8, ncclFloat32, 0, comm, NULL));
    expect(ncclAllReduce(buf, out, 8, ncclFloat32, (ncclRedOp_t)99, comm, NULL) == ncclInvalidArgument, "bad op");
    get(&c1, &b1);
    get_t(ncclFloat16, &h1, &hb1);
    expect(c1 - c0 == 4 && b1 - b0 == 3 * 32 + 6, "counters moved by %llu calls %llu bytes, want 4, 102",
           (unsigned long long)(c1 - c0), (unsigned long long)(b1 - b0));
    expect(h1 - h0 == 1 && hb1 - hb0 == 6, "fp16 counters");
    expect(get_t(ncclNumTypes, &h1, &hb1) == -1, "type counters of an invalid type");
  }
  report("hostnccl_get_counters counts accepted allreduce calls and bytes");
  free(buf);
  free(out);
  NCCL_OK(ncclCommDestroy(comm));
}

/* What an old NCCL (HOSTNCCL_VERSION=20903) refuses. */
static void case_old(void) {
  ncclComm_t comm = t_comm(t_rank, NULL);
  float b[4] = {1, 1, 1, 1}, s = 1;
  ncclRedOp_t op;
  expect(ncclAllReduce(b, b, 2, ncclBfloat16, ncclSum, comm, NULL) == ncclInvalidArgument, "bf16 on 2.9.3");
  expect(ncclAllReduce(b, b, 4, ncclFloat32, ncclAvg, comm, NULL) == ncclInvalidArgument, "avg on 2.9.3");
  expect(ncclRedOpCreatePreMulSum(&op, &s, ncclFloat32, ncclScalarHostImmediate, comm) == ncclInvalidUsage,
         "premulsum on 2.9.3");
  NCCL_OK(ncclAllReduce(b, b, 4, ncclFloat32, ncclSum, comm, NULL));
  expect(all_eq(b, 4, (float)t_nranks), "fp32 sum on 2.9.3");
  report("pretend NCCL 2.9.3: bf16, avg and PreMulSum refused, fp32 sum works");
  NCCL_OK(ncclCommDestroy(comm));
}

/* ------------------------------------------------------------------ group */

static void case_group(void) {
  ncclComm_t comm = t_comm(t_rank, NULL), rev = t_comm(t_nranks - 1 - t_rank, NULL);
  const size_t n = 1000;
  float *a = floats(n, (float)(t_rank + 1)), *r1 = floats(n, -1), *r2 = floats(n, -1);
  NCCL_OK(ncclGroupStart());
  NCCL_OK(ncclAllReduce(a, r1, n, ncclFloat32, ncclSum, comm, NULL));
  expect(all_eq(r1, n, -1), "allreduce ran inside the group");
  NCCL_OK(ncclGroupStart());
  NCCL_OK(ncclBroadcast(r1, r2, n, ncclFloat32, t_nranks - 1, comm, NULL)); /* needs r1's result */
  NCCL_OK(ncclGroupEnd());
  expect(all_eq(r1, n, -1) && all_eq(r2, n, -1), "inner group end ran the queue");
  NCCL_OK(ncclGroupEnd());
  expect(all_eq(r1, n, ranksum(1)), "allreduce result after group end");
  expect(all_eq(r2, n, ranksum(1)), "broadcast of the allreduce result (order kept)");
  report("group: work deferred to the outermost group end, then run in order");

  float *g = floats(n * (size_t)t_nranks, -1), *s1 = floats(n, -1), *p = floats(n, -1);
  int next = (t_rank + 1) % t_nranks, prev = (t_rank + t_nranks - 1) % t_nranks;
  NCCL_OK(ncclGroupStart());
  NCCL_OK(ncclRecv(p, n, ncclFloat32, prev, comm, NULL));
  NCCL_OK(ncclAllGather(a, g, n, ncclFloat32, rev, NULL));
  NCCL_OK(ncclAllReduce(a, s1, n, ncclFloat32, ncclMax, rev, NULL));
  NCCL_OK(ncclSend(a, n, ncclFloat32, next, comm, NULL));
  NCCL_OK(ncclGroupEnd());
  for (int j = 0; j < t_nranks; j++) /* block j comes from rev rank j = world rank n-1-j */
    expect(all_eq(g + (size_t)j * n, n, (float)(t_nranks - j)), "allgather block %d on reversed comm", j);
  expect(all_eq(s1, n, (float)t_nranks), "max on reversed comm");
  expect(all_eq(p, n, (float)(prev + 1)), "recv from prev");
  expect(ncclGroupStart() == ncclSuccess && ncclGroupEnd() == ncclSuccess, "empty group");
  report("group: two communicators, collectives and send/recv mixed");
  free(a); free(r1); free(r2); free(g); free(s1); free(p);
  NCCL_OK(ncclCommDestroy(rev));
  NCCL_OK(ncclCommDestroy(comm));
}

/* ------------------------------------------------------------------ comms */

static void case_comms(void) {
  ncclComm_t a = t_comm(t_rank, NULL), b = t_comm(t_nranks - 1 - t_rank, NULL);
  int x;
  NCCL_OK(ncclCommUserRank(b, &x));
  expect(x == t_nranks - 1 - t_rank, "reordered rank %d", x);
  const size_t n = 257;
  float *in = floats(n, (float)(t_rank + 1)), *ra = floats(n, 0), *gb = floats(n * (size_t)t_nranks, 0);
  for (int it = 0; it < 20; it++) { /* interleaved on two communicators */
    NCCL_OK(ncclAllReduce(in, ra, n, ncclFloat32, ncclSum, a, NULL));
    NCCL_OK(ncclAllGather(in, gb, n, ncclFloat32, b, NULL));
  }
  expect(all_eq(ra, n, ranksum(1)), "sum on comm a");
  for (int j = 0; j < t_nranks; j++) expect(all_eq(gb + (size_t)j * n, n, (float)(t_nranks - j)), "gather block %d", j);
  report("two communicators interleaved, one with reversed ranks");

  ncclComm_t s = NULL, s2 = (ncclComm_t)1;
  NCCL_OK(ncclCommSplit(a, t_rank % 2, -t_rank, &s, NULL));
  int cnt = 0, want_rank = 0;
  float want_sum = 0;
  for (int r = 0; r < t_nranks; r++)
    if (r % 2 == t_rank % 2) { cnt++; want_rank += r > t_rank; want_sum += (float)r; }
  expect(s != NULL, "split gave no comm");
  if (s) {
    NCCL_OK(ncclCommCount(s, &x));
    expect(x == cnt, "split count %d want %d", x, cnt);
    NCCL_OK(ncclCommUserRank(s, &x));
    expect(x == want_rank, "split rank %d want %d (key = -rank)", x, want_rank);
    float me = (float)t_rank, sum = -1;
    NCCL_OK(ncclAllReduce(&me, &sum, 1, ncclFloat32, ncclSum, s, NULL));
    expect(sum == want_sum, "sum over split %g want %g", sum, want_sum);
  }
  NCCL_OK(ncclCommSplit(a, t_rank == 0 ? NCCL_SPLIT_NOCOLOR : 7, t_rank, &s2, NULL));
  expect(t_rank == 0 ? s2 == NULL : s2 != NULL, "NOCOLOR gives NULL");
  if (s2) {
    NCCL_OK(ncclCommCount(s2, &x));
    expect(x == t_nranks - 1, "count without rank 0");
    NCCL_OK(ncclCommUserRank(s2, &x));
    expect(x == t_rank - 1, "rank without rank 0");
    NCCL_OK(ncclCommDestroy(s2));
  }
  if (s) NCCL_OK(ncclCommDestroy(s));
  report("split by parity (key reverses order) and with NCCL_SPLIT_NOCOLOR");

  for (int i = 0; i < 50; i++) { /* many created and destroyed */
    ncclComm_t c = t_comm(t_rank, NULL);
    float one = 1, got = 0;
    NCCL_OK(ncclAllReduce(&one, &got, 1, ncclFloat32, ncclSum, c, NULL));
    expect(got == (float)t_nranks, "comm %d", i);
    NCCL_OK(i % 2 ? ncclCommDestroy(c) : ncclCommAbort(c));
  }
  report("50 communicators created, used, destroyed or aborted");
  free(in); free(ra); free(gb);
  NCCL_OK(ncclCommDestroy(b));
  NCCL_OK(ncclCommDestroy(a));
}

/* ---------------------------------------------------------------- threads */

typedef struct {
  int k;
  ncclUniqueId id;
  ncclComm_t comm; /* preset, or created by the thread */
  long bad;
} worker;

static void *work(void *arg) {
  worker *w = arg;
  if (!w->comm && ncclCommInitRank(&w->comm, t_nranks, w->id, t_rank) != ncclSuccess) {
    w->bad++;
    return NULL;
  }
  size_t n = 1000 + 17 * (size_t)w->k;
  float *in = floats(n, 0), *out = floats(n, 0);
  for (int it = 0; it < 200; it++) {
    for (size_t i = 0; i < n; i++) in[i] = (float)((t_rank + 1) * (w->k + 1) + it);
    if (ncclAllReduce(in, out, n, ncclFloat32, ncclSum, w->comm, NULL) != ncclSuccess) { w->bad++; break; }
    float want = ranksum((float)(w->k + 1)) + (float)(it * t_nranks);
    if (!all_eq(out, n, want)) w->bad++;
  }
  free(in);
  free(out);
  return NULL;
}

static void case_threads(const char *mode) {
  enum { NT = 3 };
  worker w[NT];
  pthread_t th[NT];
  for (int k = 0; k < NT; k++) {
    memset(&w[k], 0, sizeof w[k]);
    w[k].k = k;
    if (t_rank == 0) NCCL_OK(ncclGetUniqueId(&w[k].id));
    MPI_Bcast(&w[k].id, sizeof w[k].id, MPI_BYTE, 0, MPI_COMM_WORLD);
    /* With less than MPI_THREAD_MULTIPLE communicator creation (a blocking
     * MPI collective) must not run concurrently: create them here. */
    if (strcmp(mode, "multiple") != 0) NCCL_OK(ncclCommInitRank(&w[k].comm, t_nranks, w[k].id, t_rank));
  }
  for (int k = 0; k < NT; k++) pthread_create(&th[k], NULL, work, &w[k]);
  for (int k = 0; k < NT; k++) {
    pthread_join(th[k], NULL);
    expect(w[k].bad == 0, "thread %d: %ld wrong", k, w[k].bad);
    if (w[k].comm) NCCL_OK(ncclCommDestroy(w[k].comm));
  }
  char what[128];
  snprintf(what, sizeof what, "%d threads, each its own communicator, 200 allreduces (MPI thread level %s)", NT, mode);
  report(what);
}

/* ------------------------------------------------------------ nonblocking */

static void case_nonblocking(void) {
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 0;
  ncclUniqueId id;
  ncclComm_t c = NULL;
  int inprog;
  if (t_rank == 0) NCCL_OK(ncclGetUniqueId(&id));
  MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
  ncclResult_t r = ncclCommInitRankConfig(&c, t_nranks, id, t_rank, &cfg);
  expect(r == ncclInProgress && c != NULL, "init returned %d", r);
  expect(poll_done(c, &inprog) == ncclSuccess && inprog >= 1, "init polls: %d in progress", inprog);
  report("nonblocking init: ncclInProgress, polls in progress then success");

  const size_t n = 4096;
  float *in = floats(n, (float)(t_rank + 1)), *out = floats(n, -1), *g = floats(n * (size_t)t_nranks, -1);
  expect(ncclAllReduce(in, out, n, ncclFloat32, ncclSum, c, NULL) == ncclInProgress, "allreduce not in progress");
  ncclResult_t a;
  NCCL_OK(ncclCommGetAsyncError(c, &a));
  expect(a == ncclInProgress, "first poll: %d", a);
  expect(settles(out, n, ranksum(1)), "queued allreduce did not complete without polls");
  expect(poll_done(c, &inprog) == ncclSuccess, "allreduce polls");
  expect(all_eq(out, n, ranksum(1)), "allreduce result");
  expect(ncclAllReduce(in, out, n, ncclNumTypes, ncclSum, c, NULL) == ncclInvalidArgument, "invalid arg not immediate");
  report("nonblocking allreduce: ncclInProgress (the first poll too), completes without polls, result right");

  NCCL_OK(ncclGroupStart());
  expect(ncclAllReduce(in, out, n, ncclFloat32, ncclMax, c, NULL) == ncclSuccess, "grouped call");
  expect(ncclAllGather(in, g, n, ncclFloat32, c, NULL) == ncclSuccess, "grouped call");
  expect(ncclGroupEnd() == ncclInProgress, "group end not in progress");
  expect(poll_done(c, &inprog) == ncclSuccess && inprog >= 1, "group polls");
  expect(all_eq(out, n, (float)t_nranks), "max");
  for (int j = 0; j < t_nranks; j++) expect(all_eq(g + (size_t)j * n, n, (float)(j + 1)), "gather block %d", j);
  ncclComm_t blk = t_comm(t_rank, NULL);
  NCCL_OK(ncclGroupStart());
  NCCL_OK(ncclAllReduce(in, out, n, ncclFloat32, ncclSum, c, NULL));
  NCCL_OK(ncclAllReduce(in, out, n, ncclFloat32, ncclSum, blk, NULL));
  expect(ncclGroupEnd() == ncclInvalidUsage, "mixed blocking and nonblocking group");
  NCCL_OK(ncclCommDestroy(blk));
  report("nonblocking group end: ncclInProgress, mixing with blocking refused");

  ncclComm_t s = NULL;
  r = ncclCommSplit(c, 0, t_rank, &s, NULL); /* inherits nonblocking */
  expect(r == ncclInProgress && s, "split returned %d", r);
  if (s) {
    expect(poll_done(s, &inprog) == ncclSuccess && inprog >= 1, "split polls");
    expect(ncclAllReduce(in, out, n, ncclFloat32, ncclMin, s, NULL) == ncclInProgress, "on split");
    expect(poll_done(s, &inprog) == ncclSuccess && all_eq(out, n, 1), "min on split");
    expect(ncclCommFinalize(s) == ncclInProgress, "finalize");
    expect(poll_done(s, &inprog) == ncclSuccess && inprog >= 1, "finalize polls");
    NCCL_OK(ncclCommDestroy(s));
  }
  /* Destroy runs what is still queued. */
  expect(ncclAllReduce(in, out, n, ncclFloat32, ncclSum, c, NULL) == ncclInProgress, "queued before destroy");
  NCCL_OK(ncclCommDestroy(c));
  expect(all_eq(out, n, ranksum(1)), "destroy ran the queued allreduce");
  report("nonblocking split, finalize, destroy with queued work");
  free(in); free(out); free(g);
}

/* -------------------------------------------------------- fault injection */

static void case_failcall(void) {
  ncclComm_t comm = t_comm(t_rank, NULL);
  float in[16], out[16];
  for (int i = 0; i < 16; i++) { in[i] = (float)(t_rank + 1); out[i] = -1; }
  uint64_t c0 = 0, c1 = 0;
  int (*get)(uint64_t *, uint64_t *) = (int (*)(uint64_t *, uint64_t *))dlsym(RTLD_DEFAULT, "hostnccl_get_counters");
  if (!get) NCCL_OK(ncclInternalError); /* not the host NCCL */
  expect(ncclAllReduce(in, out, 16, ncclFloat32, ncclSum, comm, NULL) == ncclSuccess, "call 1");
  expect(ncclBroadcast(in, out, 16, ncclFloat32, 0, comm, NULL) == ncclSuccess, "call 2");
  for (int i = 0; i < 16; i++) out[i] = -1;
  get(&c0, NULL);
  expect(ncclAllReduce(in, out, 16, ncclFloat32, ncclSum, comm, NULL) == ncclSystemError, "call 3 did not fail");
  get(&c1, NULL);
  expect(all_eq(out, 16, -1), "failed call wrote recvbuff");
  expect(c1 == c0, "failed call counted");
  expect(strstr(ncclGetLastError(comm), "HOSTNCCL_FAIL_CALL") != NULL, "message: %s", ncclGetLastError(comm));
  expect(ncclAllReduce(in, out, 16, ncclFloat32, ncclSum, comm, NULL) == ncclSuccess, "call 4");
  expect(all_eq(out, 16, ranksum(1)), "call 4 result");
  report("HOSTNCCL_FAIL_CALL=3: the 3rd call fails with ncclSystemError untouched, the 4th works");
  NCCL_OK(ncclCommDestroy(comm));
}

static void case_failgroup(void) {
  ncclComm_t comm = t_comm(t_rank, NULL);
  float in[16], out[16], p[16];
  int next = (t_rank + 1) % t_nranks, prev = (t_rank + t_nranks - 1) % t_nranks;
  for (int i = 0; i < 16; i++) { in[i] = (float)(t_rank + 1); out[i] = -1; p[i] = -1; }
  NCCL_OK(ncclGroupStart());
  NCCL_OK(ncclAllReduce(in, out, 16, ncclFloat32, ncclSum, comm, NULL));
  expect(ncclGroupEnd() == ncclSuccess && all_eq(out, 16, ranksum(1)), "group 1");
  for (int i = 0; i < 16; i++) out[i] = -1;
  NCCL_OK(ncclGroupStart());
  NCCL_OK(ncclAllReduce(in, out, 16, ncclFloat32, ncclSum, comm, NULL));
  NCCL_OK(ncclSend(in, 16, ncclFloat32, next, comm, NULL));
  NCCL_OK(ncclRecv(p, 16, ncclFloat32, prev, comm, NULL));
  expect(ncclGroupEnd() == ncclSystemError, "group 2 did not fail");
  expect(all_eq(out, 16, -1) && all_eq(p, 16, -1), "dropped operations ran");
  NCCL_OK(ncclGroupStart());
  NCCL_OK(ncclGroupStart());
  NCCL_OK(ncclRecv(p, 16, ncclFloat32, prev, comm, NULL));
  NCCL_OK(ncclSend(in, 16, ncclFloat32, next, comm, NULL));
  NCCL_OK(ncclGroupEnd()); /* inner ends are not counted */
  expect(ncclGroupEnd() == ncclSuccess && all_eq(p, 16, (float)(prev + 1)), "group 3");
  NCCL_OK(ncclAllReduce(in, out, 16, ncclFloat32, ncclMax, comm, NULL));
  expect(all_eq(out, 16, (float)t_nranks), "allreduce after");
  report("HOSTNCCL_FAIL_GROUP_END=2: the 2nd outermost group end fails, its operations dropped");
  NCCL_OK(ncclCommDestroy(comm));
}

/* ------------------------------------------------------------------- link */

/* One group: part floats from in to each other rank, part from each into out. */
static void all_to_all(const float *in, float *out, size_t part, ncclComm_t comm) {
  NCCL_OK(ncclGroupStart());
  for (int p = 0; p < t_nranks; p++) {
    if (p == t_rank) continue;
    NCCL_OK(ncclSend(in + (size_t)p * part, part, ncclFloat32, p, comm, NULL));
    NCCL_OK(ncclRecv(out + (size_t)p * part, part, ncclFloat32, p, comm, NULL));
  }
  NCCL_OK(ncclGroupEnd());
}

static void case_link(void) {
  const char *l = getenv("HOSTNCCL_LINK_LATENCY_US"), *g = getenv("HOSTNCCL_LINK_GBPS");
  double lat = l ? atof(l) * 1e-6 : 0, gbps = g ? atof(g) : 0;
  ncclComm_t comm = t_comm(t_rank, NULL);
  const size_t n = 1 << 16; /* 256 KiB of fp32 */
  double S = (double)(n * 4), bw = gbps > 0 ? gbps * 1e9 / 8 : INFINITY;
  float *in = floats(n, 1), *out = floats(n, 0);
  double tmin = INFINITY;
  for (int it = 0; it < 3; it++) {
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = now_s();
    NCCL_OK(ncclAllReduce(in, out, n, ncclFloat32, ncclSum, comm, NULL));
    double dt = now_s() - t0;
    tmin = dt < tmin ? dt : tmin;
  }
  double bound = 2.0 * (t_nranks - 1) * (lat + S / t_nranks / bw);
  printf("# link: rank %d: allreduce of %.0f B: min %.1f ms, model lower bound %.1f ms\n", t_rank, S, tmin * 1e3, bound * 1e3);
  expect(tmin >= bound, "allreduce %.4f s < %.4f s", tmin, bound);
  expect(all_eq(out, n, (float)t_nranks), "allreduce result");
  report("emulated link: ring allreduce takes >= 2(n-1)(latency + S/n/bandwidth)");

  /* Broadcast from 0 then from n-1: rank 0 waits for n chained hops, each
   * causally after its start (a bound that holds whatever the clock skew). */
  MPI_Barrier(MPI_COMM_WORLD);
  double t0 = now_s();
  NCCL_OK(ncclBroadcast(in, out, n, ncclFloat32, 0, comm, NULL));
  NCCL_OK(ncclBroadcast(out, out, n, ncclFloat32, t_nranks - 1, comm, NULL));
  double dt = now_s() - t0;
  bound = t_nranks * (lat + S / bw);
  if (t_rank == 0) expect(dt >= bound, "broadcast chain %.4f s < %.4f s", dt, bound);
  MPI_Barrier(MPI_COMM_WORLD);
  t0 = now_s();
  NCCL_OK(ncclGroupStart());
  NCCL_OK(ncclSend(in, n, ncclFloat32, (t_rank + 1) % t_nranks, comm, NULL));
  NCCL_OK(ncclRecv(out, n, ncclFloat32, (t_rank + t_nranks - 1) % t_nranks, comm, NULL));
  NCCL_OK(ncclGroupEnd());
  dt = now_s() - t0;
  bound = lat + S / bw;
  expect(dt >= bound, "send/recv %.4f s < %.4f s", dt, bound);
  report("emulated link: broadcast chain hops >= latency + S/bandwidth each, send/recv >= latency + S/bandwidth");

  /* All-to-all in one group: S/n to each of the n-1 peers. One link per rank:
   * the n-1 messages go out one after another, so at least latency +
   * (n-1)(S/n)/bandwidth, never the time of one message. */
  size_t part = n / (size_t)t_nranks;
  MPI_Barrier(MPI_COMM_WORLD);
  t0 = now_s();
  all_to_all(in, out, part, comm);
  dt = now_s() - t0;
  bound = lat + (double)(t_nranks - 1) * (double)(part * 4) / bw;
  expect(dt >= bound, "all-to-all %.4f s < %.4f s", dt, bound);
  report("emulated link: an all-to-all group takes >= latency + (n-1)(S/n)/bandwidth (one link per rank)");
  free(in);
  free(out);
  NCCL_OK(ncclCommDestroy(comm));
}

/* ----------------------------------------------------------------- fabric */

/* The links of this test's own model: per node or per rank NIC directions and
 * per rank intra directions, bytes charged per step; the time of a step is its
 * busiest direction's bytes over its rate. */
typedef struct {
  int n, *node, nic_per_node;
  double nic_bw, intra_bw; /* bytes per second */
  double *out_b, *in_b;    /* [0, n): intra per rank; [n, 2n): NIC per rank or node */
} fab_model;

static void fab_clear(fab_model *m) {
  memset(m->out_b, 0, 2 * (size_t)m->n * sizeof(double));
  memset(m->in_b, 0, 2 * (size_t)m->n * sizeof(double));
}

static void fab_msg(fab_model *m, int from, int to, double bytes) {
  if (m->node[from] == m->node[to]) {
    m->out_b[from] += bytes;
    m->in_b[to] += bytes;
  } else {
    m->out_b[m->n + (m->nic_per_node ? m->node[from] : from)] += bytes;
    m->in_b[m->n + (m->nic_per_node ? m->node[to] : to)] += bytes;
  }
}

static double fab_time(const fab_model *m) {
  double t = 0;
  for (int i = 0; i < 2 * m->n; i++) {
    double bw = i < m->n ? m->intra_bw : m->nic_bw, b = fmax(m->out_b[i], m->in_b[i]);
    t = fmax(t, b / bw);
  }
  return t;
}

/* The span of one operation over every rank: the latest end less the earliest
 * start (CLOCK_MONOTONIC is one clock for the host's processes). */
static double fab_span(double t0, double t1) {
  double lo, hi;
  MPI_Allreduce(&t0, &lo, 1, MPI_DOUBLE, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(&t1, &hi, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return hi - lo;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static void case_fabric(const char *mib) {
  const char *g = getenv("HOSTNCCL_LINK_GBPS"), *ig = getenv("HOSTNCCL_INTRA_GBPS"), *np = getenv("HOSTNCCL_NIC_PER");
  double gbps = g ? atof(g) : 0, igbps = ig ? atof(ig) : gbps;
  int n = t_nranks;
  fab_model m = {.n = n, .nic_per_node = np && !strcmp(np, "node"), .nic_bw = gbps * 1e9 / 8,
                 .intra_bw = igbps > 0 ? igbps * 1e9 / 8 : INFINITY};
  char host[64] = {0}, *hosts = calloc((size_t)n, sizeof host);
  m.node = calloc((size_t)n, sizeof(int));
  m.out_b = calloc(2 * (size_t)n, sizeof(double));
  m.in_b = calloc(2 * (size_t)n, sizeof(double));
  gethostname(host, sizeof host - 1);
  MPI_Allgather(host, sizeof host, MPI_CHAR, hosts, sizeof host, MPI_CHAR, MPI_COMM_WORLD);
  int nnodes = 0;
  for (int i = 0; i < n; i++) {
    int j = 0;
    while (strcmp(hosts + (size_t)j * sizeof host, hosts + (size_t)i * sizeof host)) j++;
    m.node[i] = j == i ? nnodes++ : m.node[j];
  }
  size_t count = (size_t)(mib ? atof(mib) : 4) * (1u << 20) / 4;
  count -= count % (size_t)n;
  double S = (double)count * 4, part = S / n;
  float *in = floats(count, 1), *out = floats(count, 0);
  ncclComm_t comm = t_comm(t_rank, NULL);
  if (t_rank == 0)
    printf("# fabric: %d ranks on %d nodes (host names), NIC per %s at %g Gb/s, intra %g Gb/s, S = %.0f B\n", n, nnodes,
           m.nic_per_node ? "node" : "rank", gbps, igbps, S);

  /* The host NCCL's rank-order ring: 2(n-1) steps of S/n from each rank to the next. */
  fab_clear(&m);
  for (int r = 0; r < n; r++) fab_msg(&m, r, (r + 1) % n, part);
  double ring_model = 2.0 * (n - 1) * fab_time(&m);
  /* All-to-all in one group: S/n from each rank to each other rank. */
  fab_clear(&m);
  for (int r = 0; r < n; r++)
    for (int p = 0; p < n; p++)
      if (p != r) fab_msg(&m, r, p, part);
  double a2a_model = fab_time(&m);

  enum { REPS = 3 };
  double ring[REPS], a2a[REPS];
  int good = 1;
  for (int it = 0; it < REPS; it++) {
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = now_s();
    NCCL_OK(ncclAllReduce(in, out, count, ncclFloat32, ncclSum, comm, NULL));
    ring[it] = fab_span(t0, now_s());
    good &= all_eq(out, count, (float)n);
    size_t pc = count / (size_t)n;
    MPI_Barrier(MPI_COMM_WORLD);
    t0 = now_s();
    all_to_all(in, out, pc, comm);
    a2a[it] = fab_span(t0, now_s());
  }
  qsort(ring, REPS, sizeof *ring, cmp_double);
  qsort(a2a, REPS, sizeof *a2a, cmp_double);
  if (t_rank == 0) {
    printf("# fabric: ring all-reduce: median %.1f ms, modelled %.1f ms, measured/modelled %.3f\n", ring[REPS / 2] * 1e3,
           ring_model * 1e3, ring[REPS / 2] / ring_model);
    printf("# fabric: all-to-all group: median %.1f ms, modelled %.1f ms, measured/modelled %.3f\n", a2a[REPS / 2] * 1e3,
           a2a_model * 1e3, a2a[REPS / 2] / a2a_model);
  }
  expect(good, "ring all-reduce result");
  expect(ring[0] >= ring_model, "ring all-reduce %.4f s < %.4f s", ring[0], ring_model);
  expect(a2a[0] >= a2a_model, "all-to-all %.4f s < %.4f s", a2a[0], a2a_model);
  char what[160];
  snprintf(what, sizeof what, "fabric: %d nodes; a ring all-reduce and an all-to-all take at least what their bytes "
           "cost on the links they cross", nnodes);
  report(what);
  free(in);
  free(out);
  free(hosts);
  free(m.node);
  free(m.out_b);
  free(m.in_b);
  NCCL_OK(ncclCommDestroy(comm));
}

/* --------------------------------------------------------------- bigcount */

/* b[i] = pat[i % period] for i < n, by doubling a filled prefix (memcpy
 * speed: touching 2 GiB byte by byte would dominate the test). */
static void fill_pattern(int8_t *b, size_t n, const int8_t *pat, size_t period) {
  size_t done = period < n ? period : n;
  memcpy(b, pat, done);
  for (size_t unit = done; done < n; unit = done) { /* copies whole periods */
    size_t len = unit < n - done ? unit : n - done;
    memcpy(b + done, b, len);
    done += len;
  }
}

/* Index of the first element with b[i] != pat[i % period], or n. */
static size_t check_pattern(const int8_t *b, size_t n, const int8_t *pat, size_t period) {
  static int8_t ref[1 << 22];
  size_t step = sizeof ref - sizeof ref % period;
  fill_pattern(ref, step, pat, period);
  for (size_t off = 0; off < n; off += step) {
    size_t len = n - off < step ? n - off : step;
    if (memcmp(b + off, ref, len) != 0)
      for (size_t i = 0; i < len; i++)
        if (b[off + i] != ref[i]) return off + i;
  }
  return n;
}

static void case_bigcount(void) {
  ncclComm_t comm = t_comm(t_rank, NULL);
  const size_t n = ((size_t)1 << 31) + 5;
  int8_t *b = malloc(n), mine[61], sum[61], bc[127];
  for (int j = 0; j < 61; j++) {
    mine[j] = (int8_t)(t_rank + j);                                  /* rank r: r + i % 61 */
    sum[j] = (int8_t)(t_nranks * j + t_nranks * (t_nranks - 1) / 2); /* wraps like int8 */
  }
  for (int j = 0; j < 127; j++) bc[j] = (int8_t)(j * 3 - 100);
  expect(b != NULL, "no memory");
  if (b) {
    fill_pattern(b, n, mine, 61);
    NCCL_OK(ncclAllReduce(b, b, n, ncclInt8, ncclSum, comm, NULL));
    size_t bad = check_pattern(b, n, sum, 61);
    expect(bad == n, "allreduce element %zu: %d", bad, bad < n ? b[bad] : 0);
    if (t_rank == t_nranks - 1) fill_pattern(b, n, bc, 127);
    NCCL_OK(ncclBcast(b, n, ncclInt8, t_nranks - 1, comm, NULL));
    bad = check_pattern(b, n, bc, 127);
    expect(bad == n, "broadcast element %zu: %d", bad, bad < n ? b[bad] : 0);
  }
  report("2^31+5 int8 elements: in-place allreduce and bcast");
  free(b);
  NCCL_OK(ncclCommDestroy(comm));
}

/* ------------------------------------------------------------------ abort */

static void *aborter(void *arg) {
  usleep(300000);
  ncclCommAbort((ncclComm_t)arg);
  return NULL;
}

static void case_abort(void) {
  ncclComm_t x = t_comm(t_rank, NULL);
  const size_t n = 1 << 20;
  float *in = floats(n, 1), *out = floats(n, -1);
  if (t_rank == 0) { /* the others never join: only the abort can end this call */
    pthread_t th;
    pthread_create(&th, NULL, aborter, x);
    ncclResult_t r = ncclAllReduce(in, out, n, ncclFloat32, ncclSum, x, NULL);
    pthread_join(th, NULL);
    expect(r != ncclSuccess && r != ncclInProgress, "allreduce returned %d", r);
  } else {
    NCCL_OK(ncclCommAbort(x));
  }
  MPI_Barrier(MPI_COMM_WORLD);
  ncclComm_t y = t_comm(t_rank, NULL);
  NCCL_OK(ncclAllReduce(in, out, n, ncclFloat32, ncclSum, y, NULL));
  expect(all_eq(out, n, (float)t_nranks), "new communicator after abort");
  NCCL_OK(ncclCommDestroy(y));
  report("ncclCommAbort from another thread ends a call its peers never join");
  free(in);
  free(out);
}

/* ------------------------------------------------------------------ ended */

/* Calls naming a communicator after its destroy or abort returned: real NCCL
 * would use freed memory; the host NCCL answers ncclInvalidUsage and reports
 * each (HOSTNCCL-ENDED; 20-hostnccl.sh reads the report file: 4 lines per
 * rank). Control: a new communicator works. */
static void case_ended(void) {
  float in[16], out[16];
  for (int i = 0; i < 16; i++) in[i] = 1;
  ncclComm_t x = t_comm(t_rank, NULL), y = t_comm(t_rank, NULL);
  NCCL_OK(ncclCommDestroy(x));
  NCCL_OK(ncclCommAbort(y));
  int n = 0;
  expect(ncclAllReduce(in, out, 16, ncclFloat32, ncclSum, x, NULL) == ncclInvalidUsage, "all-reduce on a destroyed communicator");
  expect(ncclCommCount(y, &n) == ncclInvalidUsage, "ncclCommCount on an aborted communicator");
  expect(ncclSend(in, 16, ncclFloat32, (t_rank + 1) % t_nranks, y, NULL) == ncclInvalidUsage, "send on an aborted communicator");
  expect(ncclCommDestroy(x) == ncclInvalidUsage, "a second destroy");
  ncclComm_t z = t_comm(t_rank, NULL);
  NCCL_OK(ncclAllReduce(in, out, 16, ncclFloat32, ncclSum, z, NULL));
  expect(all_eq(out, 16, (float)t_nranks), "a new communicator after the ended ones");
  NCCL_OK(ncclCommDestroy(z));
  report("calls on destroyed or aborted communicators answer ncclInvalidUsage, reported; new ones work");
}

/* --------------------------------------------------------------- mismatch */

/* One mismatch per run (the host NCCL aborts the job on it: 20-hostnccl.sh
 * checks the exit status and the HOSTNCCL-MISMATCH line naming both calls);
 * "premul" is the legitimate difference: Sum here, PreMulSum elsewhere. */
static void case_mismatch(const char *which) {
  ncclComm_t comm = t_comm(t_rank, NULL);
  float in[16], out[16];
  ncclRedOp_t pre;
  float scalar = (float)(t_rank + 1); /* differs per rank: legitimate */
  for (int i = 0; i < 16; i++) in[i] = 1, out[i] = -1;
  int last = t_rank == t_nranks - 1;
  ncclResult_t r = ncclSuccess;
  if (!strcmp(which, "premul")) {
    NCCL_OK(ncclRedOpCreatePreMulSum(&pre, &scalar, ncclFloat32, ncclScalarHostImmediate, comm));
    NCCL_OK(ncclAllReduce(in, out, 16, ncclFloat32, t_rank == 0 ? ncclSum : pre, comm, NULL));
    float want = 1;
    for (int q = 1; q < t_nranks; q++) want += (float)(q + 1);
    expect(all_eq(out, 16, want), "Sum on rank 0 with PreMulSum elsewhere: %g want %g", out[0], want);
    NCCL_OK(ncclRedOpDestroy(pre, comm));
    report("Sum on one rank and PreMulSum on the others is no mismatch");
    NCCL_OK(ncclCommDestroy(comm));
    return;
  }
  if (!strcmp(which, "count")) r = ncclAllReduce(in, out, last ? 8 : 16, ncclFloat32, ncclSum, comm, NULL);
  else if (!strcmp(which, "datatype"))
    r = ncclAllReduce(in, out, last ? 16 : 8, last ? ncclFloat16 : ncclFloat32, ncclSum, comm, NULL);
  else if (!strcmp(which, "op")) r = ncclAllReduce(in, out, 16, ncclFloat32, last ? ncclMax : ncclSum, comm, NULL);
  else if (!strcmp(which, "root")) r = ncclBroadcast(in, out, 16, ncclFloat32, last ? 1 : 0, comm, NULL);
  else if (!strcmp(which, "kind"))
    r = last ? ncclAllGather(in, out, 4, ncclFloat32, comm, NULL)
             : ncclReduceScatter(in, out, 4, ncclFloat32, ncclSum, comm, NULL);
  else if (!strcmp(which, "count0")) r = ncclAllReduce(in, out, last ? 0 : 4, ncclFloat32, ncclSum, comm, NULL);
  else expect(0, "unknown mismatch case '%s'", which);
  expect(0, "mismatched collectives (%s) returned %d instead of stopping the job", which, (int)r);
  report("mismatched collectives stop the job");
  NCCL_OK(ncclCommDestroy(comm));
}

/* --------------------------------------------------------------- selfinit */

static void case_selfinit(const char *path) {
  const char *r = getenv("OMPI_COMM_WORLD_RANK"), *n = getenv("OMPI_COMM_WORLD_SIZE");
  int rank = r ? atoi(r) : 0, nranks = n ? atoi(n) : 1, inited = 1;
  char tmp[4096];
  ncclUniqueId id;
  ncclComm_t comm;
  memset(&id, 0, sizeof id);
  MPI_Initialized(&inited);
  if (rank == 0) { /* publish the id atomically: write then rename */
    NCCL_OK(ncclGetUniqueId(&id));
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "wb");
    if (!f || fwrite(&id, sizeof id, 1, f) != 1 || fclose(f) != 0 || rename(tmp, path) != 0) NCCL_OK(ncclSystemError);
  } else {
    FILE *f = NULL;
    for (int i = 0; i < 3000 && !(f = fopen(path, "rb")); i++) usleep(10000);
    if (!f || fread(&id, sizeof id, 1, f) != 1) NCCL_OK(ncclSystemError);
    fclose(f);
  }
  NCCL_OK(ncclCommInitRank(&comm, nranks, id, rank));
  MPI_Comm_rank(MPI_COMM_WORLD, &t_rank); /* MPI is up now: report through it */
  MPI_Comm_size(MPI_COMM_WORLD, &t_nranks);
  int thread_level = -1;
  MPI_Query_thread(&thread_level);
  expect(!inited, "MPI was initialised before the first NCCL call");
  expect(thread_level == MPI_THREAD_MULTIPLE, "thread level %d", thread_level);
  float one = 1, sum = 0;
  NCCL_OK(ncclAllReduce(&one, &sum, 1, ncclFloat32, ncclSum, comm, NULL));
  expect(sum == (float)nranks && t_rank == rank, "sum %g", sum);
  NCCL_OK(ncclCommDestroy(comm));
  report("program without MPI_Init: the host NCCL initialises MPI (THREAD_MULTIPLE)");
}

int main(int argc, char **argv) {
  const char *c = argc > 1 ? argv[1] : "";
  if (!strcmp(c, "selfinit")) { /* MPI_Finalize is left to the host NCCL's atexit */
    case_selfinit(argc > 2 ? argv[2] : "hostnccl-id");
    return t_failures ? 1 : 0;
  }
  if (!strcmp(c, "threads") && argc > 2 && !strcmp(argv[2], "multiple")) {
    int provided;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &t_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &t_nranks);
  } else {
    t_init(&argc, &argv);
  }
  if (!strcmp(c, "basic")) case_basic(argc > 2 ? argv[2] : NULL);
  else if (!strcmp(c, "old")) { case_basic("20903"); case_old(); }
  else if (!strcmp(c, "group")) case_group();
  else if (!strcmp(c, "comms")) case_comms();
  else if (!strcmp(c, "threads")) case_threads(argc > 2 ? argv[2] : "single");
  else if (!strcmp(c, "nonblocking")) case_nonblocking();
  else if (!strcmp(c, "failcall")) case_failcall();
  else if (!strcmp(c, "failgroup")) case_failgroup();
  else if (!strcmp(c, "link")) case_link();
  else if (!strcmp(c, "fabric")) case_fabric(argc > 2 ? argv[2] : NULL);
  else if (!strcmp(c, "bigcount")) case_bigcount();
  else if (!strcmp(c, "abort")) case_abort();
  else if (!strcmp(c, "ended")) case_ended();
  else if (!strcmp(c, "mismatch")) case_mismatch(argc > 2 ? argv[2] : "");
  else {
    if (t_rank == 0) fprintf(stderr, "unknown case '%s'\n", c);
    t_failures = 1;
  }
  MPI_Finalize();
  return t_failures ? 1 : 0;
}
