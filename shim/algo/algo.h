/* algo.h — the algorithms that carry out a plan (plan.h), as the collectives
 * (shim/coll) call them: exec.c walks the steps, twophase.c runs a two-phase
 * step. */
#ifndef NSC_ALGO_H
#define NSC_ALGO_H

#include <nccl.h>
#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "plan.h"

struct nsc_comm;

/* The plan of a call on c (rs: a reduce-scatter of count per rank; compress:
 * the policy transforms it), from the call, the settings and c's agreed map
 * and hier adoption only. */
void nsc_plan_for(const struct nsc_comm *c, int rs, size_t count, ncclRedOp_t op, int compress, nsc_plan *p);

/* exec.c: a compressed all-reduce (rs = 0; count elements) or reduce-scatter
 * (rs = 1; count per rank) of fp32 Sum/Avg whose plan is two-phase or
 * hierarchical; outside any group. seq: the call's number on the
 * communicator (c->seq when it was made; its random streams and log). */
ncclResult_t nsc_twophase(struct nsc_comm *c, const nsc_backend *be, const float *send, float *recv, size_t count,
                          ncclRedOp_t op, cudaStream_t s, int rs, uint64_t seq);

/* twophase.c: one two-phase step over point-to-point (tp_plan.h), with the
 * error-feedback bucket keyed by ef_send (the step's input, or the user's
 * sendbuff when the input is a staging buffer whose address may change). */
ncclResult_t nsc_twophase_keyed(struct nsc_comm *c, const nsc_backend *be, const float *send, float *recv,
                                size_t count, ncclRedOp_t op, cudaStream_t s, int rs, uint64_t seq, const void *ef_send);
/* A rank without the input a two-phase step needs still issues every message
 * its peers expect, NaN (0xff) from and into recvbuff (4 * count bytes, the
 * call's receive size), and takes its place in the error-feedback sequence
 * (ef_send names the bucket, as in nsc_twophase_keyed; its residuals are
 * dropped): returns ncclSystemError or the failing call's. */
ncclResult_t nsc_twophase_poisoned(struct nsc_comm *c, const nsc_backend *be, float *recv, size_t count, int rs,
                                   cudaStream_t s, const void *ef_send);

#endif
