/* staging.h — wire-type staging memory per (communicator, stream).
 *
 * Each stream has an arena: a bump allocator over one block, reused only in
 * stream order (everything the shim enqueues on a stream runs in order, so the
 * next call may reuse the block once the previous call's cast-back has been
 * enqueued). Several live regions (calls inside one group) take successive
 * pieces; when the block is too small a further block is added and, once
 * nothing is live, the arena is rebuilt as one block grown geometrically.
 *
 * NCCLSHIM_MAX_STAGING_BYTES is not decided here: what a call may have
 * depends on what every rank agrees on (the call, the settings, the user
 * group it is in: nsc_get_staging in coll/allreduce.c), never on which
 * streams the calls use or which regions are still live, both of which
 * differ between ranks. Here it only caps how far an arena grows.
 *
 * Arenas are keyed by (backend, stream handle), and for CU_STREAM_PER_THREAD
 * (one handle, a different stream on every thread) by the calling thread too;
 * the fusion block is the communicator's, whatever the streams.
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
 * when not, -1 while the answer is not there (only when wait = 0), and gives
 * the token back once it answered 0 or 1. wait = -1 (the communicator is
 * being destroyed or aborted): the answer is not wanted, the exchange is
 * abandoned (oob_abandon) and the token given back at once; returns 0. */
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
  void *pt; /* release point (backend.h) after the arena's last use: the stream may be gone when it is freed */
  struct nsc_arena *next;
} nsc_arena;

typedef struct {
  nsc_arena *arenas;
  int lock;             /* a spin lock (zero = free): held for a few field updates only */
  uint64_t failed;      /* allocations that failed (faults included) */
  /* Fusion has a block of its own per communicator, whatever streams the
   * callers use, whose size every rank agreed on (see nsc_staging_fuse_*): a
   * fused collective is issued only when its wire buffer fits there, so
   * neither a failed allocation on one rank nor the callers' choice of
   * streams can make ranks issue different collectives. The block is used in
   * stream order: a use on another stream than the last one first waits for
   * it (a join through the backend). */
  const nsc_backend *fbe;
  /* The streams of the current group only (cleared at each settle: a later
   * group must never name a stream its caller may have destroyed since):
   * fstream, the last take's (a take on another stream joins it); gstream,
   * the last take attempted, fitting or not (a grown block is made there).
   * fpt, the release point after the block's uses up to the last settle: a
   * group's first take waits for it, frees happen after it. */
  nsc_stream fstream, gstream;
  int fhave, ghave; /* fstream / gstream set (NULL is a stream: the legacy one) */
  void *fpt;
  void *fblock;
  size_t fcap;      /* agreed and allocated */
  size_t freserved; /* allocated at the first call, before agreement */
  size_t fused;     /* handed out in the current group */
  size_t fwant;     /* asked for in the current group, fitting or not */
  int fdisabled;    /* an agreement failed: no fusion on this communicator */
  nsc_block *fretired; /* replaced blocks that parked cast-backs may still read */
  void *gblock;     /* a grown block waiting for its agreement (gtok) */
  size_t gcap;
  nsc_block *gnode; /* taken with gblock: retires the replaced block if cast-backs are parked */
  void *gtok;
  const nsc_fuse_agreement *gag;
} nsc_staging;

enum { NSC_STAGING_OK = 0, NSC_STAGING_NOMEM = -2 };

/* Bytes a request of `bytes` takes from an arena (alignment). */
size_t nsc_staging_round(size_t bytes);
/* Reserve `bytes` on stream s (an arena grows geometrically up to `cap`, or
 * to what this request needs). Returns NSC_STAGING_OK or NSC_STAGING_NOMEM
 * (this rank only). */
int nsc_staging_get(nsc_staging *st, const nsc_backend *be, nsc_stream s, size_t bytes,
                    size_t cap, void **p);
/* One region on stream s is no longer needed by the host side (its cast-back
 * is enqueued); when none is live the arena is reset. */
void nsc_staging_done(nsc_staging *st, nsc_stream s);
/* The same for work dropped before it was issued (a failed group end, a
 * communicator's end): its stream is never named (it may be gone). */
void nsc_staging_dropped(nsc_staging *st, nsc_stream s);
/* Fusion: a wire buffer of `bytes` from the communicator's agreed fusion
 * block, for use on stream s; -1 when it does not fit (the caller forwards
 * the members in fp32 and the block grows by an agreement after the group,
 * applied a group later). Only the agreed size and the call sequence, the
 * same on every rank, decide. Returns 1 (the buffer is handed out all the
 * same) when s could not be made to wait for the block's previous stream:
 * the caller poisons it. */
int nsc_staging_fuse_take(nsc_staging *st, const nsc_backend *be, nsc_stream s, size_t bytes, void **p);
/* Before a group's first take while parked cast-backs still read the block:
 * this rank moves to a fresh block of the agreed size (the old one is retired
 * until a settle without parked work). Capacity and the call sequence stay
 * what decides, so what is issued is unchanged. Returns 0, or -1 when the
 * allocation failed (the block is kept: the caller poisons the parked
 * cast-backs that read it). Nothing to do (0) unless the group's first take.
 * Allocates: not under the communicator's lock. */
int nsc_staging_fuse_fresh(nsc_staging *st, nsc_stream s);
/* After a use of the fusion block on s (a fused cast-back, parked or not,
 * and each settle): its release point moves behind that use and still
 * covers the earlier ones (s first waits for the old point). */
void nsc_staging_fuse_used(nsc_staging *st, nsc_stream s);
/* After the outermost group end, whatever it answered: first the agreement
 * started at the previous settle is read (waiting, which by then costs
 * nothing: a whole group has run since) and applied: the new block replaces
 * the old one, or fusion is disabled on the communicator, on every rank
 * alike. Then, when this group wanted more fusion space than agreed (and not
 * more than limit), a block of that size is allocated and its agreement
 * started. Resets the per-group counts. Returns 1 if a grown block was
 * applied. parked: cast-backs of a nonblocking communicator still wait (they
 * may read a block being replaced): a replaced block is kept until a settle
 * without. */
int nsc_staging_fuse_settle(nsc_staging *st, size_t limit, const nsc_fuse_agreement *ag, int parked);
/* Apply every agreement still waiting for its answer, waiting for it (by
 * polling). For a captured call: work of the communicator left running on a
 * private stream must not overlap the graph's collectives when it is
 * launched (capture is alike on every rank, so the point is the same). */
void nsc_staging_fuse_resolve(nsc_staging *st);
/* At a communicator's first call: allocate an initial fusion block for
 * stream s (returns 1 if this rank got it); nsc_staging_fuse_agreed() then
 * applies what every rank agreed (ok = all got it): keep it, or free it and
 * disable fusion on the communicator. */
int nsc_staging_fuse_reserve(nsc_staging *st, const nsc_backend *be, nsc_stream s, size_t bytes);
void nsc_staging_fuse_agreed(nsc_staging *st, const nsc_backend *be, nsc_stream s, int ok);
/* Free every arena (communicator destroy/abort); an agreement still
 * unanswered is abandoned without waiting (its exchange slot comes back
 * once its collective has completed). */
void nsc_staging_release(nsc_staging *st);

/* Testing: make the n-th allocation of this process fail (0 = never). */
void nsc_staging_fault_at(long long n);

#endif
