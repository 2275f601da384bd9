/* test_cuda_backend.c — the shim's CUDA backend (shim/backend/backend_cuda.c,
 * compress/cu_*.c) on the CUDA driver test double (tests/cudadrv), one check
 * per defect of issue 13 that the backend alone can show:
 *   classify   device, pinned host and managed memory get the CUDA backend,
 *              only memory the driver does not know the host one (defect 1)
 *   kernels    which kernels load (fatbin / NVRTC) and usable() (defect 1,
 *              building without nvcc)
 *   oobctx     the exchange buffer and private stream are on the context of
 *              the caller's stream, whatever is current, even nothing (4)
 *   oobsync    the exchange never synchronises and can be polled (6)
 *   relaxed    queries and marks beside another thread's global-mode capture
 *              leave that capture valid (5)
 *   nopools    a device without memory pools gets no cuMemAlloc fallback (7)
 *   perthread  staging arenas and side streams of CU_STREAM_PER_THREAD are
 *              per thread (8)
 *
 *   test_cuda_backend CHECK...   (TAP lines; exit 1 on any failure)
 *
 * Runs with the double first on the library path; its counters
 * (capture_violations, region_syncs, illegal_accesses) must stay 0 unless a
 * check provokes them on purpose. Must not: be linked into the shim. */
#include <cuda.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "cast.h"
#include "cast_bits.h"
#include "wire.h"
#include "cudadrv_hooks.h"
#include "staging.h"
#include "tap_drv.h"


static CUcontext ctx[2];
static const nsc_backend *be;

static cudadrv_stats stats(void) {
  cudadrv_stats s;
  cudadrv_get_stats(&s);
  return s;
}

static void setup(void) {
  DRV(cuInit(0));
  for (int d = 0; d < 2; d++) DRV(cuDevicePrimaryCtxRetain(&ctx[d], d));
  DRV(cuCtxSetCurrent(ctx[0]));
  be = nsc_backend_cuda();
  if (!be) {
    printf("not ok - the CUDA backend loads on the double: %s\nBail out!\n", nsc_backend_error());
    exit(1);
  }
  /* A context's one-time setup (module load, pinned counters, exchange
   * slots) synchronises; it happens here, outside the checked regions, as
   * it does at a communicator's first uncaptured call. */
  CUstream s;
  DRV(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  be->usable((nsc_stream)s);
  cuStreamDestroy(s);
}

static void t_classify(void) {
  CUdeviceptr d = 0, m = 0, mh = 0;
  void *pinned = NULL, *plain = malloc(64);
  DRV(cuMemAlloc(&d, 4096));
  DRV(cuMemHostAlloc(&pinned, 4096, CU_MEMHOSTALLOC_PORTABLE));
  DRV(cuMemAllocManaged(&m, 4096, CU_MEM_ATTACH_GLOBAL));
  DRV(cuMemAllocManaged(&mh, 4096, CU_MEM_ATTACH_HOST));
  report(nsc_backend_for((void *)(uintptr_t)d) == be, "classify: device memory -> CUDA backend");
  report(nsc_backend_for(pinned) == be, "classify: pinned host memory (cuMemHostAlloc) -> CUDA backend");
  report(nsc_backend_for((void *)(uintptr_t)m) == be, "classify: managed memory (attach global) -> CUDA backend");
  report(nsc_backend_for((void *)(uintptr_t)mh) == be, "classify: managed memory (attach host) -> CUDA backend");
  report(nsc_backend_for(plain) == &nsc_backend_host, "classify: malloc'ed memory -> host backend");
  report(nsc_backend_for(NULL) == &nsc_backend_host, "classify: NULL -> host backend");
  cuMemFree(d);
  cuMemFree(m);
  cuMemFree(mh);
  cuMemFreeHost(pinned);
  free(plain);
}

/* expect: "fatbin", "NVRTC" or "none" (kernels cannot load). */
static void t_kernels(const char *expect) {
  CUstream s;
  DRV(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  int usable = be->usable((nsc_stream)s);
  char msg[300];
  if (!strcmp(expect, "none")) {
    snprintf(msg, sizeof msg, "kernels cannot load: usable() says no (%s)", nsc_backend_error());
    report(!usable, msg);
    CUdeviceptr d;
    DRV(cuMemAlloc(&d, 64));
    report(nsc_backend_for((void *)(uintptr_t)d) == be, "... device memory still never goes to the host backend");
    report(be->to_wire((nsc_stream)s, NSC_FMT_FP16, (float *)(uintptr_t)d, (void *)(uintptr_t)(d + 32), 4, 1) != 0,
           "... and a cast on it fails instead of running");
    cuMemFree(d);
    return;
  }
  snprintf(msg, sizeof msg, "kernels load: usable() and kernels() = '%s' (expected %s...)", be->kernels(), expect);
  report(usable && !strncmp(be->kernels(), expect, strlen(expect)), msg);
  /* They really run: 4096 values through fp16 and back, against the host casts. */
  enum { N = 4096 };
  static float x[N], back[N], want[N];
  static uint16_t w[N];
  for (int i = 0; i < N; i++) x[i] = (float)(i - N / 2) * 0.37f;
  nsc_cast_to_wire(NSC_FMT_FP16, x, w, N, 1.0f, NULL);
  nsc_cast_from_wire(NSC_FMT_FP16, w, want, N, 1.0f);
  CUdeviceptr dx, dw;
  DRV(cuMemAlloc(&dx, N * 4));
  DRV(cuMemAlloc(&dw, N * 2));
  DRV(cuMemcpyHtoD(dx, x, sizeof x));
  int rc = be->to_wire((nsc_stream)s, NSC_FMT_FP16, (float *)(uintptr_t)dx, (void *)(uintptr_t)dw, N, 1.0f);
  rc |= be->from_wire((nsc_stream)s, NSC_FMT_FP16, (void *)(uintptr_t)dw, (float *)(uintptr_t)dx, N, 1.0f);
  DRV(cuStreamSynchronize(s));
  DRV(cuMemcpyDtoH(back, dx, sizeof back));
  report(rc == 0 && !memcmp(back, want, sizeof want), "... and fp32 -> fp16 -> fp32 on the device is bit-exact");
  cuMemFree(dx);
  cuMemFree(dw);
  cuStreamDestroy(s);
}

static void exchange_roundtrip(CUstream caller, const char *what) {
  int64_t vals[5] = {7, -1, 1ll << 40, 3, -9}, back[5] = {0};
  void *buf = NULL;
  nsc_stream os = NULL;
  char msg[200];
  int rc = be->oob_begin((nsc_stream)caller, vals, sizeof vals, &buf, &os);
  unsigned ord = 99;
  CUcontext bctx = NULL;
  if (!rc) {
    cuPointerGetAttribute(&ord, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, (CUdeviceptr)(uintptr_t)buf);
    cuStreamGetCtx((CUstream)os, &bctx);
  }
  int end = rc ? -1 : be->oob_end(buf, os, back, sizeof back, 1);
  snprintf(msg, sizeof msg, "oobctx: %s: buffer on device 1 (got %u), private stream in its context, round trip exact",
           what, ord);
  report(!rc && end == 1 && ord == 1 && bctx == ctx[1] && os != (nsc_stream)caller && !memcmp(vals, back, sizeof vals),
         msg);
}

static void *no_ctx_thread(void *arg) {
  exchange_roundtrip(*(CUstream *)arg, "from a fresh thread with no current context");
  return NULL;
}

static void t_oobctx(void) {
  CUstream s1;
  DRV(cuCtxSetCurrent(ctx[1]));
  DRV(cuStreamCreate(&s1, CU_STREAM_NON_BLOCKING));
  DRV(cuCtxSetCurrent(ctx[0]));
  exchange_roundtrip(s1, "caller's stream on device 1, device 0 current");
  pthread_t t;
  pthread_create(&t, NULL, no_ctx_thread, &s1);
  pthread_join(t, NULL);
  cuStreamDestroy(s1);
}

/* Host work that holds a stream until released. */
static volatile int gate;
static void hold(void *arg) {
  (void)arg;
  while (!__atomic_load_n(&gate, __ATOMIC_ACQUIRE)) sched_yield();
}

static void t_oobsync(void) {
  CUstream s;
  DRV(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  int64_t vals[3] = {1, 2, 3}, back[3] = {0};
  void *buf = NULL;
  nsc_stream os = NULL;
  cudadrv_stats before = stats();
  cudadrv_region(1);
  int rc = be->oob_begin((nsc_stream)s, vals, sizeof vals, &buf, &os);
  gate = 0;
  if (!rc) cudadrv_enqueue(os, hold, NULL, NULL); /* the "collective" has not run yet */
  int first = rc ? -1 : be->oob_end(buf, os, back, sizeof back, 0);
  int again = rc ? -1 : be->oob_end(buf, os, back, sizeof back, 0);
  __atomic_store_n(&gate, 1, __ATOMIC_RELEASE);
  int last = rc ? -1 : be->oob_end(buf, os, back, sizeof back, 1);
  cudadrv_region(0);
  cudadrv_stats after = stats();
  report(first == 0 && again == 0, "oobsync: oob_end without wait answers 'not yet' while the private stream is busy");
  report(last == 1 && !memcmp(vals, back, sizeof vals), "oobsync: ... then, waiting, the result");
  char msg[160];
  snprintf(msg, sizeof msg, "oobsync: no synchronising driver call in the exchange (%llu counted)",
           (unsigned long long)(after.region_syncs - before.region_syncs));
  report(after.region_syncs == before.region_syncs, msg);
  cuStreamDestroy(s);
}

/* Another thread captures in global mode (torch.cuda.graph's default) while
 * this one takes marks, reads them, asks about capture and exchanges. */
static volatile int phase;
static CUresult end_rc = CUDA_ERROR_UNKNOWN;
static void *capturer(void *arg) {
  (void)arg;
  CUstream cs;
  cuCtxSetCurrent(ctx[0]);
  cuStreamCreate(&cs, CU_STREAM_NON_BLOCKING);
  cuStreamBeginCapture(cs, CU_STREAM_CAPTURE_MODE_GLOBAL);
  __atomic_store_n(&phase, 1, __ATOMIC_RELEASE);
  while (__atomic_load_n(&phase, __ATOMIC_ACQUIRE) != 2) sched_yield();
  CUgraph g = NULL;
  end_rc = cuStreamEndCapture(cs, &g);
  if (g) cuGraphDestroy(g);
  cuStreamDestroy(cs);
  return NULL;
}

static void t_relaxed(void) {
  CUstream s;
  DRV(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  nsc_mark a, b;
  uint64_t ns = 0;
  DRV(be->mark((nsc_stream)s, &a) ? CUDA_ERROR_UNKNOWN : CUDA_SUCCESS);
  DRV(be->mark((nsc_stream)s, &b) ? CUDA_ERROR_UNKNOWN : CUDA_SUCCESS);
  cudadrv_stats before = stats();
  pthread_t t;
  phase = 0;
  pthread_create(&t, NULL, capturer, NULL);
  while (__atomic_load_n(&phase, __ATOMIC_ACQUIRE) != 1) sched_yield();
  int el, capt = -1, spins = 0;
  while ((el = be->elapsed(&a, &b, &ns)) == 0 && spins++ < 100000) sched_yield();
  be->capturing((nsc_stream)s, &capt);
  nsc_mark c;
  int mk = be->mark((nsc_stream)s, &c);
  int64_t v[1] = {5}, back[1] = {0};
  void *buf;
  nsc_stream os;
  int ex = be->oob_begin((nsc_stream)s, v, sizeof v, &buf, &os) || be->oob_end(buf, os, back, sizeof back, 1) != 1;
  __atomic_store_n(&phase, 2, __ATOMIC_RELEASE);
  pthread_join(t, NULL);
  cudadrv_stats after = stats();
  report(el == 1 && capt == 0 && !mk && !ex, "relaxed: elapsed(), capturing(), mark() and an exchange work beside the capture");
  char msg[200];
  snprintf(msg, sizeof msg, "relaxed: the other thread's global-mode capture stays valid (end capture %d, %llu violations)",
           (int)end_rc, (unsigned long long)(after.capture_violations - before.capture_violations));
  report(end_rc == CUDA_SUCCESS && after.capture_violations == before.capture_violations, msg);
  be->mark_release(&a);
  be->mark_release(&b);
  if (!mk) be->mark_release(&c);
  cuStreamDestroy(s);
}

/* Run with CUDADRV_NO_POOLS=1. */
static void t_nopools(void) {
  CUstream s;
  DRV(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  void *p = NULL;
  cudadrv_stats before = stats();
  cudadrv_region(1);
  int rc = be->alloc((nsc_stream)s, 1 << 20, &p);
  cudadrv_region(0);
  cudadrv_stats after = stats();
  char msg[300];
  snprintf(msg, sizeof msg, "nopools: no staging without memory pools, no cuMemAlloc fallback (%s; %llu syncs)",
           rc ? nsc_backend_error() : "allocated", (unsigned long long)(after.region_syncs - before.region_syncs));
  report(rc != 0 && p == NULL && after.region_syncs == before.region_syncs && strstr(nsc_backend_error(), "memory pools"),
         msg);
  if (!rc) be->release((nsc_stream)s, p);
  cuStreamDestroy(s);
}

static nsc_staging pst;
static void **pt_slot[2];
static pthread_barrier_t both;
static nsc_stream sides[2];
static uintptr_t pt_tid[2];
static void *pt_get(void *arg) {
  void **p = arg;
  int me = p == pt_slot[1];
  if (me) pthread_barrier_wait(&both); /* the second take comes after the first */
  intptr_t rc = nsc_staging_take(&pst, &nsc_backend_host, (nsc_stream)0x2, 1000, p);
  pt_tid[me] = (uintptr_t)pthread_self();
  if (!me) pthread_barrier_wait(&both);
  cuCtxSetCurrent(ctx[0]);
  if (be->side_stream((nsc_stream)CU_STREAM_PER_THREAD, &sides[me])) rc = -1;
  pthread_barrier_wait(&both); /* both threads alive: their ids differ */
  return (void *)rc;
}

static void t_perthread(void) {
  void *p1 = NULL, *p2 = NULL;
  pthread_t t1, t2;
  void *r1, *r2;
  pthread_barrier_init(&both, NULL, 2);
  pt_slot[0] = &p1;
  pt_slot[1] = &p2;
  int got = nsc_staging_reserve(&pst, &nsc_backend_host, NULL, 1 << 20);
  nsc_staging_agreed(&pst, &nsc_backend_host, NULL, got);
  pthread_create(&t1, NULL, pt_get, &p1);
  pthread_create(&t2, NULL, pt_get, &p2);
  pthread_join(t1, &r1);
  pthread_join(t2, &r2);
  /* CU_STREAM_PER_THREAD is another stream on each thread: the block knows
   * the second take's thread, never mistakes it for the first's stream. */
  report(got && !r1 && !r2 && p1 && p2 && (char *)p2 - (char *)p1 == 1024 && pst.fthread == pt_tid[1] &&
             pt_tid[0] != pt_tid[1],
         "perthread: two threads' CU_STREAM_PER_THREAD takes are two streams' pieces of the block");
  report(sides[0] && sides[1] && sides[0] != sides[1] && sides[0] != (nsc_stream)CU_STREAM_PER_THREAD,
         "perthread: ... and their pipelining side streams are two streams");
  nsc_staging_release(&pst);
}

/* Issue 23, defect 5: chunks and shards start at any element, and the cast
 * kernels then must still move vectors after a scalar head (the double runs
 * the real kernels on tests/simt, which counts vector accesses and faults on
 * misaligned ones). Source and wire buffer 1..3 elements past an allocation:
 * exact, and vectors for all but at most 3 + 3 elements of each 4096-element
 * tile (its head and tail; before the fix: none); offsets that differ modulo
 * the vector width: scalar, exact. */
static void t_vectors(void) {
  CUstream s;
  DRV(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  enum { N = 3 * 4096 + 37 };
  CUdeviceptr x, w;
  DRV(cuMemAlloc(&x, (N + 8) * 4));
  DRV(cuMemAlloc(&w, (N + 8) * 2));
  float *h = malloc((N + 8) * 4);
  uint16_t *want = malloc(N * 2), *got = malloc(N * 2);
  for (int i = 0; i < N + 8; i++) h[i] = (float)(i % 1000) * 0.37f - 150.0f;
  DRV(cuMemcpyHtoD(x, h, (N + 8) * 4));
  static const int offs[][2] = {{1, 1}, {2, 2}, {3, 3}, {1, 2}, {3, 0}};
  for (size_t k = 0; k < sizeof offs / sizeof offs[0]; k++) {
    int os = offs[k][0], ow = offs[k][1], same = os == ow;
    cudadrv_stats before = stats();
    int rc = be->to_wire((nsc_stream)s, NSC_FMT_FP16, (const float *)(uintptr_t)(x + 4 * (size_t)os),
                         (void *)(uintptr_t)(w + 2 * (size_t)ow), N, 1.0f);
    DRV(cuStreamSynchronize(s));
    cudadrv_stats after = stats();
    DRV(cuMemcpyDtoH(got, w + 2 * (size_t)ow, N * 2));
    for (int i = 0; i < N; i++) want[i] = nsc_f32_to_f16_ref(h[os + i]);
    uint64_t vec = after.kernel_vec_accesses - before.kernel_vec_accesses;
    char msg[200];
    snprintf(msg, sizeof msg, "vectors: fp16 cast, source %d and wire %d elements past their allocations: exact, %s (%llu vector accesses)",
             os, ow, same ? "vectorised after a scalar head" : "scalar (offsets differ modulo 4)", (unsigned long long)vec);
    report(!rc && !memcmp(want, got, N * 2) && (same ? vec >= 2 * ((N - 8 * ((N + 4095) / 4096)) / 4) : vec == 0), msg);
  }
  free(h);
  free(want);
  free(got);
  cuMemFree(x);
  cuMemFree(w);
  cuStreamDestroy(s);
}

/* Issue 23, defect 4: the kernels count overflows and underflows in device
 * memory (one atomic per block and counter), not in pinned host memory where
 * each atomic crosses PCIe; the counts still come out exact. */
static void t_counters(void) {
  CUstream s;
  DRV(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  enum { N = 100003 };
  CUdeviceptr x, w;
  DRV(cuMemAlloc(&x, N * 4));
  DRV(cuMemAlloc(&w, N * 2));
  float *h = malloc(N * 4);
  for (int i = 0; i < N; i++) h[i] = i % 3 == 0 ? 1e-30f : i % 3 == 1 ? 1e6f : 0.5f; /* underflow, overflow, fine */
  DRV(cuMemcpyHtoD(x, h, N * 4));
  nsc_cast_counts c0, c1;
  be->counts(&c0);
  cudadrv_stats before = stats();
  int rc = be->to_wire((nsc_stream)s, NSC_FMT_FP16, (const float *)(uintptr_t)x, (void *)(uintptr_t)w, N, 1.0f);
  rc |= be->fmt_encode((nsc_stream)s, NSC_FMT_INT8, 256, (const float *)(uintptr_t)x, (void *)(uintptr_t)w, N / 4, 1.0f);
  DRV(cuStreamSynchronize(s));
  cudadrv_stats after = stats();
  be->counts(&c1);
  /* what the scalar references count: fp16 33334 Inf and 33334 zeros; int8
   * flushes the 1e-30 and 0.5 beside 1e6 in each block */
  nsc_cast_counts rf = {0, 0}, r8 = {0, 0};
  uint16_t *t16 = malloc(N * 2);
  uint8_t *t8 = malloc(nsc_fmt_bytes(NSC_FMT_INT8, N / 4, 256));
  for (int i = 0; i < N; i++) {
    uint32_t a;
    memcpy(&a, &h[i], 4);
    a &= 0x7fffffffu;
    rf.overflow += nsc_bits_is_overflow(a, NSC_F16_OVF_LO);
    rf.underflow += nsc_bits_is_underflow(a, NSC_F16_UNF_HI);
  }
  nsc_fmt_encode_ref(NSC_FMT_INT8, 256, h, t8, N / 4, 1.0f, &r8);
  uint64_t wo = rf.overflow + r8.overflow, wu = rf.underflow + r8.underflow;
  char msg[240];
  snprintf(msg, sizeof msg, "counters: %llu launches counted into host memory (want 0); overflow/underflow %llu/%llu (the references: %llu/%llu)",
           (unsigned long long)(after.kernel_host_atomics - before.kernel_host_atomics),
           (unsigned long long)(c1.overflow - c0.overflow), (unsigned long long)(c1.underflow - c0.underflow),
           (unsigned long long)wo, (unsigned long long)wu);
  report(!rc && after.kernel_host_atomics == before.kernel_host_atomics && c1.overflow - c0.overflow == wo &&
             c1.underflow - c0.underflow == wu && wo == 33334,
         msg);
  /* Defect 8: grids from the driver's occupancy (the double: 6 blocks of 256
   * per multiprocessor, 132 of them), not 8 per multiprocessor. */
  enum { BIG = 132 * 8 * 4096 };
  CUdeviceptr bx, bw;
  DRV(cuMemAlloc(&bx, (size_t)BIG * 4));
  DRV(cuMemAlloc(&bw, (size_t)BIG * 2));
  /* (every launch of the process is capped alike, so the largest is this one) */
  rc = be->to_wire((nsc_stream)s, NSC_FMT_BF16, (const float *)(uintptr_t)bx, (void *)(uintptr_t)bw, BIG, 1.0f);
  DRV(cuStreamSynchronize(s));
  cudadrv_stats g = stats();
  snprintf(msg, sizeof msg, "occupancy: a cast of %d tiles launches %llu blocks (132 SMs x 6 resident, the driver's occupancy)",
           132 * 8, (unsigned long long)g.kernel_max_grid);
  report(!rc && g.kernel_max_grid == 132 * 6, msg);
  cuMemFree(bx);
  cuMemFree(bw);
  free(t16);
  free(t8);
  free(h);
  cuMemFree(x);
  cuMemFree(w);
  cuStreamDestroy(s);
}

int main(int argc, char **argv) {
  setup();
  for (int i = 1; i < argc; i++) {
    const char *c = argv[i];
    if (!strcmp(c, "classify")) t_classify();
    else if (!strncmp(c, "kernels=", 8)) t_kernels(c + 8);
    else if (!strcmp(c, "oobctx")) t_oobctx();
    else if (!strcmp(c, "oobsync")) t_oobsync();
    else if (!strcmp(c, "relaxed")) t_relaxed();
    else if (!strcmp(c, "nopools")) t_nopools();
    else if (!strcmp(c, "perthread")) t_perthread();
    else if (!strcmp(c, "vectors")) t_vectors();
    else if (!strcmp(c, "counters")) t_counters();
    else {
      fprintf(stderr, "unknown check %s\n", c);
      return 2;
    }
  }
  cudadrv_stats s = stats();
  if (s.illegal_accesses) report(0, "no illegal access counted by the double");
  return failures != 0;
}

