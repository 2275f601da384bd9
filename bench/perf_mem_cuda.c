/* perf_mem_cuda.c — the CUDA implementation of perf_mem.h: device buffers,
 * one non-blocking stream handed to NCCL, and CUDA graphs for -G.
 *
 * Copies go through cudaMemcpyAsync on that stream followed by a stream
 * synchronize: a plain cudaMemcpy runs on the legacy stream, which does not
 * order against a non-blocking stream.
 *
 * Must not: print or exit; be compiled without CUDA (the Makefile leaves it
 * out of host-only builds). */
#include "perf_mem.h"

#include <stdio.h>
#include <cuda_runtime_api.h>

static cudaStream_t stream;
static cudaGraph_t graph;
static cudaGraphExec_t graph_exec;
static int device;

#define CU(call) do { if ((call) != cudaSuccess) return -1; } while (0)

static int cu_alloc(void **p, size_t bytes) {
  CU(cudaMalloc(p, bytes ? bytes : 1));
  return 0;
}

static void cu_release(void *p) { cudaFree(p); }

static int cu_copy(void *dst, const void *src, size_t bytes) {
  if (!bytes) return 0;
  CU(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream));
  CU(cudaStreamSynchronize(stream));
  return 0;
}

static int cu_sync(void) {
  CU(cudaStreamSynchronize(stream));
  return 0;
}

static int cu_capture_begin(void) {
  /* Thread-local mode: NCCL may allocate while the capture is open. */
  CU(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  return 0;
}

static int cu_capture_end(void) {
  CU(cudaStreamEndCapture(stream, &graph));
  CU(cudaGraphInstantiateWithFlags(&graph_exec, graph, 0));
  return 0;
}

static int cu_graph_launch(int times) {
  for (int i = 0; i < times; i++) CU(cudaGraphLaunch(graph_exec, stream));
  return 0;
}

static void cu_graph_release(void) {
  if (graph_exec) cudaGraphExecDestroy(graph_exec);
  if (graph) cudaGraphDestroy(graph);
  graph_exec = NULL;
  graph = NULL;
}

static void cu_describe(char *buf, size_t len, int *dev) {
  struct cudaDeviceProp prop;
  if (cudaGetDeviceProperties(&prop, device) == cudaSuccess)
    snprintf(buf, len, "[%04x:%02x:%02x] %s", prop.pciDomainID, prop.pciBusID, prop.pciDeviceID, prop.name);
  else
    snprintf(buf, len, "[unknown] CUDA device");
  *dev = device;
}

static void cu_close(void) {
  cu_graph_release();
  if (stream) cudaStreamDestroy(stream);
  stream = NULL;
}

int perf_mem_cuda_open(perf_mem_t *m, int local_rank, char *err, size_t errlen) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n < 1) {
    snprintf(err, errlen, "no CUDA device visible (%s)", e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
    return 1;
  }
  device = local_rank % n;
  if ((e = cudaSetDevice(device)) != cudaSuccess ||
      (e = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking)) != cudaSuccess) {
    snprintf(err, errlen, "CUDA device %d: %s", device, cudaGetErrorString(e));
    return -1;
  }
  *m = (perf_mem_t){
    .name = "cuda", .stream = stream, .alloc = cu_alloc, .release = cu_release,
    .upload = cu_copy, .download = cu_copy, .sync = cu_sync,
    .capture_begin = cu_capture_begin, .capture_end = cu_capture_end,
    .graph_launch = cu_graph_launch, .graph_release = cu_graph_release,
    .describe = cu_describe, .close = cu_close,
  };
  return 0;
}
