/* allreduce_perf.c — nccl-tests' all_reduce_perf: every rank reduces `count`
 * elements into `count` elements (harness: perf_bench.c). */
#include "perf_bench.h"

static size_t same(size_t count, int nranks) { (void)nranks; return count; }
static size_t zero(size_t count, int rank, int nranks) { (void)count; (void)rank; (void)nranks; return 0; }
static double bus(int n) { return 2.0 * (n - 1) / n; }
static ncclResult_t run(const void *send, void *recv, size_t count, ncclDataType_t t, ncclRedOp_t op,
                        ncclComm_t comm, cudaStream_t s) {
  return ncclAllReduce(send, recv, count, t, op, comm, s);
}

int main(int argc, char **argv) {
  static const perf_coll_t coll = {"allreduce_perf", same, same, zero, zero, bus, run};
  return perf_bench_main(argc, argv, &coll);
}
