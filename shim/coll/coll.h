/* coll.h — what the exported hooks (shim/hooks/hooks.c) call: one function
 * per hooked NCCL entry point, holding the shim's behaviour for it. */
#ifndef NSC_COLL_H
#define NSC_COLL_H

#include <nccl.h>

#include "backend.h"
#include "queue.h"
#include "log.h"
#include "policy.h"

struct nsc_agreed; /* plan.h */
struct nsc_plan;   /* plan.h */

struct nsc_comm;

/* call.c: an intercepted ncclAllReduce or ncclReduceScatter (k: the hook's
 * descriptor: rs, arg, dt, op, send, recv, comm, stream; the path fills in
 * the rest). */
ncclResult_t nsc_collective(nsc_call *k);
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
/* Fail message for a communicator whose ranks disagree. */
ncclResult_t nsc_mismatch(struct nsc_comm *c);

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

/* learn.c: the communicator's launch cost at NCCLSHIM_LAUNCH_BYTES=auto.
 * nsc_learn_before, before the decision of call k (local: accumulation
 * answers it): reads the marks that are there, takes the agreement's answer
 * where it is due, and fills the decision's agreed price (ag->learned,
 * ag->launch; ag NULL: a call the policy forwards anyway). nsc_learn_plan,
 * after the decision (p; NULL: forwarded as it is): which of the call's real
 * launches is a sample (comm.h's nsc_learn_time takes its marks: call.c
 * around a plain call, the executors around the ring's wire all-reduce and
 * two-phase's all-gather). nsc_learn_after, after the call returned `last`:
 * drops an unissued sample's mark, and issues the agreement where it is
 * due. */
void nsc_learn_before(struct nsc_comm *c, const nsc_call *k, int local, struct nsc_agreed *ag);
void nsc_learn_plan(struct nsc_comm *c, const nsc_call *k, int local, const struct nsc_plan *p);
void nsc_learn_after(struct nsc_comm *c, const nsc_backend *be, const nsc_call *k, int local, ncclResult_t last);

#endif
