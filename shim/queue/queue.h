/* queue.h — the queue room: per-thread group depth and the work that must
 * wait for the outermost ncclGroupEnd (a group's tasks: fused members and
 * calls whose plan runs after the real group end; cast-backs, checks,
 * agreements, settles) or, on nonblocking communicators, for
 * ncclCommGetAsyncError to report completion. Items are data: what running
 * one does is told by its `run`, which the room that made it set (exec/: a
 * cast-back, a deferred plan; coll/: a check, an agreement; staging/: a
 * settle); this room only keeps, orders, runs and frees them, and never
 * looks at what an item is.
 *
 * Inside a group NCCL enqueues nothing until the outermost group end, so a
 * cast-back enqueued earlier would run before its collective. Work items are
 * run in the order they were queued; if the group end fails they are dropped
 * (staging returned, nothing enqueued) and the error is returned unchanged. */
#ifndef NSC_QUEUE_H
#define NSC_QUEUE_H

#include <nccl.h>

#include "backend.h"
#include "log.h"
#include "plan.h"

struct nsc_comm;
typedef struct nsc_work nsc_work;

/* How the group an item waited for ended (for a parked item: how its
 * communicator's poll answered; for an item run at once: ok, not in
 * progress). */
typedef struct {
  int in_progress; /* the group end answered ncclInProgress: its collectives are not enqueued yet */
  int ok;          /* the group end (the poll) succeeded: what the group issued reached its streams */
} nsc_after;
/* What running an item does. It takes the item: frees it (nsc_work_free,
 * nsc_work_drop) or hands it on (parks it), and returns what it adds to the
 * group end's answer. */
typedef ncclResult_t (*nsc_work_fn)(nsc_work *w, const nsc_after *a);

/* Item flags */
#define NSC_W_ISSUES 1u /* issues collectives of the shim's own after the group end and waits for their
                         * answers (a check, an agreement, a deferred plan, a settle): after an
                         * ncclInProgress end the group's work is waited for first, and the work of
                         * several devices' communicators runs on threads of its own (lifecycle.c) */
#define NSC_W_MEMBER 2u /* a fused member: the group's plan packs it before the real group end; it
                         * never runs alone */

struct nsc_work {
  nsc_work_fn run;
  unsigned flags;           /* NSC_W_* */
  struct nsc_comm *c;       /* holds a reference */
  const nsc_backend *be;
  nsc_stream stream;
  /* The CUDA context `stream` named when the item was queued (the caller's
   * current one for the legacy and per-thread handles 0, 0x1, 0x2, which
   * name a stream only relative to a thread and its context); NULL for host
   * memory. The group end runs each device's items with it current. */
  void *ctx;
  nsc_fmt_t fmt;            /* a cast-back's wire format (fp16 or bf16) */
  ncclRedOp_t op;
  void *wirebuf;            /* a cast-back's staging region */
  int poison;               /* a cast-back of a rank that failed locally: fill dst (or the
                             * segments' dsts) with all-ones (NaN) instead of casting back */
  int fail_late;            /* poisoned after its call had answered (a parked cast-back whose
                             * fusion block was lost): it fails when it runs, at the poll */
  void *own;                /* a buffer of the item's own, released on its stream when it ends */
  const float *src;         /* a call's sendbuff */
  float *dst;               /* a call's (a cast-back's) recvbuff */
  size_t count;
  float scale;
  nsc_seg *segs;            /* the cast-back of a fused bucket */
  int nseg;
  nsc_stream *joins;        /* streams that wait for `stream` after the cast-back (fused) */
  int njoin;
  nsc_rec rec;
  uint64_t pseq;            /* order in the communicator's parked list */
  uint64_t seq;             /* a deferred call's number on its communicator, taken when it was made */
  const nsc_plan *plan;     /* ... its plan, made at its call: the item's own copy (freed with it) */
  nsc_member m;             /* a fused member, as the group's plan reads it (plan.h) */
  nsc_work *next;
};

struct nsc_pending {
  nsc_work *head, *tail;
  uint64_t last_seq;        /* pseq of the last item parked */
};

/* The calling thread's group depth (hooks keep it). */
extern __thread int nsc_gdepth;
static inline int nsc_group_depth(void) { return nsc_gdepth; }
void nsc_group_enter(void);
/* A number of the outermost group this thread is in (0: none), the same
 * for every call of one user group and new for the next. */
extern __thread uint64_t nsc_gid;
static inline uint64_t nsc_group_id(void) { return nsc_gdepth > 0 ? nsc_gid : 0; }
/* Returns the depth after leaving (0 = this was the outermost end). */
int nsc_group_leave(void);
/* Inside a group: note the communicator of a call made into it (hooks.c, for
 * every intercepted call). nsc_group_comms takes this thread's notes (at
 * most NSC_GROUP_COMMS distinct ones; more are not noted) and clears them:
 * after a group end answered ncclInProgress, the shim's own calls after the
 * group (checks, agreements, two-phase members) first wait for the group's
 * work on every communicator it touched (lifecycle.c). */
#define NSC_GROUP_COMMS 16
void nsc_group_note_in(ncclComm_t comm);
static inline void nsc_group_note(ncclComm_t comm) {
  if (nsc_gdepth > 0) nsc_group_note_in(comm);
}
int nsc_group_comms(ncclComm_t *out);

/* Queue work for the outermost group end of this thread (on the caller's
 * thread, at its call: the item's ctx is taken here). */
void nsc_group_defer(nsc_work *w);
/* Take this thread's queued work (in order) and clear the queue. */
nsc_work *nsc_group_take(void);

/* Host memory on the decision path (work items decide what is issued at
 * group end; an agreement's state must exist on every rank that issues it):
 * zeroed bytes from the heap or, when the heap fails, a slot of a static
 * reserve (NSC_RESERVE_N slots of NSC_RESERVE_SLOT bytes, process-wide).
 * NULL only when the heap fails and every slot is held at once (or bytes is
 * larger than a slot). Free with nsc_coll_free. */
#define NSC_RESERVE_N 64
#define NSC_RESERVE_SLOT 1024
void *nsc_coll_zalloc(size_t bytes);
void nsc_coll_free(void *p);
/* calloc for the collectives' host allocations, with the fault point
 * NCCLSHIM_FAULT_HOST_ALLOC (the N-th call fails; tests). */
void *nsc_coll_calloc(size_t n, size_t size);
/* A new item of c's, run by `run` (flags NSC_W_*), or NULL. */
nsc_work *nsc_work_new(struct nsc_comm *c, nsc_work_fn run, unsigned flags);
/* An item for call k on c (its memory kind be, stream, op, buffers and count
 * argument filled in), or NULL. */
nsc_work *nsc_work_of_call(struct nsc_comm *c, const nsc_backend *be, const nsc_call *k, nsc_work_fn run,
                           unsigned flags);
/* Run an item now, its stream work enqueued (ok = 0: dropped instead). */
static inline ncclResult_t nsc_work_run(nsc_work *w, int ok) {
  nsc_after a = {0, ok};
  return w->run(w, &a);
}
/* Free an item that was run: its own buffer released on its stream, its
 * plan, segments and joins freed, its reference released. */
void nsc_work_free(nsc_work *w);
/* Drop one item unrun: staging returned, record discarded, then freed. */
void nsc_work_drop(nsc_work *w);
/* A cast-back's wire buffer from its communicator's staging block: counted
 * (wire_out) until the item has run (its use moved the block's release
 * point) or was dropped unissued. */
void nsc_work_hold_wire(nsc_work *w, void *p);
void nsc_work_drop_list(nsc_work *w);
/* Take the fused members out of *list (in order, linked by next and by
 * their m.next); the rest stays in *list, in order. */
nsc_work *nsc_work_take_members(nsc_work **list);
/* The item a fused member's descriptor belongs to. */
static inline nsc_work *nsc_work_of_member(const nsc_member *m) {
  return (nsc_work *)(void *)((char *)(uintptr_t)m - offsetof(nsc_work, m));
}

/* Nonblocking communicators: park work until completion is reported. The
 * list is allocated by the configuration check (reserve: 0 when it cannot
 * be, and the check then fails on every rank), before any decision needs it. */
int nsc_pending_reserve(struct nsc_comm *c);
void nsc_pending_add(struct nsc_comm *c, nsc_work *w);
void nsc_pending_drop(struct nsc_pending **p);
/* The pseq of the last item parked so far (0 if none): taken before polling
 * NCCL, so a completion only releases work that was parked before the poll. */
uint64_t nsc_pending_mark(struct nsc_comm *c);
/* Run (ok != 0) or drop the parked work with pseq <= upto. Finishing is
 * serialised per communicator, and a caller returns only after any other
 * thread's finishing has ended, so a poll that reports success never
 * overtakes a cast-back still running on another thread. */
ncclResult_t nsc_pending_finish(struct nsc_comm *c, int ok, uint64_t upto);

#endif
