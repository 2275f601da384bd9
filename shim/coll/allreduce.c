/* allreduce.c — one intercepted ncclAllReduce: pass it through, compress it,
 * answer it locally (accumulation), queue it for fusion at group end, or
 * carry it out in two phases (inside a group: right after the group end).
 *
 * Order of work on the caller's stream: cast-in, the real collective on the
 * wire buffer, cast-back; outside a group all three are enqueued before the
 * call returns (PyTorch records its completion event right after the call).
 * Inside a group, or when a nonblocking communicator answers ncclInProgress,
 * the cast-back waits (group.c).
 *
 * Must not: retry a real call, hold any lock of ours across one, synchronise
 * the caller's stream, or let anything but arguments and configuration decide
 * which collective is issued. */
#include <stdio.h>
#include <string.h>

#include "accum.h"
#include "algo.h"
#include "comm.h"
#include "core.h"
#include "msg.h"
#include "policy.h"
#include "real.h"
#include "coll.h"
#include "tp_plan.h"

/* Accumulation: what the collective returns if every rank held this rank's
 * data — Sum: W * x, Avg: x. */
static ncclResult_t answer_locally(nsc_comm *c, const nsc_backend *be, const void *send, void *recv,
                                   size_t count, ncclDataType_t dt, ncclRedOp_t op, cudaStream_t s) {
  nsc_rec rec;
  nsc_rec_init(&rec, c, NSC_ACT_SKIP, count, dt, dt, op, be, s);
  double factor = op == ncclSum ? (double)c->nranks : 1.0;
  char kind = dt == ncclFloat32 ? 'f' : dt == ncclFloat64 ? 'd' : dt == ncclFloat16 ? 'h' : 'b';
  int rc = 0;
  if (factor != 1.0 || send != recv) rc = be->scale((nsc_stream)s, kind, send, recv, count, factor);
  nsc_count_call(NSC_ACT_SKIP, rec.logical_bytes, 0, 0);
  nsc_log_mark(&rec, NSC_MARK_END);
  rec.result = rc ? ncclSystemError : ncclSuccess;
  nsc_log_commit(&c->log, &rec);
  if (rc) nsc_warn("accumulation: local result failed: %s", nsc_backend_error());
  return rec.result;
}

/* Communicators whose staging is settled after this thread's outermost
 * group end, linked through the entries (one reference each), in the order
 * the group first named them. */
static __thread nsc_comm *to_settle, **to_settle_tail; /* NULL tail: the list is empty */

void nsc_staging_note(nsc_comm *c, const nsc_backend *be, cudaStream_t s) {
  uint64_t gid = nsc_group_id();
  if (!gid || c->settle_gid == gid) return;
  c->settle_gid = gid;
  c->settle_be = be;
  c->settle_stream = (nsc_stream)s;
  nsc_comm_ref(c);
  c->settle_next = NULL;
  if (!to_settle_tail) to_settle_tail = &to_settle;
  *to_settle_tail = c;
  to_settle_tail = &c->settle_next;
}

nsc_work *nsc_staging_settle_items(void) {
  nsc_work *h = NULL, **t = &h;
  nsc_comm **keep = &to_settle;
  for (nsc_comm *c = to_settle, *n; c; c = n) {
    n = c->settle_next;
    nsc_work *w = nsc_work_new(NSC_W_SETTLE, c);
    if (!w) { /* this and every later one stay on the list, in order: settled after the group's work */
      keep = NULL;
      break;
    }
    w->be = c->settle_be;
    w->stream = c->settle_stream; /* alive: its call is in this group */
    *keep = n;
    c->settle_next = NULL;
    nsc_comm_put(c); /* the item holds its own reference */
    *t = w;
    t = &w->next;
  }
  if (!keep) { /* the rest stays: find its tail */
    keep = &to_settle;
    while (*keep) keep = &(*keep)->settle_next;
  }
  to_settle_tail = to_settle ? keep : NULL;
  return h;
}

void nsc_staging_settle_group(void) {
  nsc_comm *c = to_settle;
  to_settle = NULL;
  to_settle_tail = NULL;
  while (c) {
    nsc_comm *n = c->settle_next;
    c->settle_next = NULL;
    nsc_staging_settle_comm(c, (cudaStream_t)c->settle_stream);
    nsc_comm_put(c);
    c = n;
  }
}

int nsc_cast_fault(void) {
  static long long k;
  long long n = nsc_g.cfg.fault_cast;
  if (!n || __atomic_add_fetch(&k, 1, __ATOMIC_RELAXED) != n) return 0;
  nsc_backend_set_error("cast %lld to the wire type failed (NCCLSHIM_FAULT_CAST)", n);
  return 1;
}

/* Chunks of a compressed call (NCCLSHIM_CHUNK_BYTES, or the cost rule's for
 * auto: plan.h): decided by count, configuration and the communicator's
 * agreed memory kind alone — never by group depth, ncclInProgress answers
 * or local failures — so every rank issues the same chunk collectives
 * whether it pipelines, runs inside a group, on a nonblocking communicator,
 * or has failed locally. 0: one collective. */
static size_t chunk_elems(const nsc_comm *c, size_t count) { return nsc_plan_ring_chunk(&nsc_g.cfg, c->host_rule, count); }

/* The real collectives of one compressed call: count wire elements in chunks
 * of ce (0: one), at buf (advancing by each chunk, or all on buf when
 * !advance: a poisoned buffer of one chunk). Outside a group a chunk that
 * answers ncclInProgress is waited for before the next one is issued; the
 * last answer is returned. A failing real call ends the sequence: its error
 * is NCCL's, passed up unchanged and never retried. */
ncclResult_t nsc_wire_calls(nsc_comm *c, void *buf, int advance, size_t count, size_t ce, ncclDataType_t wdt,
                            ncclRedOp_t op, cudaStream_t s, int in_group) {
  size_t step = ce ? ce : count;
  ncclResult_t r = ncclSuccess;
  for (size_t off = 0; off < count; off += step) { /* count > 0: compressed calls only */
    size_t n = count - off < step ? count - off : step;
    if (r == ncclInProgress && !in_group) {
      c->nonblocking = 1;
      r = nsc_wait_nonblocking(c->comm);
      if (r != ncclSuccess) return r;
    }
    r = nsc_real.AllReduce((uint16_t *)buf + (advance ? off : 0), (uint16_t *)buf + (advance ? off : 0), n, wdt, op,
                           c->comm, s);
    NSC_COUNT(real_calls, 1);
    if (!NSC_OK(r)) return r;
  }
  return r;
}

/* Run, defer to the group end, or park until completion, a cast-back whose
 * collectives answered r. */
static ncclResult_t finish_castback(nsc_comm *c, nsc_work *w, ncclResult_t r, int in_group) {
  if (!NSC_OK(r)) {
    nsc_work_drop(w); /* error passed up unchanged, never retried */
    return r;
  }
  if (in_group) nsc_group_defer(w);
  else if (r == ncclInProgress) {
    c->nonblocking = 1;
    nsc_pending_add(c, w);
  } else r = nsc_work_run(w);
  return r;
}

/* This rank could not stage (or cast) but its peers did: it still issues
 * the very collectives they issue (same chunks), on a buffer of the same kind
 * as theirs (a staging-like buffer of one chunk from the backend, filled with
 * all-ones = NaN in fp16, bf16 and fp32), so nobody hangs and every peer's
 * result is NaN rather than silently wrong; this rank's recvbuff becomes NaN
 * once the collectives are enqueued, and it returns ncclSystemError. Only if
 * even that buffer cannot be had are recvbuff's own bytes reduced (the user's
 * buffer, which may be registered with NCCL: the peers' algorithm choice may
 * then differ, but the collectives still match). */
static ncclResult_t poisoned(nsc_comm *c, const nsc_backend *be, void *recv, size_t count, ncclRedOp_t op,
                             cudaStream_t s, int in_group) {
  ncclDataType_t wdt = nsc_policy_wire_dtype(&nsc_g.cfg);
  size_t ce = chunk_elems(c, count), per = ce ? ce : count;
  nsc_work *w = nsc_work_new(NSC_W_CASTBACK, c);
  void *buf = NULL;
  if (w && be->alloc((nsc_stream)s, per * 2, &buf)) buf = NULL;
  void *p = buf ? buf : recv;
  be->fill_ones((nsc_stream)s, p, per * 2);
  ncclResult_t r = nsc_wire_calls(c, p, 0, count, ce, wdt, op, s, in_group);
  if (w) {
    w->be = be;
    w->stream = (nsc_stream)s;
    w->dst = recv;
    w->count = count;
    w->poison = 1;
    w->own = buf;
    r = finish_castback(c, w, r, in_group);
  } else {
    be->fill_ones((nsc_stream)s, recv, count * 4);
  }
  nsc_warn("rank %d could not stage a compressed all-reduce: it contributed NaN and fails this call "
           "(the collective itself returned %d)", c->rank, (int)r);
  return ncclSystemError;
}

ncclResult_t nsc_reduce_wire(nsc_comm *c, nsc_work *w, size_t count, size_t ce, int in_group) {
  ncclDataType_t wdt = w->wire == NSC_WIRE_BF16 ? ncclBfloat16 : ncclFloat16;
  nsc_log_mark(&w->rec, NSC_MARK_CAST_IN);
  int poison = w->poison;
  ncclResult_t r = nsc_wire_calls(c, w->wirebuf, 1, count, ce, wdt, w->op, (cudaStream_t)w->stream, in_group);
  /* The COLL mark is taken by nsc_work_run: after a group end or a
   * nonblocking completion, where the collective really is on the stream. */
  r = finish_castback(c, w, r, in_group);
  return poison && NSC_OK(r) ? ncclSystemError : r;
}

/* Pipelining: the cast of chunk i+1 runs on a helper stream while chunk i is
 * on the wire; the caller's stream waits for each chunk's cast before its
 * collective, so stream order holds. Used outside groups on communicators
 * that never answered ncclInProgress; elsewhere the same chunk collectives
 * are issued after one cast (nothing would overlap). A local failure from
 * chunk k on poisons the staging from k (NaN on every rank there) and this
 * rank's whole result, but every chunk is still issued. */
static ncclResult_t pipelined(nsc_comm *c, nsc_work *w, const float *send, size_t ce) {
  const nsc_backend *be = w->be;
  nsc_stream s = w->stream, side = s;
  ncclDataType_t wdt = w->wire == NSC_WIRE_BF16 ? ncclBfloat16 : ncclFloat16;
  float down = (float)(1.0 / nsc_g.cfg.prescale);
  uint16_t *stage = w->wirebuf;
  ncclResult_t r = ncclSuccess;
  int bad = be->side_stream(s, &side) || be->join(side, s) || nsc_cast_fault() ||
            be->to_wire(side, w->wire, send, stage, ce, down);
  if (bad) be->fill_ones(s, stage, w->count * 2);
  for (size_t off = 0; off < w->count; off += ce) {
    size_t n = w->count - off < ce ? w->count - off : ce, next = off + n;
    if (!bad && be->join(s, side)) {
      bad = 1;
      be->fill_ones(s, stage + off, (w->count - off) * 2);
    }
    r = nsc_real.AllReduce(stage + off, stage + off, n, wdt, w->op, c->comm, (cudaStream_t)s);
    NSC_COUNT(real_calls, 1);
    if (r == ncclInProgress) { /* first sign of a nonblocking communicator: finish this call */
      c->nonblocking = 1;
      r = nsc_wait_nonblocking(c->comm);
    }
    if (!NSC_OK(r)) break; /* NCCL's error, the same on every rank: passed up, no further chunk */
    if (!bad && next < w->count && (nsc_cast_fault() ||
        be->to_wire(side, w->wire, send + next, stage + next, w->count - next < ce ? w->count - next : ce, down))) {
      bad = 1;
      be->fill_ones(s, stage + next, (w->count - next) * 2);
    }
    if (!bad && be->from_wire(s, w->wire, stage + off, w->dst + off, n, w->scale)) bad = 1;
  }
  if (bad) {
    nsc_warn("pipelined compression failed on rank %d: %s; its chunks from there on are NaN on every rank and "
             "this rank's result is NaN", c->rank, nsc_backend_error());
    be->fill_ones(s, w->dst, w->count * 4);
    if (NSC_OK(r)) r = ncclSystemError;
  }
  nsc_log_mark(&w->rec, NSC_MARK_END);
  nsc_staging_done_on(c, (cudaStream_t)s);
  w->rec.result = r;
  if (NSC_OK(r)) nsc_log_commit(&c->log, &w->rec);
  else nsc_log_discard(&w->rec);
  nsc_work_drop(w); /* its use is covered above: the drop only uncounts it */
  return r;
}

static ncclResult_t compress(nsc_comm *c, const nsc_backend *be, const void *send, void *recv, size_t count,
                             ncclRedOp_t op, cudaStream_t s, int in_group) {
  nsc_wire_t wire = nsc_g.cfg.compress == NSC_COMPRESS_BF16 ? NSC_WIRE_BF16 : NSC_WIRE_FP16;
  void *stage = NULL;
  switch (nsc_get_staging(c, be, s, count * 2, "an all-reduce", &stage)) {
  case NSC_STAGE_REFUSED: return ncclInvalidUsage;
  case NSC_STAGE_PLAIN: return nsc_forward(c, send, recv, count, ncclFloat32, op, s, NSC_ACT_PASS);
  case NSC_STAGE_POISON: return poisoned(c, be, recv, count, op, s, in_group);
  default: break;
  }
  nsc_work *w = nsc_work_new(NSC_W_CASTBACK, c);
  if (!w) return poisoned(c, be, recv, count, op, s, in_group); /* the block is reset at the settle */
  w->be = be;
  w->stream = (nsc_stream)s;
  w->wire = wire;
  w->op = op;
  nsc_work_hold_wire(w, stage);
  w->dst = recv;
  w->count = count;
  w->scale = (float)nsc_g.cfg.prescale;
  nsc_rec_init(&w->rec, c, NSC_ACT_COMPRESS, count, ncclFloat32, nsc_policy_wire_dtype(&nsc_g.cfg), op, be, s);
  size_t ce = chunk_elems(c, count);
  nsc_count_call(NSC_ACT_COMPRESS, count * 4, count * 2, 0);
  if (ce && !in_group && !c->nonblocking) return pipelined(c, w, send, ce);
  if (nsc_cast_fault() || be->to_wire((nsc_stream)s, wire, send, stage, count, (float)(1.0 / nsc_g.cfg.prescale))) {
    nsc_warn("cast to the wire type failed on rank %d: %s; it contributes NaN and fails this call", c->rank,
             nsc_backend_error());
    be->fill_ones((nsc_stream)s, stage, count * 2);
    w->poison = 1;
  }
  return nsc_reduce_wire(c, w, count, ce, in_group);
}

static ncclResult_t queue_fuse(nsc_comm *c, const nsc_backend *be, const void *send, void *recv, size_t count,
                               ncclRedOp_t op, cudaStream_t s) {
  nsc_work *w = nsc_work_new(NSC_W_FUSE, c);
  if (!w) return ncclSystemError; /* same on every rank only by luck: say so loudly */
  w->be = be;
  w->stream = (nsc_stream)s;
  w->op = op;
  w->src = send;
  w->dst = recv;
  w->count = count;
  nsc_group_defer(w);
  return ncclSuccess;
}

/* A communicator first seen inside a group is checked right after that group;
 * until then its calls pass through, alike on every rank. */
static void defer_check(nsc_comm *c, const nsc_backend *be, cudaStream_t s) {
  if (c->check_queued) return;
  nsc_work *w = nsc_work_new(NSC_W_CHECK, c);
  if (!w) return;
  c->check_queued = 1;
  w->be = be;
  w->stream = (nsc_stream)s;
  nsc_group_defer(w);
}

int nsc_coll_enter(ncclComm_t comm, nsc_comm **c, ncclResult_t *r) {
  int st = nsc_activate();
  nsc_forget_error();
  if (st == NSC_FAILED) {
    nsc_note_error(nsc_g.fail_msg);
    *r = nsc_g.fail_code;
    return NSC_ENTER_RETURN;
  }
  if (st != NSC_ACTIVE || !comm) return NSC_ENTER_FORWARD;
  if (!(*c = nsc_comm_get(comm))) {
    nsc_warn("out of memory for communicator state");
    *r = ncclSystemError;
    return NSC_ENTER_RETURN;
  }
  NSC_COUNT(calls, 1);
  return NSC_ENTER_OK;
}

ncclResult_t nsc_allreduce(const void *send, void *recv, size_t count, ncclDataType_t dt, ncclRedOp_t op,
                           ncclComm_t comm, cudaStream_t stream) {
  nsc_comm *c = NULL;
  ncclResult_t r = ncclSuccess;
  int e = nsc_coll_enter(comm, &c, &r);
  if (e == NSC_ENTER_RETURN) return r;
  if (e == NSC_ENTER_FORWARD) return nsc_real.AllReduce(send, recv, count, dt, op, comm, stream);
  nsc_call call = {count, dt, op, send && recv, nsc_group_depth() > 0, 0};
  int agree = 0; /* accumulation asks for an agreement right after this call */
  const nsc_config *cfg = &nsc_g.cfg;
  if (c->checked <= 0) {
    const nsc_backend *be = nsc_backend_for(recv);
    /* Capture first: a captured call is forwarded untouched and leaves the
     * check (staging, module loads, an exchange) to the first uncaptured
     * call; capture is alike on every rank. */
    if (c->checked == 0 && be->capturing((nsc_stream)stream, &call.capturing)) call.capturing = 1;
    if (c->checked == 0 && (call.in_group || call.capturing)) {
      if (!call.capturing) defer_check(c, be, stream);
      /* Passed through, but it is part of a backward pass all the same: the
       * micro-step count starts at the job's first pass (learning: syncs). */
      if (cfg->accum_steps > 1 && be->capturing((nsc_stream)stream, &call.capturing)) call.capturing = 1;
      (void)nsc_accum_feed(c, &call, send, recv, nsc_policy_accumulable(cfg, &call), &agree);
      r = nsc_forward(c, send, recv, count, dt, op, stream, NSC_ACT_PASS);
      if (agree) nsc_accum_after(c, be, stream, 1, r);
      goto out;
    }
    r = nsc_check_comm(c, be, (nsc_stream)stream);
    if (r != ncclSuccess) goto out;
  }
  if (c->untouched) { /* agreed by every rank in the check */
    r = nsc_forward(c, send, recv, count, dt, op, stream, NSC_ACT_PASS);
    goto out;
  }
  c->seq++;
  nsc_log_call(&c->log, c->seq, count, dt, op, send, recv); /* the diagnosis: observe-only */
  nsc_action a = nsc_policy_transform(cfg, &call);
  int acc = nsc_policy_accumulable(cfg, &call);
  /* Two-phase from count, rank count and configuration alone, inside a
   * group as outside (there after the real group end, group.h); it takes
   * precedence over fusion: a two-phase member is not packed with the
   * ring's fused members. */
  int tp = 0;
  if (nsc_policy_compressible(cfg, &call)) { /* the plan only where it can be more than the call itself */
    nsc_plan plan;
    nsc_plan_for(c, 0, count, op, 1, &plan);
    tp = plan.alg == NSC_PLAN_TWOPHASE || plan.alg == NSC_PLAN_HIER;
    /* no plan gains at the agreed launch cost (plan.h): the call as it is */
    if (plan.alg == NSC_PLAN_PLAIN && a == NSC_ACT_COMPRESS) a = NSC_ACT_PASS;
  }
  if (a == NSC_ACT_PASS && !acc && !tp) {
    (void)nsc_accum_feed(c, &call, send, recv, 0, &agree);
    r = nsc_forward(c, send, recv, count, dt, op, stream, NSC_ACT_PASS);
    goto out;
  }
  /* Only calls we may transform pay for the pointer and capture queries. */
  const nsc_backend *be = nsc_backend_for(recv);
  if (be->capturing((nsc_stream)stream, &call.capturing)) call.capturing = 1;
  if (call.capturing) {
    static int warned;
    nsc_warn_once(&warned, "a stream is being captured into a CUDA graph: captured all-reduces are forwarded "
                           "untouched and always sync (decisions would be frozen into the graph)");
    /* No fusion agreement of ours may still be running when the graph's
     * collectives are launched. */
    if (nsc_staging_may_issue(&c->staging)) (void)nsc_wait_nonblocking(c->comm);
    nsc_stream now = (nsc_stream)stream; /* capturing: no confirmation is issued there */
    nsc_staging_resolve(&c->staging, &now);
    a = nsc_policy_transform(cfg, &call);
    acc = nsc_policy_accumulable(cfg, &call);
  }
  if (call.capturing) tp = 0;
  /* Calls that may take staging settle it: after the call, or after the
   * outermost group end (decided by the call alone, as the takes are). */
  int stages = !call.capturing && (tp || a == NSC_ACT_COMPRESS || a == NSC_ACT_FUSE);
  if (stages && call.in_group) nsc_staging_note(c, be, stream);
  if (!nsc_accum_feed(c, &call, send, recv, acc, &agree)) r = answer_locally(c, be, send, recv, count, dt, op, stream);
  else if (tp && call.in_group) r = nsc_twophase_defer(c, be, send, recv, count, op, (nsc_stream)stream, 0);
  else if (tp) r = nsc_twophase(c, be, send, recv, count, op, stream, 0, c->seq);
  else switch (a) {
  case NSC_ACT_COMPRESS:
    if (nsc_policy_blocked(cfg)) /* too small for two-phase; NCCL cannot reduce block-scaled runs */
      r = nsc_forward(c, send, recv, count, dt, op, stream, NSC_ACT_PASS);
    else
      r = compress(c, be, send, recv, count, op, stream, call.in_group);
    break;
  case NSC_ACT_FUSE: r = queue_fuse(c, be, send, recv, count, op, stream); break;
  default: r = nsc_forward(c, send, recv, count, dt, op, stream, NSC_ACT_PASS); break;
  }
  /* Issued whatever this call returned: every rank issues it here. */
  if (stages && !call.in_group) nsc_staging_settle_comm(c, stream);
  if (agree) nsc_accum_after(c, be, stream, call.in_group, r);
out:
  nsc_comm_put(c);
  return r;
}
