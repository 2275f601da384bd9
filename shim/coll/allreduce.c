/* allreduce.c — one intercepted ncclAllReduce: pass it through, compress it,
 * answer it locally (accumulation) or queue it for fusion at group end.
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
#include "comm.h"
#include "core.h"
#include "msg.h"
#include "policy.h"
#include "real.h"
#include "shim.h"

static void rec_init(nsc_rec *r, nsc_comm *c, int action, size_t count, ncclDataType_t dt,
                     ncclDataType_t wire_dt, ncclRedOp_t op, const nsc_backend *be, cudaStream_t s) {
  memset(r, 0, sizeof *r);
  r->seq = c->seq;
  r->action = action;
  r->count = count;
  r->dtype = dt;
  r->wire_dtype = wire_dt;
  r->op = op;
  r->nmembers = 1;
  r->logical_bytes = count * nsc_dtype_size(dt);
  r->wire_bytes = action == NSC_ACT_SKIP ? 0 : count * nsc_dtype_size(wire_dt);
  if (nsc_log_on()) nsc_log_begin(r, be, (nsc_stream)s);
}

static void count_call(int action, uint64_t logical, uint64_t wire, int real_calls) {
  switch (action) {
  case NSC_ACT_PASS: NSC_COUNT(passthrough, 1); break;
  case NSC_ACT_COMPRESS: NSC_COUNT(compressed, 1); break;
  case NSC_ACT_SKIP: NSC_COUNT(skipped, 1); break;
  default: NSC_COUNT(fused, 1); break;
  }
  NSC_COUNT(logical_bytes, logical);
  NSC_COUNT(wire_bytes, wire);
  NSC_COUNT(real_calls, real_calls);
}

ncclResult_t nsc_forward(nsc_comm *c, const void *send, void *recv, size_t count, ncclDataType_t dt,
                         ncclRedOp_t op, cudaStream_t stream, int action) {
  if (!nsc_log_on()) {
    count_call(action, count * nsc_dtype_size(dt), count * nsc_dtype_size(dt), 1);
    return nsc_real.AllReduce(send, recv, count, dt, op, c->comm, stream);
  }
  nsc_rec rec;
  /* Timed on the buffer's own backend: CUDA events on the caller's stream. */
  rec_init(&rec, c, action, count, dt, dt, op, nsc_backend_for(recv), stream);
  ncclResult_t r = nsc_real.AllReduce(send, recv, count, dt, op, c->comm, stream);
  count_call(action, rec.logical_bytes, rec.wire_bytes, 1);
  nsc_log_mark(&rec, NSC_MARK_END);
  rec.result = r;
  nsc_log_commit(&c->log, &rec);
  return r;
}

/* Accumulation: what the collective returns if every rank held this rank's
 * data — Sum: W * x, Avg: x. */
static ncclResult_t answer_locally(nsc_comm *c, const nsc_backend *be, const void *send, void *recv,
                                   size_t count, ncclDataType_t dt, ncclRedOp_t op, cudaStream_t s) {
  nsc_rec rec;
  rec_init(&rec, c, NSC_ACT_SKIP, count, dt, dt, op, be, s);
  double factor = op == ncclSum ? (double)c->nranks : 1.0;
  char kind = dt == ncclFloat32 ? 'f' : dt == ncclFloat64 ? 'd' : dt == ncclFloat16 ? 'h' : 'b';
  int rc = 0;
  if (factor != 1.0 || send != recv) rc = be->scale((nsc_stream)s, kind, send, recv, count, factor);
  count_call(NSC_ACT_SKIP, rec.logical_bytes, 0, 0);
  nsc_log_mark(&rec, NSC_MARK_END);
  rec.result = rc ? ncclSystemError : ncclSuccess;
  nsc_log_commit(&c->log, &rec);
  if (rc) nsc_warn("accumulation: local result failed: %s", nsc_backend_error());
  return rec.result;
}

/* Staging for count wire elements; on failure the message says why. A limit
 * failure is the same on every rank (it depends on the call sequence only). */
static ncclResult_t get_staging(nsc_comm *c, const nsc_backend *be, cudaStream_t s, size_t bytes, void **p) {
  /* Not under c->lock: staging allocates outside its own lock, and the
   * watchdog's paths need c->lock. */
  int rc = nsc_staging_get(&c->staging, be, (nsc_stream)s, bytes, (size_t)nsc_g.cfg.max_staging_bytes, p);
  if (rc == NSC_STAGING_LIMIT)
    nsc_warn("an all-reduce needs %zu bytes of staging beyond NCCLSHIM_MAX_STAGING_BYTES=%lld on communicator %p; "
             "raise it or set NCCLSHIM_COMPRESS=off",
             bytes, nsc_g.cfg.max_staging_bytes, (void *)c->comm);
  else if (rc == NSC_STAGING_NOMEM && __atomic_add_fetch(&c->log.staging_failed, 1, __ATOMIC_RELAXED))
    nsc_warn("staging allocation of %zu bytes failed on rank %d: %s", bytes, c->rank, nsc_backend_error());
  return rc == NSC_STAGING_OK ? ncclSuccess : rc == NSC_STAGING_LIMIT ? ncclInvalidUsage : ncclSystemError;
}

/* This rank could not get staging but its peers did: it still issues the same
 * collective (on recvbuff's own bytes, filled with all-ones = NaN in fp16,
 * bf16 and fp32), so nobody hangs, every peer's result is NaN rather than
 * silently wrong, and this rank returns the error. */
static ncclResult_t poisoned(nsc_comm *c, void *recv, size_t count, ncclRedOp_t op, cudaStream_t s,
                             const nsc_backend *be) {
  ncclDataType_t wdt = nsc_policy_wire_dtype(&nsc_g.cfg);
  be->fill_ones((nsc_stream)s, recv, count * 4);
  ncclResult_t r = nsc_real.AllReduce(recv, recv, count, wdt, op, c->comm, s);
  NSC_COUNT(real_calls, 1);
  be->fill_ones((nsc_stream)s, recv, count * 4);
  nsc_warn("rank %d could not stage a compressed all-reduce: it contributed NaN and fails this call "
           "(the collective itself returned %d)", c->rank, (int)r);
  return ncclSystemError;
}

ncclResult_t nsc_reduce_wire(nsc_comm *c, nsc_work *w, size_t count, int in_group) {
  ncclDataType_t wdt = w->wire == NSC_WIRE_BF16 ? ncclBfloat16 : ncclFloat16;
  nsc_log_mark(&w->rec, NSC_MARK_CAST_IN);
  ncclResult_t r = nsc_real.AllReduce(w->wirebuf, w->wirebuf, count, wdt, w->op, c->comm, (cudaStream_t)w->stream);
  NSC_COUNT(real_calls, 1);
  /* The COLL mark is taken by nsc_work_run: after a group end or a
   * nonblocking completion, where the collective really is on the stream. */
  if (!NSC_OK(r)) {
    nsc_work_drop(w); /* error passed up unchanged, never retried */
    return r;
  }
  if (in_group) nsc_group_defer(w);
  else if (r == ncclInProgress) {
    c->nonblocking = 1;
    nsc_pending_add(c, w);
  }
  else r = nsc_work_run(w);
  return r;
}

/* Pipelining (NCCLSHIM_CHUNK_BYTES): the cast of chunk i+1 runs on a helper
 * stream while chunk i is on the wire; the caller's stream waits for each
 * chunk's cast before its collective, so stream order holds. Chunk
 * boundaries depend on count and configuration only. Not used inside a
 * group (nothing reaches the stream before the group ends, so nothing would
 * overlap) nor on nonblocking communicators (chunks would each need to be
 * polled to completion). */
static size_t chunk_elems(const nsc_comm *c, size_t count, int in_group) {
  size_t ce = (size_t)nsc_g.cfg.chunk_bytes / 4;
  if (in_group || c->nonblocking || ce == 0 || count <= ce) return 0;
  return ce;
}

static ncclResult_t pipelined(nsc_comm *c, nsc_work *w, const float *send, size_t ce) {
  const nsc_backend *be = w->be;
  nsc_stream s = w->stream, side;
  ncclDataType_t wdt = w->wire == NSC_WIRE_BF16 ? ncclBfloat16 : ncclFloat16;
  float down = (float)(1.0 / nsc_g.cfg.prescale);
  uint16_t *stage = w->wirebuf;
  ncclResult_t r = ncclSuccess;
  if (be->side_stream(s, &side) || be->join(side, s) || be->to_wire(side, w->wire, send, stage, ce, down)) goto fail;
  for (size_t off = 0; off < w->count; off += ce) {
    size_t n = w->count - off < ce ? w->count - off : ce, next = off + n;
    if (be->join(s, side)) goto fail;
    r = nsc_real.AllReduce(stage + off, stage + off, n, wdt, w->op, c->comm, (cudaStream_t)s);
    NSC_COUNT(real_calls, 1);
    if (r == ncclInProgress) { /* first sign of a nonblocking communicator: finish this call, never pipeline again */
      c->nonblocking = 1;
      r = nsc_wait_nonblocking(c->comm);
    }
    if (!NSC_OK(r)) break; /* passed up unchanged; no further chunk is issued */
    if (next < w->count &&
        be->to_wire(side, w->wire, send + next, stage + next, w->count - next < ce ? w->count - next : ce, down))
      goto fail;
    if (be->from_wire(s, w->wire, stage + off, w->dst + off, n, w->scale)) goto fail;
  }
  nsc_log_mark(&w->rec, NSC_MARK_END);
  pthread_mutex_lock(&c->lock);
  nsc_staging_done(&c->staging, s);
  pthread_mutex_unlock(&c->lock);
  w->rec.result = r;
  if (NSC_OK(r)) nsc_log_commit(&c->log, &w->rec);
  else nsc_log_discard(&w->rec);
  w->wirebuf = NULL;
  nsc_work_drop(w);
  return r;
fail:
  nsc_warn("pipelined compression failed: %s", nsc_backend_error());
  nsc_work_drop(w);
  return ncclSystemError;
}

static ncclResult_t compress(nsc_comm *c, const nsc_backend *be, const void *send, void *recv, size_t count,
                             ncclRedOp_t op, cudaStream_t s, int in_group) {
  nsc_wire_t wire = nsc_g.cfg.compress == NSC_COMPRESS_BF16 ? NSC_WIRE_BF16 : NSC_WIRE_FP16;
  void *stage = NULL;
  ncclResult_t r = get_staging(c, be, s, count * 2, &stage);
  if (r == ncclSystemError) return poisoned(c, recv, count, op, s, be);
  if (r != ncclSuccess) return r;
  nsc_work *w = nsc_work_new(NSC_W_CASTBACK, c);
  if (!w) {
    pthread_mutex_lock(&c->lock);
    nsc_staging_done(&c->staging, (nsc_stream)s);
    pthread_mutex_unlock(&c->lock);
    return poisoned(c, recv, count, op, s, be);
  }
  w->be = be;
  w->stream = (nsc_stream)s;
  w->wire = wire;
  w->op = op;
  w->wirebuf = stage;
  w->dst = recv;
  w->count = count;
  w->scale = (float)nsc_g.cfg.prescale;
  rec_init(&w->rec, c, NSC_ACT_COMPRESS, count, ncclFloat32, nsc_policy_wire_dtype(&nsc_g.cfg), op, be, s);
  size_t ce = chunk_elems(c, count, in_group);
  if (ce) {
    count_call(NSC_ACT_COMPRESS, count * 4, count * 2, 0);
    return pipelined(c, w, send, ce);
  }
  if (be->to_wire((nsc_stream)s, wire, send, stage, count, (float)(1.0 / nsc_g.cfg.prescale))) {
    nsc_warn("cast to the wire type failed: %s", nsc_backend_error());
    nsc_work_drop(w);
    return poisoned(c, recv, count, op, s, be);
  }
  count_call(NSC_ACT_COMPRESS, count * 4, count * 2, 0);
  return nsc_reduce_wire(c, w, count, in_group);
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

/* Accumulation's view of one call: an accumulable call moves the micro-step
 * counter and gets its decision (1 sync, 0 answer locally); any other call
 * is only evidence while the pass size is being learned. */
static int accum_feed(nsc_comm *c, const nsc_call *call, int acc) {
  const nsc_config *cfg = &nsc_g.cfg;
  if (cfg->accum_steps <= 1) return 1;
  uint64_t sig = nsc_accum_sig(call->count, call->dt, call->op);
  size_t bytes = call->count * nsc_dtype_size(call->dt);
  int sync = 1;
  char why[256] = "";
  pthread_mutex_lock(&c->lock);
  if (acc) {
    sync = nsc_accum_next(&c->accum, sig, bytes, cfg->accum_steps, why, sizeof why);
    nsc_log_accum(&c->log, sync);
  } else if (c->accum.mode == NSC_ACC_LEARNING) {
    int fl = (call->dt == ncclFloat16 || call->dt == ncclBfloat16 || call->dt == ncclFloat32 ||
              call->dt == ncclFloat64) && (call->op == ncclSum || call->op == ncclAvg);
    nsc_accum_observe(&c->accum, sig, fl ? bytes : 0);
  }
  pthread_mutex_unlock(&c->lock);
  if (why[0] && c->rank == 0) nsc_info("accumulation on communicator %p: %s", (void *)c->comm, why);
  return sync;
}

ncclResult_t nsc_allreduce(const void *send, void *recv, size_t count, ncclDataType_t dt, ncclRedOp_t op,
                           ncclComm_t comm, cudaStream_t stream) {
  int st = nsc_activate();
  if (st == NSC_FAILED) return nsc_g.fail_code;
  if (st != NSC_ACTIVE || !comm) return nsc_real.AllReduce(send, recv, count, dt, op, comm, stream);
  nsc_comm *c = nsc_comm_get(comm);
  if (!c) {
    nsc_warn("out of memory for communicator state");
    return ncclSystemError;
  }
  NSC_COUNT(calls, 1);
  ncclResult_t r;
  nsc_call call = {count, dt, op, send && recv, nsc_group_depth() > 0, 0};
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
      (void)accum_feed(c, &call, nsc_policy_accumulable(cfg, &call));
      r = nsc_forward(c, send, recv, count, dt, op, stream, NSC_ACT_PASS);
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
  nsc_action a = nsc_policy_transform(cfg, &call);
  int acc = nsc_policy_accumulable(cfg, &call);
  if (a == NSC_ACT_PASS && !acc) {
    (void)accum_feed(c, &call, 0);
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
    nsc_staging_fuse_resolve(&c->staging);
    a = nsc_policy_transform(cfg, &call);
    acc = nsc_policy_accumulable(cfg, &call);
  }
  if (!accum_feed(c, &call, acc)) {
    r = answer_locally(c, be, send, recv, count, dt, op, stream);
    goto out;
  }
  switch (a) {
  case NSC_ACT_COMPRESS: r = compress(c, be, send, recv, count, op, stream, call.in_group); break;
  case NSC_ACT_FUSE: r = queue_fuse(c, be, send, recv, count, op, stream); break;
  default: r = nsc_forward(c, send, recv, count, dt, op, stream, NSC_ACT_PASS); break;
  }
out:
  nsc_comm_put(c);
  return r;
}
