/* shimfault_util.h — helpers shared by the reliability test programs
 * (shimfault*.c, shim_threads.c): MPI/NCCL start-up, communicators, inputs
 * that are exact in fp16 and bf16, expectation checks, the shim's and the host
 * NCCL's counters, and the process's memory and file descriptors.
 *
 * Each program is one translation unit that includes this header once, so the
 * helpers are plain statics. Checks never stop a program: they count failures
 * and print one line each; main() ends with sf_finish(), whose exit status is
 * non-zero on every rank when any rank failed.
 *
 * Must not: depend on the shim being loaded (its API is looked up with dlsym,
 * so the same programs run against plain NCCL for comparison runs), or call
 * anything but the public NCCL API and the documented test hooks. */
#ifndef SHIMFAULT_UTIL_H
#define SHIMFAULT_UTIL_H

#include <dirent.h>
#include <dlfcn.h>
#include <math.h>
#include <mpi.h>
#include <nccl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ncclshim.h"
#include "testmpi.h"

static int rank, nranks;
static int failures;


/* EXPECT(cond, fmt, ...): count and report a failed expectation, go on
 * (from any thread; one write per line). */
#define EXPECT(cond, ...)                                                         \
  do {                                                                            \
    if (!(cond) && __atomic_fetch_add(&failures, 1, __ATOMIC_RELAXED) < 40) {     \
      char m_[512];                                                               \
      int n_ = snprintf(m_, sizeof m_, "FAIL rank %d line %d: ", rank, __LINE__); \
      snprintf(m_ + n_, sizeof m_ - (size_t)n_, __VA_ARGS__);                     \
      fprintf(stderr, "%s\n", m_);                                                \
    }                                                                             \
  } while (0)

static inline void sf_init(int *argc, char ***argv, int need_threads) {
  int provided = 0;
  MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);
  if (need_threads && provided < MPI_THREAD_MULTIPLE) {
    fprintf(stderr, "MPI gives thread level %d, this test needs MPI_THREAD_MULTIPLE\n", provided);
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
}

/* Exit status for every rank: 0 only when no rank failed. */
static inline int sf_finish(void) {
  int mine = failures != 0, any = 0;
  MPI_Allreduce(&mine, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return any;
}


/* A communicator of this rank alone. */
static inline ncclComm_t sf_comm_self(void) {
  ncclUniqueId id;
  ncclComm_t c = NULL;
  if (tm_before_init) tm_before_init();
  NCCL_OK(ncclGetUniqueId(&id));
  NCCL_OK(ncclCommInitRank(&c, 1, id, 0));
  return c;
}

/* Wait on a nonblocking communicator; returns its final async error. */
static inline ncclResult_t sf_poll(ncclComm_t c) {
  ncclResult_t e = ncclInProgress;
  while (e == ncclInProgress) NCCL_OK(ncclCommGetAsyncError(c, &e));
  return e;
}

/* ---- inputs exact in the wire types --------------------------------------
 * Multiples of 1/4 in [-2, 2]: any sum of up to 32 of them is a multiple of
 * 1/4 of magnitude <= 64, exact in fp16 (11 significant bits) and bf16 (8),
 * at every partial sum of any order; divided by a power-of-two rank count it
 * stays exact. `salt` makes different calls use different data. */
static inline float sf_val(int r, size_t i, int salt) {
  return (float)((int)(((size_t)r * 7 + i * 3 + (size_t)salt * 5) % 17) - 8) * 0.25f;
}

static inline void sf_fill(float *x, size_t n, int r, int salt) {
  for (size_t i = 0; i < n; i++) x[i] = sf_val(r, i, salt);
}

/* The exact result over ranks [0, n) (Sum, or Avg when avg). */
static inline float sf_want(size_t i, int salt, int n, int avg) {
  double s = 0;
  for (int q = 0; q < n; q++) s += sf_val(q, i, salt);
  return (float)(avg ? s / n : s);
}

/* Number of wrong elements of got[0..n) (first one reported). */
static inline size_t sf_check(const float *got, size_t n, int salt, int nr, int avg, const char *what) {
  size_t wrong = 0, first = 0;
  for (size_t i = 0; i < n; i++)
    if (got[i] != sf_want(i, salt, nr, avg) || signbit(got[i]) != signbit(sf_want(i, salt, nr, avg))) {
      if (!wrong) first = i;
      wrong++;
    }
  EXPECT(wrong == 0, "%s: %zu of %zu elements wrong, first [%zu] = %.9g, expected %.9g", what, wrong, n,
         first, n ? got[first] : 0.0, n ? sf_want(first, salt, nr, avg) : 0.0);
  return wrong;
}

/* This rank's own input still there (an in-place buffer nothing wrote). */
static inline size_t sf_check_input(const float *x, size_t n, int salt, const char *what) {
  size_t wrong = 0, first = 0;
  for (size_t i = 0; i < n; i++)
    if (x[i] != sf_val(rank, i, salt)) {
      if (!wrong) first = i;
      wrong++;
    }
  EXPECT(wrong == 0, "%s: %zu of %zu elements changed, first [%zu] = %.9g, input %.9g", what, wrong, n, first,
         n ? x[first] : 0.0, n ? sf_val(rank, first, salt) : 0.0);
  return wrong;
}

/* Elements of x[0..n) whose bits differ from `pattern` repeated. */
static inline size_t sf_count_not(const void *x, size_t n, uint32_t pattern) {
  size_t bad = 0;
  for (size_t i = 0; i < n; i++) {
    uint32_t v;
    memcpy(&v, (const char *)x + 4 * i, 4);
    bad += v != pattern;
  }
  return bad;
}

#define SF_SENTINEL 0x7fa5a5a5u /* a NaN no arithmetic of ours produces */

static inline void sf_poison(void *x, size_t n) {
  for (size_t i = 0; i < n; i++) memcpy((char *)x + 4 * i, &(uint32_t){SF_SENTINEL}, 4);
}

/* ---- counters ----------------------------------------------------------- */
/* The shim's totals (all zero when the shim is not loaded). */
static inline ncclshim_stats_t sf_stats(void) {
  static int (*get)(ncclshim_stats_t *);
  static int looked;
  ncclshim_stats_t s;
  memset(&s, 0, sizeof s);
  if (!looked) {
    *(void **)&get = dlsym(RTLD_DEFAULT, "ncclshim_get_stats");
    looked = 1;
  }
  if (get) get(&s);
  return s;
}

static inline int sf_shim_loaded(void) { return dlsym(RTLD_DEFAULT, "ncclshim_get_stats") != NULL; }

/* ncclAllReduce calls the host NCCL accepted (tests/hostnccl/hostnccl_hooks.h). */
static inline uint64_t sf_host_calls(void) {
  static int (*get)(uint64_t *, uint64_t *);
  static int looked;
  uint64_t c = 0;
  if (!looked) {
    *(void **)&get = dlsym(RTLD_DEFAULT, "hostnccl_get_counters");
    looked = 1;
  }
  if (get) get(&c, NULL);
  return c;
}

/* ---- the process -------------------------------------------------------- */
/* Under AddressSanitizer or valgrind, freed blocks wait in a quarantine, so
 * VmRSS says nothing about leaks and addresses are not reused soon: those
 * checks are made by plain runs only (sf_plain_run() == 1). */
#if defined(__has_include)
#if __has_include(<valgrind/valgrind.h>)
#include <valgrind/valgrind.h>
#endif
#endif
#ifndef RUNNING_ON_VALGRIND
#define RUNNING_ON_VALGRIND 0
#endif

static inline int sf_plain_run(void) {
#ifdef __SANITIZE_ADDRESS__
  return 0;
#else
  return !RUNNING_ON_VALGRIND;
#endif
}

static inline long sf_rss_kib(void) {
  FILE *f = fopen("/proc/self/status", "r");
  char line[256];
  long kib = -1;
  while (f && fgets(line, sizeof line, f))
    if (!strncmp(line, "VmRSS:", 6)) kib = strtol(line + 6, NULL, 10);
  if (f) fclose(f);
  return kib;
}

static inline int sf_fd_count(void) {
  DIR *d = opendir("/proc/self/fd");
  int n = 0;
  for (struct dirent *e; d && (e = readdir(d));) n += e->d_name[0] != '.';
  if (d) closedir(d);
  return n - 1; /* the directory stream's own descriptor */
}

static inline size_t sf_env_size(const char *name, size_t dflt) {
  const char *s = getenv(name);
  return s && *s ? (size_t)strtoull(s, NULL, 0) : dflt;
}

#endif
