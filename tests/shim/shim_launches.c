/* shim_launches.c — how many NCCL launches one compressed call issues (issue
 * 33), read from the host NCCL's counter (hostnccl_get_launches, over every
 * communicator of the process: hier's sub-communicators included).
 *
 *   mpirun -np N shim_launches COUNT...
 *
 * For each COUNT (fp32 elements): three warm-up all-reduces of that size
 * (the check, staging growth and its agreements happen there), then one
 * more, whose launches rank 0 prints as "launches COUNT N"; every rank
 * checks that the result is the exact sum (inputs small multiples of 1/4).
 * LAUNCHES_GROUP=1: each all-reduce alone in a user group (ncclGroupStart,
 * the call, ncclGroupEnd: tests/layers/callpath.sh's grouped routes);
 * LAUNCHES_WARMUP=W: W warm-up calls instead of three (a group's staging
 * grows a group later than a call's).
 * Exits 1 on a wrong sum. Must not: assume any plan (the caller compares
 * the counts with the planner's and the model's). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "testmpi.h"

int hostnccl_get_launches(void *comm, uint64_t *launches);

static float val(int r, size_t i) { return (float)((int)((i * 5 + (size_t)r * 3) % 9) - 4) * 0.25f; }

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank, n, bad = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  ncclComm_t comm = tm_comm_world();
  const char *g = getenv("LAUNCHES_GROUP");
  int grouped = g && atoi(g) > 0;
  const char *wu = getenv("LAUNCHES_WARMUP");
  int warm = wu && atoi(wu) > 0 ? atoi(wu) : 3;
  for (int a = 1; a < argc; a++) {
    size_t count = strtoull(argv[a], NULL, 0);
    float *buf = malloc(count * sizeof *buf);
    if (!buf) MPI_Abort(MPI_COMM_WORLD, 2);
    uint64_t before = 0, after = 0;
    for (int it = 0; it <= warm; it++) {
      for (size_t i = 0; i < count; i++) buf[i] = val(rank, i);
      if (it == warm) hostnccl_get_launches(NULL, &before);
      if (grouped) NCCL_OK(ncclGroupStart());
      NCCL_OK(ncclAllReduce(buf, buf, count, ncclFloat32, ncclSum, comm, NULL));
      if (grouped) NCCL_OK(ncclGroupEnd());
      if (it == warm) hostnccl_get_launches(NULL, &after);
      for (size_t i = 0; i < count; i++) {
        float want = 0;
        for (int q = 0; q < n; q++) want += val(q, i);
        if (buf[i] != want && bad++ < 3)
          fprintf(stderr, "rank %d count %zu [%zu] = %g, want %g\n", rank, count, i, buf[i], want);
      }
    }
    if (rank == 0) printf("launches %zu %llu\n", count, (unsigned long long)(after - before));
    free(buf);
  }
  ncclCommDestroy(comm);
  MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  MPI_Finalize();
  return bad != 0;
}
