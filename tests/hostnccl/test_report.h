/* test_report.h — how the host NCCL's MPI test programs report: every rank
 * records its failures with WRONG(...), report("what") combines them over
 * MPI_COMM_WORLD and rank 0 prints one "ok - np=N what" / "not ok - ..." line
 * (each failing rank prints its first failure as a "#" line first).
 * NCCL_OK(call) aborts the job on an unexpected NCCL error: a test that
 * cannot continue must not hang the suite.
 *
 * Must not: be included by the library; define anything non-static. */
#ifndef HOSTNCCL_TEST_REPORT_H
#define HOSTNCCL_TEST_REPORT_H

#include <mpi.h>
#include <nccl.h>
#include <stdarg.h>
#include <stdio.h>

static int t_rank, t_nranks, t_failures;
static long t_bad;
static char t_first_bad[256];

#define NCCL_OK(call)                                                                      \
  do {                                                                                     \
    ncclResult_t r_ = (call);                                                              \
    if (r_ != ncclSuccess) {                                                               \
      fprintf(stderr, "rank %d: %s:%d: %s failed: %s (%s)\n", t_rank, __FILE__, __LINE__,  \
              #call, ncclGetErrorString(r_), ncclGetLastError(NULL));                      \
      MPI_Abort(MPI_COMM_WORLD, 1);                                                        \
    }                                                                                      \
  } while (0)

static void wrong(const char *fmt, ...) __attribute__((format(printf, 1, 2), unused));
static void wrong(const char *fmt, ...) {
  if (t_bad++ == 0) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t_first_bad, sizeof t_first_bad, fmt, ap);
    va_end(ap);
  }
}

/* expect(cond, fmt...): record a failure when cond is false. */
#define expect(cond, ...) do { if (!(cond)) wrong(__VA_ARGS__); } while (0)

static void __attribute__((unused)) report(const char *what) {
  long total = 0;
  MPI_Allreduce(&t_bad, &total, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
  if (t_bad) printf("#   rank %d: %ld wrong, first: %s\n", t_rank, t_bad, t_first_bad);
  fflush(stdout);
  MPI_Barrier(MPI_COMM_WORLD);
  if (t_rank == 0) printf("%s - np=%d %s\n", total ? "not ok" : "ok", t_nranks, what);
  fflush(stdout);
  t_failures += total != 0;
  t_bad = 0;
}

static void __attribute__((unused)) t_init(int *argc, char ***argv) {
  MPI_Init(argc, argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &t_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &t_nranks);
}

/* A communicator of all world ranks; rank_of_me lets tests reorder ranks. */
static ncclComm_t __attribute__((unused)) t_comm(int rank_of_me, ncclConfig_t *config) {
  ncclUniqueId id;
  ncclComm_t c = NULL;
  if (t_rank == 0) NCCL_OK(ncclGetUniqueId(&id));
  MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
  ncclResult_t r = ncclCommInitRankConfig(&c, t_nranks, id, rank_of_me, config);
  if (r != ncclSuccess && r != ncclInProgress) NCCL_OK(r);
  return c;
}

#endif
