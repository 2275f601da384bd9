/* devmirror.h — SHIMTEST_DEVICE=1 runs a test program's all-reduces on
 * device memory of the CUDA driver test double (tests/cudadrv, on
 * LD_LIBRARY_PATH), unchanged otherwise. Included after nccl.h by a test
 * program, it replaces ncclAllReduce, ncclGroupStart and ncclGroupEnd with
 * wrappers that give each host buffer a device mirror (the same one for the
 * same host address, so buffer identity and in-place calls are preserved),
 * copy the host contents in on the call's stream (NULL: a stream of the
 * calling thread's own) before the call, pass the
 * device pointers to NCCL (the shim then takes its CUDA backend), and copy
 * both buffers back after the call, or after the outermost group end inside
 * a group. The test body keeps reading and writing host memory.
 *
 * SHIMTEST_SYNC_AUDIT=1 brackets every NCCL call with cudadrv_region, so the
 * double counts (and fails the run on) synchronising driver calls the shim
 * makes inside a user's collective.
 *
 * Each rank uses device rank % count, made current on each calling thread
 * (also before each communicator is made, through testmpi.h's hook);
 * mirrors are shared by the threads, groups are per thread. For
 * blocking communicators only (a copy back needs the work on the stream).
 * Must not: be used without MPI initialised, or free a mirror (host
 * addresses are reused by malloc; a mirror covering a range is reused). */
#ifndef NSC_DEVMIRROR_H
#define NSC_DEVMIRROR_H

#include <cuda.h>
#include <dlfcn.h>
#include <mpi.h>
#include <nccl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DM_DRIVER(X)                                                                     \
  X(cuInit) X(cuDeviceGetCount) X(cuDevicePrimaryCtxRetain) X(cuCtxSetCurrent)           \
  X(cuMemAlloc) X(cuMemcpyHtoDAsync) X(cuMemcpyDtoHAsync) X(cuStreamSynchronize) X(cuStreamCreate)
#define DM_FIELD(f) __typeof__(f) *f;
typedef struct {
  const char *host;
  size_t bytes;
  CUdeviceptr dev;
} dm_map;
static struct {
  int state; /* 0 unknown, 1 on, -1 off */
  DM_DRIVER(DM_FIELD)
  CUcontext ctx;
  dm_map *maps; /* under dm_lock */
  size_t nmaps, capmaps;
  void (*region)(int); /* SHIMTEST_SYNC_AUDIT=1: cudadrv_region around NCCL calls */
} dm;
static pthread_mutex_t dm_lock = PTHREAD_MUTEX_INITIALIZER;
/* Per thread: group depth and the copies back after the outermost end. */
typedef struct { char *host; CUdeviceptr dev; size_t bytes; cudaStream_t s; } dm_back;
static __thread struct {
  int depth;
  dm_back *back;
  size_t nback, capback;
} dmt;
#undef DM_FIELD
#define DM_STR_(x) #x
#define DM_STR(x) DM_STR_(x)

static void dm_die(const char *what, int r) {
  fprintf(stderr, "devmirror: %s failed (%d)\n", what, r);
  MPI_Abort(MPI_COMM_WORLD, 3);
}
#define DM_CK(call) do { CUresult r_ = (call); if (r_ != CUDA_SUCCESS) dm_die(#call, (int)r_); } while (0)

static int dm_on(void) {
  pthread_mutex_lock(&dm_lock);
  int st = dm.state;
  pthread_mutex_unlock(&dm_lock);
  if (st) {
    if (st > 0) DM_CK(dm.cuCtxSetCurrent(dm.ctx)); /* any thread */
    return st > 0;
  }
  pthread_mutex_lock(&dm_lock);
  if (dm.state) { /* another thread won */
    pthread_mutex_unlock(&dm_lock);
    return dm_on();
  }
  const char *e = getenv("SHIMTEST_DEVICE");
  if (!e || strcmp(e, "1")) {
    dm.state = -1;
    pthread_mutex_unlock(&dm_lock);
    return 0;
  }
  void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
  if (!h || !dlsym(h, "cudadrv_host_view")) dm_die("SHIMTEST_DEVICE=1: loading the CUDA driver test double", 0);
#define DM_LOAD(f) if (!(*(void **)&dm.f = dlsym(h, DM_STR(f)))) dm_die(DM_STR(f), 0);
  DM_DRIVER(DM_LOAD)
#undef DM_LOAD
  const char *audit = getenv("SHIMTEST_SYNC_AUDIT");
  if (audit && !strcmp(audit, "1")) *(void **)&dm.region = dlsym(h, "cudadrv_region");
  int rank = 0, n = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  DM_CK(dm.cuInit(0));
  DM_CK(dm.cuDeviceGetCount(&n));
  DM_CK(dm.cuDevicePrimaryCtxRetain(&dm.ctx, rank % n));
  DM_CK(dm.cuCtxSetCurrent(dm.ctx));
  dm.state = 1;
  pthread_mutex_unlock(&dm_lock);
  return 1;
}

/* The device address mirroring host [p, p+bytes). */
static CUdeviceptr dm_dev(const void *p, size_t bytes) {
  const char *c = p;
  pthread_mutex_lock(&dm_lock);
  for (size_t i = dm.nmaps; i-- > 0;)
    if (c >= dm.maps[i].host && c + bytes <= dm.maps[i].host + dm.maps[i].bytes) {
      CUdeviceptr d = dm.maps[i].dev + (CUdeviceptr)(c - dm.maps[i].host);
      pthread_mutex_unlock(&dm_lock);
      return d;
    }
  if (dm.nmaps == dm.capmaps) {
    dm.capmaps = dm.capmaps ? 2 * dm.capmaps : 64;
    dm.maps = realloc(dm.maps, dm.capmaps * sizeof *dm.maps);
  }
  dm_map m = {c, bytes ? bytes : 1, 0};
  DM_CK(dm.cuMemAlloc(&m.dev, m.bytes));
  dm.maps[dm.nmaps++] = m;
  pthread_mutex_unlock(&dm_lock);
  return m.dev;
}

static cudaStream_t dm_thread_stream(void) {
  static __thread CUstream own;
  const char *e = getenv("SHIMTEST_PTDS");
  if (e && !strcmp(e, "1")) return (cudaStream_t)CU_STREAM_PER_THREAD;
  if (!own) DM_CK(dm.cuStreamCreate(&own, CU_STREAM_NON_BLOCKING));
  return (cudaStream_t)own;
}

static size_t dm_esize(ncclDataType_t t) {
  switch (t) {
  case ncclInt8: case ncclUint8: case ncclFloat8e4m3: case ncclFloat8e5m2: return 1;
  case ncclFloat16: case ncclBfloat16: return 2;
  case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
  default: return 8;
  }
}

static void dm_copy_back(void) {
  for (size_t i = 0; i < dmt.nback; i++)
    DM_CK(dm.cuMemcpyDtoHAsync(dmt.back[i].host, dmt.back[i].dev, dmt.back[i].bytes, (CUstream)dmt.back[i].s));
  for (size_t i = 0; i < dmt.nback; i++) DM_CK(dm.cuStreamSynchronize((CUstream)dmt.back[i].s));
  dmt.nback = 0;
}

static void dm_later(const void *host, CUdeviceptr dev, size_t bytes, cudaStream_t s) {
  if (dmt.nback == dmt.capback) {
    dmt.capback = dmt.capback ? 2 * dmt.capback : 16;
    dmt.back = realloc(dmt.back, dmt.capback * sizeof *dmt.back);
  }
  dmt.back[dmt.nback++] = (dm_back){(char *)host, dev, bytes, s};
}

static ncclResult_t dm_allreduce(const void *s, void *r, size_t n, ncclDataType_t t, ncclRedOp_t op,
                                 ncclComm_t c, cudaStream_t st) {
  if (!dm_on() || (t < 0 || t >= ncclNumTypes)) return ncclAllReduce(s, r, n, t, op, c, st);
  /* NULL: a stream of this thread's own. Threads sharing the legacy stream
   * would serialise their communicators in different orders on different
   * ranks and deadlock, as on a GPU. SHIMTEST_PTDS=1 passes the per-thread
   * default stream's handle instead (the same value on every thread). */
  if (!st) st = dm_thread_stream();
  size_t bytes = n * dm_esize(t);
  CUdeviceptr ds = s ? dm_dev(s, bytes) : 0, dr = r ? dm_dev(r, bytes) : 0;
  if (s && bytes) DM_CK(dm.cuMemcpyHtoDAsync(ds, s, bytes, (CUstream)st));
  if (r && r != s && bytes) DM_CK(dm.cuMemcpyHtoDAsync(dr, r, bytes, (CUstream)st));
  if (dm.region) dm.region(1);
  ncclResult_t res = ncclAllReduce(s ? (void *)ds : NULL, r ? (void *)dr : NULL, n, t, op, c, st);
  if (dm.region) dm.region(0);
  if (s && bytes) dm_later(s, ds, bytes, st);
  if (r && r != s && bytes) dm_later(r, dr, bytes, st);
  if (!dmt.depth) dm_copy_back();
  return res;
}

static __attribute__((unused)) ncclResult_t dm_group_start(void) {
  ncclResult_t r = ncclGroupStart();
  if (r == ncclSuccess) dmt.depth++;
  return r;
}

static __attribute__((unused)) ncclResult_t dm_group_end(void) {
  int audit = dm.region && dm_on();
  if (audit) dm.region(1);
  ncclResult_t r = ncclGroupEnd();
  if (audit) dm.region(0);
  if (dmt.depth > 0 && --dmt.depth == 0 && dm_on()) dm_copy_back();
  return r;
}

/* Before a communicator is made (testmpi.h): this rank's device current on
 * the calling thread, as a program's cudaSetDevice before ncclCommInitRank,
 * so the shim sets its context up there and not inside a collective. */
static void dm_before_init(void) { (void)dm_on(); }
__attribute__((constructor)) static void dm_register(void) { tm_before_init = dm_before_init; }

#define ncclAllReduce(s, r, n, t, op, c, st) dm_allreduce(s, r, n, t, op, c, st)
#define ncclGroupStart() dm_group_start()
#define ncclGroupEnd() dm_group_end()

#endif
