/* answer.c — the answers that transform nothing: a call forwarded to NCCL
 * untouched (a PLAIN plan's step, the forwarded path of coll/call.c, and the
 * walk's answer when the agreed staging has no room: the call, or each
 * member of a bucket, in fp32), and accumulation's local answer (a LOCAL
 * plan's step: what the collective returns if every rank held this rank's
 * data).
 *
 * Must not: change an argument of a forwarded call (it is bit-identical to
 * plain NCCL: the same call, the same result code), or issue anything for a
 * local answer. */
#include "exec.h"

#include "comm.h"
#include "core.h"
#include "msg.h"
#include "real.h"

ncclResult_t nsc_forward(nsc_comm *c, int rs, const void *send, void *recv, size_t count, ncclDataType_t dt,
                         ncclRedOp_t op, cudaStream_t s, nsc_why why) {
  /* a reduce-scatter's record and counters: its whole buffer (count per rank) */
  size_t whole = rs ? count * (size_t)(c->nranks > 0 ? c->nranks : 1) : count;
  if (!nsc_log_on()) {
    nsc_count_call(NSC_ALG_PLAIN, whole * nsc_dtype_size(dt), whole * nsc_dtype_size(dt), 1);
    return rs ? NSC_ISSUE(c, ReduceScatter(send, recv, count, dt, op, c->comm, s))
              : NSC_ISSUE(c, AllReduce(send, recv, count, dt, op, c->comm, s));
  }
  nsc_rec rec;
  /* Timed on the buffer's own backend: CUDA events on the caller's stream. */
  nsc_rec_start(&rec, rs ? NSC_COLL_REDUCESCATTER : NSC_COLL_ALLREDUCE, NSC_ALG_PLAIN, c->seq, whole, dt, dt, op,
                nsc_backend_for(recv), (nsc_stream)s, nsc_group_depth() > 0);
  rec.why = (int)why;
  ncclResult_t r = rs ? NSC_ISSUE(c, ReduceScatter(send, recv, count, dt, op, c->comm, s))
                      : NSC_ISSUE(c, AllReduce(send, recv, count, dt, op, c->comm, s));
  nsc_count_call(NSC_ALG_PLAIN, rec.logical_bytes, rec.wire_bytes, 1);
  nsc_log_mark(&rec, NSC_MARK_END);
  rec.result = r;
  nsc_log_commit(&c->log, &rec);
  return r;
}

/* A bucket's members, each as it was called, in fp32: still inside the real
 * group (the log must not time them); the first failure is the answer, and
 * every member is issued all the same. */
static ncclResult_t forward_members(nsc_work *m0, nsc_why why) {
  ncclResult_t r = ncclSuccess;
  nsc_group_enter();
  for (const nsc_member *d = &m0->m; d; d = d->bnext) {
    nsc_work *m = nsc_work_of_member(d);
    ncclResult_t rr = nsc_forward(m->c, 0, m->src, m->dst, m->count, ncclFloat32, m->op, (cudaStream_t)m->stream, why);
    if (r == ncclSuccess && !NSC_OK(rr)) r = rr;
  }
  nsc_group_leave();
  return r;
}

ncclResult_t nsc_forward_call(const nsc_walk *w, nsc_why why) {
  if (w->members) return forward_members(w->members, why);
  const nsc_call *k = w->k;
  return nsc_forward(w->c, k->rs, k->send, k->recv, k->arg, k->dt, k->op, k->stream, why);
}

ncclResult_t nsc_step_forward(nsc_walk *w, const nsc_step *st, float **dst, size_t *wrote) {
  (void)st, (void)wrote;
  *dst = NULL;
  return nsc_forward_call(w, w->p->why);
}

/* Accumulation: what the collective returns if every rank held this rank's
 * data — Sum: W * x, Avg: x. */
ncclResult_t nsc_step_local(nsc_walk *w, const nsc_step *st, float **dst, size_t *wrote) {
  (void)st, (void)wrote;
  *dst = NULL;
  nsc_comm *c = w->c;
  const nsc_call *k = w->k;
  const nsc_backend *be = w->be;
  nsc_rec rec;
  nsc_stream s = (nsc_stream)k->stream;
  nsc_rec_start(&rec, NSC_COLL_ALLREDUCE, NSC_ALG_LOCAL, c->seq, k->arg, k->dt, k->dt, k->op, be, s,
                nsc_group_depth() > 0);
  double factor = k->op == ncclSum ? (double)c->nranks : 1.0;
  char kind = k->dt == ncclFloat32 ? 'f' : k->dt == ncclFloat64 ? 'd' : k->dt == ncclFloat16 ? 'h' : 'b';
  int rc = 0;
  if (factor != 1.0 || k->send != k->recv) rc = be->scale(s, kind, k->send, k->recv, k->arg, factor);
  nsc_count_call(NSC_ALG_LOCAL, rec.logical_bytes, 0, 0);
  nsc_log_mark(&rec, NSC_MARK_END);
  rec.result = rc ? ncclSystemError : ncclSuccess;
  nsc_log_commit(&c->log, &rec);
  if (rc) nsc_warn("accumulation: local result failed: %s", nsc_backend_error());
  return rec.result;
}
