/* exec.h — the executor: what carries out a call's plan (plan.h), made once
 * by the decision (nsc_decide) and handed over by the one path of the
 * collectives (coll/call.c) or, for a grouped two-phase call, by the group
 * end (coll/lifecycle.c).
 *
 * exec.c runs a plan through a table of runners, one per algorithm (PLAIN,
 * LOCAL, FUSE, RING, TWOPHASE, HIER); a hierarchical plan's steps go through
 * a table of step handlers (a collective of NCCL's, a two-phase step).
 * ring.c holds the ring's runner and cast-backs, fuse.c fusion's queue and
 * packing, twophase.c the two-phase step, hier.c hier's sub-communicators.
 * Three idioms have one helper each: waiting on ncclInProgress
 * (comm.h: nsc_enqueued), keeping the first error (NSC_FIRST) and poisoning
 * what a failed step wrote (nsc_poison).
 *
 * Must not: decide anything (the plan did; data, timings and local failures
 * change only what a step writes, never what is issued), retry a real
 * call, or hold a lock of ours across one. */
#ifndef NSC_EXEC_H
#define NSC_EXEC_H

#include <nccl.h>
#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "core.h"
#include "msg.h"
#include "plan.h"
#include "queue.h"

struct nsc_comm;

/* A runner carries out a plan of its algorithm: plan p of call k on c (be:
 * the receive buffer's memory kind). The table (exec.c) names each
 * algorithm's: PLAIN and LOCAL exec.c's, RING ring.c's, TWOPHASE
 * twophase.c's, HIER exec.c's walk, FUSE fuse.c's queue. */
typedef ncclResult_t (*nsc_runner)(struct nsc_comm *c, const nsc_backend *be, const nsc_call *k, const nsc_plan *p);
extern const nsc_runner nsc_runners[NSC_PLAN_NALGS];
/* Carry out plan p of call k on c: one indirect call through the table. A
 * deferred plan (TWOPHASE/HIER in a user group) is queued for the group
 * end; a FUSE member is queued for packing there. */
static inline ncclResult_t nsc_exec(struct nsc_comm *c, const nsc_backend *be, const nsc_call *k,
                                    const nsc_plan *p) {
  return (unsigned)p->alg < NSC_PLAN_NALGS ? nsc_runners[p->alg](c, be, k, p) : ncclInternalError;
}
/* A deferred plan: the whole call, queued for the group end. */
ncclResult_t nsc_exec_defer(struct nsc_comm *c, const nsc_backend *be, const nsc_call *k, const nsc_plan *p);
/* After the real group end: a grouped call's plan, queued by nsc_exec. */
ncclResult_t nsc_exec_deferred(nsc_work *w);
/* A call forwarded untouched (an all-reduce, or with rs a reduce-scatter of
 * count per rank), logged and counted as passed through, for reason `why`
 * (policy.h; the summary's "left untouched" line; a reduce-scatter's record
 * counts its whole buffer). */
ncclResult_t nsc_forward(struct nsc_comm *c, int rs, const void *send, void *recv, size_t count, ncclDataType_t dt,
                         ncclRedOp_t op, cudaStream_t s, nsc_why why);

/* fuse.c: at the outermost group end, before the real one: pack the queued
 * FUSE members into wire buffers and issue their collectives; the list comes
 * back with CASTBACK items in their place. */
ncclResult_t nsc_fuse_flush(nsc_work **list);
/* fuse.c: a FUSE member, queued for the group end. */
ncclResult_t nsc_fuse_queue(struct nsc_comm *c, const nsc_backend *be, const nsc_call *k, const nsc_plan *p);

/* ring.c: the ring in the wire type (cast in, NCCL's all-reduce in fp16 or
 * bf16 in the plan's chunks, cast back). */
ncclResult_t nsc_ring(struct nsc_comm *c, const nsc_backend *be, const nsc_call *k, const nsc_plan *p);
/* A CASTBACK item of c's, its `run` set (the cast back, or the NaN fill of
 * a poisoned one, the staging released, the record committed). */
nsc_work *nsc_castback_new(struct nsc_comm *c);
/* Issue the real wire collective(s) of a CASTBACK — one, or one per chunk
 * of ce elements — and queue (in a group), park (ncclInProgress) or run its
 * cast-back. A poisoned cast-back still issues them all and returns
 * ncclSystemError. */
ncclResult_t nsc_reduce_wire(struct nsc_comm *c, nsc_work *castback, size_t count, size_t ce, int in_group);
/* The real wire collectives alone: count elements at buf in chunks of ce
 * (0: one), advancing through buf, or all on buf (!advance: a poisoned
 * buffer of one chunk). */
ncclResult_t nsc_wire_calls(struct nsc_comm *c, void *buf, int advance, size_t count, size_t ce,
                            ncclDataType_t wdt, ncclRedOp_t op, cudaStream_t s, int in_group);
/* Testing (NCCLSHIM_FAULT_CAST): 1 when this cast to the wire type is the
 * one to fail (the message is set). */
int nsc_cast_fault(void);

/* twophase.c: TWOPHASE's runner (the plan's one step on the caller's
 * communicator, or deferred). */
ncclResult_t nsc_twophase_run(struct nsc_comm *c, const nsc_backend *be, const nsc_call *k, const nsc_plan *p);
/* The bucket a two-phase step's error-feedback residuals belong to: the
 * user's send and receive buffers of the call, whatever stage of an
 * algorithm runs the step. A stage's own buffers would mix buckets: hier's
 * middle stage reads and writes the receive buffer's shard, so two buckets
 * with their own send buffers and one receive buffer looked like one (the
 * red team's case: 61x the bound). */
typedef struct {
  const void *send, *recv;
} nsc_ef_key;
/* twophase.c: one two-phase step over point-to-point (tp: its layout on
 * this rank, from the plan), its residuals keyed by key. */
ncclResult_t nsc_twophase_keyed(struct nsc_comm *c, const nsc_backend *be, const nsc_tp_plan *tp, const float *send,
                                float *recv, size_t count, ncclRedOp_t op, cudaStream_t s, int rs, uint64_t seq,
                                nsc_ef_key key);
/* A rank without the input a two-phase step needs still issues every message
 * its peers expect, NaN (0xff) from and into recvbuff (4 * count bytes, the
 * call's receive size), and takes its place in the error-feedback sequence
 * (key names the bucket, as in nsc_twophase_keyed; its residuals are
 * dropped): returns ncclSystemError or the failing call's. */
ncclResult_t nsc_twophase_poisoned(struct nsc_comm *c, const nsc_backend *be, const nsc_tp_plan *tp, float *recv,
                                   size_t count, int rs, cudaStream_t s, nsc_ef_key key);

/* ---- helpers shared by the runners -------------------------------------------- */

/* Keep the first failure: res becomes x's answer when res is still fine. */
#define NSC_FIRST(res, x)                           \
  do {                                              \
    ncclResult_t x_ = (x);                          \
    if (NSC_OK(res) && !NSC_OK(x_)) (res) = x_;     \
  } while (0)

/* A step that failed on this rank: what it wrote (bytes at p) becomes
 * all-ones (NaN in every format), so that nothing sent on or kept is a wrong
 * value; returns the backend's answer. */
static inline int nsc_poison(const nsc_backend *be, nsc_stream s, void *p, size_t bytes) {
  return be->fill_ones(s, p, bytes);
}

/* The process totals of one call (ncclshim_get_stats). */
static inline void nsc_count_call(int action, uint64_t logical, uint64_t wire, int real_calls) {
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

#endif
