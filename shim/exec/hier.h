/* hier.h — NCCLSHIM_ALGO=hier's sub-communicators (hier.c); the steps that
 * run on them are a plan (plan.h), walked by exec.c. */
#ifndef NSC_HIER_H
#define NSC_HIER_H

#include <nccl.h>
#include <stddef.h>

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

#endif
