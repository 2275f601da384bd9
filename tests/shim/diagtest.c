/* diagtest.c — a training loop with a known bottleneck, for the diagnosis
 * (tests/t/55-diag.sh): each pass all-reduces B buckets of E floats at fixed
 * addresses (fp32 Sum, like DDP's gradient buckets), each after C µs of CPU
 * work; between passes the "input" sleeps S µs. Optionally DDP's first
 * whole-model pass, an int32 used-map after each pass, a slow rank (more
 * work on one rank) and a small metric all-reduce per pass, DDP's buffer
 * broadcast at the start of each pass (BatchNorm statistics) and a slow
 * rank whose extra work comes before it.
 *
 *   diagtest [-p PASSES] [-b BUCKETS] [-e ELEMS] [-c WORK_US] [-s SLEEP_US]
 *            [-W] [-u] [-m] [-R] [-B] [-H] [-r RANK [-x EXTRA_US] [-X EXTRA_US]] [-o FILE]
 *     -W  a first whole-model pass (one bucket of B*E floats), as DDP's first iteration
 *     -u  an int32 Sum of 16 elements after each pass (find_unused_parameters' used-map)
 *     -m  a 1-element fp32 metric all-reduce after each pass
 *     -B  an ncclBcast of 16 floats from rank 0 at the start of each pass (DDP's
 *         broadcast_buffers, what ProcessGroupNCCL's broadcast calls)
 *     -x  the slow rank's extra work before each bucket; -X before each pass
 *         (before its broadcast): the others then wait in the broadcast
 *     -R  reduce-scatter the buckets (FSDP2 / ZeRO) instead: each rank's shard
 *         of E/n floats (E a multiple of the ranks) into a buffer of its own
 *     -H  the buckets in bf16 (DDP on a model cast to bf16): the same values, which bf16
 *         holds exactly, half the bytes
 *     -o  rank 0 writes what it built in: passes, CPU work and sleep per pass (µs)
 * CPU work is measured on the thread's CPU clock (it takes C µs of CPU,
 * however long the machine makes it take). Results are checked exactly
 * (integers times powers of two). With SHIMTEST_DEVICE=1 the buffers are
 * mirrored in device memory of the CUDA driver double (tests/shim/devmirror.h):
 * the shim takes its CUDA backend. Exit 0 on success. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "testmpi.h"
#include "devmirror.h" /* SHIMTEST_DEVICE=1: device buffers on the CUDA driver double */

static long long thread_cpu_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return (long long)t.tv_sec * 1000000 + t.tv_nsec / 1000;
}

static volatile double sink;

/* -H: the fp32 values (small integers) as bf16, exactly, and back. */
static void to_bf16(const float *x, uint16_t *h, size_t n) {
  for (size_t i = 0; i < n; i++) {
    uint32_t u;
    memcpy(&u, &x[i], 4);
    h[i] = (uint16_t)(u >> 16);
  }
}
static void from_bf16(const uint16_t *h, float *x, size_t n) {
  for (size_t i = 0; i < n; i++) {
    uint32_t u = (uint32_t)h[i] << 16;
    memcpy(&x[i], &u, 4);
  }
}

static void work(long long us) {
  if (us <= 0) return;
  long long end = thread_cpu_us() + us;
  double x = 1.0;
  while (thread_cpu_us() < end)
    for (int i = 0; i < 200; i++) x = x * 1.0000001 + 1e-9;
  sink = x;
}

int main(int argc, char **argv) {
  int passes = 12, buckets = 4, whole = 0, used = 0, metric = 0, slow = -1, rs = 0, bcast = 0, half = 0;
  long long elems = 65536, work_us = 0, sleep_us = 0, extra_us = 0, pass_extra_us = 0;
  const char *out = NULL;
  int o;
  while ((o = getopt(argc, argv, "p:b:e:c:s:WumRBHr:x:X:o:")) != -1) {
    switch (o) {
    case 'p': passes = atoi(optarg); break;
    case 'b': buckets = atoi(optarg); break;
    case 'e': elems = atoll(optarg); break;
    case 'c': work_us = atoll(optarg); break;
    case 's': sleep_us = atoll(optarg); break;
    case 'W': whole = 1; break;
    case 'u': used = 1; break;
    case 'm': metric = 1; break;
    case 'R': rs = 1; break;
    case 'r': slow = atoi(optarg); break;
    case 'x': extra_us = atoll(optarg); break;
    case 'X': pass_extra_us = atoll(optarg); break;
    case 'B': bcast = 1; break;
    case 'H': half = 1; break;
    case 'o': out = optarg; break;
    default: fprintf(stderr, "usage: see the header of tests/shim/diagtest.c\n"); return 2;
    }
  }
  (void)dm_group_start; /* devmirror.h's, unused here */
  (void)dm_group_end;
  MPI_Init(&argc, &argv);
  int rank, n;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  ncclComm_t comm = tm_comm_world();
  float *b = malloc((size_t)buckets * (size_t)elems * sizeof *b);
  int32_t *um = calloc(16, sizeof *um);
  float *mt = calloc(1, sizeof *mt);
  float bn[16];
  float *sh = malloc((size_t)buckets * (size_t)elems * sizeof *sh);
  size_t all = (size_t)buckets * (size_t)elems;
  uint16_t *hb = half ? malloc(all * 2) : NULL, *hsh = half ? malloc(all * 2) : NULL;
  if (!b || !um || !mt || !sh || (half && (!hb || !hsh)) || (rs && (elems % n || whole))) MPI_Abort(MPI_COMM_WORLD, 2);
  ncclDataType_t gdt = half ? ncclBfloat16 : ncclFloat32;
  size_t esz = half ? 2 : 4;
  char *gb = half ? (char *)hb : (char *)b, *gsh = half ? (char *)hsh : (char *)sh; /* what NCCL reduces */
  long long mywork = work_us + (rank == slow ? extra_us : 0);
  int bad = 0;
  for (int p = 0; p < passes; p++) {
    for (long long i = 0; i < (long long)buckets * elems; i++) b[i] = (float)((rank + 1) * ((i % 7) + 1));
    float want_mul = (float)(n * (n + 1) / 2);
    if (rank == slow) work(pass_extra_us);
    if (bcast) {
      for (int i = 0; i < 16; i++) bn[i] = (float)(rank * 100 + p + i);
      NCCL_OK(ncclBcast(bn, 16, ncclFloat32, 0, comm, NULL));
      for (int i = 0; i < 16; i++) bad += bn[i] != (float)(p + i);
    }
    if (half) to_bf16(b, hb, all);
    if (whole && p == 0) {
      work(mywork * buckets);
      NCCL_OK(ncclAllReduce(gb, gb, all, gdt, ncclSum, comm, NULL));
    } else {
      for (int k = 0; k < buckets; k++) {
        work(mywork);
        char *x = gb + esz * (size_t)k * (size_t)elems;
        if (rs) NCCL_OK(ncclReduceScatter(x, gsh + esz * (size_t)k * (size_t)(elems / n), (size_t)(elems / n), gdt,
                                          ncclSum, comm, NULL));
        else NCCL_OK(ncclAllReduce(x, x, (size_t)elems, gdt, ncclSum, comm, NULL));
      }
    }
    if (half) {
      from_bf16(hb, b, all);
      if (rs) from_bf16(hsh, sh, (size_t)buckets * (size_t)(elems / n));
    }
    for (long long i = 0; i < (long long)buckets * elems; i++) /* rs: the shards, at their place in the buckets */
      if (rs ? (i % elems) / (elems / n) == rank && sh[(i / elems) * (elems / n) + i % (elems / n)] !=
                                                        want_mul * (float)((i % 7) + 1)
             : b[i] != want_mul * (float)((i % 7) + 1))
        bad++;
    if (used) NCCL_OK(ncclAllReduce(um, um, 16, ncclInt32, ncclSum, comm, NULL));
    if (metric) {
      mt[0] = 1.0f;
      NCCL_OK(ncclAllReduce(mt, mt, 1, ncclFloat32, ncclSum, comm, NULL));
      if (mt[0] != (float)n) bad++;
    }
    if (sleep_us > 0) usleep((useconds_t)sleep_us); /* the "DataLoader" */
  }
  if (rank == 0 && out) {
    FILE *f = fopen(out, "w");
    if (f) {
      fprintf(f, "{\"passes\":%d,\"buckets\":%d,\"elems\":%lld,\"work_us_per_pass\":%lld,\"sleep_us_per_pass\":%lld,"
                 "\"nranks\":%d,\"slow_rank\":%d,\"extra_us_per_pass\":%lld,\"bcast\":%d,\"esz\":%d}\n",
              passes, buckets, elems, work_us * buckets, sleep_us, n, slow, extra_us * buckets + pass_extra_us, bcast,
              half ? 2 : 4);
      fclose(f);
    }
  }
  ncclCommDestroy(comm);
  free(b);
  free(um);
  free(mt);
  free(sh);
  free(hb);
  free(hsh);
  MPI_Finalize();
  if (bad) fprintf(stderr, "rank %d: %d wrong values\n", rank, bad);
  return bad ? 1 : 0;
}
