/* exec.c — the executor (exec.h): a plan is run by its algorithm's runner
 * from one table; a hierarchical plan's steps by the step handlers, one
 * after the other on the caller's stream, each on the communicator its
 * group names (ALL: the caller's; NODE and CROSS: the sub-communicators
 * hier.c split at the check).
 *
 * What the walk of a hierarchical plan owns:
 *   - staging: the plan's need (TMP and every two-phase step's encoded
 *     bytes) is checked against NCCLSHIM_MAX_STAGING_BYTES (refused alike on
 *     every rank, nothing issued) and against the agreed block (no room:
 *     the whole call is plain NCCL on every rank, never a partly
 *     hierarchical fp32 sum, whose order would differ) before anything is
 *     issued;
 *   - failures: every step is issued whatever the earlier ones answered on
 *     this rank (its peers issue them: skipping one would hang them); a step
 *     that failed here fills what it wrote with 0xff (NaN), so that what it
 *     sends on is NaN, never a wrong value; the first failure is the call's
 *     result, and a failed reduce-scatter's whole shard is NaN;
 *   - a rank whose TMP cannot be used (NSC_STAGE_POISON) writes the steps
 *     meant for TMP into its receive buffer (its peers' inputs stay what
 *     they are) and sends NaN in the two-phase step that would read TMP;
 *   - the call's log record and counters (a two-phase step on a
 *     sub-communicator is counted as part of this call, not as its own).
 * The ncclAvg of a plan is Avg in every reducing step: x/L inside the node,
 * x/N between nodes.
 *
 * A plan marked deferred (two phases inside a user group: a second phase
 * needs the first one's data, and nothing of a group runs before its
 * outermost end) is queued whole and run right after the real group end, in
 * the order it was queued, on its own stream, by every rank alike.
 *
 * Must not: run a step list inside a user group, retry a real call, or
 * decide anything but from the plan (data, timings and local failures
 * change only what a step writes, never what is issued). */
#include "exec.h"

#include "comm.h"
#include "core.h"
#include "msg.h"
#include "real.h"
#include "staging.h"

ncclResult_t nsc_forward(nsc_comm *c, int rs, const void *send, void *recv, size_t count, ncclDataType_t dt,
                         ncclRedOp_t op, cudaStream_t s, nsc_why why) {
  /* a reduce-scatter's record and counters: its whole buffer (count per rank) */
  size_t whole = rs ? count * (size_t)(c->nranks > 0 ? c->nranks : 1) : count;
  if (!nsc_log_on()) {
    nsc_count_call(NSC_ACT_PASS, whole * nsc_dtype_size(dt), whole * nsc_dtype_size(dt), 1);
    return rs ? NSC_ISSUE(c, ReduceScatter(send, recv, count, dt, op, c->comm, s))
              : NSC_ISSUE(c, AllReduce(send, recv, count, dt, op, c->comm, s));
  }
  nsc_rec rec;
  /* Timed on the buffer's own backend: CUDA events on the caller's stream. */
  nsc_rec_start(&rec, rs ? NSC_KIND_REDUCESCATTER : NSC_KIND_ALLREDUCE, c->seq, NSC_ACT_PASS, whole, dt, dt, op,
                nsc_backend_for(recv), (nsc_stream)s, nsc_group_depth() > 0);
  rec.why = (int)why;
  ncclResult_t r = rs ? NSC_ISSUE(c, ReduceScatter(send, recv, count, dt, op, c->comm, s))
                      : NSC_ISSUE(c, AllReduce(send, recv, count, dt, op, c->comm, s));
  nsc_count_call(NSC_ACT_PASS, rec.logical_bytes, rec.wire_bytes, 1);
  nsc_log_mark(&rec, NSC_MARK_END);
  rec.result = r;
  nsc_log_commit(&c->log, &rec);
  return r;
}

/* One walk's state. */
typedef struct {
  nsc_comm *c;
  const nsc_backend *be;
  const nsc_plan *p;
  const float *send;
  float *recv, *tmp;
  ncclRedOp_t op;
  cudaStream_t s;
  uint64_t seq;
  int grouped; /* the step's collectives are inside a group of the walk's own */
} walk;

static const float *src_of(const walk *w, const nsc_step *st) {
  switch (st->src) {
  case NSC_BUF_SEND: return w->send + st->src_off;
  case NSC_BUF_RECV: return w->recv + st->src_off;
  default: return w->tmp ? w->tmp + st->src_off : NULL;
  }
}

/* Where a step writes; a step meant for TMP on a rank without it writes into
 * the receive buffer (count elements, the call's own receive size). */
static float *dst_of(const walk *w, const nsc_step *st) {
  switch (st->dst) {
  case NSC_BUF_RECV: return w->recv + st->dst_off;
  case NSC_BUF_TMP: return w->tmp ? w->tmp + st->dst_off : w->recv;
  default: return NULL; /* no step writes the send buffer */
  }
}

static ncclComm_t nccl_of(const walk *w, nsc_plan_on on) {
  return on == NSC_ON_NODE ? w->c->hier_intra : on == NSC_ON_CROSS ? w->c->hier_cross : w->c->comm;
}

/* A real call's result; on a nonblocking communicator polled (never the
 * stream) until it is enqueued, except inside the walk's own group, whose
 * end is polled instead. */
static ncclResult_t enqueued(const walk *w, ncclComm_t on, ncclResult_t r) {
  NSC_COUNT(real_calls, 1);
  if (r == ncclInProgress && w->grouped) {
    w->c->nonblocking = 1;
    return ncclSuccess;
  }
  return nsc_enqueued(w->c, on, r);
}

static ncclResult_t walk_twophase(const walk *w, const nsc_step *st, float *dst) {
  nsc_comm *on = st->on == NSC_ON_CROSS ? w->c->hier_xc : w->c;
  ncclRedOp_t op = st->avg ? ncclAvg : ncclSum;
  const float *src = src_of(w, st);
  nsc_ef_key key = {w->send, w->recv}; /* the call's buffers, never the stage's (exec.h) */
  if (src) return nsc_twophase_keyed(on, w->be, &w->p->tp, src, dst, st->count, op, w->s, st->rs, w->seq, key);
  /* No TMP here: the step's staging is taken all the same, as the healthy
   * ranks' two-phase takes it (the block's use so far is counted alike on
   * every rank: later takes of a group, and its growth, are decided from
   * it), and every message goes out NaN. */
  void *unused = NULL;
  (void)nsc_get_staging(on, w->be, (nsc_stream)w->s, nsc_tp_staging_bytes(&w->p->tp, st->rs), "a reduce-scatter",
                        &unused);
  return nsc_twophase_poisoned(on, w->be, &w->p->tp, dst, st->count, st->rs, w->s, key);
}

/* The step handlers: one NCCL collective of the step's group, or a
 * two-phase step. Each returns its result and sets *dst to NULL where this
 * rank wrote nothing, *wrote to the elements it wrote. */
typedef ncclResult_t (*step_fn)(const walk *w, const nsc_step *st, float **dst, size_t *wrote);

static ncclResult_t step_collective(const walk *w, const nsc_step *st, float **dst, size_t *wrote) {
  ncclComm_t comm = nccl_of(w, st->on);
  ncclRedOp_t op = st->avg ? ncclAvg : ncclSum;
  const float *src = src_of(w, st);
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

static ncclResult_t step_twophase(const walk *w, const nsc_step *st, float **dst, size_t *wrote) {
  (void)wrote;
  return walk_twophase(w, st, *dst);
}

/* The casts and the wire collective are the ring's runner's (ring.c): a
 * walk never meets them. */
static const step_fn step_handlers[] = {
    [NSC_STEP_ALLREDUCE] = step_collective, [NSC_STEP_REDUCESCATTER] = step_collective,
    [NSC_STEP_ALLGATHER] = step_collective, [NSC_STEP_TWOPHASE] = step_twophase,
    [NSC_STEP_REDUCE] = step_collective,
};

/* One step (for node j when it repeats per node); returns its result, after
 * filling what it wrote with NaN when it failed. */
static ncclResult_t run_step(const walk *w, const nsc_step *st) {
  float *dst = dst_of(w, st);
  size_t wrote = st->count; /* elements */
  step_fn f = (size_t)st->kind < sizeof step_handlers / sizeof *step_handlers ? step_handlers[st->kind] : NULL;
  ncclResult_t r = f ? f(w, st, &dst, &wrote) : ncclInternalError;
  if (!NSC_OK(r) && dst && (st->dst != NSC_BUF_TMP || w->tmp)) nsc_poison(w->be, (nsc_stream)w->s, dst, 4 * wrote);
  return r;
}

/* The record's wire bytes: what this rank's two-phase steps encode and its
 * fp32 steps on the whole communicator carry. */
static size_t wire_bytes(const nsc_plan *p) {
  size_t b = 0;
  for (int i = 0; i < p->nsteps; i++) {
    const nsc_step *st = &p->step[i];
    if (st->kind == NSC_STEP_TWOPHASE) {
      for (int j = 0; j < p->tp.n; j++) b += nsc_tp_chunk_bytes(&p->tp, j);
    } else if (st->on == NSC_ON_ALL) {
      b += 4 * st->count;
    }
  }
  return b;
}

/* HIER: the plan's steps in order, each through its handler. */
static ncclResult_t walk_hier(nsc_comm *c, const nsc_backend *be, const nsc_plan *p, const float *send, float *recv,
                              ncclRedOp_t op, cudaStream_t s, uint64_t seq) {
  const nsc_topo *t = &c->topo;
  const char *what = p->rs ? "a reduce-scatter" : "an all-reduce";
  size_t need = p->staging;
  if (need) {
    /* checked on the caller's communicator (its message names it) */
    ncclResult_t lim = nsc_staging_refused(c, need, what);
    if (lim != ncclSuccess) return lim; /* nothing issued anywhere */
    if (!nsc_staging_room(c, be, (nsc_stream)s, need))
      return nsc_forward(c, p->rs, send, recv, p->count, ncclFloat32, op, s, NSC_WHY_STAGING);
  }
  walk w = {c, be, p, send, recv, NULL, op, s, seq, 0};
  if (p->tmp_elems) {
    void *tmp = NULL;
    if (nsc_get_staging(c, be, (nsc_stream)s, 4 * p->tmp_elems, what, &tmp) == NSC_STAGE_OK) w.tmp = tmp;
  }
  size_t total = p->rs ? p->count * (size_t)c->nranks : p->count;
  nsc_rec rec;
  nsc_rec_start(&rec, NSC_KIND_TWOPHASE | (p->rs ? NSC_KIND_REDUCESCATTER : 0), seq, NSC_ACT_COMPRESS, total,
                ncclFloat32, (ncclDataType_t)p->wdt, op, be, (nsc_stream)s, 0);
  rec.wire_bytes = wire_bytes(p);
  if (!p->tmp_elems || w.tmp) { /* as flat two-phase: counted once it has its staging */
    nsc_count_call(NSC_ACT_COMPRESS, 4 * total, rec.wire_bytes, 0);
    NSC_COUNT(twophase, 1);
  }
  nsc_log_mark(&rec, NSC_MARK_CAST_IN);
  ncclResult_t r = ncclSuccess;
  for (int i = 0; i < p->nsteps; i++) {
    const nsc_step *st = &p->step[i];
    int nodes = st->flags & NSC_STEP_EACH_NODE ? t->nnodes : 1;
    int locals = st->flags & NSC_STEP_EACH_LOCAL ? t->local_size : 1;
    /* A repeated step is one group: one launch for its N (or N x L)
     * collectives (plan.h). Each writes its own part of TMP (or, on a rank
     * without TMP, of its receive buffer, whose result is NaN anyway), so
     * their order inside the group does not matter. */
    int grouped = nodes * locals > 1;
    ncclResult_t g = grouped ? nsc_real.GroupStart() : ncclSuccess;
    if (!NSC_OK(g)) grouped = 0; /* no group: the same collectives, one launch each */
    w.grouped = grouped;
    for (int q = 0; q < nodes; q++)
      for (int l = 0; l < locals; l++) {
        nsc_step at = nsc_plan_step_at(p, t, st, nsc_plan_node_order(t, q), l); /* node j's offsets, root l */
        NSC_FIRST(r, run_step(&w, &at));
      }
    w.grouped = 0;
    if (grouped) {
      ncclResult_t e = nsc_real.GroupEnd(); /* always closed, also after a failed member */
      g = nsc_enqueued(c, nccl_of(&w, st->on), e);
      if (!NSC_OK(g)) { /* nothing of the group ran: what it would have written is NaN */
        if (w.tmp && st->dst == NSC_BUF_TMP) nsc_poison(be, (nsc_stream)s, w.tmp, 4 * p->tmp_elems);
        else nsc_poison(be, (nsc_stream)s, recv, 4 * p->count);
        NSC_FIRST(r, g);
      }
    }
  }
  if (w.tmp) nsc_staging_done_on(c, (nsc_stream)s);
  if (p->rs) {
    if (NSC_OK(r) && !w.tmp && p->tmp_elems) r = ncclSystemError; /* its shard came from NaN */
    if (!NSC_OK(r)) nsc_poison(be, (nsc_stream)s, recv, 4 * p->count);
  }
  nsc_log_mark(&rec, NSC_MARK_COLL);
  nsc_log_mark(&rec, NSC_MARK_END);
  rec.result = r;
  if (NSC_OK(r)) nsc_log_commit(&c->log, &rec);
  else nsc_log_discard(&rec);
  return r;
}

/* ---- the runners ---- */

static ncclResult_t run_plain(nsc_comm *c, const nsc_backend *be, const nsc_call *k, const nsc_plan *p) {
  (void)be, (void)p;
  return nsc_forward(c, k->rs, k->send, k->recv, k->arg, k->dt, k->op, k->stream, p->why);
}

/* Accumulation: what the collective returns if every rank held this rank's
 * data — Sum: W * x, Avg: x. */
static ncclResult_t run_local(nsc_comm *c, const nsc_backend *be, const nsc_call *k, const nsc_plan *p) {
  nsc_rec rec;
  nsc_stream s = (nsc_stream)k->stream;
  (void)p;
  nsc_rec_start(&rec, NSC_KIND_ALLREDUCE, c->seq, NSC_ACT_SKIP, k->arg, k->dt, k->dt, k->op, be, s,
                nsc_group_depth() > 0);
  double factor = k->op == ncclSum ? (double)c->nranks : 1.0;
  char kind = k->dt == ncclFloat32 ? 'f' : k->dt == ncclFloat64 ? 'd' : k->dt == ncclFloat16 ? 'h' : 'b';
  int rc = 0;
  if (factor != 1.0 || k->send != k->recv) rc = be->scale(s, kind, k->send, k->recv, k->arg, factor);
  nsc_count_call(NSC_ACT_SKIP, rec.logical_bytes, 0, 0);
  nsc_log_mark(&rec, NSC_MARK_END);
  rec.result = rc ? ncclSystemError : ncclSuccess;
  nsc_log_commit(&c->log, &rec);
  if (rc) nsc_warn("accumulation: local result failed: %s", nsc_backend_error());
  return rec.result;
}

ncclResult_t nsc_exec_defer(nsc_comm *c, const nsc_backend *be, const nsc_call *k, const nsc_plan *p) {
  nsc_work *w = nsc_work_of_call(NSC_W_TWOPHASE, c, be, k);
  if (!w) { /* heap and reserve exhausted at once: the peers' group issues it, this one cannot */
    nsc_warn("out of host memory on rank %d for a grouped two-phase call on communicator %p: its peers will wait "
             "for it", c->rank, (void *)c->comm);
    return ncclSystemError;
  }
  w->seq = c->seq;
  w->plan = *p;
  nsc_group_defer(w);
  return ncclSuccess;
}

static ncclResult_t run_hier(nsc_comm *c, const nsc_backend *be, const nsc_call *k, const nsc_plan *p) {
  if (p->deferred) return nsc_exec_defer(c, be, k, p);
  return walk_hier(c, be, p, k->send, k->recv, k->op, k->stream, c->seq);
}

const nsc_runner nsc_runners[NSC_PLAN_NALGS] = {
    [NSC_PLAN_PLAIN] = run_plain, [NSC_PLAN_RING] = nsc_ring,  [NSC_PLAN_TWOPHASE] = nsc_twophase_run,
    [NSC_PLAN_HIER] = run_hier,   [NSC_PLAN_LOCAL] = run_local, [NSC_PLAN_FUSE] = nsc_fuse_queue,
};

ncclResult_t nsc_exec_deferred(nsc_work *w) {
  const nsc_plan *p = &w->plan;
  cudaStream_t s = (cudaStream_t)w->stream;
  ncclResult_t r = p->alg == NSC_PLAN_HIER
                       ? walk_hier(w->c, w->be, p, w->src, w->dst, w->op, s, w->seq)
                       : nsc_twophase_keyed(w->c, w->be, &p->tp, w->src, w->dst, w->count, w->op, s, p->rs, w->seq,
                                            (nsc_ef_key){w->src, w->dst});
  /* forwarded plain (no staging room): enqueued before anything follows */
  return nsc_enqueued(w->c, w->c->comm, r);
}
