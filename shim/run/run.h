/* run.h — what every executor of a plan uses (shim/algo, and the
 * collectives that run the ring and plain plans themselves): the call's log
 * record and counters, its staging from the communicator's agreed block,
 * forwarding a call as plain NCCL, polling a nonblocking communicator.
 *
 * Must not: decide which collectives are issued (the plans do), or call up
 * into the collectives (shim/coll) or the algorithms (shim/algo). */
#ifndef NSC_RUN_H
#define NSC_RUN_H

#include <nccl.h>
#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "log.h"

struct nsc_comm;

/* Poll a nonblocking communicator until its operations completed (used only
 * for the shim's own first operations on it, never for the caller's). */
ncclResult_t nsc_wait_nonblocking(ncclComm_t comm);
/* Start a call's record (action, logical and wire sizes) and count it;
 * nsc_rec_init for an all-reduce by NCCL's own collective, nsc_rec_init_kind
 * for another call kind (NSC_KIND_* bits, log.h). */
void nsc_rec_init_kind(nsc_rec *r, int kind, struct nsc_comm *c, int action, size_t count, ncclDataType_t dt,
                       ncclDataType_t wire_dt, ncclRedOp_t op, const nsc_backend *be, cudaStream_t s);
#define nsc_rec_init(r, ...) nsc_rec_init_kind((r), NSC_KIND_ALLREDUCE, __VA_ARGS__)
void nsc_count_call(int action, uint64_t logical, uint64_t wire, int real_calls);
/* Staging of `bytes` on stream s of c, from its agreed block (an internal
 * communicator's is its parent's): NSC_STAGE_OK; NSC_STAGE_REFUSED (beyond
 * NCCLSHIM_MAX_STAGING_BYTES for this call and its user group's earlier
 * compressed calls: ncclInvalidUsage on every rank, message noted);
 * NSC_STAGE_PLAIN (the agreed block has no room: the call is forwarded in
 * fp32 on every rank); NSC_STAGE_POISON (handed out, but this rank cannot
 * use it: it must still issue every call, poisoned). */
enum { NSC_STAGE_OK, NSC_STAGE_REFUSED, NSC_STAGE_PLAIN, NSC_STAGE_POISON };
int nsc_get_staging(struct nsc_comm *c, const nsc_backend *be, cudaStream_t s, size_t bytes, const char *what,
                    void **p);
/* The take alone (no limit): 0, -1 (no room), 1 (poison); fusion's. */
int nsc_staging_take_comm(struct nsc_comm *c, const nsc_backend *be, cudaStream_t s, size_t bytes, void **p);
/* Whether takes of `bytes` in all fit c's block now (a call of several
 * pieces decides once; when not, it is forwarded in fp32 and the block grows). */
int nsc_staging_room(struct nsc_comm *c, const nsc_backend *be, cudaStream_t s, size_t bytes);
/* A region of c's staging is no longer read after what is enqueued on s. */
void nsc_staging_done_on(struct nsc_comm *c, cudaStream_t s);
/* The limit alone, nothing reserved: ncclInvalidUsage (with the message)
 * where nsc_get_staging would refuse `bytes` now, else ncclSuccess. */
ncclResult_t nsc_staging_refused(const struct nsc_comm *c, size_t bytes, const char *what);

/* A call forwarded untouched (logged and counted as `action`). */
ncclResult_t nsc_forward(struct nsc_comm *c, const void *send, void *recv, size_t count,
                         ncclDataType_t dt, ncclRedOp_t op, cudaStream_t stream, int action);
/* reducescatter.c: a reduce-scatter forwarded untouched (rc per rank). */
ncclResult_t nsc_forward_rs(struct nsc_comm *c, const void *send, void *recv, size_t rc, ncclDataType_t dt,
                            ncclRedOp_t op, cudaStream_t s);
/* An fp32 all-reduce (rs = 0) or reduce-scatter (rs = 1, count per rank)
 * that found no room in the agreed staging: forwarded as plain NCCL. */
ncclResult_t nsc_forward_plain(struct nsc_comm *c, const void *send, void *recv, size_t count, ncclRedOp_t op,
                               cudaStream_t s, int rs);

#endif
