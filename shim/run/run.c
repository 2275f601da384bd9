/* run.c — see run.h. */
#include "run.h"

#include <sched.h>
#include <stdio.h>
#include <string.h>

#include "comm.h"
#include "core.h"
#include "group.h"
#include "msg.h"
#include "policy.h"
#include "real.h"

ncclResult_t nsc_wait_nonblocking(ncclComm_t comm) {
  ncclResult_t e = ncclInProgress;
  while (e == ncclInProgress) {
    ncclResult_t r = nsc_real.CommGetAsyncError ? nsc_real.CommGetAsyncError(comm, &e) : ncclSuccess;
    if (!nsc_real.CommGetAsyncError) e = ncclSuccess;
    if (r != ncclSuccess) return r;
    if (e == ncclInProgress) sched_yield();
  }
  return e;
}

void nsc_rec_init_kind(nsc_rec *r, int kind, nsc_comm *c, int action, size_t count, ncclDataType_t dt,
                       ncclDataType_t wire_dt, ncclRedOp_t op, const nsc_backend *be, cudaStream_t s) {
  memset(r, 0, sizeof *r);
  r->kind = kind;
  r->seq = c->seq;
  r->action = action;
  r->count = count;
  r->dtype = dt;
  r->wire_dtype = wire_dt;
  r->op = op;
  r->nmembers = 1;
  r->logical_bytes = count * nsc_dtype_size(dt);
  r->wire_bytes = action == NSC_ACT_SKIP ? 0 : count * nsc_dtype_size(wire_dt);
  if (nsc_log_on()) nsc_log_begin(r, be, (nsc_stream)s, nsc_group_depth() > 0);
}

void nsc_count_call(int action, uint64_t logical, uint64_t wire, int real_calls) {
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
    nsc_count_call(action, count * nsc_dtype_size(dt), count * nsc_dtype_size(dt), 1);
    return nsc_real.AllReduce(send, recv, count, dt, op, c->comm, stream);
  }
  nsc_rec rec;
  /* Timed on the buffer's own backend: CUDA events on the caller's stream. */
  nsc_rec_init(&rec, c, action, count, dt, dt, op, nsc_backend_for(recv), stream);
  ncclResult_t r = nsc_real.AllReduce(send, recv, count, dt, op, c->comm, stream);
  nsc_count_call(action, rec.logical_bytes, rec.wire_bytes, 1);
  nsc_log_mark(&rec, NSC_MARK_END);
  rec.result = r;
  nsc_log_commit(&c->log, &rec);
  return r;
}

/* Forwarded untouched; logged as a pass-through record of the whole buffer
 * (rc per rank, nranks ranks), as the two-phase record counts it. */
ncclResult_t nsc_forward_rs(nsc_comm *c, const void *send, void *recv, size_t rc, ncclDataType_t dt,
                            ncclRedOp_t op, cudaStream_t s) {
  size_t count = rc * (size_t)(c->nranks > 0 ? c->nranks : 1), bytes = count * nsc_dtype_size(dt);
  if (!nsc_log_on()) {
    nsc_count_call(NSC_ACT_PASS, bytes, bytes, 1);
    return nsc_real.ReduceScatter(send, recv, rc, dt, op, c->comm, s);
  }
  nsc_rec rec;
  nsc_rec_init_kind(&rec, NSC_KIND_REDUCESCATTER, c, NSC_ACT_PASS, count, dt, dt, op, nsc_backend_for(recv), s);
  ncclResult_t r = nsc_real.ReduceScatter(send, recv, rc, dt, op, c->comm, s);
  nsc_count_call(NSC_ACT_PASS, bytes, bytes, 1);
  nsc_log_mark(&rec, NSC_MARK_END);
  rec.result = r;
  nsc_log_commit(&c->log, &rec);
  return r;
}

/* Staging of `bytes` for one compressed call (`what` names it); on failure
 * the message says why. NCCLSHIM_MAX_STAGING_BYTES is decided from what
 * every rank agrees on: the call's own need (count, rank count, settings)
 * plus, inside a user group, the needs of the group's compressed calls on
 * this communicator before it (the same calls in the same order on every
 * rank) — never from the streams the calls use or from regions still live
 * on this rank (a parked cast-back, a poll not yet made), which differ
 * between ranks (issue 26: a one-rank refusal paired nothing with its
 * peers' exchange). A refusal is then the same on every rank: ncclInvalidUsage
 * with nothing issued. */
ncclResult_t nsc_staging_refused(const nsc_comm *c, size_t bytes, const char *what) {
  size_t limit = (size_t)nsc_g.cfg.max_staging_bytes, need = nsc_staging_round(bytes);
  uint64_t gid = nsc_group_id();
  size_t before = gid && c->staging_gid == gid ? c->staging_gneed : 0;
  if (need > limit || before > limit - need) {
    char m[400];
    if (before)
      snprintf(m, sizeof m, "%s needs %zu bytes of staging, %zu with its group's earlier compressed calls on "
               "communicator %p: beyond NCCLSHIM_MAX_STAGING_BYTES=%lld; it is refused on every rank; raise the limit, "
               "split the group or set NCCLSHIM_COMPRESS=off", what, need, before + need, (void *)c->comm,
               nsc_g.cfg.max_staging_bytes);
    else
      snprintf(m, sizeof m, "%s needs %zu bytes of staging beyond NCCLSHIM_MAX_STAGING_BYTES=%lld on communicator "
               "%p; it is refused on every rank; raise the limit or set NCCLSHIM_COMPRESS=off", what, need,
               nsc_g.cfg.max_staging_bytes, (void *)c->comm);
    nsc_warn("%s", m);
    nsc_note_error(m);
    return ncclInvalidUsage;
  }
  return ncclSuccess;
}

/* The communicator whose staging block c's calls take from. */
static nsc_comm *owner(nsc_comm *c) { return c->parent ? c->parent : c; }

/* Parked work the shim runs itself: NCCL is polled until the
 * communicator's earlier work is enqueued (never the device), and the parked
 * cast-backs are run now, in stream order behind their collectives (each
 * moves the block's release point); an error they return is told at the
 * next poll. Serialised with any other thread running parked work. */
static void flush_parked(nsc_comm *o) {
  uint64_t upto = nsc_pending_mark(o);
  ncclResult_t e = nsc_wait_nonblocking(o->comm);
  ncclResult_t r = nsc_pending_finish(o, e == ncclSuccess, upto);
  if (e == ncclSuccess && r != ncclSuccess)
    __atomic_compare_exchange_n(&o->flush_err, &(ncclResult_t){ncclSuccess}, r, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
}

/* Before a group's first take while cast-backs still read the block (parked
 * on a nonblocking communicator until a poll, or being run by another
 * thread): this rank moves to a fresh block (staging.h), at most two deep;
 * beyond that, or when no fresh block can be had, the parked work is run
 * now (flush_parked), so the block is never rewritten under it and its
 * memory stays bounded. */
static void fresh_if_parked(nsc_comm *o, cudaStream_t s) {
  if (!__atomic_load_n(&o->wire_out, __ATOMIC_ACQUIRE)) return;
  int rc = nsc_staging_fresh(&o->staging, (nsc_stream)s); /* allocates: not under o->lock */
  if (rc == 0) return;
  if (rc < 0) {
    nsc_warn("staging: no fresh block on rank %d (%s); communicator %p's parked cast-backs are run first",
             o->rank, nsc_backend_error(), (void *)o->comm);
    __atomic_add_fetch(&o->log.staging_failed, 1, __ATOMIC_RELAXED);
  }
  flush_parked(o);
  if (!__atomic_load_n(&o->wire_out, __ATOMIC_ACQUIRE)) nsc_staging_free_retired(&o->staging);
}

int nsc_staging_take_comm(nsc_comm *c, const nsc_backend *be, cudaStream_t s, size_t bytes, void **p) {
  nsc_comm *o = owner(c);
  fresh_if_parked(o, s);
  /* Not under o->lock: the backend's joins and waits. */
  return nsc_staging_take(&o->staging, be, (nsc_stream)s, bytes, p);
}

int nsc_get_staging(nsc_comm *c, const nsc_backend *be, cudaStream_t s, size_t bytes, const char *what, void **p) {
  size_t need = nsc_staging_round(bytes);
  uint64_t gid = nsc_group_id();
  size_t before = gid && c->staging_gid == gid ? c->staging_gneed : 0;
  if (nsc_staging_refused(c, bytes, what) != ncclSuccess) return NSC_STAGE_REFUSED;
  if (gid) {
    c->staging_gid = gid;
    c->staging_gneed = before + need;
  }
  int rc = nsc_staging_take_comm(c, be, s, bytes, p);
  if (rc < 0) return NSC_STAGE_PLAIN;
  if (rc > 0) {
    nsc_warn("staging on rank %d cannot wait for its earlier use (%s): %s contributes NaN", c->rank,
             nsc_backend_error(), what);
    return NSC_STAGE_POISON;
  }
  return NSC_STAGE_OK;
}

int nsc_staging_room(nsc_comm *c, const nsc_backend *be, cudaStream_t s, size_t bytes) {
  return nsc_staging_fits(&owner(c)->staging, be, (nsc_stream)s, bytes);
}

void nsc_staging_done_on(nsc_comm *c, cudaStream_t s) { nsc_staging_used(&owner(c)->staging, (nsc_stream)s); }

ncclResult_t nsc_forward_plain(nsc_comm *c, const void *send, void *recv, size_t count, ncclRedOp_t op,
                               cudaStream_t s, int rs) {
  return rs ? nsc_forward_rs(c, send, recv, count, ncclFloat32, op, s)
            : nsc_forward(c, send, recv, count, ncclFloat32, op, s, NSC_ACT_PASS);
}

