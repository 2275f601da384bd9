/* staging.h — wire-type staging memory per (communicator, stream).
 *
 * Each stream has an arena: a bump allocator over one block, reused only in
 * stream order (everything the shim enqueues on a stream runs in order, so the
 * next call may reuse the block once the previous call's cast-back has been
 * enqueued). Several live regions (calls inside one group) take successive
 * pieces; when the block is too small a further block is added and, once
 * nothing is live, the arena is rebuilt as one block grown geometrically.
 *
 * The size limit is checked against the logical need, which depends only on
 * the sequence of calls on this communicator, so every rank fails the same
 * call when the limit is exceeded.
 *
 * Arenas are keyed by (backend, stream handle), and for CU_STREAM_PER_THREAD
 * (one handle, a different stream on every thread) by the calling thread too.
 *
 * Locking: the staging has a lock of its own and never calls the backend's
 * alloc/release while holding it, so callers must not hold the communicator's
 * lock around the calls that allocate (get, fuse_reserve, fuse_settle): the
 * watchdog's poll and abort paths need that lock, and an allocation (on a GPU:
 * cuMemAllocAsync from the device's default pool, which PyTorch's caching
 * allocator does not see) must never keep them waiting. */
#ifndef NSC_STAGING_H
#define NSC_STAGING_H

#include <stddef.h>
#include <stdint.h>

#include "backend.h"

/* Growing the fusion block needs every rank's word, and waiting for it
 * would wait for the communicator's earlier work: the agreement is started
 * after one group and its answer read at the settle after the next one.
 * start(ok) issues it (NULL: it could not be issued, which counts as
 * disagreement); finish(tok, wait) returns 1 when every rank succeeded, 0
 * when not, -1 while the answer is not there (only when !wait), and gives
 * the token back once it answered 0 or 1. */
typedef struct {
  void *(*start)(int ok, const nsc_backend *be, nsc_stream s, void *arg);
  int (*finish)(void *tok, int wait, void *arg);
  void *arg;
} nsc_fuse_agreement;

typedef struct nsc_block {
  void *p;
  size_t cap;
  struct nsc_block *next;
} nsc_block;

typedef struct nsc_arena {
  nsc_stream stream;
  uintptr_t thread; /* the owning thread for CU_STREAM_PER_THREAD, else 0 */
  const nsc_backend *be;
  nsc_block *blocks; /* first = current; further ones only while live > 0 */
  size_t used;       /* bytes handed out in the current block */
  size_t need;       /* bytes handed out in all blocks since the last reset */
  size_t peak;
  int live;
  /* Fusion has a block of its own whose size every rank agreed on (see
   * nsc_staging_fuse_*): a fused collective is issued only when its wire
   * buffer fits there, so a failed allocation on one rank can never make
   * ranks issue different collectives. */
  void *fblock;
  size_t fcap;      /* agreed and allocated */
  size_t freserved; /* allocated at the first call, before agreement */
  size_t fused;     /* handed out in the current group */
  size_t fwant;     /* asked for in the current group, fitting or not */
  int fdisabled;    /* an agreement failed: no fusion on this stream */
  void *gblock;     /* a grown block waiting for its agreement (gtok) */
  size_t gcap;
  void *gtok;
  const nsc_fuse_agreement *gag;
  struct nsc_arena *next;
} nsc_arena;

typedef struct {
  nsc_arena *arenas;
  int lock;             /* a spin lock (zero = free): held for a few field updates only */
  uint64_t failed;      /* allocations that failed (faults included) */
} nsc_staging;

enum { NSC_STAGING_OK = 0, NSC_STAGING_LIMIT = -1, NSC_STAGING_NOMEM = -2 };

/* Reserve `bytes` on stream s. Returns NSC_STAGING_OK, NSC_STAGING_LIMIT (the
 * same on every rank) or NSC_STAGING_NOMEM (this rank only). */
int nsc_staging_get(nsc_staging *st, const nsc_backend *be, nsc_stream s, size_t bytes,
                    size_t limit, void **p);
/* One region on stream s is no longer needed by the host side (its cast-back
 * is enqueued); when none is live the arena is reset. */
void nsc_staging_done(nsc_staging *st, nsc_stream s);
/* Fusion: a wire buffer of `bytes` from the agreed fusion block of stream
 * s, or -1 when it does not fit (the caller forwards the members in fp32
 * and the block grows by an agreement after the group, applied a group later). Only the agreed size,
 * the same on every rank, decides. */
int nsc_staging_fuse_take(nsc_staging *st, const nsc_backend *be, nsc_stream s, size_t bytes, void **p);
/* After the outermost group end: first the agreements started at the
 * previous settle are read (waiting, which by then costs nothing: a whole
 * group has run since) and applied: the new block replaces the old one, or
 * fusion is disabled on that stream, on every rank alike. Then, for each
 * arena that wanted more fusion space than agreed (and not more than limit),
 * a block of that size is allocated and its agreement started. Resets the
 * per-group counts of every arena. Returns the number of arenas grown. */
int nsc_staging_fuse_settle(nsc_staging *st, size_t limit, const nsc_fuse_agreement *ag);
/* Apply every agreement still waiting for its answer, waiting for it (by
 * polling). For a captured call: work of the communicator left running on a
 * private stream must not overlap the graph's collectives when it is
 * launched (capture is alike on every rank, so the point is the same). */
void nsc_staging_fuse_resolve(nsc_staging *st);
/* At a communicator's first call: allocate an initial fusion block for
 * stream s (returns 1 if this rank got it); nsc_staging_fuse_agreed() then
 * applies what every rank agreed (ok = all got it): keep it, or free it and
 * disable fusion on that stream. */
int nsc_staging_fuse_reserve(nsc_staging *st, const nsc_backend *be, nsc_stream s, size_t bytes);
void nsc_staging_fuse_agreed(nsc_staging *st, const nsc_backend *be, nsc_stream s, int ok);
/* Free every arena (communicator destroy/abort); an agreement still
 * unanswered is asked once more without waiting (its exchange slot stays
 * taken if the answer never comes). */
void nsc_staging_release(nsc_staging *st);

/* Testing: make the n-th allocation of this process fail (0 = never). */
void nsc_staging_fault_at(long long n);

#endif
