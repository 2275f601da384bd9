/* ring.c — the wire steps of the ring (plan.h's RING: cast in, NCCL's own
 * all-reduce in fp16/bf16, cast back) and of a fused bucket (its segmented
 * cast in is fuse.c's; the wire all-reduce and the cast back are these),
 * and the cast-back work item they share.
 *
 * Order of work on the call's stream: cast-in, the real collective on the
 * wire buffer (in the plan's chunks), cast-back; outside a group all three
 * are enqueued before the call returns (PyTorch records its completion event
 * right after the call). Inside a group, or when a nonblocking communicator
 * answers ncclInProgress, the cast-back waits (queue.h): it is a work item
 * whose `run` is here. Where the plan says so (chunks, outside a group) and
 * the communicator never answered ncclInProgress, the steps repeat per
 * chunk: the wire step issues chunk k, casts chunk k+1 in on a side stream
 * beside it, and casts chunk k back, the caller's stream waiting for each
 * chunk's cast before its collective.
 *
 * Must not: retry a real call, hold any lock of ours across one, synchronise
 * the caller's stream, or let anything but the plan decide which collectives
 * are issued (chunks included, pipelined or not, failed locally or not). */
#include <stdio.h>
#include <string.h>

#include "comm.h"
#include "core.h"
#include "exec.h"
#include "msg.h"
#include "real.h"
#include "staging.h"

/* A cast-back's run: after a failed group end (or poll) dropped; after an
 * ncclInProgress one parked until the communicator's poll; else the cast
 * back (or the NaN fill of a poisoned item), the streams that wait for it,
 * its staging released, its record committed. */
static ncclResult_t castback_run(nsc_work *w, const nsc_after *a) {
  if (!a->ok) {
    nsc_work_drop(w);
    return ncclSuccess;
  }
  if (a->in_progress && w->c) {
    nsc_pending_add(w->c, w);
    return ncclSuccess;
  }
  ncclResult_t r = ncclSuccess;
  nsc_log_mark(&w->rec, NSC_MARK_COLL); /* the collective is enqueued by now */
  int rc = 0;
  if (w->poison) /* the error was returned by the call itself */
    for (int i = 0; i < (w->segs ? w->nseg : 1); i++)
      rc |= nsc_poison(w->be, w->stream, w->segs ? w->segs[i].dst : w->dst, 4 * (w->segs ? w->segs[i].count : w->count));
  else
    rc = w->segs ? w->be->seg_from_wire(w->stream, w->fmt, w->segs, w->nseg, w->wirebuf, w->scale)
                 : w->be->from_wire(w->stream, w->fmt, w->wirebuf, w->dst, w->count, w->scale);
  for (int j = 0; j < w->njoin; j++) rc |= w->be->join(w->joins[j], w->stream);
  if (rc) {
    nsc_warn("cast back from the wire type failed: %s", nsc_backend_error());
    r = ncclSystemError;
  }
  if (w->fail_late) r = ncclSystemError; /* the call answered before it was poisoned */
  nsc_log_mark(&w->rec, NSC_MARK_END);
  if (w->c && w->wirebuf) { /* backend calls: not under the lock */
    nsc_staging_done_on(w->c, w->stream);
    w->wirebuf = NULL;
    __atomic_sub_fetch(&w->c->wire_out, 1, __ATOMIC_ACQ_REL);
  }
  if (w->c) {
    w->rec.result = w->poison ? ncclSystemError : r;
    nsc_log_commit(&w->c->log, &w->rec);
  }
  nsc_work_free(w);
  return r;
}

nsc_work *nsc_castback_new(nsc_comm *c) { return nsc_work_new(c, castback_run, 0); }

nsc_work *nsc_castback_of(const nsc_walk *w, size_t count) {
  nsc_work *cb = nsc_castback_new(w->c);
  if (!cb) return NULL;
  cb->be = w->be;
  cb->stream = (nsc_stream)w->s;
  cb->fmt = w->p->fmt;
  cb->op = w->k->op;
  nsc_work_hold_wire(cb, w->stage);
  cb->count = count;
  cb->scale = (float)w->p->codec.prescale;
  return cb;
}

int nsc_cast_fault(const nsc_codec *codec) {
  static long long k;
  long long n = codec->fault_cast;
  if (!n || __atomic_add_fetch(&k, 1, __ATOMIC_RELAXED) != n) return 0;
  nsc_backend_set_error("cast %lld to the wire type failed (NCCLSHIM_FAULT_CAST)", n);
  return 1;
}

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
      r = nsc_enqueued(c, c->comm, r);
      if (r != ncclSuccess) return r;
    }
    uint16_t *at = (uint16_t *)buf + (advance ? off : 0);
    const nsc_backend *tb = c->learn.at == NSC_LEARN_AT_WIRE ? nsc_backend_for(buf) : NULL; /* a sample (comm.h) */
    if (tb) nsc_learn_time_begin(c, tb, (nsc_stream)s, NSC_LEARN_AT_WIRE);
    r = NSC_ISSUE(c, AllReduce(at, at, n, wdt, op, c->comm, s));
    if (tb) nsc_learn_time_end(c, tb, (nsc_stream)s, NSC_LEARN_AT_WIRE, r);
    NSC_COUNT(real_calls, 1);
    if (!NSC_OK(r)) return r;
  }
  return r;
}

/* This rank could not stage (or cast) but its peers did: it still issues
 * the very collectives they issue (same chunks), on a buffer of the same kind
 * as theirs (a staging-like buffer of one chunk from the backend, filled with
 * all-ones = NaN in fp16, bf16 and fp32), so nobody hangs and every peer's
 * result is NaN rather than silently wrong; this rank's recvbuff becomes NaN
 * once the collectives are enqueued, and it answers ncclSystemError. Only if
 * even that buffer cannot be had are recvbuff's own bytes reduced (the user's
 * buffer, which may be registered with NCCL: the peers' algorithm choice may
 * then differ, but the collectives still match). The wire step issues them,
 * the cast-back step fills recvbuff. */
static void poisoned(nsc_walk *w, size_t count) {
  const nsc_backend *be = w->be;
  nsc_stream s = (nsc_stream)w->s;
  size_t per = w->p->chunk ? w->p->chunk : count;
  nsc_work *cb = nsc_castback_new(w->c);
  void *buf = NULL;
  if (cb && be->alloc(s, per * 2, &buf)) buf = NULL;
  nsc_poison(be, s, buf ? buf : w->recv, per * 2);
  if (cb) {
    cb->be = be;
    cb->stream = s;
    cb->dst = w->recv;
    cb->count = count;
    cb->poison = 1;
    cb->own = buf;
  }
  w->cb = cb;
  w->wire = buf ? buf : w->recv;
  w->advance = 0;
  w->pipe = 0;
  w->forced = ncclSystemError;
}

/* Pipelining's first cast: chunk 0 on the side stream. */
static void pipe_first(nsc_walk *w, size_t ce) {
  const nsc_backend *be = w->be;
  nsc_stream s = (nsc_stream)w->s;
  w->side = s;
  w->bad = be->side_stream(s, &w->side) || be->join(w->side, s) || nsc_cast_fault(&w->p->codec) ||
           be->to_wire(w->side, w->p->fmt, w->send, w->stage, ce, (float)(1.0 / w->p->codec.prescale));
  if (w->bad) nsc_poison(be, s, w->stage, w->cb->count * 2);
}

ncclResult_t nsc_step_cast_in(nsc_walk *w, const nsc_step *st, float **dst, size_t *wrote) {
  (void)wrote;
  *dst = NULL;
  size_t count = st->count;
  nsc_work *cb = w->stage_poison ? NULL : nsc_castback_of(w, count);
  if (!cb) { /* the block is reset at the settle */
    poisoned(w, count);
    return ncclSuccess;
  }
  nsc_comm *c = w->c;
  const nsc_plan *p = w->p;
  const nsc_backend *be = w->be;
  nsc_stream s = (nsc_stream)w->s;
  cb->dst = w->recv;
  nsc_rec_start(&cb->rec, NSC_COLL_ALLREDUCE, NSC_ALG_RING, w->seq, count, ncclFloat32, (ncclDataType_t)p->wdt,
                w->k->op, be, s, w->k->in_group);
  nsc_count_call(NSC_ALG_RING, count * 4, count * 2, 0);
  w->cb = cb;
  w->wire = w->stage;
  w->advance = 1;
  /* the chunks are the plan's (from count, settings and the agreed memory
   * kind alone): every rank issues the same chunk collectives, pipelined or
   * not, in a group or not, failed locally or not */
  w->pipe = p->pipelined && !c->nonblocking;
  if (w->pipe) {
    pipe_first(w, p->chunk);
    return ncclSuccess;
  }
  if (nsc_cast_fault(&w->p->codec) || be->to_wire(s, p->fmt, w->send, w->stage, count, (float)(1.0 / p->codec.prescale))) {
    nsc_warn("cast to the wire type failed on rank %d: %s; it contributes NaN and fails this call", c->rank,
             nsc_backend_error());
    nsc_poison(be, s, w->stage, count * 2);
    cb->poison = 1;
  }
  return ncclSuccess;
}

/* The chunks with their casts beside them: the cast of chunk k+1 runs on the
 * side stream while chunk k is on the wire; the caller's stream waits for
 * each chunk's cast before its collective, so stream order holds. A local
 * failure from chunk k on poisons the staging from k (NaN on every rank
 * there) and this rank's whole result, but every chunk is still issued. */
static ncclResult_t pipe_chunks(nsc_walk *w, size_t count) {
  nsc_comm *c = w->c;
  const nsc_plan *p = w->p;
  const nsc_backend *be = w->be;
  nsc_stream s = (nsc_stream)w->s, side = w->side;
  size_t ce = p->chunk;
  uint16_t *stage = w->stage;
  float down = (float)(1.0 / p->codec.prescale), up = (float)p->codec.prescale;
  ncclResult_t r = ncclSuccess;
  for (size_t off = 0; off < count; off += ce) {
    size_t n = count - off < ce ? count - off : ce, next = off + n;
    if (!w->bad && be->join(s, side)) {
      w->bad = 1;
      nsc_poison(be, s, stage + off, (count - off) * 2);
    }
    nsc_learn_time_begin(c, be, s, NSC_LEARN_AT_WIRE); /* the first chunk: the learner's sample, if it is */
    r = NSC_ISSUE(c, AllReduce(stage + off, stage + off, n, (ncclDataType_t)p->wdt, w->k->op, c->comm, (cudaStream_t)s));
    NSC_COUNT(real_calls, 1);
    r = nsc_enqueued(c, c->comm, r); /* the first sign of a nonblocking communicator: this call is finished */
    nsc_learn_time_end(c, be, s, NSC_LEARN_AT_WIRE, r);
    if (!NSC_OK(r)) break; /* NCCL's error, the same on every rank: passed up, no further chunk */
    if (!w->bad && next < count &&
        (nsc_cast_fault(&w->p->codec) ||
         be->to_wire(side, p->fmt, w->send + next, stage + next, count - next < ce ? count - next : ce, down))) {
      w->bad = 1;
      nsc_poison(be, s, stage + next, (count - next) * 2);
    }
    if (!w->bad && be->from_wire(s, p->fmt, stage + off, w->recv + off, n, up)) w->bad = 1;
  }
  return r;
}

ncclResult_t nsc_step_wire(nsc_walk *w, const nsc_step *st, float **dst, size_t *wrote) {
  (void)wrote;
  *dst = NULL;
  if (w->pipe) return w->wire_r = pipe_chunks(w, st->count);
  /* The COLL mark is the cast-back's: after a group end or a nonblocking
   * completion, where the collective really is on the stream. */
  if (w->cb && w->forced == ncclSuccess) nsc_log_mark(&w->cb->rec, NSC_MARK_CAST_IN);
  w->wire_r = nsc_wire_calls(w->c, w->wire, w->advance, st->count, w->p->chunk, (ncclDataType_t)w->p->wdt, w->k->op,
                             w->s, w->k->in_group);
  return w->wire_r;
}

/* Run, defer to the group end, or park until completion, a cast-back whose
 * collectives answered r. */
static ncclResult_t finish(nsc_comm *c, nsc_work *cb, ncclResult_t r, int in_group) {
  if (!NSC_OK(r)) {
    nsc_work_drop(cb); /* error passed up unchanged, never retried */
    return r;
  }
  if (in_group) nsc_group_defer(cb);
  else if (r == ncclInProgress) {
    c->nonblocking = 1;
    nsc_pending_add(c, cb);
  } else r = nsc_work_run(cb, 1);
  return r;
}

/* The pipelined chunks' end: the result is in place (each chunk was cast
 * back beside the next); a local failure makes it NaN. */
static ncclResult_t pipe_last(nsc_walk *w) {
  nsc_comm *c = w->c;
  nsc_work *cb = w->cb;
  ncclResult_t r = w->wire_r;
  if (w->bad) {
    nsc_warn("pipelined compression failed on rank %d: %s; its chunks from there on are NaN on every rank and "
             "this rank's result is NaN", c->rank, nsc_backend_error());
    nsc_poison(w->be, (nsc_stream)w->s, w->recv, cb->count * 4);
    if (NSC_OK(r)) r = ncclSystemError;
  }
  nsc_log_mark(&cb->rec, NSC_MARK_END);
  nsc_staging_done_on(c, (nsc_stream)w->s);
  cb->rec.result = r;
  if (NSC_OK(r)) nsc_log_commit(&c->log, &cb->rec);
  else nsc_log_discard(&cb->rec);
  nsc_work_drop(cb); /* its use is covered above: the drop only uncounts it */
  return r;
}

ncclResult_t nsc_step_cast_out(nsc_walk *w, const nsc_step *st, float **dst, size_t *wrote) {
  (void)wrote;
  *dst = NULL;
  nsc_comm *c = w->c;
  ncclResult_t r = w->wire_r;
  if (w->pipe) return pipe_last(w);
  if (w->forced != ncclSuccess) { /* the poisoned path: recvbuff NaN once the collectives are enqueued */
    if (w->cb) r = finish(c, w->cb, r, w->k->in_group);
    else nsc_poison(w->be, (nsc_stream)w->s, w->recv, st->count * 4);
    nsc_warn("rank %d could not stage a compressed all-reduce: it contributed NaN and fails this call "
             "(the collective itself returned %d)", c->rank, (int)r);
    return ncclSystemError;
  }
  if (!w->cb) return NSC_OK(r) ? ncclSystemError : r; /* a bucket whose cast-back could not be made: NaN now */
  int poison = w->cb->poison;
  r = finish(c, w->cb, r, w->k->in_group);
  return poison && NSC_OK(r) ? ncclSystemError : r;
}
