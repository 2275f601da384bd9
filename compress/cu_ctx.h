/* cu_ctx.h — what the CUDA side keeps per CUcontext: the kernel module (the
 * embedded fatbin, else the kernels compiled by NVRTC) and its functions, the
 * device's SM count and stream-ordered allocation support, the
 * overflow/underflow counters in pinned host-mapped memory, the slots of the
 * out-of-band exchange (pinned host + device memory, an event and a private
 * stream each, made at setup so the hook path never allocates for it), the
 * side streams (created on first use), and a pool of timing events.
 *
 * Entries are created on a context's first use and never freed (a process has
 * a handful of contexts); lookups take no lock. A context handle reused after
 * destruction is told apart by its id (cuCtxGetId) where the driver has it.
 *
 * Must not: synchronise, or run driver calls that are illegal during stream
 * capture except on a context's first use (module load, host allocation),
 * which runs in relaxed capture mode and never for a captured call. That
 * first use is normally a communicator's creation (nsc_backend_prepare(),
 * inside the interposed ncclCommInit*, which synchronise anyway), so no
 * collective pays for it. */
#ifndef NSC_CU_CTX_H
#define NSC_CU_CTX_H

#include <pthread.h>
#include <stdint.h>

#include "cu_abi.h"
#include "cu_driver.h"

#define NSC_K_ENUM(k) NSC_K_##k,
enum { NSC_KERNEL_NAMES(NSC_K_ENUM) NSC_K_COUNT };
#undef NSC_K_ENUM

typedef struct nsc_cuctx nsc_cuctx;

#define NSC_CU_MAX_SIDE 64 /* side streams per context */
#define NSC_CU_OOB_SLOTS 32   /* concurrent out-of-band exchanges per context (learning accumulation keeps up to 4 per communicator) */
#define NSC_CU_SLOT_BIT(i) ((uint64_t)1 << (i))
#define NSC_CU_OOB_BYTES 1024 /* bytes per exchange */

/* A pooled event; handed out by nsc_cuev_get, back with nsc_cuev_put. */
typedef struct nsc_cuev {
  CUevent ev;
  nsc_cuctx *owner;
  struct nsc_cuev *next;
} nsc_cuev;

struct nsc_cuctx {
  CUcontext ctx;
  unsigned long long id;
  CUresult setup;          /* CUDA_SUCCESS, or why the entry is unusable */
  const char *setup_what;
  CUresult kload;          /* CUDA_SUCCESS, or why the kernels did not load: the entry
                            * still serves exchanges, staging and marks */
  const char *kload_what;
  CUdevice dev;
  CUmodule mod;
  CUfunction fn[NSC_K_COUNT];
  int sms;   /* multiprocessors, for grid sizes */
  int bps[NSC_K_COUNT]; /* resident blocks per multiprocessor of each kernel (the driver's occupancy) */
  int pools; /* cuMemAllocAsync usable */
  CUmemoryPool pool; /* the shim's own pool on the device (release threshold 0), or NULL: the default pool */
  char kernels[128]; /* where the module came from ("fatbin", "NVRTC 13.2, sm_90 CUBIN") */
  volatile uint64_t *counters; /* pinned host mirror: [0] overflow, [1] underflow */
  CUdeviceptr counters_dev;    /* device memory the kernels add to (not the pinned mirror: their
                                * atomics would cross PCIe on every cast) */
  CUstream count_stream;       /* private: copies the counters to the mirror */
  CUevent count_ev;
  unsigned char *oob_host;  /* NSC_CU_OOB_SLOTS * NSC_CU_OOB_BYTES, pinned */
  CUdeviceptr oob_dev;      /* the same size on the device */
  CUevent oob_ev[NSC_CU_OOB_SLOTS];
  CUstream oob_stream[NSC_CU_OOB_SLOTS]; /* the private stream of each slot */
  CUstream rel_stream; /* frees memory after a release point (backend.h), never a caller's stream */
  pthread_mutex_t lock; /* everything below */
  uint64_t oob_busy;    /* bit per slot */
  uint64_t oob_ended;   /* bit per slot: its copy back is enqueued (atomic, read without the lock) */
  uint64_t oob_abandoned; /* bit per slot: busy until its event completes (abandoned exchanges) */
  nsc_cuev *free_ev;
  int nev;
  CUevent join_ev; /* record-then-wait, reusable at once */
  int nside;
  struct {
    CUstream of, side;
    uintptr_t thread; /* CU_STREAM_PER_THREAD: the thread whose stream it is, else 0 */
  } sides[NSC_CU_MAX_SIDE];
};

/* Every function returns CUDA_SUCCESS or the failing call's result with *what
 * naming it (a static string). */

/* The entry for the context of stream s (the current context for the NULL and
 * per-thread/legacy handles), created on first use. A context whose setup
 * failed keeps failing with the same result, untried. Kernels that did not
 * load do not fail the entry (c->kload says why; launches fail with it), so
 * the configuration check can still tell every rank. */
CUresult nsc_cuctx_of(CUstream s, nsc_cuctx **out, const char **what);
/* The entry for context ctx (pushed for its setup when not current). */
CUresult nsc_cuctx_for(CUcontext ctx, nsc_cuctx **out, const char **what);

/* Make c's context current for a few driver calls: *pushed tells leave() to
 * restore the previous one. Cheap when it is already current. */
CUresult nsc_cuctx_enter(const nsc_cuctx *c, int *pushed, const char **what);
void nsc_cuctx_leave(int pushed);

/* Totals over all contexts: each context's device counters copied to its
 * pinned mirror on a private stream, waited for by polling that copy's
 * event (a few microseconds; never the callers' streams, so the totals may
 * lag kernels still running). For summaries and ncclshim_get_stats, never
 * inside a collective. */
void nsc_cuctx_counts(uint64_t *overflow, uint64_t *underflow);


/* The side stream of caller stream s: one per caller stream (a shared one
 * would order the work of unrelated streams, e.g. two communicators, and can
 * deadlock across ranks), so one per thread for CU_STREAM_PER_THREAD,
 * non-blocking, at s's priority; s itself once NSC_CU_MAX_SIDE are in use. */
CUresult nsc_cuctx_side_stream(nsc_cuctx *c, CUstream s, CUstream *side, const char **what);
/* waiter waits for everything enqueued on signaller so far (event record +
 * stream wait; legal under capture). */
CUresult nsc_cuctx_join(nsc_cuctx *c, CUstream waiter, CUstream signaller, const char **what);

/* An exchange slot: *slot, its pinned host bytes, device bytes and event. */
CUresult nsc_cuctx_oob_get(nsc_cuctx *c, int *slot, const char **what);
void nsc_cuctx_oob_put(nsc_cuctx *c, int slot);
/* The slot of an exchange nobody will finish: given back by a later
 * nsc_cuctx_oob_get once the slot's event (recorded after its last work)
 * completed, queried without waiting. */
void nsc_cuctx_oob_abandon(nsc_cuctx *c, int slot);
/* The slot whose device bytes start at dev, or -1. */
int nsc_cuctx_oob_slot(const nsc_cuctx *c, CUdeviceptr dev);

/* What the kernels of the first usable context came from ("none" before). */
const char *nsc_cuctx_kernels(void);

/* Events (default flags, so they carry timing) from c's pool, which grows in
 * blocks up to NSC_CUEV_MAX: enough for the summary rings (1024 records of up
 * to 4 marks) of several communicators on one device. When it is exhausted a
 * mark is not taken (the log counts it as dropped). */
#define NSC_CUEV_MAX 32768
CUresult nsc_cuev_get(nsc_cuctx *c, nsc_cuev **e, const char **what);
void nsc_cuev_put(nsc_cuev *e);

#endif
