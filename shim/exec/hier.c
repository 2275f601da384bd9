/* hier.c — NCCLSHIM_ALGO=hier's execution, for a communicator that spans
 * N >= 2 nodes holding the same number L >= 2 of its ranks each (the node
 * map agreed at the settings check, topo/topo.h): its sub-communicators, and
 * the NCCL collectives of its plan's stages on them (plan.c: an fp32
 * reduce-scatter inside the node, a two-phase exchange in the wire format
 * between nodes, an fp32 all-gather inside the node; the walk, walk.c, runs
 * them in order, the two-phase stage by twophase.c's handler on the cross
 * communicator's entry).
 *
 * The sub-communicators are split at the settings check by every rank in the
 * same order (node: colour = node index, key = rank; across: colour = local
 * rank, key = node index), inheriting the parent's configuration (on a
 * nonblocking parent each split is polled to completion), and adopted only
 * when every rank has both (one more exchange); their NCCL handles end with
 * their parent (destroy or abort alike), the internal entry only when the
 * parent's entry is freed (a call may still be inside).
 *
 * Must not: issue anything but the splits and its plans' stages, or decide
 * anything from data, timings or local failures. */
#include "hier.h"

#include "comm.h"
#include "core.h"
#include "exec.h"
#include "msg.h"
#include "plan.h"
#include "real.h"

ncclComm_t nsc_hier_nccl(const nsc_comm *c, nsc_plan_on on) {
  return on == NSC_ON_NODE ? c->hier_intra : on == NSC_ON_CROSS ? c->hier_cross : c->comm;
}

/* A stage's answer; on a nonblocking communicator polled (never the
 * stream) until it is enqueued, except inside the walk's own group, whose
 * end is polled instead. */
static ncclResult_t enqueued(const nsc_walk *w, ncclComm_t on, ncclResult_t r) {
  NSC_COUNT(real_calls, 1);
  if (r == ncclInProgress && w->grouped) {
    w->c->nonblocking = 1;
    return ncclSuccess;
  }
  return nsc_enqueued(w->c, on, r);
}

ncclResult_t nsc_step_collective(nsc_walk *w, const nsc_step *st, float **dst, size_t *wrote) {
  ncclComm_t comm = nsc_hier_nccl(w->c, st->on);
  ncclRedOp_t op = st->avg ? ncclAvg : ncclSum;
  const float *src = nsc_walk_src(w, st);
  ncclResult_t r;
  switch (st->kind) {
  case NSC_STEP_REDUCESCATTER: r = NSC_ISSUE(w->c, ReduceScatter(src, *dst, st->count, ncclFloat32, op, comm, w->s)); break;
  case NSC_STEP_ALLREDUCE: r = NSC_ISSUE(w->c, AllReduce(src, *dst, st->count, ncclFloat32, op, comm, w->s)); break;
  case NSC_STEP_ALLGATHER:
    *wrote *= (size_t)w->c->topo.local_size;
    r = NSC_ISSUE(w->c, AllGather(src, *dst, st->count, ncclFloat32, comm, w->s));
    break;
  default: /* NSC_STEP_REDUCE: only the root writes */
    r = NSC_ISSUE(w->c, Reduce(src, *dst, st->count, ncclFloat32, op, st->root, comm, w->s));
    if (st->root != w->c->topo.local_rank) *dst = NULL;
    break;
  }
  return enqueued(w, comm, r);
}

int nsc_hier_possible(const nsc_comm *c, const char **why) {
  const nsc_topo *t = &c->topo;
  *why = "";
  if (!nsc_real.CommSplit || !nsc_real.ReduceScatter || !nsc_real.AllGather || (!t->contiguous && !nsc_real.Reduce))
    *why = "this NCCL lacks ncclCommSplit, ncclReduceScatter, ncclAllGather or (nodes of non-consecutive ranks) ncclReduce";
  return !**why;
}

/* A split's result: on a nonblocking parent NCCL answers ncclInProgress and
 * completes the child in the background; poll it (the child once NCCL has
 * set it, the parent before) until it is done. */
static ncclResult_t split_done(nsc_comm *c, ncclResult_t r, const ncclComm_t *child) {
  if (r == ncclInProgress) r = nsc_wait_nonblocking(c, *child ? *child : c->comm);
  return r;
}

int nsc_hier_split(nsc_comm *c) {
  const nsc_topo *t = &c->topo;
  /* config NULL: the children inherit the parent's configuration (NCCL copies
   * it only then), blocking or not; written straight into the entry, which
   * outlives any background completion */
  c->hier_intra = c->hier_cross = NULL;
  ncclResult_t a = NSC_ISSUE(c, CommSplit(c->comm, t->node[t->rank], t->rank, &c->hier_intra, NULL));
  a = split_done(c, a, &c->hier_intra);
  ncclResult_t b = NSC_ISSUE(c, CommSplit(c->comm, t->local_rank, t->node[t->rank], &c->hier_cross, NULL)); /* whatever a was */
  b = split_done(c, b, &c->hier_cross);
  NSC_COUNT(real_calls, 2);
  if (a != ncclSuccess && c->hier_intra) {
    nsc_real.CommAbort(c->hier_intra);
    c->hier_intra = NULL;
  }
  if (b != ncclSuccess && c->hier_cross) {
    nsc_real.CommAbort(c->hier_cross);
    c->hier_cross = NULL;
  }
  nsc_comm *xc = c->hier_cross ? nsc_comm_get(c->hier_cross) : NULL;
  c->hier_xc = xc;
  if (!c->hier_intra || !c->hier_cross || !xc)
    nsc_warn("hier on communicator %p: rank %d could not split its sub-communicators (%d, %d%s)", (void *)c->comm,
             c->rank, (int)a, (int)b, c->hier_cross && !xc ? ", no host memory" : "");
  return c->hier_intra && c->hier_cross && xc;
}

/* The NCCL handles end (the same way as their parent); the internal entry
 * leaves the table, but the parent keeps its reference until it is freed
 * itself (comm.c), since a call on another thread may still be inside. */
static void end_parts(nsc_comm *c, ncclResult_t (*real_fn)(ncclComm_t)) {
  nsc_comm *x = c->hier_xc ? nsc_comm_detach(c->hier_cross) : NULL; /* the table's reference */
  if (c->hier_cross) real_fn(c->hier_cross);
  if (c->hier_intra) real_fn(c->hier_intra);
  nsc_comm_put(x);
}

void nsc_hier_adopt(nsc_comm *c, int all) {
  if (!all) {
    if (c->rank == 0)
      nsc_warn("hier on communicator %p: a rank could not split its sub-communicators; auto's choice (ring or "
               "flat two-phase) on every rank", (void *)c->comm);
    end_parts(c, nsc_real.CommAbort ? nsc_real.CommAbort : nsc_real.CommDestroy);
    nsc_comm_put(c->hier_xc); /* not adopted: no call ever used it */
    c->hier_intra = c->hier_cross = NULL;
    c->hier_xc = NULL;
    return;
  }
  nsc_comm *x = c->hier_xc;
  x->internal = 1;
  x->parent = c; /* the parent outlives it: it holds the reference (end_parts) */
  x->key_rank = c->rank;
  x->rank = c->topo.node[c->rank];
  x->nranks = c->topo.nnodes;
  x->checked = 1;
  x->host_rule = c->host_rule;
  c->hier_on = 1;
}

void nsc_hier_end(nsc_comm *c, ncclResult_t (*real_fn)(ncclComm_t)) {
  if (c && c->hier_on) end_parts(c, real_fn);
}
