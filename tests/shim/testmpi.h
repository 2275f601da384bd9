/* testmpi.h — what the MPI test programs over NCCL share: a check that stops
 * the whole job on an unexpected NCCL error (an MPI job with one rank gone
 * would otherwise wait for its timeout), and communicators made the way
 * nccl-tests makes them (rank 0's unique id broadcast over MPI), blocking or
 * nonblocking. */
#ifndef NSC_TESTMPI_H
#define NSC_TESTMPI_H

#include <mpi.h>
#include <nccl.h>
#include <stdio.h>

static inline int tm_rank(void) {
  int r = -1, up = 0;
  MPI_Initialized(&up);
  if (up) MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

/* A call that must succeed: on failure say where and stop the whole job
 * (an MPI job with one rank gone would otherwise wait for the timeout). */
#define NCCL_OK(call)                                                                              \
  do {                                                                                             \
    ncclResult_t r_ = (call);                                                                      \
    if (r_ != ncclSuccess) {                                                                       \
      fprintf(stderr, "rank %d: %s:%d %s -> %d (%s)\n", tm_rank(), __FILE__, __LINE__, #call, (int)r_, \
              ncclGetErrorString(r_));                                                             \
      MPI_Abort(MPI_COMM_WORLD, 2);                                                                \
    }                                                                                              \
  } while (0)

/* Called before each communicator is made, when set: devmirror.h makes its
 * device current there, as a program calls cudaSetDevice before
 * ncclCommInitRank. */
static void (*tm_before_init)(void);

/* A communicator over the members of m (unique id from m's rank 0). */
static inline ncclComm_t tm_comm_over_cfg(MPI_Comm m, ncclConfig_t *cfg) {
  int r, n;
  if (tm_before_init) tm_before_init();
  MPI_Comm_rank(m, &r);
  MPI_Comm_size(m, &n);
  ncclUniqueId id;
  if (r == 0) NCCL_OK(ncclGetUniqueId(&id));
  MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, m);
  ncclComm_t c = NULL;
  ncclResult_t res = ncclCommInitRankConfig(&c, n, id, r, cfg);
  if (res == ncclInProgress) { /* nonblocking: completes on polls */
    ncclResult_t e = ncclInProgress;
    while (e == ncclInProgress) NCCL_OK(ncclCommGetAsyncError(c, &e));
    res = e;
  }
  NCCL_OK(res);
  return c;
}

static inline ncclComm_t tm_comm_over(MPI_Comm m) { return tm_comm_over_cfg(m, NULL); }
static inline ncclComm_t tm_comm_world(void) { return tm_comm_over(MPI_COMM_WORLD); }

#endif
