/* exec.h — the executor: what carries out a plan (plan.h), made once by the
 * decision (nsc_decide) and handed over by the one path of the collectives
 * (coll/call.c), or, for a fused bucket, by the group's plan at the
 * outermost group end (coll/lifecycle.c).
 *
 * One walk runs every plan (walk.c): it admits the plan's staging (one rule
 * for every algorithm, below), then runs its steps in order, each through
 * the handler its kind names (steps.c's table), and for a plan of stages
 * (hier) keeps the call's record and turns what a failed stage wrote into
 * NaN. The files:
 *   task.c      the entry: a call's plan walked now, or queued for the group end
 *               (a fused member, a deferred call), and a bucket's run;
 *   walk.c      the walk;
 *   steps.c     the table of step handlers;
 *   answer.c    the untransformed answers: the call forwarded (a PLAIN
 *               plan's step), accumulation's local answer;
 *   ring.c      the ring's and a bucket's wire steps: cast in, NCCL's
 *               all-reduce in the wire type (chunked, its casts beside the
 *               chunks when the plan says so), cast back (a work item);
 *   fuse.c      a bucket's segmented cast in;
 *   twophase.c  a two-phase step;
 *   hier.c      hier's sub-communicators and its stages' NCCL collectives.
 * The executor reads no configuration: everything a step needs is its
 * plan's (format, wire datatype, codec options, chunks, staging).
 *
 * Staging, one rule (walk.c: admit), applied before any step:
 *   - beyond NCCLSHIM_MAX_STAGING_BYTES (a plan whose staging is `limited`:
 *     a user's call, with its group's earlier calls): refused with
 *     ncclInvalidUsage on every rank, nothing issued;
 *   - no room in the agreed block: the call (a bucket: each member) goes to
 *     NCCL untouched, in fp32, on every rank (why "staging"), and the block
 *     grows after it;
 *   - room, but this rank cannot use it (its stream cannot wait for the
 *     block's earlier use): every step is still issued, on NaN.
 * A plan of one region takes it here and hands it to its steps; a plan of
 * stages (hier) is only admitted here, and each stage takes its own.
 *
 * Three idioms have one helper each: waiting on ncclInProgress (comm.h:
 * nsc_enqueued), keeping the first error (NSC_FIRST) and poisoning what a
 * failed step wrote (nsc_poison).
 *
 * Must not: decide anything (the plan did; data, timings and local failures
 * change only what a step writes, never what is issued), read the
 * configuration, retry a real call, or hold a lock of ours across one. */
#ifndef NSC_EXEC_H
#define NSC_EXEC_H

#include <nccl.h>
#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "core.h"
#include "ef.h"
#include "msg.h"
#include "plan.h"
#include "queue.h"

struct nsc_comm;

/* ---- the entry (task.c) -------------------------------------------------------- */

/* Carry out plan p of call k on c (be: the receive buffer's memory kind):
 * the walk, now; a plan that waits for the group end (a fused member, a
 * deferred two-phase or hierarchical call) is queued for it, with a copy of
 * its plan. */
ncclResult_t nsc_exec(struct nsc_comm *c, const nsc_backend *be, const nsc_call *k, const nsc_plan *p);
/* At the outermost group end, before the real one: the bucket that starts
 * at member head (nsc_decide_group), by its plan (nsc_plan_bucket), with the
 * context its members' streams named at their calls current. */
ncclResult_t nsc_exec_bucket(const nsc_member *head, const nsc_plan *p);
/* A call forwarded untouched (an all-reduce, or with rs a reduce-scatter of
 * count per rank), logged and counted as passed through, for reason `why`
 * (policy.h; the summary's "left untouched" line; a reduce-scatter's record
 * counts its whole buffer). answer.c. */
ncclResult_t nsc_forward(struct nsc_comm *c, int rs, const void *send, void *recv, size_t count, ncclDataType_t dt,
                         ncclRedOp_t op, cudaStream_t s, nsc_why why);

/* ---- the walk (walk.c) and its steps' handlers ---------------------------------- */

/* One run of a plan: what the walk and the step handlers share. */
typedef struct nsc_walk {
  struct nsc_comm *c;
  const nsc_backend *be;
  const nsc_plan *p;
  const nsc_call *k;        /* the call (a bucket: its own: the members' op, its home stream) */
  nsc_work *members;        /* a bucket's first member (the rest by m.bnext), else NULL */
  uint64_t seq;             /* the call's number on its communicator, taken at its call */
  cudaStream_t s;
  const float *send;
  float *recv, *tmp;        /* tmp: TMP, NULL when this rank could not take it */
  int grouped;              /* a repeated step's collectives are inside a group of the walk's own */
  void *stage;              /* a plan of one region: it, taken by the walk */
  int stage_poison;         /* ... handed out, but unusable on this rank: its steps go out NaN */
  /* between a ring's (a bucket's) steps */
  nsc_work *cb;             /* its cast-back (NULL: none could be made) */
  void *wire;               /* the buffer its wire step reduces */
  int advance;              /* ... chunk by chunk (0: every chunk on one chunk's NaN buffer) */
  int pipe;                 /* its casts go beside its chunks, on `side` */
  nsc_stream side;
  int bad;                  /* a local failure: what this rank sends from here on is NaN */
  ncclResult_t wire_r;      /* its wire step's answer, for its cast-back */
  ncclResult_t forced;      /* the call's answer whatever the steps answered (a rank that sent
                             * NaN for want of staging: ncclSystemError), or ncclSuccess */
} nsc_walk;

/* Run p, a plan of call k on c, numbered seq; members: a bucket's. */
ncclResult_t nsc_walk_run(struct nsc_comm *c, const nsc_backend *be, const nsc_call *k, const nsc_plan *p,
                          uint64_t seq, nsc_work *members);

/* A step handler runs one step (for node j and local index l when it
 * repeats: the walk passes it at those offsets). *dst is where it writes
 * and *wrote how many fp32 elements: a plan of stages fills them with NaN
 * when the step failed; a handler that poisons what it wrote itself, or
 * writes nothing, sets *dst to NULL. Returns the step's answer. */
typedef ncclResult_t (*nsc_step_fn)(nsc_walk *w, const nsc_step *st, float **dst, size_t *wrote);
typedef struct {
  nsc_step_fn run;
  /* A step of a plan of one region that keeps a place in a sequence even
   * when its call did not run its steps, refused (forwarded = 0) or
   * forwarded in fp32 for want of staging (forwarded = 1): two-phase's
   * error-feedback slot (its residuals dropped when forwarded). NULL: none. */
  void (*unrun)(nsc_walk *w, const nsc_step *st, int forwarded);
} nsc_step_handler;
/* steps.c: the handlers of the step kinds, and of the call itself
 * (NSC_STEP_CALL: forwarded) and of a collective in the wire type
 * (NSC_STEP_WIRE: the ring's and a bucket's). */
extern const nsc_step_handler nsc_step_handlers[NSC_STEP_COUNT], nsc_step_call_handler, nsc_step_wire_handler;
static inline const nsc_step_handler *nsc_step_handler_of(const nsc_step *st) {
  if (st->flags & NSC_STEP_CALL) return &nsc_step_call_handler;
  if (st->flags & NSC_STEP_WIRE) return &nsc_step_wire_handler;
  return (unsigned)st->kind < NSC_STEP_COUNT && nsc_step_handlers[st->kind].run ? &nsc_step_handlers[st->kind] : NULL;
}

/* The handlers (steps.c names them in the table). */
ncclResult_t nsc_step_forward(nsc_walk *w, const nsc_step *st, float **dst, size_t *wrote);    /* answer.c */
ncclResult_t nsc_step_local(nsc_walk *w, const nsc_step *st, float **dst, size_t *wrote);      /* answer.c */
ncclResult_t nsc_step_cast_in(nsc_walk *w, const nsc_step *st, float **dst, size_t *wrote);    /* ring.c */
ncclResult_t nsc_step_wire(nsc_walk *w, const nsc_step *st, float **dst, size_t *wrote);       /* ring.c */
ncclResult_t nsc_step_cast_out(nsc_walk *w, const nsc_step *st, float **dst, size_t *wrote);   /* ring.c */
ncclResult_t nsc_step_seg_cast_in(nsc_walk *w, const nsc_step *st, float **dst, size_t *wrote); /* fuse.c */
ncclResult_t nsc_step_twophase(nsc_walk *w, const nsc_step *st, float **dst, size_t *wrote);   /* twophase.c */
void nsc_twophase_unrun(nsc_walk *w, const nsc_step *st, int forwarded);
ncclResult_t nsc_step_collective(nsc_walk *w, const nsc_step *st, float **dst, size_t *wrote); /* hier.c */

/* answer.c: the call, or each member of a bucket, forwarded for reason why
 * (the walk's answer when the agreed block has no room). */
ncclResult_t nsc_forward_call(const nsc_walk *w, nsc_why why);

/* hier.c: the NCCL communicator of group `on` (ALL: the caller's; NODE,
 * CROSS: hier's sub-communicators). */
ncclComm_t nsc_hier_nccl(const struct nsc_comm *c, nsc_plan_on on);

/* Where a step reads and writes: the call's buffers at the step's offsets,
 * or TMP; a step meant for TMP on a rank without it writes into the receive
 * buffer (count elements, the call's own receive size) and reads nothing
 * (NULL: its two-phase step sends NaN). */
static inline const float *nsc_walk_src(const nsc_walk *w, const nsc_step *st) {
  switch (st->src) {
  case NSC_BUF_SEND: return w->send + st->src_off;
  case NSC_BUF_RECV: return w->recv + st->src_off;
  default: return w->tmp ? w->tmp + st->src_off : NULL;
  }
}
static inline float *nsc_walk_dst(const nsc_walk *w, const nsc_step *st) {
  switch (st->dst) {
  case NSC_BUF_RECV: return w->recv + st->dst_off;
  case NSC_BUF_TMP: return w->tmp ? w->tmp + st->dst_off : w->recv;
  default: return NULL; /* no step writes the send buffer */
  }
}

/* ---- the ring's cast-back (ring.c) ------------------------------------------------ */

/* A cast-back item of c's, its `run` set (the cast back, or the NaN fill of
 * a poisoned one, the staging released, the record committed; parked after
 * an ncclInProgress group end, dropped after a failed one). */
nsc_work *nsc_castback_new(struct nsc_comm *c);
/* The cast-back of walk w's call (a bucket's) for count wire elements at
 * the staging the walk took: its memory kind, stream, format, op and
 * prescale; NULL when no item could be had. */
nsc_work *nsc_castback_of(const nsc_walk *w, size_t count);
/* Testing (NCCLSHIM_FAULT_CAST, in the plan's codec): 1 when this cast to
 * the wire type is the process's N-th, the one to fail (the backend's
 * message is set). */
int nsc_cast_fault(const nsc_codec *codec);
/* The real wire collectives alone: count elements at buf in chunks of ce
 * (0: one), advancing through buf, or all on buf (!advance: a poisoned
 * buffer of one chunk). */
ncclResult_t nsc_wire_calls(struct nsc_comm *c, void *buf, int advance, size_t count, size_t ce,
                            ncclDataType_t wdt, ncclRedOp_t op, cudaStream_t s, int in_group);

/* ---- two-phase (twophase.c) ----------------------------------------------------------- */

/* The bucket a two-phase step's error-feedback residuals belong to: the
 * user's send and receive buffers of the call, whatever stage of an
 * algorithm runs the step. A stage's own buffers would mix buckets: hier's
 * middle stage reads and writes the receive buffer's shard, so two buckets
 * with their own send buffers and one receive buffer looked like one (61x
 * the bound, found by the red team's review: tests/t/46-ef.sh 2c). */
typedef struct {
  const void *send, *recv;
} nsc_ef_key;

/* ---- helpers shared by the handlers -------------------------------------------- */

/* Keep the first failure: res becomes x's answer when res is still fine. */
#define NSC_FIRST(res, x)                           \
  do {                                              \
    ncclResult_t x_ = (x);                          \
    if (NSC_OK(res) && !NSC_OK(x_)) (res) = x_;     \
  } while (0)

/* A step that failed on this rank: what it wrote (bytes at p) becomes
 * all-ones (NaN in every format), so that nothing sent on or kept is a wrong
 * value; returns the backend's answer. */
static inline int nsc_poison(const nsc_backend *be, nsc_stream s, void *p, size_t bytes) {
  return be->fill_ones(s, p, bytes);
}

/* One step at its offsets (for node j and local index l when it repeats)
 * through its handler: its answer, after a plan of stages filled what a
 * failed one wrote with NaN. Inline: the walk's loop and a repeated step's
 * group (walk.c) call it between handlers. */
static inline ncclResult_t nsc_walk_step(nsc_walk *w, const nsc_step *st) {
  float *dst = nsc_walk_dst(w, st);
  size_t wrote = st->count; /* elements */
  const nsc_step_handler *h = nsc_step_handler_of(st);
  ncclResult_t r = h ? h->run(w, st, &dst, &wrote) : ncclInternalError;
  if (w->p->stages && !NSC_OK(r) && dst && (st->dst != NSC_BUF_TMP || w->tmp))
    nsc_poison(w->be, (nsc_stream)w->s, dst, 4 * wrote);
  return r;
}

/* The process totals of one call (ncclshim_get_stats), by its plan's
 * algorithm. */
static inline void nsc_count_call(nsc_alg alg, uint64_t logical, uint64_t wire, int real_calls) {
  switch (alg) {
  case NSC_ALG_PLAIN: NSC_COUNT(passthrough, 1); break;
  case NSC_ALG_LOCAL: NSC_COUNT(skipped, 1); break;
  case NSC_ALG_FUSE: NSC_COUNT(fused, 1); break;
  default: NSC_COUNT(compressed, 1); break;
  }
  NSC_COUNT(logical_bytes, logical);
  NSC_COUNT(wire_bytes, wire);
  NSC_COUNT(real_calls, real_calls);
}

#endif
