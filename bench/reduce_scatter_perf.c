/* reduce_scatter_perf.c — nccl-tests' reduce_scatter_perf: a row of `count`
 * elements (rounded down to a multiple of the rank count n) is reduced and
 * rank r receives elements [r*count/n, (r+1)*count/n); in place, recvbuff is
 * that shard of sendbuff. busbw = algbw * (n-1)/n (harness: perf_bench.c). */
#include "perf_bench.h"

static size_t round_n(size_t count, int nranks) { return count / (size_t)nranks * (size_t)nranks; }
static size_t shard(size_t count, int nranks) { return count / (size_t)nranks; }
static size_t at_shard(size_t count, int rank, int nranks) { return (size_t)rank * (count / (size_t)nranks); }
static double bus(int n) { return (double)(n - 1) / n; }
static ncclResult_t run(const void *send, void *recv, size_t count, ncclDataType_t t, ncclRedOp_t op,
                        ncclComm_t comm, cudaStream_t s) {
  int n = 1;
  ncclResult_t r = ncclCommCount(comm, &n);
  if (r != ncclSuccess) return r;
  return ncclReduceScatter(send, recv, count / (size_t)n, t, op, comm, s);
}

int main(int argc, char **argv) {
  static const perf_coll_t coll = {"reduce_scatter_perf", round_n, shard, at_shard, at_shard, bus, run};
  return perf_bench_main(argc, argv, &coll);
}
