/* call.c — the one path of an intercepted all-reduce or reduce-scatter: the
 * hook's call descriptor (nsc_call) is taken through the communicator's
 * agreed state, decided once (plan.h: nsc_decide) and handed to the
 * executor (exec.h), which runs it now or queues what must wait for the
 * outermost group end; grouped, ungrouped and nonblocking calls take the
 * same path.
 *
 * The steps, in order:
 *   1. activation and the communicator's entry (a bad setting fails here,
 *      with its message for ncclGetLastError);
 *   2. a communicator's first calls: its check (coll/check.c), made at its
 *      first call outside a group and capture, or right after the group in
 *      which it first appeared; until then its calls are forwarded, alike on
 *      every rank;
 *   3. the call's number on the communicator and the diagnosis's note;
 *   4. the policy, asked once (policy.h); the decision's first question
 *      (nsc_decide_untouched): a call that can be nothing but itself is
 *      forwarded with the reason the decision would give it (the forwarded
 *      path: no memory-kind or capture query, no plan);
 *   5. capture (a captured call is forwarded, after the shim's own
 *      agreements in flight are finished), the accumulation learner's
 *      answer (its own updates stay in the learner);
 *   6. the launch price the fabric learner agreed (learn.c: or this call is
 *      one of its timed plain samples), the decision (the plan, once), the
 *      executor (it walks the plan now, or queues it for the group end: an
 *      ungrouped call is a group of one), and after it the staging settle,
 *      an accumulation agreement and the learner's where they are due.
 * Argument errors are NCCL's: such calls are forwarded untouched.
 *
 * Reduce-scatters are never fused or accumulated (accumulate.c says why);
 * inside a group one is numbered only when it runs in two phases.
 *
 * Must not: let anything but arguments, settings and agreed values decide
 * what is issued, retry a real call, or hold a lock of ours across one. */
#include "comm.h"
#include "core.h"
#include "exec.h"
#include "msg.h"
#include "plan.h"
#include "queue.h"
#include "real.h"
#include "staging.h"
#include "coll.h"

/* A communicator's call before its settings check (in its first group, or
 * captured): forwarded, alike on every rank. */
static ncclResult_t forward(nsc_comm *c, const nsc_call *k) {
  return nsc_forward(c, k->rs, k->send, k->recv, k->arg, k->dt, k->op, k->stream, NSC_WHY_BEFORE_CHECK);
}

/* A queued check's run, after the group end, whatever it answered
 * (ncclSuccess or ncclInProgress is timing on a nonblocking communicator,
 * not a decision, and a failure may be this rank's alone): after an
 * ncclInProgress the group's work is first waited for, so that the check is
 * the communicator's next operation, as on every other rank. A stream being
 * captured (the group was captured, alike on every rank) gets no check yet:
 * the first uncaptured call makes it. */
static ncclResult_t check_run(nsc_work *w, const nsc_after *a) {
  nsc_comm *c = w->c;
  c->check_queued = 0;
  int capturing = 0;
  if (w->be->capturing(w->stream, &capturing)) capturing = 1;
  ncclResult_t wr = ncclSuccess, rr = ncclSuccess;
  if (!capturing) {
    if (a->in_progress) wr = nsc_enqueued(c, c->comm, ncclInProgress);
    rr = nsc_check_comm(c, w->be, w->stream);
  }
  nsc_work_drop(w);
  return wr != ncclSuccess ? wr : rr;
}

/* A communicator first seen inside a group is checked right after that group;
 * until then its calls pass through, alike on every rank. */
static void defer_check(nsc_comm *c, const nsc_backend *be, cudaStream_t s) {
  if (c->check_queued) return;
  nsc_work *w = nsc_work_new(c, check_run, NSC_W_ISSUES);
  if (!w) return;
  c->check_queued = 1;
  w->be = be;
  w->stream = (nsc_stream)s;
  nsc_group_defer(w);
}

/* Step 2, on a communicator not yet checked (0) or whose check failed (-1):
 * 1 when the call is answered here (*r), 0 when it goes on, checked. Capture
 * first: a captured call is forwarded untouched and leaves the check
 * (staging, module loads, an exchange) to the first uncaptured call;
 * capture is alike on every rank. */
static int first_calls(nsc_comm *c, nsc_call *k, ncclResult_t *r) {
  const nsc_backend *be = nsc_backend_for(k->recv);
  nsc_stream s = (nsc_stream)k->stream;
  if (k->rs && k->in_group) {
    /* Before the check: forwarded (checked at the communicator's next call
     * outside a group). After a failed check: the check's error, as every
     * other call on the communicator, on every rank (fuzzer seeds 3097,
     * 3286: a healthy peer forwarded it). */
    *r = c->checked < 0 ? nsc_check_comm(c, be, s) : forward(c, k);
    return 1;
  }
  if (c->checked == 0 && be->capturing(s, &k->capturing)) k->capturing = 1;
  if (c->checked == 0 && k->rs && k->capturing) {
    *r = forward(c, k);
    return 1;
  }
  if (c->checked == 0 && (k->in_group || k->capturing)) {
    int agree = 0;
    if (!k->capturing) defer_check(c, be, k->stream);
    /* Passed through, but it is part of a backward pass all the same: the
     * micro-step count starts at the job's first pass (learning: syncs). */
    if (nsc_cfg_accumulating(&nsc_g.cfg) && be->capturing(s, &k->capturing)) k->capturing = 1;
    (void)nsc_accum_feed(c, k, k->send, k->recv, nsc_policy_accumulable(&nsc_g.cfg, k), &agree);
    *r = forward(c, k);
    if (agree) nsc_accum_after(c, be, k->stream, 1, *r);
    return 1;
  }
  *r = nsc_check_comm(c, be, s);
  return *r != ncclSuccess;
}

/* A captured all-reduce: no agreement of ours may still be running when the
 * graph's collectives are launched. */
static void before_capture(nsc_comm *c, cudaStream_t s) {
  static int warned;
  nsc_warn_once(&warned, "a stream is being captured into a CUDA graph: captured all-reduces are forwarded "
                         "untouched and always sync (decisions would be frozen into the graph)");
  nsc_stage_before_capture(c, (nsc_stream)s);
}

ncclResult_t nsc_collective(nsc_call *k) {
  /* 1. */
  int st = nsc_activate();
  nsc_forget_error();
  if (st == NSC_FAILED) {
    nsc_note_error(nsc_g.fail_msg);
    return nsc_g.fail_code;
  }
  if (st != NSC_ACTIVE || !k->comm)
    return k->rs ? nsc_real.ReduceScatter(k->send, k->recv, k->arg, k->dt, k->op, k->comm, k->stream)
                 : nsc_real.AllReduce(k->send, k->recv, k->arg, k->dt, k->op, k->comm, k->stream);
  nsc_comm *c = nsc_comm_get(k->comm);
  if (!c) {
    nsc_warn("out of memory for communicator state");
    return ncclSystemError;
  }
  NSC_COUNT(calls, 1);
  const nsc_config *cfg = &nsc_g.cfg;
  ncclResult_t r = ncclSuccess;
  int agree = 0; /* accumulation asks for an agreement right after this call */
  k->count = k->arg;
  k->has_buffers = k->send && k->recv;
  k->in_group = nsc_group_depth() > 0;
  /* 2. */
  if (c->checked <= 0 && first_calls(c, k, &r)) goto out;
  /* 3. (a reduce-scatter's whole buffer is what MIN_BYTES and the log count) */
  if (k->rs) k->count = k->arg * (size_t)c->nranks;
  if (!(k->rs && k->in_group) && !(c->untouched && !k->rs)) {
    c->seq++;
    if (k->rs) nsc_log_call_rs(&c->log, c->seq, k->count, k->dt, k->op, k->send, k->recv);
    else nsc_log_call(&c->log, c->seq, k->count, k->dt, k->op, k->send, k->recv); /* the diagnosis: observe-only */
  }
  /* 4. (untouched: agreed by every rank in the check) */
  nsc_policy_ask(cfg, k);
  nsc_agreed ag = {.untouched = c->untouched};
  nsc_why why = nsc_decide_untouched(k, &ag);
  if (why != NSC_WHY_NONE) {
    if (!c->untouched && !k->rs && nsc_cfg_accumulating(cfg) && !nsc_catchup_on)
      (void)nsc_accum_feed(c, k, k->send, k->recv, 0, &agree);
    /* a plain launch all the same: the fabric learner may time it (learn.c) */
    const nsc_backend *fbe = NULL;
    if (c->learn.f.state == NSC_FAB_MEASURING && cfg->launch_bytes == NSC_CFG_AUTO) {
      fbe = nsc_backend_for(k->recv);
      if (fbe->capturing((nsc_stream)k->stream, &k->capturing)) k->capturing = 1;
      nsc_learn_before(c, k, 0, NULL);
      nsc_learn_plan(c, k, 0, NULL);
      nsc_learn_time_begin(c, fbe, (nsc_stream)k->stream, NSC_LEARN_AT_CALL);
    }
    r = nsc_forward(c, k->rs, k->send, k->recv, k->arg, k->dt, k->op, k->stream, why);
    if (fbe) {
      nsc_learn_time_end(c, fbe, (nsc_stream)k->stream, NSC_LEARN_AT_CALL, r);
      nsc_learn_after(c, fbe, k, 0, r);
    }
    goto out;
  }
  /* 5. (only calls that may be transformed pay for the memory-kind and
   * capture queries) */
  const nsc_backend *be = nsc_backend_for(k->recv);
  if (be->capturing((nsc_stream)k->stream, &k->capturing)) k->capturing = 1;
  if (k->capturing && !k->rs) before_capture(c, k->stream);
  int local = 0;
  if (!k->rs && nsc_cfg_accumulating(cfg) && !nsc_catchup_on) /* the step hook's catch-up is never accumulated */
    local = !nsc_accum_feed(c, k, k->send, k->recv, (k->pol.may & NSC_MAY_ACCUM) && !k->capturing, &agree);
  /* 6. */
  nsc_topo flat = {.nranks = c->nranks, .rank = c->rank, .local_size = 1, .min_local = 1, .max_local = 1};
  ag.topo = c->topo.nranks == c->nranks && c->topo.node ? &c->topo : &flat;
  ag.hier = c->hier_on;
  ag.host = c->host_rule;
  nsc_learn_before(c, k, local, &ag); /* the learner's (learn.c): the agreed launch price */
  nsc_plan p;
  nsc_decide(&p, cfg, k, &ag, local);
  if (k->rs && k->in_group && p.deferred) c->seq++; /* numbered when it runs in two phases */
  /* Calls that may take staging settle it: after the call, or after the
   * outermost group end (decided by the call alone, as the takes are). */
  if (p.settles && k->in_group) nsc_staging_note(c, be, (nsc_stream)k->stream);
  nsc_learn_plan(c, k, local, &p); /* which launch of it is a sample (a plain call: around the executor) */
  nsc_learn_time_begin(c, be, (nsc_stream)k->stream, NSC_LEARN_AT_CALL);
  r = nsc_exec(c, be, k, &p);
  nsc_learn_time_end(c, be, (nsc_stream)k->stream, NSC_LEARN_AT_CALL, r);
  /* Issued whatever this call returned: every rank issues it here. */
  if (p.settles && !k->in_group) nsc_staging_settle_comm(c, (nsc_stream)k->stream);
  if (agree) nsc_accum_after(c, be, k->stream, k->in_group, r);
  nsc_learn_after(c, be, k, local, r);
out:
  nsc_comm_put(c);
  return r;
}
