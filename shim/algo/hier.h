/* hier.h — NCCLSHIM_ALGO=hier: a compressed all-reduce that compresses only
 * what crosses the network (hier.c has the stages). */
#ifndef NSC_HIER_H
#define NSC_HIER_H

#include <nccl.h>
#include <stddef.h>
#include <stdint.h>

#include "backend.h"

struct nsc_comm;

/* Whether a communicator with this agreed node map runs hier (config, node
 * map and kernels only: the same on every rank): NCCLSHIM_ALGO=hier or auto,
 * compression on, N >= 2 nodes of the same L >= 2 ranks. why: the reason
 * when not. */
int nsc_hier_wanted(const struct nsc_comm *c, const char **why);
/* Split the two sub-communicators (every rank calls it when nsc_hier_wanted,
 * in the same order, whatever fails); 1 when both exist on this rank. */
int nsc_hier_split(struct nsc_comm *c);
/* After the ranks agreed (all = every rank split both): adopt them, or abort
 * what this rank created. */
void nsc_hier_adopt(struct nsc_comm *c, int all);
/* The communicator ends: its sub-communicators end first, the same way
 * (ncclCommDestroy or ncclCommAbort). */
void nsc_hier_end(struct nsc_comm *c, ncclResult_t (*real_fn)(ncclComm_t));
/* The all-reduce itself (outside any group, as two-phase): called by
 * nsc_twophase for an all-reduce on a communicator that adopted hier. */
ncclResult_t nsc_hier(struct nsc_comm *c, const nsc_backend *be, const float *send, float *recv, size_t count,
                      ncclRedOp_t op, cudaStream_t s, uint64_t seq);
/* The reduce-scatter (count per rank), likewise, on a communicator that
 * adopted hier and whose nodes hold consecutive ranks (topo.contiguous);
 * called by nsc_twophase. */
ncclResult_t nsc_hier_rs(struct nsc_comm *c, const nsc_backend *be, const float *send, float *recv, size_t count,
                         ncclRedOp_t op, cudaStream_t s, uint64_t seq);

#endif
