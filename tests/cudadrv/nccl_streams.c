/* nccl_streams.c — the host NCCL honours streams on the CUDA driver test
 * double: its collectives run in stream order after the work enqueued before
 * them and before the work enqueued after, not at call time, in groups over
 * two streams and in captured graphs; and no NCCL call synchronises
 * (command "order", the default). "capturefirst": a communicator's first
 * all-reduce captured; "capturequery": all-reduces beside another thread's
 * global-mode capture. The
 * same program runs under the shim (mpirun_shim with the double on
 * LD_LIBRARY_PATH, NCCLSHIM_MIN_BYTES=0): the inputs are exact in fp16. Run by tests/t/15-cudadrv.sh with 2
 * ranks (device rank % 2 each). One TAP line per check on rank 0; exits 1
 * on any rank if any check failed there.
 *
 * Determinism without timing: the stream is first blocked by a host function
 * that waits for a flag the main thread sets only after ncclAllReduce has
 * returned; the input is written on the stream behind it. A collective run at
 * call time would reduce the old contents. Must not: touch device buffers
 * from host code (they crash on the double). */
#include <cuda.h>
#include <mpi.h>
#include <nccl.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cudadrv_hooks.h"

static int rank, nranks, failures;

static void check(int ok, const char *what) {
  int all = 0, mine = !ok;
  MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  failures += !ok;
  if (rank == 0) printf("%s - %s%s\n", all ? "not ok" : "ok", what, all ? " (on some rank)" : "");
}

#define CK(call) do { CUresult r_ = (call); if (r_ != CUDA_SUCCESS) { printf("FATAL rank %d %s: %d\n", rank, #call, (int)r_); MPI_Abort(MPI_COMM_WORLD, 2); } } while (0)
/* Every NCCL call but communicator creation (NC0: it synchronises in real
 * NCCL, and the shim sets up its CUDA context there) is a user's
 * collective: bracketed for the double's count of synchronising calls made
 * inside one (must stay 0). */
#define NC_(call, in) do { if (in) cudadrv_region(1); ncclResult_t r_ = (call); if (in) cudadrv_region(0); if (r_ != ncclSuccess) { printf("FATAL rank %d %s: %s\n", rank, #call, ncclGetErrorString(r_)); MPI_Abort(MPI_COMM_WORLD, 2); } } while (0)
#define NC(call) NC_(call, 1)
#define NC0(call) NC_(call, 0)

static volatile int gate;
static void wait_gate(void *arg) {
  (void)arg;
  while (!__atomic_load_n(&gate, __ATOMIC_ACQUIRE)) sched_yield();
}

enum { N = 4099 };

/* in[i] = (rank+1) * (i % 7) / 4: sums exact in fp32 */
static void fill(float *h, int r) {
  for (int i = 0; i < N; i++) h[i] = (float)((r + 1) * (i % 7)) * 0.25f;
}
static int is_sum(const float *h) {
  for (int i = 0; i < N; i++) {
    float want = 0;
    for (int r = 0; r < nranks; r++) want += (float)((r + 1) * (i % 7)) * 0.25f;
    if (h[i] != want) return 0;
  }
  return 1;
}

static void cmd_order(ncclComm_t comm) {
  CUstream s, s2;
  CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CK(cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING));
  CUdeviceptr d, d2;
  float *in, *out;
  CK(cuMemAlloc(&d, N * 4));
  CK(cuMemAlloc(&d2, N * 4));
  CK(cuMemHostAlloc((void **)&in, N * 4, 0));
  CK(cuMemHostAlloc((void **)&out, N * 4, 0));

  /* 1: input written on the stream behind a gate, collective, copy back */
  CK(cuMemsetD32Async(d, 0, N, s));
  CK(cuStreamSynchronize(s));
  fill(in, rank);
  gate = 0;
  CK(cuLaunchHostFunc(s, wait_gate, NULL));
  CK(cuMemcpyHtoDAsync(d, in, N * 4, s));
  NC(ncclAllReduce((void *)d, (void *)d, N, ncclFloat32, ncclSum, comm, s));
  CK(cuMemcpyDtoHAsync(out, d, N * 4, s));
  __atomic_store_n(&gate, 1, __ATOMIC_RELEASE); /* only now may the stream run */
  CK(cuStreamSynchronize(s));
  check(is_sum(out), "an all-reduce runs after the copy enqueued before it and before the copy after it");

  /* 2: a group over two streams: each collective after its own stream's work */
  CK(cuMemsetD32Async(d, 0, N, s));
  CK(cuMemsetD32Async(d2, 0, N, s2));
  CK(cuStreamSynchronize(s));
  CK(cuStreamSynchronize(s2));
  gate = 0;
  CK(cuLaunchHostFunc(s2, wait_gate, NULL));
  CK(cuMemcpyHtoDAsync(d, in, N * 4, s));
  CK(cuMemcpyHtoDAsync(d2, in, N * 4, s2));
  NC(ncclGroupStart());
  NC(ncclAllReduce((void *)d, (void *)d, N, ncclFloat32, ncclSum, comm, s));
  NC(ncclAllReduce((void *)d2, (void *)d2, N, ncclFloat32, ncclSum, comm, s2));
  NC(ncclGroupEnd());
  CK(cuMemcpyDtoHAsync(out, d, N * 4, s));
  float *out2;
  CK(cuMemHostAlloc((void **)&out2, N * 4, 0)); /* pinned: a pageable copy would wait for the gate */
  CK(cuMemcpyDtoHAsync(out2, d2, N * 4, s2));
  gate = 1;
  CK(cuStreamSynchronize(s));
  CK(cuStreamSynchronize(s2));
  check(is_sum(out) && is_sum(out2), "a group over two streams waits for the work of both");
  CK(cuMemFreeHost(out2));

  /* 3: capture the collective into a graph and launch it twice */
  CK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
  CK(cuMemcpyHtoDAsync(d, in, N * 4, s));
  NC(ncclAllReduce((void *)d, (void *)d, N, ncclFloat32, ncclSum, comm, s));
  CK(cuMemcpyDtoHAsync(out, d, N * 4, s));
  CUgraph g;
  CK(cuStreamEndCapture(s, &g));
  CUgraphExec x;
  CK(cuGraphInstantiate(&x, g, 0));
  memset(out, 0, N * 4);
  int ran_at_capture = 0;
  for (int i = 0; i < N; i++) ran_at_capture |= out[i] != 0;
  int ok = 1;
  for (int rep = 0; rep < 2; rep++) {
    memset(out, 0, N * 4);
    CK(cuGraphLaunch(x, s));
    CK(cuStreamSynchronize(s));
    ok &= is_sum(out);
  }
  check(ok && !ran_at_capture, "a captured all-reduce runs at each graph launch");
  CK(cuGraphExecDestroy(x));
  CK(cuGraphDestroy(g));
  cudadrv_stats st;
  cudadrv_get_stats(&st);
  check(st.host_ops >= 5 && !st.illegal_accesses && !st.capture_violations, "collectives ran as stream work of the double, no violation");
  check(!st.region_syncs, "no synchronising driver call inside an NCCL call");

}

/* The first all-reduce of a communicator is captured (torch.cuda.graph on a
 * fresh process group): capture must stay valid, and the graph's replays
 * give the sum. */
static void cmd_capturefirst(ncclComm_t comm) {
  CUstream s;
  CUdeviceptr d;
  float *in, *out;
  CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CK(cuMemAlloc(&d, N * 4));
  CK(cuMemHostAlloc((void **)&in, N * 4, 0));
  CK(cuMemHostAlloc((void **)&out, N * 4, 0));
  fill(in, rank);
  CK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
  CK(cuMemcpyHtoDAsync(d, in, N * 4, s));
  ncclResult_t nr = ncclAllReduce((void *)d, (void *)d, N, ncclFloat32, ncclSum, comm, s);
  CK(cuMemcpyDtoHAsync(out, d, N * 4, s));
  CUgraph g = NULL;
  CUresult end = cuStreamEndCapture(s, &g);
  check(nr == ncclSuccess && end == CUDA_SUCCESS, "a communicator's first all-reduce captured: the capture stays valid");
  if (end != CUDA_SUCCESS) return;
  CUgraphExec x;
  CK(cuGraphInstantiate(&x, g, 0));
  CK(cuGraphLaunch(x, s));
  CK(cuStreamSynchronize(s));
  check(is_sum(out), "its graph replays the sum");
  CK(cuGraphExecDestroy(x));
  CK(cuGraphDestroy(g));
}

/* Another thread captures in global mode (torch.cuda.graph's default) while
 * this one runs uncaptured all-reduces: nothing NCCL does here (event
 * queries, synchronisation) may invalidate that capture. */
static CUstream cap_stream;
static volatile int cap_phase;
static CUresult cap_end;
static void *capture_thread(void *arg) {
  CUcontext c = arg;
  CK(cuCtxSetCurrent(c));
  CK(cuStreamBeginCapture(cap_stream, CU_STREAM_CAPTURE_MODE_GLOBAL));
  __atomic_store_n(&cap_phase, 1, __ATOMIC_RELEASE);
  while (__atomic_load_n(&cap_phase, __ATOMIC_ACQUIRE) != 2) sched_yield();
  CUgraph g = NULL;
  cap_end = cuStreamEndCapture(cap_stream, &g);
  if (g) cuGraphDestroy(g);
  return NULL;
}

static void cmd_capturequery(ncclComm_t comm, CUcontext ctx) {
  CUstream s;
  CUdeviceptr d;
  float *in, *out;
  CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CK(cuStreamCreate(&cap_stream, CU_STREAM_NON_BLOCKING));
  CK(cuMemAlloc(&d, N * 4));
  CK(cuMemHostAlloc((void **)&in, N * 4, 0));
  CK(cuMemHostAlloc((void **)&out, N * 4, 0));
  fill(in, rank);
  CK(cuMemcpyHtoDAsync(d, in, N * 4, s));
  NC(ncclAllReduce((void *)d, (void *)d, N, ncclFloat32, ncclSum, comm, s)); /* first call: outside */
  CK(cuStreamSynchronize(s));
  pthread_t t;
  pthread_create(&t, NULL, capture_thread, ctx);
  while (__atomic_load_n(&cap_phase, __ATOMIC_ACQUIRE) != 1) sched_yield();
  int ok = 1;
  for (int k = 0; k < 4; k++) {
    CK(cuMemcpyHtoDAsync(d, in, N * 4, s));
    NC(ncclAllReduce((void *)d, (void *)d, N, ncclFloat32, ncclSum, comm, s));
    CK(cuMemcpyDtoHAsync(out, d, N * 4, s));
    /* the program itself waits only after the capture ended (below) */
    if (k == 3) break;
  }
  __atomic_store_n(&cap_phase, 2, __ATOMIC_RELEASE);
  pthread_join(t, NULL);
  CK(cuStreamSynchronize(s));
  ok = is_sum(out);
  check(cap_end == CUDA_SUCCESS, "all-reduces on one thread leave another thread's global-mode capture valid");
  check(ok, "and give the sum");
}

int main(int argc, char **argv) {
  int prov;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &prov);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);
  setvbuf(stdout, NULL, _IOLBF, 0);
  CK(cuInit(0));
  CUcontext ctx;
  CK(cuDevicePrimaryCtxRetain(&ctx, rank % 2));
  CK(cuCtxSetCurrent(ctx));
  ncclUniqueId id;
  if (rank == 0) NC0(ncclGetUniqueId(&id));
  MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
  ncclComm_t comm;
  NC0(ncclCommInitRank(&comm, nranks, id, rank));
  const char *cmd = argc > 1 ? argv[1] : "order";
  if (!strcmp(cmd, "capturefirst")) cmd_capturefirst(comm);
  else if (!strcmp(cmd, "capturequery")) cmd_capturequery(comm, ctx);
  else cmd_order(comm);
  NC(ncclCommDestroy(comm));
  MPI_Finalize();
  return failures != 0;
}
