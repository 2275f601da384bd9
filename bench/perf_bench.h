/* perf_bench.h — what one nccl-tests-style benchmark tells the shared harness
 * (perf_bench.c) about its collective, as nccl-tests' struct testColl does:
 * how to call it, how many elements each rank receives and where, and the
 * bus bandwidth factor. `count` is always the total element count of a row
 * (what its size column says). */
#ifndef PERF_BENCH_H
#define PERF_BENCH_H

#include <nccl.h>
#include <stddef.h>

typedef struct {
  const char *name; /* "allreduce_perf" */
  /* The count a row of `count` elements really uses (reduce-scatter: a
   * multiple of the rank count). */
  size_t (*round_count)(size_t count, int nranks);
  /* Elements each rank receives (the count column). */
  size_t (*recv_count)(size_t count, int nranks);
  /* In place: recvbuff = sendbuff + this many elements. */
  size_t (*inplace_offset)(size_t count, int rank, int nranks);
  /* recvbuff[0] is element `result_first` of the full reduction. */
  size_t (*result_first)(size_t count, int rank, int nranks);
  double (*bus_factor)(int nranks);
  ncclResult_t (*run)(const void *send, void *recv, size_t count, ncclDataType_t t, ncclRedOp_t op,
                      ncclComm_t comm, cudaStream_t s);
} perf_coll_t;

/* The whole benchmark: MPI init, arguments, the table, the exit status. */
int perf_bench_main(int argc, char **argv, const perf_coll_t *coll);

#endif
