/* cudadrv.h — internals of the CUDA driver test double (libcuda.so.1 on host
 * memory, see tests/README.md): handles, the stream work queue, capture, the
 * allocation table.
 *
 * The pieces: core.c (init, errors, devices, contexts, capture-mode rules,
 * counters, cuGetProcAddress), mem.c (device arenas, pools, pinned, managed,
 * VMM, pointer attributes, translation), stream.c (streams, worker threads,
 * events, copies, sets, host work), graph.c (capture, graphs), module.c
 * (modules from the shim's fatbin, host implementations of its kernels).
 *
 * Must not: be linked into the shim, or let host code reach device memory
 * (device addresses are mapped PROT_NONE; only the views of mem.c reach it). */
#ifndef CUDADRV_H
#define CUDADRV_H

#include <cuda.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>

#include "cudadrv_hooks.h"

#define CD_EXPORT __attribute__((visibility("default")))
#define CD_NDEV 2

/* ---- core.c ---- */
CUresult cd_ready(void);                 /* CUDA_ERROR_NOT_INITIALIZED before cuInit */
void cd_note(const char *fmt, ...) __attribute__((format(printf, 1, 2))); /* "cudadrv: ..." */
void cd_count_illegal(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void cd_count(uint64_t *field);          /* atomic ++ of a cudadrv_stats field */
extern cudadrv_stats cd_stats;
/* A synchronising call: counted when the thread is inside a cudadrv_region. */
void cd_sync_call(const char *api);
/* A non-blocking query's answer: NOT_READY inside a cudadrv_region counts in
 * region_polls (a host that polls there is waiting for the device). */
void cd_poll_result(const char *api, CUresult r);
/* A potentially unsafe call during capture (allocation, module load, sync,
 * query): CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED and the offending captures
 * invalidated when this thread's mode forbids it. */
CUresult cd_unsafe(const char *api);

struct CUctx_st {
  int magic;
  int dev;
  int primary;
  unsigned long long id;
  pthread_mutex_t lock;     /* streams list */
  struct CUstream_st *streams;
  struct CUstream_st *legacy;
};
CUcontext cd_current(void);
int cd_device_sm(void);                  /* compute capability, major * 10 + minor (CUDADRV_SM) */
CUcontext cd_primary(int dev);           /* NULL for a bad ordinal */
int cd_ctx_valid(CUcontext c);

/* ---- stream.c ---- */
typedef enum { OP_KERNEL, OP_COPY, OP_SET, OP_RECORD, OP_WAIT, OP_HOST, OP_FREE, OP_GRAPH } cd_opkind;

/* A captured node's dependencies: node numbers of its capture (at most
 * CD_DEPS; `all`: every earlier node, when more were needed). */
#define CD_DEPS 8
typedef struct {
  uint64_t n[CD_DEPS];
  int k, all;
} cd_deps;

typedef struct cd_op {
  cd_opkind kind;
  int branch;               /* captured: its stream's index in the capture */
  uint64_t node;            /* captured: its number (1, 2, ... in enqueue order) */
  cd_deps deps;             /* captured: what it waits for when a graph runs */
  struct cd_op *next;
  const char *api;                /* for messages */
  union {
    struct { const struct CUfunc_st *fn; unsigned char *params; unsigned grid, block; } k;
    struct { CUdeviceptr dst, src; size_t bytes; void *staged; } copy;
    struct { CUdeviceptr dst; unsigned value; unsigned width; size_t n; } set;
    struct { struct CUevent_st *ev; uint64_t gen; } rec;
    struct { struct CUstream_st *s; uint64_t seq; } wait;
    struct { void (*fn)(void *); void *arg; void (*release)(void *); int *refs; } host;
    struct { CUdeviceptr p; uint64_t gen; } free;
    struct { struct CUgraphExec_st *exec; } graph;
  } u;
} cd_op;

struct cd_capture;

struct CUstream_st {
  int magic;
  CUcontext ctx;
  unsigned flags;
  int prio;
  int kind;                 /* 0 user, 1 legacy, 2 per-thread */
  unsigned long long id;
  struct CUstream_st *next_in_ctx;
  pthread_mutex_t lock;
  pthread_cond_t cv;
  cd_op *head, *tail;
  uint64_t enq, done;       /* ops enqueued / completed */
  int dead;
  pthread_t thr;
  struct cd_capture *cap;   /* capture this stream belongs to (graph.c) */
  uint64_t cap_last;        /* its last captured node */
  cd_deps cap_joins;        /* events it waited for since then: its next node's extra dependencies */
  long delay_us;            /* CUDADRV_STREAM_DELAY_US: each op starts this late */
};

struct CUevent_st {
  int magic;
  unsigned flags;
  CUcontext ctx;
  pthread_mutex_t lock;
  struct CUstream_st *s;    /* last record: stream and position */
  uint64_t seq;
  uint64_t gen, done_gen;   /* records made / completed */
  uint64_t ns;              /* time of the last completed record */
  struct cd_capture *cap;   /* recorded in this capture */
  uint64_t cap_node;
  cd_deps cap_deps;         /* ... what a stream waiting for it then depends on */
};

/* Resolves a stream handle (NULL/legacy/per-thread need a current context). */
CUresult cd_stream(CUstream h, struct CUstream_st **out);
/* Puts op on s (or into s's capture); takes ownership. */
CUresult cd_enqueue(struct CUstream_st *s, cd_op *op);
cd_op *cd_op_new(cd_opkind k, const char *api);
void cd_op_free(cd_op *op);
void cd_op_run(cd_op *op);               /* executes one op (worker or graph) */
/* Waits until s has completed everything enqueued so far. */
void cd_stream_drain(struct CUstream_st *s);

/* ---- graph.c ---- */
typedef struct cd_capture {
  unsigned long long id;
  CUstreamCaptureMode mode;
  pthread_t thread;
  struct CUstream_st *origin;
  int invalid;
  char why[160];
  cd_op *head, *tail;
  uint64_t nodes;
  uint64_t joined[64];      /* per member stream: last node joined back */
  struct CUstream_st *members[64];
  int nmembers;
  CUdeviceptr *allocs;      /* made by cuMemAllocAsync during the capture */
  int nallocs;
  struct cd_capture *next_active;
} cd_capture;
void cd_capture_add(cd_capture *c, struct CUstream_st *s, cd_op *op);
/* What a record on s under capture makes its event stand for (under s's capture). */
void cd_capture_record_deps(struct CUstream_st *s, cd_deps *out);
void cd_capture_invalidate(cd_capture *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Active captures, for cd_unsafe (lock held while the callback runs). */
void cd_captures_lock(void);
void cd_captures_unlock(void);
cd_capture *cd_captures_first(void);
/* s waits for an event recorded during a capture: s joins it. */
CUresult cd_capture_join(struct CUstream_st *s, struct CUevent_st *e);
/* An allocation made on a capturing stream; freed with the graph. */
void cd_capture_note_alloc(cd_capture *c, CUdeviceptr p);

/* ---- mem.c ---- */
/* Host address of [p, p+bytes) for the double's own work (kernels, copies)
 * or NULL (the access is then counted and reported with api). Host memory
 * the double does not know is accepted only when host_ok. */
void *cd_view(CUdeviceptr p, size_t bytes, const char *api, int host_ok);
/* The device of the kernel this thread is running (-1: not a kernel). A
 * kernel may touch device memory of its own device only (no peer access),
 * and VMM memory only where cuMemSetAccess allowed that device. */
extern __thread int cd_exec_dev;
int cd_is_pinned_or_device(const void *p);     /* known to the double */
int cd_is_host_memory(uintptr_t p);            /* pinned or registered host memory */
int cd_free_async_run(CUdeviceptr p, uint64_t gen); /* a queued cuMemFreeAsync runs */
CUresult cd_free_device(CUdeviceptr p, int async);
CUresult cd_alloc_device(int dev, CUcontext ctx, size_t bytes, struct CUmemPoolHandle_st *pool,
                         CUdeviceptr *out);

/* ---- module.c ---- */
typedef struct cd_kernel cd_kernel;
struct CUfunc_st {
  int magic;
  const cd_kernel *k;             /* the double's contract for it */
  const struct simt_kernel_ *sk;  /* the kernel compiled for the CPU (tests/simt) */
  struct CUmod_st *mod;
};
size_t cd_kernel_params_size(const struct CUfunc_st *f);
/* Copies the launch's parameters (the kernel's own signature) into buf. */
void cd_kernel_pack(const struct CUfunc_st *f, void **params, unsigned char *buf);
void cd_kernel_run(const struct CUfunc_st *f, const unsigned char *params, unsigned grid, unsigned block);

#endif
