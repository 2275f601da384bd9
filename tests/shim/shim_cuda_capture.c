/* shim_cuda_capture.c — a communicator whose first all-reduces are captured
 * into a CUDA graph (issue 13, defect 3), on the CUDA driver test double with
 * the shim preloaded over the host NCCL.
 *
 *   shim_cuda_capture single|group
 *
 * single: the communicator's first all-reduce is captured (global mode, as
 *         torch.cuda.graph does); group: its first all-reduces are captured
 *         inside ncclGroupStart/End. Either way the shim must forward them
 *         untouched and leave its first-call check (fusion block, kernels,
 *         exchange) to the first uncaptured call: no allocation on the
 *         capturing stream (graph_allocs), nothing that invalidates the
 *         capture (capture_violations), the capture ends cleanly, and the
 *         stats count pass-throughs only. Buffers are pinned host memory (the
 *         CUDA backend's, and reachable by the host NCCL, which ignores
 *         streams). Exits 1 on a failed check. Must not: make an uncaptured
 *         call on a device buffer (the host NCCL cannot reach device memory). */
#include <cuda.h>
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "cudadrv_hooks.h"
#include "ncclshim.h"
#include "testmpi.h"
#include "cudatest.h"

static int failures;
static void check(int ok, const char *what) {
  printf("%s - rank %d: %s\n", ok ? "ok" : "not ok", tm_rank(), what);
  failures += !ok;
}


int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int group = argc > 1 && !strcmp(argv[1], "group");
  CUstream s = ct_stream();
  enum { N = 1 << 16 }; /* 256 KiB of fp32: compressible by size */
  float *x = NULL, *y = NULL;
  DRV(cuMemHostAlloc((void **)&x, N * 4, CU_MEMHOSTALLOC_PORTABLE));
  DRV(cuMemHostAlloc((void **)&y, N * 4, CU_MEMHOSTALLOC_PORTABLE));
  for (int i = 0; i < N; i++) x[i] = y[i] = (float)(i % 64);
  ncclComm_t comm = tm_comm_world();

  DRV(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
  if (group) NCCL_OK(ncclGroupStart());
  NCCL_OK(ncclAllReduce(x, x, N, ncclFloat32, ncclSum, comm, s));
  if (group) {
    NCCL_OK(ncclAllReduce(y, y, N, ncclFloat32, ncclSum, comm, s));
    NCCL_OK(ncclGroupEnd());
  }
  CUgraph g = NULL;
  CUresult er = cuStreamEndCapture(s, &g);
  check(er == CUDA_SUCCESS && g != NULL, "the capture ends cleanly");
  if (g) cuGraphDestroy(g);

  cudadrv_stats ds;
  cudadrv_get_stats(&ds);
  check(ds.capture_violations == 0, "nothing the shim did invalidated the capture");
  check(ds.graph_allocs == 0, "no allocation on the capturing stream (no graph allocation node)");
  ncclshim_stats_t st;
  int (*get)(ncclshim_stats_t *) = (int (*)(ncclshim_stats_t *))dlsym(RTLD_DEFAULT, "ncclshim_get_stats");
  if (get && get(&st) == 0) {
    char msg[160];
    snprintf(msg, sizeof msg, "captured calls forwarded untouched (%llu passed through, %llu compressed, %llu real calls)",
             (unsigned long long)st.passthrough, (unsigned long long)st.compressed, (unsigned long long)st.real_calls);
    unsigned long long want = group ? 2 : 1;
    check(st.passthrough == want && st.compressed == 0 && st.fused == 0 && st.real_calls == want, msg); /* no check exchange */
  } else {
    check(0, "the shim is preloaded (ncclshim_get_stats found)");
  }
  ncclCommDestroy(comm);
  MPI_Finalize();
  return failures != 0;
}
