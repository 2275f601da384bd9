/* coll.h — what the exported hooks (shim/hooks/hooks.c) call: one function
 * per hooked NCCL entry point, holding the shim's behaviour for it. */
#ifndef NSC_COLL_H
#define NSC_COLL_H

#include <nccl.h>

#include "backend.h"
#include "group.h"
#include "log.h"
#include "policy.h"
#include "run.h"

struct nsc_comm;

ncclResult_t nsc_allreduce(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t dt,
                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream);
ncclResult_t nsc_reduce_scatter(const void *sendbuff, void *recvbuff, size_t recvcount, ncclDataType_t dt,
                                ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream);
/* observe.c: a call forwarded untouched and, with logging on, timed
 * (coll: NSC_COLL_*; op -1 when it does not reduce; root: its root or peer,
 * -1 none; buf: the buffer whose memory says how to time it). begin returns
 * 1 when end must follow the real call. */
typedef struct {
  struct nsc_comm *c;
  nsc_rec rec;
} nsc_observed;
int nsc_observe_begin(ncclComm_t comm, int coll, size_t count, ncclDataType_t dt, int op, int root,
                      const void *buf, cudaStream_t s, nsc_observed *o);
void nsc_observe_end(nsc_observed *o, ncclResult_t r);
ncclResult_t nsc_group_start(void);
ncclResult_t nsc_group_end(void);
ncclResult_t nsc_comm_end(ncclComm_t comm, ncclResult_t (*real_fn)(ncclComm_t));
ncclResult_t nsc_async_error(ncclComm_t comm, ncclResult_t *err);

/* check.c: a communicator's first call — rank and size, configuration check
 * across ranks, an initial fusion block for stream s agreed by all ranks,
 * banner. Sets c->checked to 1 or -1. */
ncclResult_t nsc_check_comm(struct nsc_comm *c, const nsc_backend *be, nsc_stream s);
/* An ncclInt64 Max all-reduce of n values on a private buffer and stream,
 * of the caller's stream's context, its result polled for (the shim's own
 * agreements between ranks, never the caller's data; nothing synchronises).
 * Issued even when this rank has no private buffer: then on an
 * all-ones buffer on `caller` (every value reads -1 on every rank), and this
 * rank returns ncclSystemError. */
ncclResult_t nsc_exchange_max(struct nsc_comm *c, const nsc_backend *be, nsc_stream caller, int64_t *vals, int n);
/* The same in two halves: begin issues it (x->live once a private buffer was
 * taken, even if the collective failed; without one the poisoned exchange is
 * issued on `caller` and x stays not live), end waits for it, copies the
 * result back and frees the buffer; end returns the collective's result. */
struct nsc_xchg;
ncclResult_t nsc_exchange_begin(struct nsc_comm *c, const nsc_backend *be, nsc_stream caller, const int64_t *vals,
                                int n, struct nsc_xchg *x);
ncclResult_t nsc_exchange_end(struct nsc_xchg *x, int64_t *vals);
/* Testing (NCCLSHIM_FAULT_CAST): 1 when this cast to the wire type is the
 * one to fail (the message is set). */
int nsc_cast_fault(void);
/* After a call outside any group that could take staging, and after the
 * outermost group end (whatever it answered) for every communicator whose
 * calls in the group could: reset the staging block's per-group counts,
 * apply the growth agreed at the previous settle, and, when a take did not
 * fit, start the agreement on a bigger block (applied at the next settle;
 * the same on every rank: it depends on the call sequence only). */
void nsc_staging_settle_comm(struct nsc_comm *c, cudaStream_t s); /* s: the call's (alive) */
/* Inside a user group: c's staging is settled after the outermost group end,
 * after the group's other work on c (be, s: a call of c's in the group).
 * nsc_staging_settle_items() turns the noted communicators into
 * NSC_W_SETTLE work items (run with the rest of the group's after-work, per
 * device); nsc_staging_settle_group() settles those no item could be made
 * for. */
void nsc_staging_note(struct nsc_comm *c, const nsc_backend *be, cudaStream_t s);
nsc_work *nsc_staging_settle_items(void);
void nsc_staging_settle_group(void);
/* Fail message for a communicator whose ranks disagree. */
ncclResult_t nsc_mismatch(struct nsc_comm *c);

/* fuse.c: at the outermost group end, before the real one: pack the queued
 * FUSE members into wire buffers and issue their collectives; the list comes
 * back with CASTBACK items in their place. */
ncclResult_t nsc_fuse_flush(nsc_work **list);

/* accumulate.c: accumulation's view of one call (call, buffers, accumulable
 * or not): 1 = sync, 0 = answer locally; *agree = 1 when an agreement must be
 * issued right after this call — by nsc_accum_after() (last: what the call
 * returned), which issues it now or queues it for the outermost group end
 * (nsc_accum_issue(), which issues it there). */
int nsc_accum_feed(struct nsc_comm *c, const nsc_call *call, const void *send, void *recv, int acc, int *agree);
void nsc_accum_after(struct nsc_comm *c, const nsc_backend *be, cudaStream_t s, int in_group, ncclResult_t last);
void nsc_accum_issue(struct nsc_comm *c, const nsc_backend *be, nsc_stream caller);
/* A broadcast on comm (observe.c): evidence for the learner (DDP's bucket
 * rebuild broadcasts int32 tensors), nothing issued, no decision. */
void nsc_accum_saw_broadcast(ncclComm_t comm, ncclDataType_t dt, size_t count);

/* The start of every intercepted collective: activation, the communicator's
 * entry (a reference the caller puts back) and the call count. OK: go on with
 * *c; FORWARD: not active, call the real function untouched; RETURN: fail
 * with *r (bad configuration, out of memory). */
enum { NSC_ENTER_OK = 0, NSC_ENTER_FORWARD = 1, NSC_ENTER_RETURN = 2 };
int nsc_coll_enter(ncclComm_t comm, struct nsc_comm **c, ncclResult_t *r);

/* Issue the real collective(s) on a wire buffer — one, or one per chunk of ce
 * elements — and queue (or run) its cast-back. A poisoned cast-back (a local
 * failure) still issues them all and returns ncclSystemError. */
ncclResult_t nsc_reduce_wire(struct nsc_comm *c, nsc_work *castback, size_t count, size_t ce, int in_group);
/* The real wire collectives alone (see allreduce.c). */
ncclResult_t nsc_wire_calls(struct nsc_comm *c, void *buf, int advance, size_t count, size_t ce,
                            ncclDataType_t wdt, ncclRedOp_t op, cudaStream_t s, int in_group);

#endif
