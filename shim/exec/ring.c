/* ring.c — the ring in the wire type (plan.h's RING): cast the fp32 input
 * to fp16/bf16 in a staging buffer, NCCL's own all-reduce on it (in the
 * plan's chunks), cast back; and the cast-backs that fusion's buckets share
 * (fuse.c).
 *
 * Order of work on the caller's stream: cast-in, the real collective on the
 * wire buffer, cast-back; outside a group all three are enqueued before the
 * call returns (PyTorch records its completion event right after the call).
 * Inside a group, or when a nonblocking communicator answers ncclInProgress,
 * the cast-back waits (queue.h): it is a work item whose `run` is here.
 *
 * Must not: retry a real call, hold any lock of ours across one, synchronise
 * the caller's stream, or let anything but the plan decide which collectives
 * are issued (chunks included). */
#include <stdio.h>
#include <string.h>

#include "comm.h"
#include "core.h"
#include "exec.h"
#include "msg.h"
#include "real.h"
#include "staging.h"

/* A CASTBACK's run: the cast back (or the NaN fill of a poisoned item), the
 * streams that wait for it, its staging released, its record committed. */
static ncclResult_t castback_run(nsc_work *w) {
  ncclResult_t r = ncclSuccess;
  nsc_log_mark(&w->rec, NSC_MARK_COLL); /* the collective is enqueued by now */
  int rc = 0;
  if (w->poison) /* the error was returned by the call itself */
    for (int i = 0; i < (w->segs ? w->nseg : 1); i++)
      rc |= nsc_poison(w->be, w->stream, w->segs ? w->segs[i].dst : w->dst, 4 * (w->segs ? w->segs[i].count : w->count));
  else
    rc = w->segs ? w->be->seg_from_wire(w->stream, w->wire, w->segs, w->nseg, w->wirebuf, w->scale)
                 : w->be->from_wire(w->stream, w->wire, w->wirebuf, w->dst, w->count, w->scale);
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
  return r;
}

nsc_work *nsc_castback_new(nsc_comm *c) {
  nsc_work *w = nsc_work_new(NSC_W_CASTBACK, c);
  if (w) w->run = castback_run;
  return w;
}

int nsc_cast_fault(void) {
  static long long k;
  long long n = nsc_g.cfg.fault_cast;
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
    r = NSC_ISSUE(c, AllReduce(at, at, n, wdt, op, c->comm, s));
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
static ncclResult_t poisoned(nsc_comm *c, const nsc_backend *be, const nsc_plan *p, void *recv, size_t count,
                             ncclRedOp_t op, cudaStream_t s, int in_group) {
  ncclDataType_t wdt = (ncclDataType_t)p->wdt;
  size_t ce = p->chunk, per = ce ? ce : count;
  nsc_work *w = nsc_castback_new(c);
  void *buf = NULL;
  if (w && be->alloc((nsc_stream)s, per * 2, &buf)) buf = NULL;
  nsc_poison(be, (nsc_stream)s, buf ? buf : recv, per * 2);
  ncclResult_t r = nsc_wire_calls(c, buf ? buf : recv, 0, count, ce, wdt, op, s, in_group);
  if (w) {
    w->be = be;
    w->stream = (nsc_stream)s;
    w->dst = recv;
    w->count = count;
    w->poison = 1;
    w->own = buf;
    r = finish_castback(c, w, r, in_group);
  } else {
    nsc_poison(be, (nsc_stream)s, recv, count * 4);
  }
  nsc_warn("rank %d could not stage a compressed all-reduce: it contributed NaN and fails this call "
           "(the collective itself returned %d)", c->rank, (int)r);
  return ncclSystemError;
}

ncclResult_t nsc_reduce_wire(nsc_comm *c, nsc_work *w, size_t count, size_t ce, int in_group) {
  ncclDataType_t wdt = w->wire == NSC_FMT_BF16 ? ncclBfloat16 : ncclFloat16;
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
  ncclDataType_t wdt = w->wire == NSC_FMT_BF16 ? ncclBfloat16 : ncclFloat16;
  float down = (float)(1.0 / nsc_g.cfg.prescale);
  uint16_t *stage = w->wirebuf;
  ncclResult_t r = ncclSuccess;
  int bad = be->side_stream(s, &side) || be->join(side, s) || nsc_cast_fault() ||
            be->to_wire(side, w->wire, send, stage, ce, down);
  if (bad) nsc_poison(be, s, stage, w->count * 2);
  for (size_t off = 0; off < w->count; off += ce) {
    size_t n = w->count - off < ce ? w->count - off : ce, next = off + n;
    if (!bad && be->join(s, side)) {
      bad = 1;
      nsc_poison(be, s, stage + off, (w->count - off) * 2);
    }
    r = NSC_ISSUE(c, AllReduce(stage + off, stage + off, n, wdt, w->op, c->comm, (cudaStream_t)s));
    NSC_COUNT(real_calls, 1);
    r = nsc_enqueued(c, c->comm, r); /* the first sign of a nonblocking communicator: this call is finished */
    if (!NSC_OK(r)) break; /* NCCL's error, the same on every rank: passed up, no further chunk */
    if (!bad && next < w->count && (nsc_cast_fault() ||
        be->to_wire(side, w->wire, send + next, stage + next, w->count - next < ce ? w->count - next : ce, down))) {
      bad = 1;
      nsc_poison(be, s, stage + next, (w->count - next) * 2);
    }
    if (!bad && be->from_wire(s, w->wire, stage + off, w->dst + off, n, w->scale)) bad = 1;
  }
  if (bad) {
    nsc_warn("pipelined compression failed on rank %d: %s; its chunks from there on are NaN on every rank and "
             "this rank's result is NaN", c->rank, nsc_backend_error());
    nsc_poison(be, s, w->dst, w->count * 4);
    if (NSC_OK(r)) r = ncclSystemError;
  }
  nsc_log_mark(&w->rec, NSC_MARK_END);
  nsc_staging_done_on(c, s);
  w->rec.result = r;
  if (NSC_OK(r)) nsc_log_commit(&c->log, &w->rec);
  else nsc_log_discard(&w->rec);
  nsc_work_drop(w); /* its use is covered above: the drop only uncounts it */
  return r;
}

ncclResult_t nsc_ring(nsc_comm *c, const nsc_backend *be, const nsc_call *k, const nsc_plan *p) {
  nsc_fmt_t wire = nsc_g.cfg.compress == NSC_COMPRESS_BF16 ? NSC_FMT_BF16 : NSC_FMT_FP16;
  const void *send = k->send;
  void *recv = k->recv;
  size_t count = k->arg;
  ncclRedOp_t op = k->op;
  cudaStream_t s = k->stream;
  int in_group = k->in_group;
  void *stage = NULL;
  switch (nsc_get_staging(c, be, (nsc_stream)s, count * 2, "an all-reduce", &stage)) {
  case NSC_STAGE_REFUSED: return ncclInvalidUsage;
  case NSC_STAGE_PLAIN: return nsc_forward(c, 0, send, recv, count, ncclFloat32, op, s, NSC_WHY_STAGING);
  case NSC_STAGE_POISON: return poisoned(c, be, p, recv, count, op, s, in_group);
  default: break;
  }
  nsc_work *w = nsc_castback_new(c);
  if (!w) return poisoned(c, be, p, recv, count, op, s, in_group); /* the block is reset at the settle */
  w->be = be;
  w->stream = (nsc_stream)s;
  w->wire = wire;
  w->op = op;
  nsc_work_hold_wire(w, stage);
  w->dst = recv;
  w->count = count;
  w->scale = (float)nsc_g.cfg.prescale;
  nsc_rec_start(&w->rec, NSC_KIND_ALLREDUCE, c->seq, NSC_ACT_COMPRESS, count, ncclFloat32, (ncclDataType_t)p->wdt,
                op, be, (nsc_stream)s, in_group);
  size_t ce = p->chunk; /* from count, settings and the agreed memory kind alone (plan.h): every rank issues the
                         * same chunk collectives, pipelined or not, in a group or not, failed locally or not */
  nsc_count_call(NSC_ACT_COMPRESS, count * 4, count * 2, 0);
  if (ce && !in_group && !c->nonblocking) return pipelined(c, w, send, ce);
  if (nsc_cast_fault() || be->to_wire((nsc_stream)s, wire, send, stage, count, (float)(1.0 / nsc_g.cfg.prescale))) {
    nsc_warn("cast to the wire type failed on rank %d: %s; it contributes NaN and fails this call", c->rank,
             nsc_backend_error());
    nsc_poison(be, (nsc_stream)s, stage, count * 2);
    w->poison = 1;
  }
  return nsc_reduce_wire(c, w, count, ce, in_group);
}
