/* walk.c — the one walk of a plan (exec.h): its staging admitted by one rule,
 * then its steps in order, each through its handler (steps.c), one after
 * the other on the call's stream, each on the communicator its group names.
 *
 * What the walk owns:
 *   - admission (admit): the plan's staging against NCCLSHIM_MAX_STAGING_BYTES
 *     (a user's call: refused alike on every rank, nothing issued) and
 *     against the agreed block (no room: the call goes plain NCCL on every
 *     rank, never a partly transformed fp32 sum, whose order would differ),
 *     before anything is issued; a plan of one region takes it here;
 *   - repetitions: a step repeated per node (and local index) is one group
 *     of the walk's own, one launch (plan.h);
 *   - the answer: the first failure, else the last step's answer (a ring
 *     on a nonblocking communicator: ncclInProgress);
 *   - for a plan of stages (hier): its TMP, the call's log record and
 *     counters (a two-phase stage on a sub-communicator is counted as part
 *     of this call, not as its own), and failures: every stage is issued
 *     whatever the earlier ones answered on this rank (its peers issue them:
 *     skipping one would hang them); a stage that failed here fills what it
 *     wrote with 0xff (NaN), so that what it sends on is NaN, never a wrong
 *     value; a failed reduce-scatter's whole shard is NaN; a rank whose TMP
 *     cannot be used writes the stages meant for TMP into its receive buffer
 *     (its peers' inputs stay what they are) and sends NaN in the two-phase
 *     stage that would read TMP.
 * The ncclAvg of a plan is Avg in every reducing step: x/L inside the node,
 * x/N between nodes.
 *
 * Must not: run a plan of stages inside a user group (its steps need each
 * other's data; such a plan is deferred to the group end), retry a real
 * call, or decide anything but from the plan (data, timings and local
 * failures change only what a step writes, never what is issued). */
#include "exec.h"

#include "comm.h"
#include "core.h"
#include "msg.h"
#include "real.h"
#include "staging.h"

/* The plan's staging, by the one rule (exec.h): NSC_STAGE_OK, _REFUSED,
 * _PLAIN (no room) or _POISON (this rank cannot use what it was handed). */
static int admit(nsc_walk *w) {
  const nsc_plan *p = w->p;
  nsc_stream s = (nsc_stream)w->s;
  const char *what = p->rs ? "a reduce-scatter" : "an all-reduce";
  if (!p->staging) return NSC_STAGE_OK;
  if (!p->stages) { /* one region, taken here for the steps */
    if (p->limited) return nsc_get_staging(w->c, w->be, s, p->staging, what, &w->stage);
    int rc = nsc_staging_take_comm(w->c, w->be, s, p->staging, &w->stage);
    return rc < 0 ? NSC_STAGE_PLAIN : rc > 0 ? NSC_STAGE_POISON : NSC_STAGE_OK;
  }
  /* stages: the total is checked on the caller's communicator (its message
   * names it); each stage takes its own region */
  if (p->limited && nsc_staging_refused(w->c, p->staging, what) != ncclSuccess) return NSC_STAGE_REFUSED;
  return nsc_staging_room(w->c, w->be, s, p->staging) ? NSC_STAGE_OK : NSC_STAGE_PLAIN;
}

/* Step st repeated per node (and local index): one group of the walk's
 * own, one launch, for its N (or N x L) collectives. Each writes its own
 * part of TMP (or, on a rank without TMP, of its receive buffer, whose
 * result is NaN anyway), so their order inside the group does not matter. */
static ncclResult_t run_repeated(nsc_walk *w, const nsc_step *st) {
  const nsc_topo *t = &w->c->topo;
  int nodes = st->flags & NSC_STEP_EACH_NODE ? t->nnodes : 1;
  int locals = st->flags & NSC_STEP_EACH_LOCAL ? t->local_size : 1;
  ncclResult_t r = ncclSuccess, g = nsc_real.GroupStart();
  w->grouped = NSC_OK(g); /* no group: the same collectives, one launch each */
  for (int q = 0; q < nodes; q++)
    for (int l = 0; l < locals; l++) {
      nsc_step at = nsc_plan_step_at(w->p, t, st, nsc_plan_node_order(t, q), l); /* node j's offsets, root l */
      NSC_FIRST(r, nsc_walk_step(w, &at));
    }
  if (w->grouped) {
    w->grouped = 0;
    ncclResult_t e = nsc_real.GroupEnd(); /* always closed, also after a failed member */
    g = nsc_enqueued(w->c, nsc_hier_nccl(w->c, st->on), e);
    if (!NSC_OK(g)) { /* nothing of the group ran: what it would have written is NaN */
      if (w->tmp && st->dst == NSC_BUF_TMP) nsc_poison(w->be, (nsc_stream)w->s, w->tmp, 4 * w->p->tmp_elems);
      else nsc_poison(w->be, (nsc_stream)w->s, w->recv, 4 * w->p->count);
      NSC_FIRST(r, g);
    }
  }
  return r;
}

/* The record's wire bytes of a plan of stages: what this rank's two-phase
 * stage encodes and its fp32 steps on the whole communicator carry. */
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

/* A plan of stages: its TMP, then its record and counters (as flat
 * two-phase's: counted once it has its staging). */
static void stages_begin(nsc_walk *w, nsc_rec *rec) {
  const nsc_plan *p = w->p;
  nsc_comm *c = w->c;
  if (p->tmp_elems) {
    void *tmp = NULL;
    if (nsc_get_staging(c, w->be, (nsc_stream)w->s, 4 * p->tmp_elems, p->rs ? "a reduce-scatter" : "an all-reduce",
                        &tmp) == NSC_STAGE_OK)
      w->tmp = tmp;
  }
  size_t total = p->rs ? p->count * (size_t)c->nranks : p->count;
  nsc_rec_start(rec, p->rs ? NSC_COLL_REDUCESCATTER : NSC_COLL_ALLREDUCE, p->alg, w->seq, total, ncclFloat32,
                (ncclDataType_t)p->wdt, w->k->op, w->be, (nsc_stream)w->s, 0);
  rec->wire_bytes = wire_bytes(p);
  if (!p->tmp_elems || w->tmp) {
    nsc_count_call(p->alg, 4 * total, rec->wire_bytes, 0);
    NSC_COUNT(twophase, 1);
  }
  nsc_log_mark(rec, NSC_MARK_CAST_IN);
}

static ncclResult_t stages_end(nsc_walk *w, nsc_rec *rec, ncclResult_t r) {
  const nsc_plan *p = w->p;
  if (w->tmp) nsc_staging_done_on(w->c, (nsc_stream)w->s);
  if (p->rs) {
    if (NSC_OK(r) && !w->tmp && p->tmp_elems) r = ncclSystemError; /* its shard came from NaN */
    if (!NSC_OK(r)) nsc_poison(w->be, (nsc_stream)w->s, w->recv, 4 * p->count);
  }
  nsc_log_mark(rec, NSC_MARK_COLL);
  nsc_log_mark(rec, NSC_MARK_END);
  rec->result = r;
  if (NSC_OK(r)) nsc_log_commit(&w->c->log, rec);
  else nsc_log_discard(rec);
  return r;
}

/* The call's steps did not run (refused, or forwarded for want of staging):
 * a step that keeps a place in a sequence takes it all the same. */
static void unrun(nsc_walk *w, int forwarded) {
  for (int i = 0; i < w->p->nsteps; i++) {
    const nsc_step_handler *h = nsc_step_handler_of(&w->p->step[i]);
    if (h && h->unrun) h->unrun(w, &w->p->step[i], forwarded);
  }
}

ncclResult_t nsc_walk_run(nsc_comm *c, const nsc_backend *be, const nsc_call *k, const nsc_plan *p, uint64_t seq,
                          nsc_work *members) {
  nsc_walk w = {.c = c, .be = be, .p = p, .k = k, .members = members, .seq = seq, .s = k->stream,
                .send = k->send, .recv = k->recv};
  switch (admit(&w)) {
  case NSC_STAGE_REFUSED: /* the limit: the same on every rank, nothing issued anywhere */
    if (!p->stages) unrun(&w, 0);
    return ncclInvalidUsage;
  case NSC_STAGE_PLAIN: /* no room in the agreed block: fp32 on every rank */
    if (!p->stages) unrun(&w, 1);
    return nsc_forward_call(&w, NSC_WHY_STAGING);
  case NSC_STAGE_POISON: w.stage_poison = 1; break;
  default: break;
  }
  nsc_rec rec;
  if (p->stages) stages_begin(&w, &rec);
  ncclResult_t r = ncclSuccess, last = ncclSuccess;
  for (int i = 0; i < p->nsteps; i++) { /* the handlers one after the other; a repeated step in a group */
    const nsc_step *st = &p->step[i];
    last = st->flags & NSC_STEP_EACH_NODE ? run_repeated(&w, st) : nsc_walk_step(&w, st);
    NSC_FIRST(r, last);
  }
  if (p->stages) return stages_end(&w, &rec, r);
  if (w.forced != ncclSuccess) return w.forced;
  return NSC_OK(r) ? last : r;
}
