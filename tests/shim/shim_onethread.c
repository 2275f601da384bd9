/* shim_onethread.c — one thread drives several ranks (issue 23 defect 1,
 * issue 37): groups holding one share of calls per communicator, as
 * single-process multi-GPU programs (nccl-tests -g N) and one-thread drivers
 * of several host communicators make them. NCCL needs a thread's
 * communicators in one group, and nothing the shim adds after the group end
 * (its configuration check with hier's splits, accumulation agreements,
 * grouped two-phase calls, staging settles) may wait for one communicator's
 * peers before the others' work is issued.
 *
 *   shim_onethread [--host] [--stream S] [NDEV]   no MPI: ncclCommInitAll of NDEV ranks (default 2)
 *   mpirun -np P shim_onethread [--host] [--stream S] L
 *                                    each process drives L ranks of one P*L-rank
 *                                    clique (rank = world rank * L + i; made by L
 *                                    threads that only initialise, as NCCL allows;
 *                                    the socket transport), so P emulated nodes
 *                                    of L ranks run hier
 *
 * Streams (--stream): "created" (default: a non-blocking stream per device),
 * "legacy" (handle 0, the current context's legacy default stream) or "ptd"
 * (CU_STREAM_PER_THREAD, 0x2: this thread's per-thread default stream of the
 * current context); the current context is the device's before each call,
 * as cudaSetDevice would make it. Handles 0 and 0x2 name a stream only
 * relative to the thread and context they are used from: the shim's work
 * after a group end runs on threads of its own, one per device.
 *
 * Buffers: device memory of the CUDA driver test double (a device per rank of
 * the process, CUDADRV_DEVICES >= L; libcuda.so.1 is dlopen'ed, found by this
 * program's run path), or host memory (--host: the shim's host backend, where
 * no CUDA context tells communicators apart; no libcuda.so.1 is loaded, so
 * the host NCCL runs calls on the calling thread).
 *
 * Each of 6 groups: per communicator two small all-reduces (fused), one large
 * (two-phase or hier by the settings) and an out-of-place reduce-scatter of
 * the large one; the first call of the program is inside the first group.
 * Sums exact (inputs small multiples of 1/4). Prints TAP lines; exits 1 on a
 * failed check (a hang is the caller's timeout). */
#include <cuda.h>
#include <dlfcn.h>
#include <mpi.h>
#include <nccl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define DRV(call)                                                                        \
  do {                                                                                   \
    CUresult r_ = (call);                                                                \
    if (r_ != CUDA_SUCCESS) {                                                            \
      fprintf(stderr, "%s failed (%d)\n", #call, (int)r_);                               \
      exit(2);                                                                           \
    }                                                                                    \
  } while (0)
#define NCCL(call)                                                                       \
  do {                                                                                   \
    ncclResult_t r_ = (call);                                                            \
    if (r_ != ncclSuccess) {                                                             \
      fprintf(stderr, "%s failed: %s\n", #call, ncclGetErrorString(r_));                 \
      exit(2);                                                                           \
    }                                                                                    \
  } while (0)

enum { MAXDEV = 8, M = 4, RS = 3, STEPS = 6 };
static const size_t count[M] = {1 << 12, 1 << 12, 1 << 18, 1 << 18}; /* RS: per rank * nranks */

static float val(int rank, int m, int step, size_t i) { return (float)((int)((rank * 7 + m * 3 + step + i) % 13) - 6) * 0.25f; }

static int host; /* --host: buffers in host memory */
static const char *stream_kind = "created"; /* --stream */
static CUcontext ctx[MAXDEV];
static struct {
  CUresult (*Init)(unsigned);
  CUresult (*DevicePrimaryCtxRetain)(CUcontext *, CUdevice);
  CUresult (*CtxSetCurrent)(CUcontext);
  CUresult (*StreamCreate)(CUstream *, unsigned);
  CUresult (*StreamSynchronize)(CUstream);
  CUresult (*MemAlloc)(CUdeviceptr *, size_t);
  CUresult (*MemcpyHtoD)(CUdeviceptr, const void *, size_t);
  CUresult (*MemcpyDtoH)(void *, CUdeviceptr, size_t);
} cu;

static void load_driver(void) {
  void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
  if (!h) { /* a sanitizer's dlopen interceptor searches its own run path: name it beside this program */
    char exe[4096], path[4200];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
      exe[n] = 0;
      char *slash = strrchr(exe, '/');
      if (slash) *slash = 0;
      snprintf(path, sizeof path, "%s/../lib/cudadrv/libcuda.so.1", exe);
      h = dlopen(path, RTLD_NOW | RTLD_GLOBAL);
    }
  }
  if (!h) {
    fprintf(stderr, "libcuda.so.1: %s\n", dlerror());
    exit(2);
  }
  const char *names[] = {"cuInit", "cuDevicePrimaryCtxRetain", "cuCtxSetCurrent", "cuStreamCreate", "cuStreamSynchronize",
                         "cuMemAlloc_v2", "cuMemcpyHtoD_v2", "cuMemcpyDtoH_v2"};
  void **slot = (void **)&cu;
  for (size_t i = 0; i < sizeof names / sizeof *names; i++)
    if (!(slot[i] = dlsym(h, names[i]))) {
      fprintf(stderr, "libcuda.so.1 lacks %s\n", names[i]);
      exit(2);
    }
}

static void *alloc(size_t bytes) {
  if (host) return malloc(bytes);
  CUdeviceptr p;
  DRV(cu.MemAlloc(&p, bytes));
  return (void *)p;
}
static void put(void *dst, const float *src, size_t bytes) {
  if (host) memcpy(dst, src, bytes);
  else DRV(cu.MemcpyHtoD((CUdeviceptr)dst, src, bytes));
}
static void get(float *dst, const void *src, size_t bytes) {
  if (host) memcpy(dst, src, bytes);
  else DRV(cu.MemcpyDtoH(dst, (CUdeviceptr)src, bytes));
}
static void use(int d) {
  if (!host) DRV(cu.CtxSetCurrent(ctx[d]));
}

typedef struct {
  ncclComm_t *out;
  int nranks, rank, dev;
  ncclUniqueId id;
} init_arg;

static void *init_one(void *p) { /* a thread that only makes its communicator */
  init_arg *a = p;
  use(a->dev);
  NCCL(ncclCommInitRank(a->out, a->nranks, a->id, a->rank));
  return NULL;
}

int main(int argc, char **argv) {
  int a = 1;
  if (a < argc && !strcmp(argv[a], "--host")) host = 1, a++;
  if (a + 1 < argc && !strcmp(argv[a], "--stream")) stream_kind = argv[a + 1], a += 2;
  int legacy = !strcmp(stream_kind, "legacy"), ptd = !strcmp(stream_kind, "ptd");
  if (!legacy && !ptd && strcmp(stream_kind, "created")) return 2;
  int nloc = a < argc ? atoi(argv[a]) : 2, failures = 0;
  if (nloc < 1 || nloc > MAXDEV) return 2;
  int mpi = getenv("OMPI_COMM_WORLD_SIZE") != NULL, wrank = 0, wsize = 1;
  if (mpi) {
    int prov;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &prov);
    MPI_Comm_rank(MPI_COMM_WORLD, &wrank);
    MPI_Comm_size(MPI_COMM_WORLD, &wsize);
  }
  const int nranks = wsize * nloc, base = wrank * nloc;
  CUstream s[MAXDEV] = {0};
  void *buf[MAXDEV][M + 1];
  if (!host) {
    load_driver();
    DRV(cu.Init(0));
  }
  for (int d = 0; d < nloc; d++) {
    if (!host) {
      DRV(cu.DevicePrimaryCtxRetain(&ctx[d], d));
      use(d);
      if (legacy || ptd) s[d] = ptd ? CU_STREAM_PER_THREAD : NULL;
      else DRV(cu.StreamCreate(&s[d], CU_STREAM_NON_BLOCKING));
    } else if (ptd) {
      s[d] = CU_STREAM_PER_THREAD; /* a handle only: host memory never names a stream */
    }
    for (int m = 0; m <= M; m++) buf[d][m] = alloc((m == M ? count[RS] / (size_t)nranks : count[m]) * 4);
  }
  ncclComm_t comms[MAXDEV];
  if (!mpi) {
    int devs[MAXDEV];
    for (int d = 0; d < nloc; d++) devs[d] = d;
    NCCL(ncclCommInitAll(comms, nloc, devs));
  } else {
    init_arg ia[MAXDEV];
    pthread_t th[MAXDEV];
    ncclUniqueId id;
    if (wrank == 0) NCCL(ncclGetUniqueId(&id));
    MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
    for (int d = 0; d < nloc; d++) {
      ia[d] = (init_arg){&comms[d], nranks, base + d, d, id};
      if (pthread_create(&th[d], NULL, init_one, &ia[d])) return 2;
    }
    for (int d = 0; d < nloc; d++) pthread_join(th[d], NULL);
  }
  const size_t shard = count[RS] / (size_t)nranks;
  float *h = malloc(count[M - 1] * 4);
  for (int step = 0; step < STEPS; step++) {
    for (int d = 0; d < nloc; d++) {
      use(d);
      for (int m = 0; m < M; m++) {
        for (size_t i = 0; i < count[m]; i++) h[i] = val(base + d, m, step, i);
        put(buf[d][m], h, count[m] * 4);
      }
    }
    NCCL(ncclGroupStart());
    for (int d = 0; d < nloc; d++) {
      use(d);
      for (int m = 0; m < RS; m++)
        NCCL(ncclAllReduce(buf[d][m], buf[d][m], count[m], ncclFloat32, ncclSum, comms[d], s[d]));
      NCCL(ncclReduceScatter(buf[d][RS], buf[d][M], shard, ncclFloat32, ncclSum, comms[d], s[d]));
    }
    NCCL(ncclGroupEnd());
    for (int d = 0; d < nloc; d++) {
      use(d);
      if (!host) DRV(cu.StreamSynchronize(s[d]));
      for (int m = 0; m < M; m++) {
        size_t n = m == RS ? shard : count[m], off = m == RS ? (size_t)(base + d) * shard : 0, bad = 0;
        get(h, buf[d][m == RS ? M : m], n * 4);
        for (size_t i = 0; i < n; i++) {
          float want = 0;
          for (int q = 0; q < nranks; q++) want += val(q, m, step, off + i);
          bad += h[i] != want;
        }
        if (bad) {
          printf("not ok - step %d rank %d call %d: %zu of %zu wrong\n", step, base + d, m, bad, n);
          failures++;
        }
      }
    }
  }
  for (int d = 0; d < nloc; d++) NCCL(ncclCommDestroy(comms[d]));
  free(h);
  if (mpi) {
    MPI_Allreduce(MPI_IN_PLACE, &failures, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Finalize();
  }
  if (wrank == 0)
    printf("%s - one thread per process drives %d rank%s of %d (%s, %s memory, %s streams), %d groups of %d calls "
           "per communicator: no hang, every sum exact\n",
           failures ? "not ok" : "ok", nloc, nloc > 1 ? "s" : "", nranks, mpi ? "threads init" : "ncclCommInitAll",
           host ? "host" : "device", stream_kind, STEPS, M);
  return failures != 0;
}
