/* tpcheck.h — what the two-phase test programs (shim_twophase.c, shim_ef.c)
 * share: the rank, the communicator and the wire format under test, a
 * failure counter with the first messages printed, the cross-rank bit
 * comparison, and main() around a command dispatcher (MPI up, one
 * communicator over MPI_COMM_WORLD, every rank's status combined). */
#ifndef NSC_TPCHECK_H
#define NSC_TPCHECK_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testmpi.h"

static int rank, nranks, fails;
static ncclComm_t comm;
static const char *fmt; /* NCCLSHIM_COMPRESS, fp16 when unset */

#define EXPECT(cond, ...)                                          \
  do {                                                             \
    if (!(cond)) {                                                 \
      if (fails++ < 10) {                                          \
        fprintf(stderr, "rank %d: ", rank);                        \
        fprintf(stderr, __VA_ARGS__);                              \
        fputc('\n', stderr);                                       \
      }                                                            \
    }                                                              \
  } while (0)

static inline uint32_t f2u(float x) { uint32_t u; memcpy(&u, &x, 4); return u; }

/* Every rank holds the same bits: compare a hash's min and max. */
static inline int identical(const float *x, size_t n) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; i++) h = (h ^ f2u(x[i])) * 1099511628211ull;
  uint64_t lo, hi;
  MPI_Allreduce(&h, &lo, 1, MPI_UINT64_T, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(&h, &hi, 1, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD);
  return lo == hi;
}

/* run(cmd, argc, argv) returns 0 on success; the job exits non-zero if any rank failed. */
static inline int tp_main(int argc, char **argv, const char *def, int (*run)(const char *, int, char **)) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);
  fmt = getenv("NCCLSHIM_COMPRESS");
  if (!fmt) fmt = "fp16";
  comm = tm_comm_world();
  int rc = run(argc > 1 ? argv[1] : def, argc, argv), any = 0;
  MPI_Allreduce(&rc, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  ncclCommDestroy(comm);
  MPI_Finalize();
  return any;
}

#endif
