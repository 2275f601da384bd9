/* shim_threads.c — threads and several communicators under the shim.
 *
 *   shim_threads threads T      T threads, each with its own communicator
 *       (unique id broadcast over its own duplicate of MPI_COMM_WORLD), each
 *       doing compressed all-reduces (plain and grouped) with exact checks;
 *       the shim's process counters must add up to every thread's calls
 *   shim_threads streams         two communicators, calls interleaved over two
 *       (fake) streams, in and out of groups: exact; VmRSS flat over rounds
 *   shim_threads abort ROUNDS   a thread blocked inside an all-reduce (its peer
 *       never joins) while a watchdog thread polls ncclCommGetAsyncError and
 *       then calls ncclCommAbort: the blocked call returns an error, nothing
 *       deadlocks, and a new communicator afterwards is exact
 *   shim_threads nbwatch N       a nonblocking communicator: N calls by the
 *       main thread while a watchdog thread polls ncclCommGetAsyncError; each
 *       result must be exact once the main thread's poll reports completion
 *
 * The host NCCL ignores streams, so distinct pointer values stand in for
 * streams: the shim keys its staging by (communicator, stream).
 * Must not: assert timings (the watchdog aborts once the calls that can
 * complete have, whatever time that takes). */
#include <pthread.h>
#include <sched.h>
#include <unistd.h>

#include "shimfault_util.h"
#include "devmirror.h" /* SHIMTEST_DEVICE=1: device buffers on the CUDA driver double */

/* ---- threads ------------------------------------------------------------------ */

enum { TCALLS = 60 };

typedef struct {
  int t;
  MPI_Comm mpi;
} thread_arg;

static void *thread_main(void *p) {
  thread_arg *a = p;
  ncclComm_t c = tm_comm_over(a->mpi);
  size_t n = 16384 + (size_t)a->t * 9973; /* each thread its own size */
  float *s = malloc(n * 4), *r = malloc(n * 4), *s2 = malloc(n * 4), *r2 = malloc(n * 4);
  char what[64];
  for (int k = 0; k < TCALLS; k++) {
    int salt = a->t * 100 + k, inplace = k % 4 == 2, grouped = k % 2 == 1;
    sf_fill(s, n, rank, salt);
    sf_poison(r, n);
    float *out = inplace ? s : r;
    if (grouped) {
      sf_fill(s2, n, rank, salt + 50);
      NCCL_OK(ncclGroupStart());
      NCCL_OK(ncclAllReduce(s, out, n, ncclFloat32, ncclSum, c, NULL));
      NCCL_OK(ncclAllReduce(s2, r2, n, ncclFloat32, ncclSum, c, NULL));
      NCCL_OK(ncclGroupEnd());
      snprintf(what, sizeof what, "thread %d call %d (grouped, 2nd member)", a->t, k);
      sf_check(r2, n, salt + 50, nranks, 0, what);
    } else {
      NCCL_OK(ncclAllReduce(s, out, n, ncclFloat32, ncclSum, c, NULL));
    }
    snprintf(what, sizeof what, "thread %d call %d", a->t, k);
    sf_check(out, n, salt, nranks, 0, what);
  }
  NCCL_OK(ncclCommDestroy(c));
  free(s), free(r), free(s2), free(r2);
  return NULL;
}

static int cmd_threads(int T) {
  pthread_t th[64];
  thread_arg args[64];
  if (T > 64) T = 64;
  /* One communicator made and dropped on the main thread first: the host
   * NCCL initialises its MPI state at the first init, and does not guard
   * that against concurrent first calls (a test-substrate limit, reported). */
  NCCL_OK(ncclCommDestroy(tm_comm_world()));
  /* Duplicates are made here, in the same order on every rank. */
  for (int t = 0; t < T; t++) {
    args[t].t = t;
    MPI_Comm_dup(MPI_COMM_WORLD, &args[t].mpi);
  }
  ncclshim_stats_t s0 = sf_stats();
  for (int t = 0; t < T; t++) pthread_create(&th[t], NULL, thread_main, &args[t]);
  for (int t = 0; t < T; t++) pthread_join(th[t], NULL);
  ncclshim_stats_t s1 = sf_stats();
  uint64_t per_thread = TCALLS + TCALLS / 2; /* grouped rounds make two calls */
  if (sf_shim_loaded()) {
    EXPECT(s1.calls - s0.calls == per_thread * (uint64_t)T, "the shim counted %llu calls, the threads made %llu",
           (unsigned long long)(s1.calls - s0.calls), (unsigned long long)(per_thread * T));
    uint64_t transformed = s1.compressed + s1.fused - s0.compressed - s0.fused;
    EXPECT(transformed == per_thread * (uint64_t)T, "%llu of %llu calls were compressed or fused",
           (unsigned long long)transformed, (unsigned long long)(per_thread * T));
  }
  for (int t = 0; t < T; t++) MPI_Comm_free(&args[t].mpi);
  return 0;
}

/* ---- streams ------------------------------------------------------------------ */

static int cmd_streams(void) {
  ncclComm_t A = tm_comm_world(), B = tm_comm_world();
  cudaStream_t s1 = (cudaStream_t)0x1, s2 = (cudaStream_t)0x2;
  enum { SN = 40000, ROUNDS = 40, SLOTS = 6 };
  float *x[SLOTS], *y[SLOTS];
  for (int k = 0; k < SLOTS; k++) x[k] = malloc(SN * 4), y[k] = malloc(SN * 4);
  long rss0 = 0;
  struct { ncclComm_t c; cudaStream_t s; int inplace; } plan[SLOTS] = {
      {A, s1, 0}, {B, s2, 0}, {A, s2, 1}, {B, s1, 1}, {A, s1, 0}, {B, s2, 0}};
  for (int round = 0; round < ROUNDS; round++) {
    if (round == 5) rss0 = sf_rss_kib();
    int grouped = round % 2;
    size_t n = SN - (size_t)(round % 7) * 1001; /* sizes vary: staging regrows */
    for (int k = 0; k < SLOTS; k++) sf_fill(x[k], n, rank, round * SLOTS + k), sf_poison(y[k], n);
    if (grouped) NCCL_OK(ncclGroupStart());
    for (int k = 0; k < SLOTS; k++)
      NCCL_OK(ncclAllReduce(x[k], plan[k].inplace ? x[k] : y[k], n, ncclFloat32, ncclSum, plan[k].c, plan[k].s));
    if (grouped) NCCL_OK(ncclGroupEnd());
    for (int k = 0; k < SLOTS; k++) {
      char what[64];
      snprintf(what, sizeof what, "round %d slot %d%s", round, k, grouped ? " (grouped)" : "");
      sf_check(plan[k].inplace ? x[k] : y[k], n, round * SLOTS + k, nranks, 0, what);
    }
  }
  long grown = sf_rss_kib() - rss0;
  EXPECT(!sf_plain_run() || grown < 4096, "VmRSS grew by %ld KiB over %d rounds on interleaved streams", grown,
         ROUNDS - 5);
  NCCL_OK(ncclCommDestroy(A));
  NCCL_OK(ncclCommDestroy(B));
  for (int k = 0; k < SLOTS; k++) free(x[k]), free(y[k]);
  return 0;
}

/* ---- abort ------------------------------------------------------------------------ */

typedef struct {
  ncclComm_t comm;
  int calls;                 /* all-reduces this rank makes; rank 0 makes one more */
  int settle;                /* completed calls after which only the blocked one (or none) is left */
  volatile int progress;     /* bumped by the caller after each completed call */
  ncclResult_t last;         /* what the last call returned */
} abort_state;

enum { AN = 64 };

static void *caller(void *p) {
  abort_state *st = p;
  float s[AN], r[AN];
  for (int k = 0; k < st->calls; k++) {
    sf_fill(s, AN, rank, k);
    st->last = ncclAllReduce(s, r, AN, ncclFloat32, ncclSum, st->comm, NULL);
    if (st->last != ncclSuccess) break;
    sf_check(r, AN, k, nranks, 0, "call before the abort");
    __atomic_add_fetch(&st->progress, 1, __ATOMIC_RELEASE);
  }
  return NULL;
}

/* The watchdog: poll the communicator like PyTorch's does; once every call
 * that can complete has (rank 0: all but its last), keep polling a while so
 * that the last call is inside NCCL, then abort. */
static void *watchdog(void *p) {
  abort_state *st = p;
  for (int still = 0; still < 2000;) {
    ncclResult_t e = ncclSuccess;
    ncclResult_t r = ncclCommGetAsyncError(st->comm, &e);
    if (r != ncclSuccess) EXPECT(0, "watchdog poll returned %d", (int)r);
    if (__atomic_load_n(&st->progress, __ATOMIC_ACQUIRE) >= st->settle) still++;
    usleep(100);
  }
  EXPECT(ncclCommAbort(st->comm) == ncclSuccess, "ncclCommAbort failed");
  return NULL;
}

static int cmd_abort(int rounds) {
  for (int round = 0; round < rounds; round++) {
    abort_state st;
    memset(&st, 0, sizeof st);
    st.comm = tm_comm_world();
    st.calls = 20 + round + (rank == 0); /* rank 0's last call never completes */
    st.settle = 20 + round;
    pthread_t a, w;
    pthread_create(&a, NULL, caller, &st);
    pthread_create(&w, NULL, watchdog, &st);
    pthread_join(w, NULL);
    pthread_join(a, NULL);
    if (rank == 0) {
      EXPECT(st.last != ncclSuccess, "round %d: the call blocked during the abort returned success", round);
      EXPECT(st.progress == st.calls - 1, "round %d: %d calls completed, expected %d", round, st.progress,
             st.calls - 1);
    } else {
      EXPECT(st.last == ncclSuccess && st.progress == st.calls, "round %d: rank %d completed %d of %d calls", round,
             rank, st.progress, st.calls);
    }
    /* The process is still usable: a fresh communicator works. */
    MPI_Barrier(MPI_COMM_WORLD);
    ncclComm_t c = tm_comm_world();
    float s[AN], r[AN];
    sf_fill(s, AN, rank, 99);
    NCCL_OK(ncclAllReduce(s, r, AN, ncclFloat32, ncclSum, c, NULL));
    sf_check(r, AN, 99, nranks, 0, "new communicator after an abort");
    NCCL_OK(ncclCommDestroy(c));
  }
  return 0;
}

/* ---- nbwatch ----------------------------------------------------------------------- */
/* A nonblocking communicator used by the main thread while a watchdog thread
 * polls ncclCommGetAsyncError on it without pause (what PyTorch's watchdog
 * does). A cast-back may run only once its own collective has completed,
 * whichever thread's poll observes that. */

typedef struct {
  ncclComm_t comm;
  volatile int stop;
  volatile int started;   /* polls the watchdog has begun */
} nbwatch_state;

/* Pin the calling thread to CPU k (mod the CPUs there are): the watchdog and
 * the caller of one rank then really run at the same time. */
static void pin_to(int k) {
  long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
  if (ncpu < 2) return;
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET((int)(k % ncpu), &set);
  pthread_setaffinity_np(pthread_self(), sizeof set, &set);
}

static void *nb_poller(void *p) {
  nbwatch_state *st = p;
  pin_to(2 * rank + 1);
  while (!__atomic_load_n(&st->stop, __ATOMIC_ACQUIRE)) {
    ncclResult_t e = ncclSuccess;
    __atomic_add_fetch(&st->started, 1, __ATOMIC_RELEASE);
    ncclResult_t r = ncclCommGetAsyncError(st->comm, &e);
    if (r != ncclSuccess || (e != ncclSuccess && e != ncclInProgress))
      EXPECT(0, "watchdog poll returned %d, async error %d", (int)r, (int)e);
    sched_yield();
  }
  return NULL;
}

static int cmd_nbwatch(int iters) {
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 0;
  nbwatch_state st = {tm_comm_over_cfg(MPI_COMM_WORLD, &cfg), 0, 0};
  enum { NN = 131072 };
  float *s = malloc(NN * 4), *r = malloc(NN * 4);
  /* First call on the main thread alone: the configuration check. */
  sf_fill(s, NN, rank, 0);
  ncclResult_t res = ncclAllReduce(s, r, NN, ncclFloat32, ncclSum, st.comm, NULL);
  EXPECT(res == ncclSuccess || res == ncclInProgress, "first call returned %d", (int)res);
  EXPECT(sf_poll(st.comm) == ncclSuccess, "first poll");
  sf_check(r, NN, 0, nranks, 0, "first call");
  pthread_t w;
  pin_to(2 * rank);
  pthread_create(&w, NULL, nb_poller, &st);
  size_t wrong_calls = 0;
  char first[160] = "";
  for (int k = 1; k <= iters; k++) {
    sf_fill(s, NN, rank, k);
    sf_poison(r, NN);
    res = ncclAllReduce(s, r, NN, ncclFloat32, ncclSum, st.comm, NULL);
    if (res != ncclSuccess && res != ncclInProgress) { EXPECT(0, "call %d returned %d", k, (int)res); break; }
    /* Let the watchdog begin two polls first (the host NCCL runs queued work
     * at the second), so that it, not this thread, usually sees completion. */
    int c0 = __atomic_load_n(&st.started, __ATOMIC_ACQUIRE);
    for (int spin = 0; spin < 100000 && __atomic_load_n(&st.started, __ATOMIC_ACQUIRE) < c0 + 2; spin++) sched_yield();
    if (sf_poll(st.comm) != ncclSuccess) { EXPECT(0, "call %d: poll failed", k); break; }
    /* Completion was reported to this thread: the result must be final.
     * Checked from the end: a cast-back still running elsewhere writes it last. */
    for (size_t i = NN; i-- > 0;)
      if (r[i] != sf_want(i, k, nranks, 0)) {
        if (!wrong_calls++)
          snprintf(first, sizeof first, "first: call %d [%zu] = %g, expected %g (this rank's input %g)", k, i, r[i],
                   sf_want(i, k, nranks, 0), sf_val(rank, i, k));
        break;
      }
  }
  __atomic_store_n(&st.stop, 1, __ATOMIC_RELEASE);
  pthread_join(w, NULL);
  EXPECT(wrong_calls == 0, "%zu of %d calls had a wrong result after the poll reported success (cast-back before "
         "its collective completed?); %s", wrong_calls, iters, first);
  if (rank == 0) printf("nbwatch: %zu of %d calls wrong\n", wrong_calls, iters);
  NCCL_OK(ncclCommDestroy(st.comm));
  free(s);
  free(r);
  return 0;
}

int main(int argc, char **argv) {
  sf_init(&argc, &argv, 1);
  const char *cmd = argc > 1 ? argv[1] : "";
  if (!strcmp(cmd, "threads") && argc == 3) cmd_threads(atoi(argv[2]));
  else if (!strcmp(cmd, "streams")) cmd_streams();
  else if (!strcmp(cmd, "abort") && argc == 3) cmd_abort(atoi(argv[2]));
  else if (!strcmp(cmd, "nbwatch") && argc == 3) cmd_nbwatch(atoi(argv[2]));
  else EXPECT(0, "usage: shim_threads threads T | streams | abort ROUNDS | nbwatch ITERS");
  return sf_finish();
}
