/* perf_mem.h — where allreduce_perf's buffers live and how it waits for
 * them: a small table with a host implementation (malloc, nothing to wait
 * for) and a CUDA one (cudaMalloc, one non-blocking stream, CUDA graphs),
 * chosen once at start-up so the harness is the same for both.
 *
 * Must not: time anything (the harness times with the host clock around the
 * launches and sync(), as nccl-tests does), or print. */
#ifndef PERF_MEM_H
#define PERF_MEM_H

#include <stddef.h>

typedef struct perf_mem {
  const char *name;                                  /* "host" or "cuda" */
  void *stream;                                      /* for ncclAllReduce: cudaStream_t or NULL */
  int (*alloc)(void **p, size_t bytes);
  void (*release)(void *p);
  int (*upload)(void *dst, const void *src, size_t bytes);   /* host -> buffer, complete on return */
  int (*download)(void *dst, const void *src, size_t bytes); /* buffer -> host, complete on return */
  int (*sync)(void);                                 /* all work queued on stream is done */
  /* CUDA graphs of the stream's work; all NULL when unavailable. */
  int (*capture_begin)(void);
  int (*capture_end)(void);                          /* ends capture and instantiates */
  int (*graph_launch)(int times);
  void (*graph_release)(void);
  /* "[0000:04:00] NVIDIA H200" style text and the device index (-1 = host). */
  void (*describe)(char *buf, size_t len, int *device);
  void (*close)(void);
} perf_mem_t;

/* Picks the implementation from ALLREDUCE_PERF_MEM (auto|host|cuda; auto:
 * cuda when built with CUDA and a GPU is visible, else host) and opens it;
 * local_rank picks the GPU. Returns 0, or -1 with a message in err. */
int perf_mem_open(perf_mem_t *m, int local_rank, char *err, size_t errlen);

/* Bytes of host memory this process may still use: MemAvailable of
 * /proc/meminfo, lowered to what the cgroup (v2 memory.max - memory.current)
 * leaves; 0 when neither can be read. */
unsigned long long perf_mem_host_available(void);

#ifdef PERF_HAVE_CUDA
/* The CUDA table. Returns 0; 1 when no GPU is visible (why in err); -1 on a
 * CUDA error. */
int perf_mem_cuda_open(perf_mem_t *m, int local_rank, char *err, size_t errlen);
#endif

#endif
