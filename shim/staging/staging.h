/* staging.h — the staging room: a communicator's staging, one block of
 * memory whose size every rank agreed on, from which every compressed call
 * takes its wire buffers (fused groups, single calls, two-phase and
 * hierarchical stages); the limit NCCLSHIM_MAX_STAGING_BYTES; the settles
 * after a call or group, and the agreement by which the block grows.
 *
 * Two levels: the block (nsc_staging, staging.c's first half: memory, takes,
 * release points; no NCCL, unit-tested alone) and, on top, what a
 * communicator's calls use (nsc_stage_*, nsc_get_staging, ...: the block of
 * the communicator's own or its parent's, the user group's needs against the
 * limit, parked work moved off the block; settle.c: the settles and the
 * growth agreement, which issue the shim's own exchanges).
 *
 * A rank-local allocation failure must never make ranks issue different
 * collectives, so memory is allocated only at points every rank reaches
 * together — the communicator's first call (its configuration check) and
 * the settle after a call or group that wanted more than the block holds —
 * and a block counts only once every rank has said it got it. So:
 *   - whether a call is compressed depends on the agreed size and the call
 *     sequence alone (rule 1): a call that does not fit is forwarded in fp32
 *     on every rank (bit-identical to plain NCCL), and the block grows by an
 *     agreement started at the next settle and applied at the one after;
 *   - a rank that cannot get memory at an agreement (beside a caching
 *     allocator holding the device) makes every rank stop compressing on
 *     that communicator, with one message: plain fp32, identical everywhere.
 *
 * Takes between two settles are successive pieces of the block (one group's
 * calls, on any streams); a settle hands the whole block to the next group.
 * The block is used in stream order: a take on another stream than the
 * previous take first waits for it (a join), and a group's first take waits
 * for the release point (backend.h) behind every earlier use. Work that is
 * still parked (a nonblocking communicator's cast-back not yet enqueued)
 * reads the block outside any stream order: the next group first moves to
 * a fresh block (nsc_staging_fresh) and retires the old one.
 *
 * Streams are named only while the group that used them is running: the
 * block is freed after its release point, never on a stream (a stream may
 * be destroyed by then). CU_STREAM_PER_THREAD is a different stream on
 * every thread: it is told apart by the calling thread too.
 *
 * NCCLSHIM_MAX_STAGING_BYTES refuses a call beyond it on every rank
 * (nsc_staging_refused, below) and caps how far the block grows.
 *
 * Locking: a spin lock for field updates (never held across a backend call)
 * and one that serialises moves of the release point (backend event calls,
 * never NCCL). Callers must not hold the communicator's lock around calls
 * that allocate (reserve, fresh, settle): the watchdog needs that lock. */
#ifndef NSC_STAGING_H
#define NSC_STAGING_H

#include <stddef.h>
#include <stdint.h>

#include <nccl.h>

#include "backend.h"

/* Growing the block needs every rank's word, and waiting for it would wait
 * for the communicator's earlier work: the agreement is started after one
 * group and moved on at each later settle. start(ok) issues it (NULL: it
 * could not be issued, which counts as disagreement); finish(tok, wait, now)
 * (now: a stream of the current call or group, alive, for what it issues;
 * NULL when there is none: the one it started on)
 * returns 1 when every rank succeeded, 0 when not, -1 while it is not
 * decided yet (with wait = 0: its answer is not there; with wait = 1: a
 * further stage was issued, to be read at the next settle), and gives the
 * token back once it answered 0 or 1. wait = -1 (the communicator is being
 * destroyed or aborted): the answer is not wanted, the exchanges are
 * abandoned (oob_abandon) and the token given back at once; returns 0. */
typedef struct {
  void *(*start)(int ok, const nsc_backend *be, nsc_stream s, void *arg);
  int (*finish)(void *tok, int wait, const nsc_stream *now, void *arg);
  void *arg;
} nsc_staging_agreement;

typedef struct nsc_block {
  void *p;
  size_t cap;
  struct nsc_block *next;
} nsc_block;

typedef struct {
  int lock;             /* a spin lock (zero = free): held for a few field updates only */
  int plock;            /* the same, held while the release point moves (backend event calls) */
  uint64_t failed;      /* allocations that failed (faults included) */
  /* The block (f...: it began as fusion's) and the memory kind it is of: a
   * take of another kind never fits. */
  const nsc_backend *fbe;
  /* The streams of the current group only (cleared at each settle: a later
   * group must never name a stream its caller may have destroyed since):
   * fstream, the last take's (a take on another stream joins it); gstream,
   * the last take attempted, fitting or not (a grown block is made there).
   * fpt, the release point after the block's uses up to the last settle: a
   * group's first take waits for it, frees happen after it. */
  nsc_stream fstream, gstream;
  uintptr_t fthread; /* fstream's thread for CU_STREAM_PER_THREAD, else 0 */
  int fhave, ghave; /* fstream / gstream set (NULL is a stream: the legacy one) */
  int fdirty;       /* a take since the release point last moved: the settle moves it */
  void *fpt;
  void *fblock;
  size_t fcap;      /* agreed and allocated */
  size_t freserved; /* allocated at the first call, before agreement */
  size_t fused;     /* handed out in the current group */
  size_t fwant;     /* asked for in the current group, fitting or not */
  int fdisabled;    /* an agreement failed: nothing is compressed on this communicator */
  nsc_block *fretired; /* replaced blocks that parked cast-backs may still read */
  void *gblock;     /* a grown block waiting for its agreement (gtok) */
  size_t gcap;
  nsc_block *gnode; /* taken with gblock: retires the replaced block if cast-backs are parked */
  void *gtok;
  const nsc_staging_agreement *gag;
} nsc_staging;

/* Bytes a request of `bytes` takes from the block (alignment). */
size_t nsc_staging_round(size_t bytes);
/* A wire buffer of `bytes` from the block, for use on stream s: 0, or -1
 * when it does not fit (the caller forwards the call in fp32; the block
 * grows by an agreement after the group, applied a group later). Only the
 * agreed size and the call sequence, the same on every rank, decide.
 * Returns 1 (the buffer is handed out all the same) when s could not be
 * made to wait for the block's earlier use: the caller poisons it. */
int nsc_staging_take(nsc_staging *st, const nsc_backend *be, nsc_stream s, size_t bytes, void **p);
/* Whether takes of `bytes` in all would fit now (for a call that takes
 * several pieces: it decides once); when not, the want is counted as a
 * take's is, so the block grows for it. */
int nsc_staging_fits(nsc_staging *st, const nsc_backend *be, nsc_stream s, size_t bytes);
/* Before the first take of a group while parked cast-backs still read the
 * block: this rank moves to a fresh block of the agreed size (the old one is
 * retired until a settle without parked work). Capacity and the call
 * sequence stay what decides, so what is issued is unchanged. Returns 0
 * (done, or nothing to do: not the group's first take), -1 when the
 * allocation failed, 1 when two blocks are retired already: then the caller
 * must finish the parked work instead (the block is kept). Allocates: not
 * under the communicator's lock. */
int nsc_staging_fresh(nsc_staging *st, nsc_stream s);
/* Frees the retired blocks (after the release point): only once nothing
 * parked reads them. */
void nsc_staging_free_retired(nsc_staging *st);
/* After a use of the block on s (a cast-back, parked or not, and each
 * settle): its release point moves behind that use and still covers the
 * earlier ones (s first waits for the old point). Safe beside the owner's
 * calls (a thread finishing nonblocking work). */
void nsc_staging_used(nsc_staging *st, nsc_stream s);
/* now: a stream of the current call or group (alive; NULL: none known), for
 * the exchanges an agreement issues.
 * After every call or outermost group that took (or tried to): first an
 * agreement in flight moves one stage (its answer is read, polled only if
 * not there yet, and its confirmation issued; at the next settle that is
 * read) and, once decided, applied: the new block replaces the old one, or
 * compression stops on the communicator, on every rank alike. Then, when no
 * agreement is in flight and this group wanted more than agreed (and not
 * more than limit), a block of that size is allocated and its agreement
 * started. Resets the
 * per-group counts. Returns 1 if a grown block was applied. parked:
 * cast-backs of a nonblocking communicator still wait (they may read a
 * block being replaced): a replaced block is kept until a settle without. */
int nsc_staging_settle(nsc_staging *st, size_t limit, const nsc_staging_agreement *ag, int parked,
                       const nsc_stream *now);
/* Apply every agreement still waiting for its answer, waiting for it (by
 * polling). For a captured call: work of the communicator left running on a
 * private stream must not overlap the graph's collectives when it is
 * launched (capture is alike on every rank, so the point is the same). */
void nsc_staging_resolve(nsc_staging *st, const nsc_stream *now);
/* At a communicator's first call: allocate the initial block on stream s
 * (returns 1 if this rank got it); nsc_staging_agreed() then applies what
 * every rank agreed (ok = all got it): keep it, or free it and stop
 * compressing on the communicator. */
int nsc_staging_reserve(nsc_staging *st, const nsc_backend *be, nsc_stream s, size_t bytes);
void nsc_staging_agreed(nsc_staging *st, const nsc_backend *be, nsc_stream s, int ok);
/* 1 when the next settle may issue an exchange (an agreement in flight, or
 * a want beyond the block). */
int nsc_staging_may_issue(nsc_staging *st);
/* 1 when an agreement failed: nothing is compressed on the communicator. */
int nsc_staging_disabled(nsc_staging *st);
/* Free the block (communicator destroy/abort); an agreement still
 * unanswered is abandoned without waiting (its exchange slot comes back
 * once its collective has completed). */
void nsc_staging_release(nsc_staging *st);

/* Testing: make the n-th allocation of this process fail, and the t-th
 * take fail to wait for the block's earlier use (0 = never). */
void nsc_staging_fault_at(long long n, long long t);

/* ---- a communicator's staging ------------------------------------------------ */

struct nsc_comm;
struct nsc_work;

/* What the staging room keeps in a communicator entry (comm.h's stage_mem). */
typedef struct {
  nsc_staging block;       /* the agreed block (a sub-communicator uses its parent's) */
  uint64_t gid;            /* the user group whose compressed members took gneed */
  size_t gneed;            /* ... bytes of staging so far (agreed: the group's calls) */
  uint64_t settle_gid;     /* the user group after which it is settled (settle.c) */
  struct nsc_comm *settle_next; /* ... the calling thread's list of them */
  const nsc_backend *settle_be; /* ... and a call's memory kind and stream in that group */
  nsc_stream settle_stream;
  nsc_staging_agreement agreement; /* how the block grows (settle.c) */
  /* The one growth agreement in flight (settle.c's private struct): never
   * allocated, so that starting it cannot fail on one rank alone. */
  _Alignas(16) unsigned char agree_mem[320];
} nsc_stage;
nsc_stage *nsc_stage_of(struct nsc_comm *c);
/* Before anything of c's staging may allocate or take: the settings' fault
 * points (NCCLSHIM_FAULT_ALLOC, _STAGE) are read (once per process), and
 * the owner's entry frees its block when it goes (comm.h's drop_stage). */
void nsc_stage_arm(struct nsc_comm *c);

/* Staging of `bytes` for one compressed call on stream s of c (`what` names
 * it in messages), from its agreed block: NSC_STAGE_OK; NSC_STAGE_REFUSED
 * (beyond NCCLSHIM_MAX_STAGING_BYTES for this call and its user group's
 * earlier compressed calls: ncclInvalidUsage on every rank, message noted);
 * NSC_STAGE_PLAIN (the agreed block has no room: the call is forwarded in
 * fp32 on every rank); NSC_STAGE_POISON (handed out, but this rank cannot
 * use it: it must still issue every call, poisoned). The limit is decided
 * from what every rank agrees on: the call's own need (count, rank count,
 * settings) plus, inside a user group, the needs of the group's compressed
 * calls on this communicator before it — never from streams or from
 * regions still live on this rank, which differ between ranks. */
enum { NSC_STAGE_OK, NSC_STAGE_REFUSED, NSC_STAGE_PLAIN, NSC_STAGE_POISON };
int nsc_get_staging(struct nsc_comm *c, const nsc_backend *be, nsc_stream s, size_t bytes, const char *what,
                    void **p);
/* The limit alone, nothing reserved: ncclInvalidUsage (with the message)
 * where nsc_get_staging would refuse `bytes` now, else ncclSuccess. */
ncclResult_t nsc_staging_refused(struct nsc_comm *c, size_t bytes, const char *what);
/* The take alone (no limit): 0, -1 (no room), 1 (poison); fusion's. */
int nsc_staging_take_comm(struct nsc_comm *c, const nsc_backend *be, nsc_stream s, size_t bytes, void **p);
/* Whether takes of `bytes` in all fit c's block now (a call of several
 * pieces decides once; when not, it is forwarded in fp32 and the block grows). */
int nsc_staging_room(struct nsc_comm *c, const nsc_backend *be, nsc_stream s, size_t bytes);
/* A region of c's staging is no longer read after what is enqueued on s. */
void nsc_staging_done_on(struct nsc_comm *c, nsc_stream s);
/* The check (coll/check.c): c's initial block of `bytes` on s (1: this rank
 * got it), then what every rank agreed (ok: all got it). */
int nsc_stage_reserve(struct nsc_comm *c, const nsc_backend *be, nsc_stream s, size_t bytes);
void nsc_stage_agreed(struct nsc_comm *c, const nsc_backend *be, nsc_stream s, int ok);
/* A captured call on c: an agreement of the shim's own still in flight is
 * finished first (nothing of ours may run when the graph's collectives are
 * launched; capture is alike on every rank). */
void nsc_stage_before_capture(struct nsc_comm *c, nsc_stream s);

/* settle.c: after a call outside any group that could take staging, and
 * after the outermost group end (whatever it answered) for every
 * communicator whose calls in the group could: reset the block's per-group
 * counts, apply the growth agreed at the previous settle, and, when a take
 * did not fit, start the agreement on a bigger block (applied at the next
 * settle; the same on every rank: it depends on the call sequence only). */
void nsc_staging_settle_comm(struct nsc_comm *c, nsc_stream s); /* s: the call's (alive) */
/* Inside a user group: c's staging is settled after the outermost group end,
 * after the group's other work on c (be, s: a call of c's in the group).
 * nsc_staging_settle_items() turns the noted communicators into
 * settle work items (run with the rest of the group's after-work, per
 * device); nsc_staging_settle_group() settles those no item could be made
 * for. */
void nsc_staging_note(struct nsc_comm *c, const nsc_backend *be, nsc_stream s);
struct nsc_work *nsc_staging_settle_items(void);
void nsc_staging_settle_group(void);

#endif
