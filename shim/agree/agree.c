/* agree.c — see agree.h. An exchange is one ncclInt64 Max all-reduce on a
 * private buffer and stream (backend.h's oob_begin/oob_end) of the
 * caller's stream's context; its answer is read by polling that stream's
 * event, never by synchronising. A rank that cannot take part properly
 * (no buffer) issues the same collective on an all-ones buffer, so every
 * rank sees -1 in every slot and fails alike. */
#include "agree.h"

#include <string.h>

#include "comm.h"
#include "core.h"
#include "msg.h"
#include "real.h"

static long long oob_count; /* exchange buffers taken; NCCLSHIM_FAULT_OOB fails one */

static ncclResult_t exchange_call(nsc_comm *c, void *buf, int n, nsc_stream s) {
  ncclResult_t r = NSC_ISSUE(c, AllReduce(buf, buf, (size_t)n, ncclInt64, ncclMax, c->comm, (cudaStream_t)s));
  NSC_COUNT(real_calls, 1);
  return nsc_enqueued(c, c->comm, r);
}

/* The peers issue an exchange of n values that this rank cannot take part in
 * properly: issue it too, on an all-ones buffer of the same kind on the
 * caller's stream (nothing is read back), so that every rank sees the poison
 * (-1 in every slot) and fails alike. ncclSystemError, or NCCL's own error. */
ncclResult_t nsc_exchange_poisoned(nsc_comm *c, const nsc_backend *be, nsc_stream caller, int n) {
  size_t bytes = (size_t)n * sizeof(int64_t);
  void *p = NULL;
  if (be->alloc(caller, bytes, &p)) {
    nsc_warn("exchange between the ranks of communicator %p: no buffer on rank %d (%s), and none for a poisoned "
             "exchange either: its peers will wait for it", (void *)c->comm, c->rank, nsc_backend_error());
    return ncclSystemError;
  }
  be->fill_ones(caller, p, bytes);
  ncclResult_t r = exchange_call(c, p, n, caller);
  be->release(caller, p);
  return NSC_OK(r) ? ncclSystemError : r;
}

ncclResult_t nsc_exchange_begin(nsc_comm *c, const nsc_backend *be, nsc_stream caller, const int64_t *vals, int n,
                                nsc_xchg *x) {
  memset(x, 0, sizeof *x);
  size_t bytes = (size_t)n * sizeof *vals;
  long long k = __atomic_add_fetch(&oob_count, 1, __ATOMIC_RELAXED);
  int rc = nsc_g.cfg.fault_oob && k == nsc_g.cfg.fault_oob ? (nsc_backend_set_error("exchange buffer %lld failed (NCCLSHIM_FAULT_OOB)", k), -1)
                                           : be->oob_begin(caller, vals, bytes, &x->buf, &x->s);
  if (rc) {
    nsc_warn("exchange between the ranks of communicator %p: no buffer on rank %d (%s); it sends poison, so "
             "every rank fails this call", (void *)c->comm, c->rank, nsc_backend_error());
    return nsc_exchange_poisoned(c, be, caller, n);
  }
  x->be = be;
  x->n = n;
  x->live = 1;
  x->r = exchange_call(c, x->buf, n, x->s);
  return x->r;
}

/* Testing (NCCLSHIM_FAULT_OOB_END): the n-th read-back of this process
 * fails (its buffer is given back all the same). */
int nsc_exchange_readback_fault(int e) {
  static long long k;
  long long f = nsc_g.cfg.fault_oob_end;
  if (e == 0 || !f || __atomic_add_fetch(&k, 1, __ATOMIC_RELAXED) != f) return e;
  nsc_backend_set_error("read-back %lld of an exchange failed (NCCLSHIM_FAULT_OOB_END)", f);
  return -1;
}

ncclResult_t nsc_exchange_end(nsc_xchg *x, int64_t *vals) {
  if (!x->live) return ncclInternalError;
  x->live = 0;
  ncclResult_t r = x->r;
  /* Polls the private stream's event: never a synchronisation. */
  if (nsc_exchange_readback_fault(x->be->oob_end(x->buf, x->s, vals, (size_t)x->n * sizeof *vals, 1)) != 1 && r == ncclSuccess) {
    nsc_warn("an exchange between the ranks could not read its answer back (%s)", nsc_backend_error());
    r = ncclSystemError;
  }
  return r;
}

/* After an exchange whose outcome was `mine` on this rank: one more int64
 * Max exchange in which every rank says whether it got (and could read) the
 * answer, so that a failure on one rank only fails the call on every rank
 * (ncclSystemError) instead of leaving that rank alone behind. A rank that
 * failed knows the answer without reading it (its own 1 is the maximum); a
 * rank that cannot read this confirmation but had the answer assumes the
 * others had it too, so any single failing read-back ends alike on every
 * rank (two failing reads in one check may not). Returns ncclSuccess when
 * every rank had the answer. */
ncclResult_t nsc_exchange_confirm(nsc_comm *c, const nsc_backend *be, nsc_stream s, ncclResult_t mine) {
  int64_t v = mine == ncclSuccess ? -2 : 1; /* a poisoned buffer reads -1: a failure too */
  nsc_xchg x;
  ncclResult_t r = nsc_exchange_begin(c, be, s, &v, 1, &x);
  if (x.live) {
    ncclResult_t e = nsc_exchange_end(&x, &v);
    if (r == ncclSuccess && e != ncclSuccess && mine == ncclSuccess) {
      nsc_warn("communicator %p: rank %d could not read the confirmation of its check; it assumes every rank "
               "had the answer, as it had", (void *)c->comm, c->rank);
      v = -2;
    }
  } else if (r == ncclSuccess) r = ncclSystemError;
  if (mine != ncclSuccess) return mine;
  if (r != ncclSuccess && !(r == ncclSystemError && !x.live)) return r; /* NCCL's own error, passed up */
  return v == -2 && r == ncclSuccess ? ncclSuccess : ncclSystemError;
}

ncclResult_t nsc_exchange_max(nsc_comm *c, const nsc_backend *be, nsc_stream caller, int64_t *vals, int n) {
  nsc_xchg x;
  ncclResult_t r = nsc_exchange_begin(c, be, caller, vals, n, &x);
  if (!x.live) return r;
  ncclResult_t e = nsc_exchange_end(&x, vals);
  return r != ncclSuccess ? r : e;
}
