/* shim.h — what the exported hooks (hooks.c) call: one function per hooked
 * NCCL entry point, holding the shim's behaviour for it. */
#ifndef NSC_SHIM_H
#define NSC_SHIM_H

#include <nccl.h>

#include "backend.h"
#include "group.h"

struct nsc_comm;

ncclResult_t nsc_allreduce(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t dt,
                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream);
ncclResult_t nsc_group_start(void);
ncclResult_t nsc_group_end(void);
ncclResult_t nsc_comm_end(ncclComm_t comm, ncclResult_t (*real_fn)(ncclComm_t));
ncclResult_t nsc_async_error(ncclComm_t comm, ncclResult_t *err);

/* check.c: a communicator's first call — rank and size, configuration check
 * across ranks, an initial fusion block for stream s agreed by all ranks,
 * banner. Sets c->checked to 1 or -1. */
ncclResult_t nsc_check_comm(struct nsc_comm *c, const nsc_backend *be, nsc_stream s);
/* Poll a nonblocking communicator until its operations completed (used only
 * for the shim's own first operations on it, never for the caller's). */
ncclResult_t nsc_wait_nonblocking(ncclComm_t comm);
/* An ncclInt64 Max all-reduce of n values on a private buffer and stream of
 * the caller's stream's context, its result polled for (the shim's own
 * agreements between ranks, never the caller's data; nothing synchronises). */
ncclResult_t nsc_exchange_max(struct nsc_comm *c, const nsc_backend *be, nsc_stream caller, int64_t *vals, int n);
/* After the outermost group end: reset the communicator's per-group fusion
 * counts, apply the growth agreed after the previous group, and, when grow
 * (the group succeeded) and a fused buffer did not fit, start the agreement
 * on a bigger fusion block (applied at the next settle). */
void nsc_fuse_settle(struct nsc_comm *c, int grow);
/* Fail message for a communicator whose ranks disagree. */
ncclResult_t nsc_mismatch(struct nsc_comm *c);

/* fuse.c: at the outermost group end, before the real one: pack the queued
 * FUSE members into wire buffers and issue their collectives; the list comes
 * back with CASTBACK items in their place. */
ncclResult_t nsc_fuse_flush(nsc_work **list, struct nsc_comm **touched, int *ntouched, int max);

/* allreduce.c helpers shared with fuse.c */
ncclResult_t nsc_forward(struct nsc_comm *c, const void *send, void *recv, size_t count,
                         ncclDataType_t dt, ncclRedOp_t op, cudaStream_t stream, int action);
/* Issue the real collective on a wire buffer and queue (or run) its cast-back. */
ncclResult_t nsc_reduce_wire(struct nsc_comm *c, nsc_work *castback, size_t count, int in_group);

#endif
