/* hier.h — NCCLSHIM_ALGO=hier's sub-communicators (hier.c), for the
 * settings check (coll/check.c) and the communicator's end; the stages that
 * run on them are a plan (plan.h), walked by exec/walk.c, their collectives
 * hier.c's handler (exec.h). */
#ifndef NSC_HIER_H
#define NSC_HIER_H

#include <nccl.h>
#include <stddef.h>

struct nsc_comm;

/* Whether this NCCL has what hier's stages call on c's node map
 * (ncclCommSplit, ncclReduceScatter, ncclAllGather, and ncclReduce for
 * nodes of non-consecutive ranks): the same on every rank of one NCCL. why:
 * the reason when not. Whether the settings and the map want hier is the
 * plan's to say (plan.h: nsc_plan_hier_wanted). */
int nsc_hier_possible(const struct nsc_comm *c, const char **why);
/* Split the two sub-communicators (every rank calls it when hier is wanted and possible,
 * in the same order, whatever fails); 1 when both exist on this rank. */
int nsc_hier_split(struct nsc_comm *c);
/* After the ranks agreed (all = every rank split both): adopt them, or abort
 * what this rank created. */
void nsc_hier_adopt(struct nsc_comm *c, int all);
/* The communicator ends: its sub-communicators end first, the same way
 * (ncclCommDestroy or ncclCommAbort). */
void nsc_hier_end(struct nsc_comm *c, ncclResult_t (*real_fn)(ncclComm_t));

#endif
