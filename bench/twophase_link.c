/* twophase_link.c — the emulated link is fair to both algorithms: an fp32
 * all-reduce done as two phases over ncclSend/ncclRecv (scatter the chunks,
 * sum, gather) against NCCL's fp32 ring all-reduce, same bytes on the wire
 * per rank (2(n-1)/n of the buffer), side by side. On the host NCCL with
 * HOSTNCCL_LINK_GBPS set the two must take the same time within 10 %: each
 * rank has one link, so the n-1 concurrent messages of a phase cannot go
 * faster than the wire. No shim involved (run without LD_PRELOAD).
 *
 *   twophase_link [MiB] [iterations]     (default 16 MiB, 3)
 *
 * Prints one line per algorithm (best time over the iterations, rank 0's
 * view after a barrier) and "ratio twophase/ring R". Must not: assert
 * anything about time (a benchmark, not a test). */
#include <mpi.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define OK(call) do { ncclResult_t r_ = (call); if (r_ != ncclSuccess) { \
  fprintf(stderr, "%s failed: %d\n", #call, (int)r_); MPI_Abort(MPI_COMM_WORLD, 2); } } while (0)

static int rank, n;
static ncclComm_t comm;

static void chunk(size_t count, int c, size_t *off, size_t *len) {
  size_t base = count / (size_t)n, rem = count % (size_t)n;
  *off = (size_t)c * base + ((size_t)c < rem ? (size_t)c : rem);
  *len = base + ((size_t)c < rem);
}

/* fp32 two-phase: chunk j to rank j, sum in rank order, the owner's chunk to everyone. */
static void twophase(const float *x, float *y, size_t count, float *slots) {
  size_t off, len, roff, rlen;
  chunk(count, rank, &roff, &rlen);
  OK(ncclGroupStart());
  for (int j = 0; j < n; j++) {
    if (j == rank) continue;
    chunk(count, j, &off, &len);
    OK(ncclSend(x + off, len, ncclFloat32, j, comm, NULL));
    OK(ncclRecv(slots + (size_t)j * rlen, rlen, ncclFloat32, j, comm, NULL));
  }
  OK(ncclGroupEnd());
  memcpy(slots + (size_t)rank * rlen, x + roff, rlen * 4);
  for (size_t i = 0; i < rlen; i++) {
    float s = slots[i];
    for (int j = 1; j < n; j++) s += slots[(size_t)j * rlen + i];
    y[roff + i] = s;
  }
  OK(ncclGroupStart());
  for (int j = 0; j < n; j++) {
    if (j == rank) continue;
    chunk(count, j, &off, &len);
    OK(ncclSend(y + roff, rlen, ncclFloat32, j, comm, NULL));
    OK(ncclRecv(y + off, len, ncclFloat32, j, comm, NULL));
  }
  OK(ncclGroupEnd());
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  size_t count = (size_t)(argc > 1 ? atof(argv[1]) : 16) * (1 << 20) / 4;
  int iters = argc > 2 ? atoi(argv[2]) : 3;
  ncclUniqueId id;
  if (rank == 0) OK(ncclGetUniqueId(&id));
  MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
  OK(ncclCommInitRank(&comm, n, id, rank));
  float *x = malloc(count * 4), *y = malloc(count * 4), *z = malloc(count * 4);
  float *slots = malloc((count / (size_t)n + 1) * (size_t)n * 4);
  for (size_t i = 0; i < count; i++) x[i] = (float)((i + (size_t)rank) % 7);
  double best[2] = {1e30, 1e30};
  for (int it = 0; it < iters; it++)
    for (int a = 0; a < 2; a++) {
      MPI_Barrier(MPI_COMM_WORLD);
      double t0 = MPI_Wtime();
      if (a == 0) OK(ncclAllReduce(x, y, count, ncclFloat32, ncclSum, comm, NULL));
      else twophase(x, z, count, slots);
      MPI_Barrier(MPI_COMM_WORLD);
      double dt = MPI_Wtime() - t0;
      if (dt < best[a]) best[a] = dt;
    }
  int same = memcmp(y, z, count * 4) == 0; /* small integers: both sums exact */
  if (rank == 0) {
    printf("# %d ranks, %.1f MiB fp32, wire bytes per rank %.1f MiB (both), best of %d\n", n,
           count * 4.0 / (1 << 20), 2.0 * (n - 1) / n * count * 4.0 / (1 << 20), iters);
    printf("ring     %9.1f ms\ntwophase %9.1f ms\nratio twophase/ring %.3f\n", best[0] * 1e3, best[1] * 1e3,
           best[1] / best[0]);
    printf("results %s\n", same ? "identical" : "DIFFER");
  }
  OK(ncclCommDestroy(comm));
  MPI_Finalize();
  return same ? 0 : 1;
}
