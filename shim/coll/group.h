/* group.h — per-thread group depth and the work that must wait for the
 * outermost ncclGroupEnd (cast-backs, fused collectives, configuration checks)
 * or, on nonblocking communicators, for ncclCommGetAsyncError to report
 * completion.
 *
 * Inside a group NCCL enqueues nothing until the outermost group end, so a
 * cast-back enqueued earlier would run before its collective. Work items are
 * run in the order they were queued; if the group end fails they are dropped
 * (staging returned, nothing enqueued) and the error is returned unchanged. */
#ifndef NSC_GROUP_H
#define NSC_GROUP_H

#include <nccl.h>

#include "backend.h"
#include "log.h"

struct nsc_comm;

typedef enum {
  NSC_W_CASTBACK, /* wire buffer -> recvbuff (segments when fused) */
  NSC_W_FUSE,     /* an fp32 member waiting to be packed at group end */
  NSC_W_CHECK,    /* a communicator first seen in this group: check it after */
  NSC_W_AGREE,    /* accumulation: issue an agreement after this group */
} nsc_work_kind;

typedef struct nsc_work {
  nsc_work_kind kind;
  struct nsc_comm *c;       /* holds a reference */
  const nsc_backend *be;
  nsc_stream stream;
  nsc_wire_t wire;
  ncclRedOp_t op;
  void *wirebuf;            /* staging region (CASTBACK) */
  int from_fuse_block;      /* wirebuf is in the agreed fusion block (not an arena region) */
  int poison;               /* CASTBACK of a rank that failed locally: fill dst (or the
                             * segments' dsts) with all-ones (NaN) instead of casting back */
  void *own;                /* a buffer of the item's own, released on its stream when it ends */
  const float *src;         /* FUSE: member's sendbuff */
  float *dst;               /* CASTBACK: recvbuff; FUSE: member's recvbuff */
  size_t count;
  float scale;
  nsc_seg *segs;            /* CASTBACK of a fused collective */
  int nseg;
  nsc_stream *joins;        /* streams that wait for `stream` after the cast-back (fused) */
  int njoin;
  nsc_rec rec;
  uint64_t pseq;            /* order in the communicator's parked list */
  struct nsc_work *next;
} nsc_work;

struct nsc_pending {
  nsc_work *head, *tail;
  uint64_t last_seq;        /* pseq of the last item parked */
};

/* The calling thread's group depth (hooks keep it). */
int nsc_group_depth(void);
void nsc_group_enter(void);
/* Returns the depth after leaving (0 = this was the outermost end). */
int nsc_group_leave(void);

/* Queue work for the outermost group end of this thread. */
void nsc_group_defer(nsc_work *w);
/* Take this thread's queued work (in order) and clear the queue. */
nsc_work *nsc_group_take(void);

nsc_work *nsc_work_new(nsc_work_kind kind, struct nsc_comm *c);
/* Run a CASTBACK (enqueue the cast, or the NaN fill of a poisoned item,
 * release staging, commit the record). */
ncclResult_t nsc_work_run(nsc_work *w);
/* Drop one item: staging returned, record discarded, reference released. */
void nsc_work_drop(nsc_work *w);
void nsc_work_drop_list(nsc_work *w);

/* Nonblocking communicators: park work until completion is reported. */
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
