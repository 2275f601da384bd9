/* test_cudadrv.c — unit tests of the CUDA driver test double itself
 * (tests/cudadrv), run by tests/t/15-cudadrv.sh: devices and contexts,
 * stream ordering (a missing wait gives a wrong result), events, the legacy
 * stream, capture invalidation in each capture mode, host access to device
 * memory crashing (in forked children), pointer attributes per memory kind,
 * kernels from the shim's fatbin with marshalled parameters, the counters.
 *
 * Prints one TAP-style line per check; exits 1 if any failed. Provokes
 * violations on purpose, so it resets the double's counters before exit.
 * Must not: assert timings beyond documented lower bounds (a host function
 * that sleeps 30 ms makes an elapsed time of at least 30 ms). */
#include <cuda.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cast.h"
#include "cu_abi.h"
#include "cudadrv_hooks.h"
#include "../tap.h"

extern const unsigned char nsc_fatbin[];
extern const size_t nsc_fatbin_size;


#define CK(call)                                                                         \
  do {                                                                                   \
    CUresult r_ = (call);                                                                \
    if (r_ != CUDA_SUCCESS) {                                                            \
      printf("not ok - %s returned %d (line %d)\n", #call, (int)r_, __LINE__);           \
      exit(1);                                                                           \
    }                                                                                    \
  } while (0)

static cudadrv_stats stats(void) {
  cudadrv_stats s;
  cudadrv_get_stats(&s);
  return s;
}

static CUcontext ctx0, ctx1;

static void sleep_ms(void *arg) {
  struct timespec t = {0, (long)(intptr_t)arg * 1000000L};
  nanosleep(&t, NULL);
}
/* Graph branches: one waits for the other's flag, a third node checks both. */
typedef struct {
  int flag, seen, after;
} branch_flag;
static void branch_wait(void *arg) {
  branch_flag *b = arg;
  for (int i = 0; i < 2000 && !__atomic_load_n(&b->flag, __ATOMIC_ACQUIRE); i++) sleep_ms((void *)(intptr_t)1);
  b->seen = __atomic_load_n(&b->flag, __ATOMIC_ACQUIRE);
}
static void branch_set(void *arg) { __atomic_store_n(&((branch_flag *)arg)->flag, 1, __ATOMIC_RELEASE); }
static void branch_after(void *arg) {
  branch_flag *b = arg;
  b->after = b->flag == 1 && b->seen == 1;
}
/* A host function holding its stream until the test opens the gate, so that
 * work queued behind it has provably not run yet. */
static void gate_wait(void *arg) {
  while (!__atomic_load_n((int *)arg, __ATOMIC_ACQUIRE)) sleep_ms((void *)(intptr_t)1);
}

/* ---- devices and contexts ---- */
static void *fresh_thread(void *arg) {
  CUcontext c = (CUcontext)1;
  *(int *)arg = cuCtxGetCurrent(&c) == CUDA_SUCCESS && c == NULL;
  return NULL;
}

static void test_contexts(void) {
  int n = 0;
  CK(cuDeviceGetCount(&n));
  CK(cuDevicePrimaryCtxRetain(&ctx0, 0));
  CK(cuDevicePrimaryCtxRetain(&ctx1, 1));
  CUcontext again = NULL, cur = (CUcontext)1;
  CK(cuDevicePrimaryCtxRetain(&again, 0));
  CK(cuCtxGetCurrent(&cur));
  check(n >= 2 && ctx0 && ctx1 && ctx0 != ctx1 && again == ctx0 && cur == NULL,
        "%d devices, distinct primary contexts, none current at start", n);
  CK(cuCtxSetCurrent(ctx0));
  CK(cuCtxPushCurrent(ctx1));
  CUdevice d = -1;
  CK(cuCtxGetDevice(&d));
  CUcontext popped = NULL;
  CK(cuCtxPopCurrent(&popped));
  CK(cuCtxGetCurrent(&cur));
  check(d == 1 && popped == ctx1 && cur == ctx0, "push/pop: device %d while pushed, back to device 0", d);
  int fresh = 0;
  pthread_t t;
  pthread_create(&t, NULL, fresh_thread, &fresh);
  pthread_join(t, NULL);
  check(fresh, "a new thread has no current context");
  CUdeviceptr p;
  CK(cuCtxSetCurrent(NULL));
  check(cuMemAlloc(&p, 64) == CUDA_ERROR_INVALID_CONTEXT, "cuMemAlloc without a current context fails");
  CK(cuCtxSetCurrent(ctx0));
  CUstream s;
  CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CUcontext sc = NULL;
  CK(cuStreamGetCtx(s, &sc));
  CK(cuCtxPushCurrent(ctx1));
  CUcontext lc = NULL;
  CK(cuStreamGetCtx(NULL, &lc));
  CK(cuCtxPopCurrent(NULL));
  check(sc == ctx0 && lc == ctx1, "cuStreamGetCtx: a stream's own context; the NULL stream's is the current one");
  void *fn = NULL;
  CUdriverProcAddressQueryResult q;
  CK(cuGetProcAddress("cuMemAlloc", &fn, 12000, 0, &q));
  check(fn == (void *)cuMemAlloc && q == CU_GET_PROC_ADDRESS_SUCCESS, "cuGetProcAddress(\"cuMemAlloc\") is cuMemAlloc_v2");
  CK(cuStreamDestroy(s));
}

/* ---- ordering, events, legacy stream ---- */
static void test_ordering(void) {
  CUstream a, b;
  CK(cuStreamCreate(&a, CU_STREAM_NON_BLOCKING));
  CK(cuStreamCreate(&b, CU_STREAM_NON_BLOCKING));
  CUdeviceptr d;
  uint32_t *h;
  CK(cuMemAlloc(&d, 4096));
  CK(cuMemHostAlloc((void **)&h, 4096, 0));
  CK(cuMemsetD32Async(d, 1, 1024, a));
  CK(cuStreamSynchronize(a));
  /* a: sleep, then set 7; b copies without waiting: sees the old value */
  CK(cuLaunchHostFunc(a, sleep_ms, (void *)(intptr_t)50));
  CK(cuMemsetD32Async(d, 7, 1024, a));
  CK(cuMemcpyDtoHAsync(h, d, 4096, b));
  CK(cuStreamSynchronize(b));
  uint32_t early = h[0];
  CK(cuStreamSynchronize(a));
  check(early == 1, "a copy on another stream without a wait reads the old value (%u)", early);
  CUevent e0, e1, e2;
  CK(cuEventCreate(&e0, CU_EVENT_DEFAULT));
  CK(cuEventCreate(&e1, CU_EVENT_DEFAULT));
  CK(cuEventCreate(&e2, CU_EVENT_DISABLE_TIMING));
  CK(cuEventRecord(e0, a));
  CK(cuLaunchHostFunc(a, sleep_ms, (void *)(intptr_t)30));
  CK(cuMemsetD32Async(d, 9, 1024, a));
  CK(cuEventRecord(e1, a));
  CK(cuEventRecord(e2, a));
  CUresult q = cuEventQuery(e1);
  float ms = 0;
  CUresult early_el = cuEventElapsedTime(&ms, e0, e1);
  CK(cuStreamWaitEvent(b, e1, 0));
  CK(cuMemcpyDtoHAsync(h, d, 4096, b));
  CK(cuStreamSynchronize(b));
  check(q == CUDA_ERROR_NOT_READY && early_el == CUDA_ERROR_NOT_READY, "event query and elapsed time not ready before the work ran");
  check(h[0] == 9 && h[1023] == 9, "with cuStreamWaitEvent the copy sees the new value (%u)", h[0]);
  CK(cuEventSynchronize(e1));
  CK(cuEventElapsedTime(&ms, e0, e1));
  check(cuEventQuery(e1) == CUDA_SUCCESS && ms >= 30.0f, "elapsed time %.1f ms covers a 30 ms host function", (double)ms);
  check(cuEventElapsedTime(&ms, e0, e2) == CUDA_ERROR_INVALID_HANDLE, "elapsed time of a DISABLE_TIMING event is an error");
  /* legacy stream: a blocking stream's work before a legacy-stream copy */
  CUstream blk;
  CK(cuStreamCreate(&blk, 0));
  CK(cuLaunchHostFunc(blk, sleep_ms, (void *)(intptr_t)30));
  CK(cuMemsetD32Async(d, 11, 1024, blk));
  CK(cuMemcpyDtoHAsync(h, d, 4096, CU_STREAM_LEGACY));
  CK(cuStreamSynchronize(CU_STREAM_LEGACY));
  uint32_t leg = h[0];
  CK(cuLaunchHostFunc(a, sleep_ms, (void *)(intptr_t)30));
  CK(cuMemsetD32Async(d, 12, 1024, a)); /* non-blocking: not ordered with legacy */
  CK(cuMemcpyDtoHAsync(h, d, 4096, NULL));
  CK(cuStreamSynchronize(NULL));
  uint32_t nb = h[0];
  CK(cuCtxSynchronize());
  check(leg == 11 && nb == 11, "legacy stream waits for a blocking stream (%u), not for a non-blocking one (%u)", leg, nb);
  CUstream pt = NULL;
  CK(cuMemsetD32Async(d, 13, 1024, CU_STREAM_PER_THREAD));
  CK(cuMemcpyDtoHAsync(h, d, 4096, CU_STREAM_PER_THREAD));
  CK(cuStreamSynchronize(CU_STREAM_PER_THREAD));
  (void)pt;
  check(h[0] == 13, "per-thread default stream runs in order");
  CK(cuMemFreeHost(h));
  CK(cuMemFree(d));
  CK(cuStreamDestroy(a));
  CK(cuStreamDestroy(b));
  CK(cuStreamDestroy(blk));
}

/* ---- capture ---- */
typedef struct {
  CUevent ev;
  CUstreamCaptureMode mode;
  CUresult r;
} qarg;

static void *query_from_thread(void *p) {
  qarg *a = p;
  cuCtxSetCurrent(ctx0);
  CUstreamCaptureMode m = a->mode;
  cuThreadExchangeStreamCaptureMode(&m);
  a->r = cuEventQuery(a->ev);
  cuThreadExchangeStreamCaptureMode(&m);
  return NULL;
}

/* Capture in capmode on s; another thread in thread mode qmode queries an
 * (uncaptured) event. Returns the query's result and the end's. */
static void capture_with_query(CUstream s, CUstreamCaptureMode capmode, CUstreamCaptureMode qmode, CUresult *q,
                               CUresult *end) {
  CUevent ev;
  CK(cuEventCreate(&ev, 0));
  CK(cuEventRecord(ev, s));
  CK(cuStreamSynchronize(s));
  CK(cuStreamBeginCapture(s, capmode));
  qarg a = {ev, qmode, CUDA_SUCCESS};
  pthread_t t;
  pthread_create(&t, NULL, query_from_thread, &a);
  pthread_join(t, NULL);
  CUgraph g = NULL;
  *q = a.r;
  *end = cuStreamEndCapture(s, &g);
  if (g) cuGraphDestroy(g);
  cuEventDestroy(ev);
}

static const char *mode_name(CUstreamCaptureMode m) {
  return m == CU_STREAM_CAPTURE_MODE_GLOBAL ? "global" : m == CU_STREAM_CAPTURE_MODE_THREAD_LOCAL ? "thread-local" : "relaxed";
}

static void test_capture(void) {
  CUstream s, side;
  CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CK(cuStreamCreate(&side, CU_STREAM_NON_BLOCKING));
  static const CUstreamCaptureMode modes[] = {CU_STREAM_CAPTURE_MODE_GLOBAL, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
                                              CU_STREAM_CAPTURE_MODE_RELAXED};
  /* another thread's query: only a global capture seen from a global-mode thread forbids it */
  for (int c = 0; c < 3; c++)
    for (int t = 0; t < 3; t++) {
      uint64_t v0 = stats().capture_violations;
      CUresult q, end;
      capture_with_query(s, modes[c], modes[t], &q, &end);
      int forbidden = c == 0 && t == 0;
      uint64_t dv = stats().capture_violations - v0;
      check(forbidden ? q == CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED && end == CUDA_ERROR_STREAM_CAPTURE_INVALIDATED && dv == 1
                      : q == CUDA_SUCCESS && end == CUDA_SUCCESS && dv == 0,
            "%s capture, query from another thread in %s mode: %s (query %d, end %d, %llu violation)", mode_name(modes[c]),
            mode_name(modes[t]), forbidden ? "invalidated" : "allowed", (int)q, (int)end, (unsigned long long)dv);
    }
  /* the capturing thread's own unsafe calls */
  for (int c = 0; c < 3; c++) {
    uint64_t v0 = stats().capture_violations;
    CK(cuStreamBeginCapture(s, modes[c]));
    CUdeviceptr p = 0;
    CUresult ra = cuMemAlloc(&p, 256);
    CUmodule m = NULL;
    CUresult rm = cuModuleLoadData(&m, nsc_fatbin);
    CUgraph g = NULL;
    CUresult end = cuStreamEndCapture(s, &g);
    int relaxed = c == 2;
    uint64_t dv = stats().capture_violations - v0;
    check(relaxed ? ra == CUDA_SUCCESS && rm == CUDA_SUCCESS && end == CUDA_SUCCESS && dv == 0
                  : ra == CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED && rm == CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED &&
                        end == CUDA_ERROR_STREAM_CAPTURE_INVALIDATED && dv == 1,
          "%s capture: cuMemAlloc and cuModuleLoadData on the capturing thread %s (%d, %d, end %d)", mode_name(modes[c]),
          relaxed ? "allowed" : "invalidate it", (int)ra, (int)rm, (int)end);
    if (p) CK(cuMemFree(p));
    if (g) CK(cuGraphDestroy(g));
  }
  /* synchronising the capturing stream is illegal in every mode */
  for (int c = 0; c < 3; c++) {
    CK(cuStreamBeginCapture(s, modes[c]));
    CUresult r = cuStreamSynchronize(s);
    CUgraph g = NULL;
    CUresult end = cuStreamEndCapture(s, &g);
    check(r == CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED && end == CUDA_ERROR_STREAM_CAPTURE_INVALIDATED,
          "%s capture: cuStreamSynchronize of the capturing stream invalidates it", mode_name(modes[c]));
  }
  /* relaxed thread mode on the capturing thread itself */
  CK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
  CUstreamCaptureMode m = CU_STREAM_CAPTURE_MODE_RELAXED;
  CK(cuThreadExchangeStreamCaptureMode(&m));
  CUstreamCaptureMode old = m;
  CUevent ev;
  CK(cuEventCreate(&ev, 0));
  CUresult rq = cuEventQuery(ev);
  CK(cuThreadExchangeStreamCaptureMode(&m));
  CUgraph g = NULL;
  CUresult end = cuStreamEndCapture(s, &g);
  check(old == CU_STREAM_CAPTURE_MODE_GLOBAL && m == CU_STREAM_CAPTURE_MODE_RELAXED && rq == CUDA_SUCCESS &&
            end == CUDA_SUCCESS,
        "cuThreadExchangeStreamCaptureMode(relaxed) around a query keeps a global capture valid");
  CK(cuGraphDestroy(g));
  /* fork/join through events; an unjoined fork fails the end */
  CUdeviceptr d;
  uint32_t *h;
  CK(cuMemAlloc(&d, 4096));
  CK(cuMemHostAlloc((void **)&h, 4096, 0));
  CK(cuMemsetD32Async(d, 0, 1024, s));
  CK(cuStreamSynchronize(s));
  CUevent fork, join;
  CK(cuEventCreate(&fork, CU_EVENT_DISABLE_TIMING));
  CK(cuEventCreate(&join, CU_EVENT_DISABLE_TIMING));
  uint64_t ga0 = stats().graph_allocs;
  CK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
  CUdeviceptr tmp;
  CK(cuMemAllocAsync(&tmp, 4096, s));
  CK(cuMemsetD32Async(tmp, 5, 1024, s));
  CK(cuEventRecord(fork, s));
  CK(cuStreamWaitEvent(side, fork, 0));
  CUstreamCaptureStatus st;
  CK(cuStreamIsCapturing(side, &st));
  CK(cuMemcpyDtoDAsync(d, tmp, 4096, side));
  CK(cuEventRecord(join, side));
  CK(cuStreamWaitEvent(s, join, 0));
  CK(cuMemcpyDtoHAsync(h, d, 4096, s));
  CK(cuMemFreeAsync(tmp, s));
  CK(cuStreamEndCapture(s, &g));
  check(st == CU_STREAM_CAPTURE_STATUS_ACTIVE && h[0] == 0 && stats().graph_allocs == ga0 + 1,
        "a stream waiting on a captured event joins the capture; nothing ran at capture time");
  CUgraphExec x;
  CK(cuGraphInstantiate(&x, g, 0));
  CK(cuGraphLaunch(x, s));
  CK(cuStreamSynchronize(s));
  uint32_t first = h[0];
  h[0] = 0;
  CK(cuGraphLaunch(x, s));
  CK(cuStreamSynchronize(s));
  check(first == 5 && h[0] == 5 && h[1023] == 5, "graph launched twice: the fork-join copy runs each time");
  CK(cuGraphExecDestroy(x));
  CK(cuGraphDestroy(g));
  /* Independent branches run concurrently, as on a GPU: the forked branch,
   * captured first, waits (up to 2 s) for a flag the origin's branch sets
   * after the fork; run in capture order it would wait in vain. After the
   * join, both are done. */
  {
    branch_flag bf = {0, 0, 0};
    CK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    CK(cuEventRecord(fork, s));
    CK(cuStreamWaitEvent(side, fork, 0));
    CK(cuLaunchHostFunc(side, branch_wait, &bf));
    CK(cuLaunchHostFunc(s, branch_set, &bf));
    CK(cuEventRecord(join, side));
    CK(cuStreamWaitEvent(s, join, 0));
    CK(cuLaunchHostFunc(s, branch_after, &bf));
    CK(cuStreamEndCapture(s, &g));
    CK(cuGraphInstantiate(&x, g, 0));
    CK(cuGraphLaunch(x, s));
    CK(cuStreamSynchronize(s));
    check(bf.seen == 1 && bf.after == 1,
          "graph branches run concurrently (the forked branch saw the other branch's flag); the node after the join ran after both");
    CK(cuGraphExecDestroy(x));
    CK(cuGraphDestroy(g));
  }
  uint64_t v0 = stats().capture_violations;
  CK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
  CK(cuEventRecord(fork, s));
  CK(cuStreamWaitEvent(side, fork, 0));
  CK(cuMemsetD32Async(d, 1, 1024, side));
  end = cuStreamEndCapture(s, &g);
  check(end == CUDA_ERROR_STREAM_CAPTURE_UNJOINED && stats().capture_violations == v0 + 1,
        "ending a capture with a forked stream not joined back fails (UNJOINED)");
  /* the legacy stream while a blocking stream captures */
  CUstream blk;
  CK(cuStreamCreate(&blk, 0));
  CK(cuStreamBeginCapture(blk, CU_STREAM_CAPTURE_MODE_RELAXED));
  CUresult rl = cuMemsetD32Async(d, 1, 1024, NULL);
  end = cuStreamEndCapture(blk, &g);
  check(rl == CUDA_ERROR_STREAM_CAPTURE_IMPLICIT && end == CUDA_ERROR_STREAM_CAPTURE_INVALIDATED,
        "legacy-stream work while a blocking stream captures invalidates it");
  CK(cuMemFreeHost(h));
  CK(cuMemFree(d));
  CK(cuStreamDestroy(blk));
  CK(cuStreamDestroy(s));
  CK(cuStreamDestroy(side));
  cudadrv_reset_stats(); /* every violation above was provoked and checked */
}

/* ---- memory ---- */
static int crashes(volatile float *p) {
  fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) {
    signal(SIGSEGV, SIG_DFL); /* not a sanitizer's handler: the plain signal */
    alarm(10);
    p[0] = 1.0f;
    _exit(0);
  }
  int st = 0;
  waitpid(pid, &st, 0);
  return WIFSIGNALED(st) && WTERMSIG(st) == SIGSEGV;
}

static void test_memory(void) {
  CUstream s;
  CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CUdeviceptr dev, pool, man, vmm;
  float *pin;
  CK(cuMemAlloc(&dev, 1 << 20));
  CK(cuMemAllocAsync(&pool, 1 << 20, s));
  CK(cuMemAllocManaged(&man, 1 << 16, CU_MEM_ATTACH_GLOBAL));
  CK(cuMemHostAlloc((void **)&pin, 1 << 16, CU_MEMHOSTALLOC_DEVICEMAP));
  CUmemAllocationProp prop = {0};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 1;
  size_t gran = 0;
  CK(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
  CUmemGenericAllocationHandle hnd;
  CK(cuMemAddressReserve(&vmm, gran, 0, 0, 0));
  CK(cuMemCreate(&hnd, gran, &prop, 0));
  CK(cuMemMap(vmm, gran, 0, hnd, 0));
  void *view = NULL;
  int before_access = cudadrv_host_view((void *)(uintptr_t)vmm, 16, &view);
  CUmemAccessDesc acc = {.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
  acc.location.type = CU_MEM_LOCATION_TYPE_DEVICE; /* its id is in an anonymous union from CUDA 13.2 on */
  acc.location.id = 1;
  CK(cuMemSetAccess(vmm, gran, &acc, 1));
  cudadrv_reset_stats(); /* the refused view above counted */
  check(before_access == -1, "a VMM mapping is not accessible before cuMemSetAccess");

  check(crashes((float *)(uintptr_t)dev), "host write to cuMemAlloc memory crashes (SIGSEGV)");
  check(crashes((float *)(uintptr_t)pool), "host write to cuMemAllocAsync memory crashes");
  check(crashes((float *)(uintptr_t)vmm), "host write to VMM-mapped memory crashes");
  pin[0] = 1.0f;
  ((float *)(uintptr_t)man)[0] = 2.0f;
  check(!crashes(pin) && pin[0] == 1.0f, "pinned and managed memory are host-accessible");

  struct {
    const char *what;
    CUdeviceptr p;
    unsigned type;
    int managed, ordinal, pooled;
  } kinds[] = {
      {"cuMemAlloc", dev, CU_MEMORYTYPE_DEVICE, 0, 0, 0},
      {"cuMemAllocAsync", pool, CU_MEMORYTYPE_DEVICE, 0, 0, 1},
      {"cuMemAllocManaged", man, CU_MEMORYTYPE_DEVICE, 1, 0, 0},
      {"cuMemHostAlloc", (CUdeviceptr)(uintptr_t)pin, CU_MEMORYTYPE_HOST, 0, 0, 0},
      {"cuMemMap", vmm, CU_MEMORYTYPE_DEVICE, 0, 1, 0},
  };
  for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
    unsigned type = 0;
    int managed = -1, ordinal = -1;
    CUmemoryPool mp = NULL;
    CUdeviceptr start = 0;
    CK(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, kinds[i].p + 8));
    CK(cuPointerGetAttribute(&managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, kinds[i].p + 8));
    CK(cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, kinds[i].p + 8));
    CK(cuPointerGetAttribute(&mp, CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE, kinds[i].p + 8));
    CK(cuPointerGetAttribute(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, kinds[i].p + 8));
    check(type == kinds[i].type && managed == kinds[i].managed && ordinal == kinds[i].ordinal &&
              (mp != NULL) == kinds[i].pooled && start == kinds[i].p,
          "%s: memory type %u, managed %d, device %d, pool %s", kinds[i].what, type, managed, ordinal, mp ? "yes" : "no");
  }
  int stackvar = 0;
  unsigned type = 7;
  CUresult r1 = cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (CUdeviceptr)(uintptr_t)&stackvar);
  CUpointer_attribute as[2] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_IS_MANAGED};
  int managed = 7;
  void *data[2] = {&type, &managed};
  CUresult r2 = cuPointerGetAttributes(2, as, data, (CUdeviceptr)(uintptr_t)&stackvar);
  check(r1 == CUDA_ERROR_INVALID_VALUE && r2 == CUDA_SUCCESS && type == 0 && managed == 0,
        "unknown host memory: cuPointerGetAttribute fails, cuPointerGetAttributes answers type 0");
  /* copies reach device memory, the hook gives its host view */
  float in[256], out[256];
  for (int i = 0; i < 256; i++) in[i] = (float)i * 0.25f;
  CK(cuMemcpyHtoDAsync(dev, in, sizeof in, s));
  memset(in, 0, sizeof in); /* pageable source: copied at call time */
  CK(cuMemcpyDtoDAsync(vmm, dev, sizeof in, s));
  CK(cuMemcpyDtoHAsync(out, vmm, sizeof out, s));
  float *hv = NULL;
  int hr = cudadrv_host_view((void *)(uintptr_t)dev, sizeof in, (void **)&hv);
  check(out[255] == 63.75f && hr == 0 && hv && hv[255] == 63.75f, "copies host -> device -> VMM -> host; host view of device memory");
  check(cudadrv_host_view((void *)(uintptr_t)dev, (1 << 20) + 1, (void **)&hv) == -1 && stats().illegal_accesses == 1,
        "a host view past the end of an allocation is refused and counted");
  cudadrv_reset_stats();
  size_t fr0, fr1, tot;
  CK(cuMemGetInfo(&fr0, &tot));
  CK(cuMemFreeAsync(pool, s));
  CK(cuStreamSynchronize(s));
  CK(cuMemGetInfo(&fr1, &tot));
  check(fr1 == fr0 + (1 << 20), "cuMemFreeAsync returns the memory in stream order");
  /* As a real pool: a block freed on s is handed out again by the next
   * allocation on s at call time (before the free ran: s orders them), not
   * by one on another stream. */
  {
    CUstream s2;
    CK(cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING));
    CUdeviceptr a, b, c;
    int gate = 0;
    CK(cuMemAllocAsync(&a, 4096, s));
    CK(cuLaunchHostFunc(s, gate_wait, &gate)); /* the free below has not run at the allocations */
    CK(cuMemFreeAsync(a, s));
    CK(cuMemAllocAsync(&c, 4096, s2));
    CK(cuMemAllocAsync(&b, 2048, s));
    uint64_t reuses = stats().pool_reuses;
    __atomic_store_n(&gate, 1, __ATOMIC_RELEASE);
    CK(cuStreamSynchronize(s));
    check(b == a && c != a && reuses == 1 && stats().illegal_accesses == 0,
          "a block freed on a stream is reused at once by that stream's next allocation, not by another stream's");
    CK(cuMemFreeAsync(b, s));
    CK(cuMemFreeAsync(c, s2));
    CK(cuStreamSynchronize(s));
    CK(cuStreamSynchronize(s2));
    CK(cuStreamDestroy(s2));
  }
  CK(cuMemUnmap(vmm, gran));
  CK(cuMemRelease(hnd));
  CK(cuMemAddressFree(vmm, gran));
  CK(cuMemFree(dev));
  CK(cuMemFree(man));
  CK(cuMemFreeHost(pin));
  check(crashes(pin), "freed pinned memory is unmapped");
  CK(cuStreamDestroy(s));
}

/* ---- kernels ---- */
static void test_kernels(void) {
  CUmodule mod;
  check(cuModuleLoadData(&mod, "not a fatbin, just bytes") == CUDA_ERROR_INVALID_IMAGE, "a non-fatbin image is refused");
  CK(cuModuleLoadData(&mod, nsc_fatbin));
  CUfunction to16, tobf, seg, sc64, none;
  CK(cuModuleGetFunction(&to16, mod, "nsc_k_to_f16"));
  CK(cuModuleGetFunction(&tobf, mod, "nsc_k_to_bf16"));
  CK(cuModuleGetFunction(&seg, mod, "nsc_k_seg_from_bf16_s"));
  CK(cuModuleGetFunction(&sc64, mod, "nsc_k_scale_f64"));
  check(cuModuleGetFunction(&none, mod, "nsc_k_to_fp8") == CUDA_ERROR_NOT_FOUND, "an unknown kernel name is not found");
  /* PTX text (as NVRTC makes it): only the kernels it defines are found */
  static const char ptx[] = ".version 8.0\n.target sm_90\n.address_size 64\n"
                            ".visible .entry nsc_k_scale_f32(\n.param .u64 a\n)\n{\nret;\n}\n";
  CUmodule pm;
  CUfunction pf;
  CK(cuModuleLoadData(&pm, ptx));
  check(cuModuleGetFunction(&pf, pm, "nsc_k_scale_f32") == CUDA_SUCCESS &&
            cuModuleGetFunction(&none, pm, "nsc_k_to_f16") == CUDA_ERROR_NOT_FOUND,
        "a PTX image: its .entry kernels are found, others are not");
  CUstream s;
  CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  enum { N = 10007 };
  static float x[N], y[N];
  static uint16_t w[N], want[N];
  for (int i = 0; i < N; i++) x[i] = (float)(i - N / 2) * 37.5f;
  x[3] = 1e30f; /* overflows both? fp16 only */
  x[4] = 1e-30f;
  CUdeviceptr dx, dw, dy;
  uint64_t *cnt;
  CK(cuMemAlloc(&dx, N * 4));
  CK(cuMemAlloc(&dw, N * 2));
  CK(cuMemAlloc(&dy, N * 4));
  CK(cuMemHostAlloc((void **)&cnt, 16, CU_MEMHOSTALLOC_DEVICEMAP));
  CUdeviceptr dcnt;
  CK(cuMemHostGetDevicePointer(&dcnt, cnt, 0));
  cnt[0] = cnt[1] = 0;
  CK(cuMemcpyHtoDAsync(dx, x, sizeof x, s));
  uint64_t n = N;
  float scale = 0.5f;
  void *p[] = {&dx, &dw, &n, &scale, &dcnt};
  CK(cuLaunchKernel(to16, 3, 1, 1, NSC_K_BLOCK, 1, 1, 0, s, p, NULL));
  n = 1;        /* the launch copied its parameters */
  scale = 2.0f;
  CK(cuMemcpyDtoHAsync(w, dw, sizeof w, s));
  nsc_cast_counts hc = {0, 0};
  nsc_cast_to_wire(NSC_FMT_FP16, x, want, N, 0.5f, &hc);
  check(!memcmp(w, want, sizeof w) && cnt[0] == hc.overflow && cnt[1] == hc.underflow && hc.overflow && hc.underflow,
        "nsc_k_to_f16 with marshalled parameters: bit-identical to the host, counts %llu/%llu",
        (unsigned long long)cnt[0], (unsigned long long)cnt[1]);
  /* segment table by value: two segments from the bf16 wire */
  nsc_ksegtab_small tab;
  memset(&tab, 0, sizeof tab);
  tab.nseg = 2;
  tab.s[0] = (nsc_kseg){0, dy, 5000, 0, 0};
  tab.s[1] = (nsc_kseg){0, dy + 4 * 5001, 5006, 5001, 2};
  tab.ntiles = 4;
  n = N;
  scale = 1.0f;
  void *p2[] = {&dx, &dw, &n, &scale, &dcnt};
  CK(cuLaunchKernel(tobf, 3, 1, 1, NSC_K_BLOCK, 1, 1, 0, s, p2, NULL));
  float f3 = 3.0f;
  void *p3[] = {&tab, &dw, &f3};
  CK(cuMemsetD8Async(dy, 0, N * 4, s));
  CK(cuLaunchKernel(seg, 4, 1, 1, NSC_K_BLOCK, 1, 1, 0, s, p3, NULL));
  CK(cuMemcpyDtoHAsync(y, dy, sizeof y, s));
  nsc_cast_to_wire(NSC_FMT_BF16, x, want, N, 1.0f, NULL);
  static float wy[N];
  memset(wy, 0, sizeof wy);
  nsc_cast_from_wire(NSC_FMT_BF16, want, wy, 5000, 3.0f);
  nsc_cast_from_wire(NSC_FMT_BF16, want + 5001, wy + 5001, 5006, 3.0f);
  check(!memcmp(y, wy, sizeof y), "nsc_k_seg_from_bf16_s reads its segment table by value");
  tab.s[1].tile0 = 1; /* wrong prefix sum */
  CK(cuLaunchKernel(seg, 4, 1, 1, NSC_K_BLOCK, 1, 1, 0, s, p3, NULL));
  double dd[64], f = 0.1;
  for (int i = 0; i < 64; i++) dd[i] = i * 1.5;
  CK(cuMemcpyHtoDAsync(dx, dd, sizeof dd, s));
  uint64_t n64 = 64;
  void *p4[] = {&dx, &dx, &n64, &f};
  CK(cuLaunchKernel(sc64, 1, 1, 1, NSC_K_BLOCK, 1, 1, 0, s, p4, NULL));
  double got[64];
  CK(cuMemcpyDtoHAsync(got, dx, sizeof got, s));
  int ok = 1;
  for (int i = 0; i < 64; i++) ok &= got[i] == dd[i] * 0.1;
  check(ok && stats().illegal_accesses == 1, "nsc_k_scale_f64 in place with a double factor; a bad segment table is reported");
  /* a kernel given host memory the driver does not know */
  CUdeviceptr hostp = (CUdeviceptr)(uintptr_t)x;
  void *p5[] = {&hostp, &dw, &n, &scale, &dcnt};
  CK(cuLaunchKernel(to16, 3, 1, 1, NSC_K_BLOCK, 1, 1, 0, s, p5, NULL));
  CK(cuStreamSynchronize(s));
  check(stats().illegal_accesses == 2, "a kernel reading pageable host memory is an illegal access");
  CUdeviceptr other;
  CK(cuCtxPushCurrent(ctx1));
  CK(cuMemAlloc(&other, N * 4));
  CK(cuCtxPopCurrent(NULL));
  void *p6[] = {&other, &dw, &n, &scale, &dcnt};
  CK(cuLaunchKernel(to16, 3, 1, 1, NSC_K_BLOCK, 1, 1, 0, s, p6, NULL));
  CK(cuStreamSynchronize(s));
  check(stats().illegal_accesses == 3, "a kernel on device 0 reading device 1's memory is an illegal access");
  CK(cuMemFree(other));
  check(cuLaunchKernel(to16, 3, 1, 1, 512, 1, 1, 0, s, p, NULL) == CUDA_ERROR_INVALID_VALUE,
        "more threads per block than the kernels' launch bounds is refused");
  cudadrv_reset_stats();
  CK(cuMemFree(dx));
  CK(cuMemFree(dw));
  CK(cuMemFree(dy));
  CK(cuMemFreeHost(cnt));
  CK(cuStreamDestroy(s));
}

static void test_region(void) {
  CUstream s;
  CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  cudadrv_region(1);
  CK(cuStreamSynchronize(s));
  CUdeviceptr p;
  CK(cuMemAllocAsync(&p, 64, s));
  CK(cuMemFreeAsync(p, s));
  cudadrv_region(0);
  CK(cuStreamSynchronize(s));
  check(stats().region_syncs == 1, "one synchronising call counted inside a region (stream-ordered allocation is not one)");
  cudadrv_reset_stats();
  CK(cuStreamDestroy(s));
}

typedef struct {
  int *log, *n;
  int v;
} hostw;
static void host_work(void *a) {
  hostw *h = a;
  h->log[(*h->n)++] = h->v;
}
static int released;
static void host_release(void *a) {
  (void)a;
  released++;
}

static void test_hooks(void) {
  CUstream a, b;
  CK(cuStreamCreate(&a, CU_STREAM_NON_BLOCKING));
  CK(cuStreamCreate(&b, CU_STREAM_NON_BLOCKING));
  int log[4], n = 0;
  hostw w1 = {log, &n, 1}, w2 = {log, &n, 2};
  CK(cuLaunchHostFunc(b, sleep_ms, (void *)(intptr_t)30));
  void *ss[2] = {a, b};
  check(cudadrv_enqueue_multi(ss, 2, host_work, &w1, host_release) == 0, "cudadrv_enqueue_multi accepts two streams");
  CK(cuMemsetD8Async(0, 0, 0, a));
  check(cudadrv_enqueue(b, host_work, &w2, host_release) == 0, "cudadrv_enqueue");
  int before = n;
  CK(cuStreamSynchronize(b));
  CK(cuStreamSynchronize(a));
  check(before == 0 && n == 2 && log[0] == 1 && log[1] == 2 && released == 2,
        "enqueued host work runs after earlier work of every stream, in order, and is released");
  CK(cuStreamDestroy(a));
  CK(cuStreamDestroy(b));
}

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (cuInit(0) != CUDA_SUCCESS) {
    printf("not ok - cuInit\n");
    return 1;
  }
  test_contexts();
  test_ordering();
  test_capture();
  test_memory();
  test_kernels();
  test_region();
  test_hooks();
  cudadrv_stats st = stats();
  check(st.capture_violations == 0 && st.region_syncs == 0 && st.illegal_accesses == 0,
        "no unexpected violation left (%llu capture, %llu sync, %llu illegal)", (unsigned long long)st.capture_violations,
        (unsigned long long)st.region_syncs, (unsigned long long)st.illegal_accesses);
  cudadrv_reset_stats();
  return failures != 0;
}
