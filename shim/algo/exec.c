/* exec.c — carries out the plan of a compressed all-reduce or reduce-scatter
 * that runs in two phases (plan.h): a flat two-phase step goes to
 * twophase.c; a hierarchical plan's steps are walked here, one after the
 * other on the caller's stream, each on the communicator its group names
 * (ALL: the caller's; NODE and CROSS: the sub-communicators hier.c split at
 * the check).
 *
 * What the walk owns, for every step list alike:
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
 * Must not: run inside a group (a step needs the previous one's data), retry
 * a real call, or decide anything but from the plan (data, timings and local
 * failures change only what a step writes, never what is issued). */
#include "algo.h"

#include "comm.h"
#include "core.h"
#include "msg.h"
#include "policy.h"
#include "real.h"
#include "run.h"

static const nsc_topo *topo_of(const nsc_comm *c, nsc_topo *flat) {
  if (c->topo.nranks == c->nranks && c->topo.node) return &c->topo;
  *flat = (nsc_topo){.nranks = c->nranks, .rank = c->rank, .local_size = 1, .min_local = 1, .max_local = 1};
  return flat;
}

void nsc_plan_for(const nsc_comm *c, int rs, size_t count, ncclRedOp_t op, int compress, nsc_plan *p) {
  nsc_topo flat;
  nsc_plan_call call = {rs, count, op == ncclAvg, compress, topo_of(c, &flat), c->hier_on, c->host_rule};
  nsc_plan_make(p, &nsc_g.cfg, &call);
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
  nsc_comm *c = w->c;
  NSC_COUNT(real_calls, 1);
  if (r == ncclInProgress && w->grouped) {
    c->nonblocking = 1;
    return ncclSuccess;
  }
  if (r == ncclInProgress) {
    c->nonblocking = 1;
    r = nsc_wait_nonblocking(on);
  }
  return r;
}

static ncclResult_t run_twophase(const walk *w, const nsc_step *st, float *dst) {
  nsc_comm *on = st->on == NSC_ON_CROSS ? w->c->hier_xc : w->c;
  ncclRedOp_t op = st->avg ? ncclAvg : ncclSum;
  const float *src = src_of(w, st);
  /* error feedback keyed by the step's input, or by the user's sendbuff
   * when that is TMP (a staging address, which may differ between calls) */
  const void *key = st->src == NSC_BUF_TMP ? (const void *)w->send : (const void *)src;
  if (src) return nsc_twophase_keyed(on, w->be, src, dst, st->count, op, w->s, st->rs, w->seq, key);
  /* No TMP here: the step's staging is taken all the same, as the healthy
   * ranks' two-phase takes it (the block's use so far is counted alike on
   * every rank: later takes of a group, and its growth, are decided from
   * it), and every message goes out NaN. */
  nsc_tp_plan tp;
  nsc_topo flat;
  nsc_plan_tp(w->p, st, &nsc_g.cfg, topo_of(w->c, &flat), &tp);
  void *unused = NULL;
  (void)nsc_get_staging(on, w->be, w->s, nsc_tp_staging_bytes(&tp, st->rs), "a reduce-scatter", &unused);
  return nsc_twophase_poisoned(on, w->be, dst, st->count, st->rs, w->s, key);
}

/* One step (for node j when it repeats per node); returns its result, after
 * filling what it wrote with NaN when it failed. */
static ncclResult_t run_step(const walk *w, const nsc_step *st) {
  ncclComm_t comm = nccl_of(w, st->on);
  ncclRedOp_t op = st->avg ? ncclAvg : ncclSum;
  float *dst = dst_of(w, st);
  size_t wrote = st->count; /* elements */
  ncclResult_t r;
  switch (st->kind) {
  case NSC_STEP_REDUCESCATTER:
    r = enqueued(w, comm, nsc_real.ReduceScatter(src_of(w, st), dst, st->count, ncclFloat32, op, comm, w->s));
    break;
  case NSC_STEP_REDUCE: /* only the root writes */
    r = enqueued(w, comm, nsc_real.Reduce(src_of(w, st), dst, st->count, ncclFloat32, op, st->root, comm, w->s));
    if (st->root != w->c->topo.local_rank) dst = NULL;
    break;
  case NSC_STEP_ALLGATHER:
    r = enqueued(w, comm, nsc_real.AllGather(src_of(w, st), dst, st->count, ncclFloat32, comm, w->s));
    wrote *= (size_t)w->c->topo.local_size;
    break;
  case NSC_STEP_ALLREDUCE:
    r = enqueued(w, comm, nsc_real.AllReduce(src_of(w, st), dst, st->count, ncclFloat32, op, comm, w->s));
    break;
  case NSC_STEP_TWOPHASE: r = run_twophase(w, st, dst); break;
  default: r = ncclInternalError; break; /* casts belong to the ring (allreduce.c) */
  }
  if (!NSC_OK(r) && dst && (st->dst != NSC_BUF_TMP || w->tmp)) w->be->fill_ones((nsc_stream)w->s, dst, 4 * wrote);
  return r;
}

/* The record's wire bytes: what this rank's two-phase steps encode and its
 * fp32 steps on the whole communicator carry. */
static size_t wire_bytes(const nsc_plan *p, const nsc_topo *t) {
  size_t b = 0;
  for (int i = 0; i < p->nsteps; i++) {
    const nsc_step *st = &p->step[i];
    if (st->kind == NSC_STEP_TWOPHASE) {
      nsc_tp_plan tp;
      nsc_plan_tp(p, st, &nsc_g.cfg, t, &tp);
      for (int j = 0; j < tp.n; j++) b += nsc_tp_chunk_bytes(&tp, j);
    } else if (st->on == NSC_ON_ALL) {
      b += 4 * st->count;
    }
  }
  return b;
}

static ncclResult_t walk_hier(nsc_comm *c, const nsc_backend *be, const nsc_plan *p, const float *send, float *recv,
                              ncclRedOp_t op, cudaStream_t s, uint64_t seq) {
  const nsc_config *cfg = &nsc_g.cfg;
  const nsc_topo *t = &c->topo;
  const char *what = p->rs ? "a reduce-scatter" : "an all-reduce";
  size_t need = nsc_plan_staging(p, cfg, t, nsc_staging_round);
  if (need) {
    /* checked on the caller's communicator (its message names it) */
    ncclResult_t lim = nsc_staging_refused(c, need, what);
    if (lim != ncclSuccess) return lim; /* nothing issued anywhere */
    if (!nsc_staging_room(c, be, s, need)) return nsc_forward_plain(c, send, recv, p->count, op, s, p->rs);
  }
  walk w = {c, be, p, send, recv, NULL, op, s, seq, 0};
  if (p->tmp_elems) {
    void *tmp = NULL;
    if (nsc_get_staging(c, be, s, 4 * p->tmp_elems, what, &tmp) == NSC_STAGE_OK) w.tmp = tmp;
  }
  size_t total = p->rs ? p->count * (size_t)c->nranks : p->count;
  nsc_rec rec;
  nsc_rec_init_kind(&rec, NSC_KIND_TWOPHASE | (p->rs ? NSC_KIND_REDUCESCATTER : 0), c, NSC_ACT_COMPRESS, total,
                    ncclFloat32, nsc_policy_wire_dtype(cfg), op, be, s);
  rec.wire_bytes = wire_bytes(p, t);
  rec.seq = seq;
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
        ncclResult_t x = run_step(&w, &at);
        if (NSC_OK(r) && !NSC_OK(x)) r = x;
      }
    w.grouped = 0;
    if (grouped) {
      ncclResult_t e = nsc_real.GroupEnd(); /* always closed, also after a failed member */
      g = e;
      if (g == ncclInProgress) {
        c->nonblocking = 1;
        g = nsc_wait_nonblocking(nccl_of(&w, st->on));
      }
      if (!NSC_OK(g)) { /* nothing of the group ran: what it would have written is NaN */
        if (w.tmp && st->dst == NSC_BUF_TMP) be->fill_ones((nsc_stream)s, w.tmp, 4 * p->tmp_elems);
        else be->fill_ones((nsc_stream)s, recv, 4 * p->count);
        if (NSC_OK(r)) r = g;
      }
    }
  }
  if (w.tmp) nsc_staging_done_on(c, s);
  if (p->rs) {
    if (NSC_OK(r) && !w.tmp && p->tmp_elems) r = ncclSystemError; /* its shard came from NaN */
    if (!NSC_OK(r)) be->fill_ones((nsc_stream)s, recv, 4 * p->count);
  }
  nsc_log_mark(&rec, NSC_MARK_COLL);
  nsc_log_mark(&rec, NSC_MARK_END);
  rec.result = r;
  if (NSC_OK(r)) nsc_log_commit(&c->log, &rec);
  else nsc_log_discard(&rec);
  return r;
}

ncclResult_t nsc_twophase(nsc_comm *c, const nsc_backend *be, const float *send, float *recv, size_t count,
                          ncclRedOp_t op, cudaStream_t s, int rs, uint64_t seq) {
  nsc_plan p;
  nsc_plan_for(c, rs, count, op, 1, &p);
  if (p.alg == NSC_PLAN_HIER) return walk_hier(c, be, &p, send, recv, op, s, seq);
  return nsc_twophase_keyed(c, be, send, recv, count, op, s, rs, seq, send);
}
