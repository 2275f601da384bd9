/* cudadrv_hooks.h — what the CUDA driver test double (tests/cudadrv,
 * build/lib/cudadrv/libcuda.so.1) exports besides the driver API, for tests
 * and for the host NCCL running on it.
 *
 * The double is a TEST DOUBLE: a host implementation of the part of the CUDA
 * driver API that the shim uses, with device memory the host cannot touch.
 * Nothing of it ships in the shim.
 *
 * Find the hooks without linking the double (the real driver lacks them):
 *   void *h = dlopen("libcuda.so.1", RTLD_NOLOAD | RTLD_LAZY);
 *   int (*view)(const void *, size_t, void **) = h ? dlsym(h, "cudadrv_host_view") : NULL;
 * (NULL: no double loaded, e.g. the real driver or none.)
 *
 * Must not: grow into a second API; hooks observe, translate and enqueue. */
#ifndef CUDADRV_HOOKS_H
#define CUDADRV_HOOKS_H

#include <stddef.h>
#include <stdint.h>

/* Things the double found wrong, per process, since start or the last reset.
 * Each is also printed to stderr when it happens ("cudadrv: ..."), and at
 * exit a process with any non-zero field prints "cudadrv: FAIL ..." and exits
 * with status 86 (CUDADRV_EXIT_ON_FAIL=0 keeps its own status). */
typedef struct {
  uint64_t capture_violations; /* calls that invalidated a stream capture */
  uint64_t region_syncs;       /* synchronising calls inside a cudadrv_region */
  uint64_t illegal_accesses;   /* kernels/copies touching memory they may not */
  uint64_t graph_allocs;       /* cuMemAllocAsync on a capturing stream (information) */
  uint64_t launches;           /* kernels run (information) */
  uint64_t host_ops;           /* cudadrv_enqueue work run (information) */
  /* The kernels run as compress/kernels.cu compiled for the CPU (tests/simt),
   * information: thread blocks run, __syncthreads and shuffles executed (per
   * thread), aligned vector loads and stores. A kernel fault (misaligned
   * vector access, barrier deadlock) counts in illegal_accesses. */
  uint64_t kernel_blocks, kernel_barriers, kernel_shuffles, kernel_vec_accesses;
  /* Kernel launches whose counters operand (atomics, one per block) was
   * host memory: each atomic crosses PCIe on a GPU (issue 23, defect 4). */
  uint64_t kernel_host_atomics;
  uint64_t kernel_max_grid; /* the largest grid launched (blocks) */
  uint64_t pool_reuses;     /* cuMemAllocAsync handed out a block freed on its stream, before the free ran */
  /* Non-blocking queries (cuEventQuery, cuStreamQuery) that found device
   * work not done inside a cudadrv_region (information): a host polling
   * there waits for the device (issue 23, defect 2). CUDADRV_POLL_NOTES=1
   * prints each. */
  uint64_t region_polls;
  /* The kernels' global memory accesses (tests/simt: every one through
   * kernels.cu's accessors), information: loads and stores, and bytes. */
  uint64_t kernel_loads, kernel_stores, kernel_load_bytes, kernel_store_bytes;
} cudadrv_stats;

/* Copies the counters; returns 0. */
int cudadrv_get_stats(cudadrv_stats *out);
/* Zeroes the counters (tests that provoke errors on purpose). */
void cudadrv_reset_stats(void);

/* Brackets a user's collective on the calling thread (enter 1 / leave 0,
 * nestable): every synchronising driver call made meanwhile on this thread
 * (stream/event/context synchronize, cuMemAlloc/cuMemFree, synchronous
 * copies and sets, device-to-pageable copies, host allocation, module load)
 * counts in region_syncs. */
void cudadrv_region(int enter);

/* The host address where bytes [p, p+bytes) of memory known to the double
 * can be read and written: the host view of device memory, p itself for
 * pinned host and managed memory. Returns 0, or -1 (and counts an illegal
 * access) when the range is not inside one live allocation. */
int cudadrv_host_view(const void *p, size_t bytes, void **host);

/* Runs fn(arg) in stream order on `stream` (a CUstream; NULL/0x1/0x2 are the
 * current context's legacy/per-thread streams) on the stream's worker
 * thread; if the stream is being captured, fn becomes a graph node run at
 * each launch. release(arg) (may be NULL) once the work can no longer run.
 * With n streams, the work runs once after all earlier work of every stream
 * and before their later work. Returns 0 (a CUresult otherwise). */
int cudadrv_enqueue(void *stream, void (*fn)(void *), void *arg, void (*release)(void *));
int cudadrv_enqueue_multi(void *const *streams, int n, void (*fn)(void *), void *arg,
                          void (*release)(void *));

/* The stream a handle names now on this thread: NULL/0x1 (legacy) and 0x2
 * (per-thread) resolved with the current context, others returned as they
 * are; NULL when it names none (no current context). For work enqueued
 * later from another thread (the host NCCL's nonblocking polls). */
void *cudadrv_stream_handle(void *stream);

#endif
