/* plan.h — how one fp32 all-reduce or reduce-scatter is carried out, as data.
 *
 * A *plan* names the algorithm of a call and lists its steps in the order
 * they are issued: real NCCL collectives, two-phase exchanges (their layout:
 * tp_plan.h) and casts, each on a named group of ranks and between named
 * buffers. nsc_plan_make is a pure function of the call (collective, count,
 * op), the settings and what every rank of the communicator agreed at its
 * check: the rank count, the node map (topo.h) and whether the hierarchical
 * sub-communicators exist on every rank. So every rank makes the same plan
 * and issues the same collectives: rule 1 of reliability.md holds for a plan
 * because nothing else is read.
 *
 * The groups of ranks a step runs among:
 *   ALL    the caller's communicator;
 *   NODE   the ranks of this rank's node (hier's first sub-communicator);
 *   CROSS  the ranks that hold this rank's local index on every node, one
 *          per node, in node order (hier's second sub-communicator).
 * Buffers: the caller's send and receive buffers, and TMP, an fp32 region of
 * plan.tmp_elems taken from the communicator's agreed staging block (the
 * encoded bytes a two-phase step or a cast needs come from there too; their
 * sizes are tp_plan.h's).
 *
 * Who makes and reads plans:
 *   - nsc_decide (below) makes a call's whole plan once; shim/coll/call.c,
 *     the one path of the collectives, calls it;
 *   - the executor (shim/exec/) runs it: a runner per algorithm (ring.c the
 *     ring's three steps, twophase.c a two-phase step, exec.c plain, local
 *     and the walk of a hierarchical plan's steps, fuse.c fusion's queue);
 *   - bench/ncclshim-model makes its plans with nsc_decide and charges each
 *     step's bytes to the links it crosses, so the model cannot drift from
 *     what is issued.
 *
 * Launches count (cost.h): each real collective, each group of sends and
 * receives, each grouped repetition of a step (hier's per-node reduce-scatters
 * or reduces, one group) is one. Pieces and chunks are made only where the
 * codec time they hide outweighs the launches they add, and ALGO=auto
 * transforms a call only where its plan costs at most 9/10 of the plain
 * call at NCCLSHIM_LAUNCH_BYTES per launch (else the plan is PLAIN).
 *
 * Decided in the plan (nsc_decide), from agreed values as well: whether the
 * policy transforms the call at all (policy.h), the accumulation learner's
 * answer (an input), fusion, capture (forwarded). Not in it: whether the
 * agreed staging block has room at the time (when not, the call is plain
 * NCCL on every rank; staging.h), which the runner asks.
 *
 * Must not: call NCCL, allocate, or read anything but its arguments. */
#ifndef NSC_PLAN_H
#define NSC_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "policy.h"
#include "topo.h"
#include "tp_plan.h"
#include "wire.h"

typedef enum {
  NSC_PLAN_PLAIN = 0, /* the call as the program made it (forwarded untouched) */
  NSC_PLAN_RING,      /* cast, NCCL's all-reduce in the wire type, cast back */
  NSC_PLAN_TWOPHASE,  /* one two-phase step on ALL */
  NSC_PLAN_HIER,      /* fp32 inside the node, two-phase between nodes */
  NSC_PLAN_LOCAL,     /* accumulation: answered on this rank, no collective */
  NSC_PLAN_FUSE,      /* a user group's member, packed with its neighbours at the group end */
  NSC_PLAN_NALGS
} nsc_plan_alg;

typedef enum { NSC_ON_ALL = 0, NSC_ON_NODE, NSC_ON_CROSS } nsc_plan_on;
typedef enum { NSC_BUF_SEND = 0, NSC_BUF_RECV, NSC_BUF_TMP } nsc_plan_buf;

typedef enum {
  NSC_STEP_ALLREDUCE = 0, /* ncclAllReduce of count elements */
  NSC_STEP_REDUCESCATTER, /* ncclReduceScatter, count per rank of the group */
  NSC_STEP_ALLGATHER,     /* ncclAllGather, count per rank of the group */
  NSC_STEP_TWOPHASE,      /* two-phase all-reduce (rs 0) or reduce-scatter (rs 1, count per rank) */
  NSC_STEP_CAST_IN,       /* fp32 to the wire type, count elements */
  NSC_STEP_CAST_OUT,      /* the wire type to fp32 */
  NSC_STEP_REDUCE,        /* ncclReduce of count elements to the group's rank `root` */
} nsc_step_kind;

/* Step flags */
#define NSC_STEP_WIRE 1u      /* the collective runs in the wire type (the ring) */
#define NSC_STEP_EACH_NODE 2u /* repeated for every node j, this rank's own first
                               * (nsc_plan_node_order): src_off and dst_off are
                               * then per node j (nsc_plan_step_at) */
#define NSC_STEP_EACH_LOCAL 4u /* with EACH_NODE: for node j, repeated for every
                                * local index l (root l, node j's l-th rank's
                                * block) */

typedef struct {
  nsc_step_kind kind;
  nsc_plan_on on;
  unsigned flags;
  int rs;        /* NSC_STEP_TWOPHASE: a reduce-scatter */
  int avg;       /* reduces with ncclAvg (else ncclSum) */
  int root;      /* NSC_STEP_REDUCE: the root's index in the group */
  size_t count;  /* the NCCL count argument (per rank for REDUCESCATTER/ALLGATHER/rs) */
  nsc_plan_buf src, dst;
  size_t src_off, dst_off; /* fp32 elements from the buffer's start */
} nsc_step;

#define NSC_PLAN_MAX_STEPS 6

typedef struct {
  nsc_plan_alg alg;
  int settles;          /* it may take staging: the block is settled after the call (outside a
                         * group) or after the outermost group end (staging.h) */
  int deferred;         /* TWOPHASE/HIER in a user group: issued right after the real group end */
  int rs;               /* the call is a reduce-scatter (count per rank) */
  size_t count;         /* the call's count (per rank for rs) */
  nsc_fmt_t fmt;        /* the wire format (ring: fp16 or bf16) */
  size_t tmp_elems;     /* fp32 elements of TMP */
  size_t chunk;         /* the ring: its real all-reduce in chunks of this many elements (0: one) */
  int launches;         /* NCCL launches the call issues on this rank (a grouped repetition is one) */
  int host;             /* the call's host rule (nsc_plan_call.host): its two-phase layouts use it */
  uint64_t cost, plain_cost; /* the cost rule's link bytes of this plan and of the plain call (cost.h) */
  int nsteps;
  nsc_step step[NSC_PLAN_MAX_STEPS];
  nsc_why why;          /* why this algorithm (policy.h's table: nsc_why_text) */
  nsc_tp_plan tp;       /* the layout of its two-phase step on this rank's group (TWOPHASE, HIER) */
  size_t staging;       /* the staging one call of it takes on this rank (nsc_plan_staging) */
  int wdt;              /* the wire's NCCL datatype as the log names it (policy.h) */
} nsc_plan;

typedef struct {
  int rs;              /* 0: all-reduce of count; 1: reduce-scatter, count per rank */
  size_t count;
  int avg;             /* ncclAvg (else ncclSum) */
  int compress;        /* the policy transforms the call (policy.h) */
  const nsc_topo *topo; /* the agreed map (nranks, rank, nodes); nnodes 0: unknown, one node */
  int hier;            /* the communicator adopted hier's sub-communicators (agreed at its check) */
  int host;            /* agreed at the check: some rank's buffers are host memory (cost.h's host rule) */
} nsc_plan_call;

void nsc_plan_make(nsc_plan *p, const nsc_config *cfg, const nsc_plan_call *call);

/* What every rank agreed at a communicator's check, as the decision reads
 * it: its node map (nnodes 0: one node), whether it adopted hier's
 * sub-communicators, and the host rule (cost.h). */
typedef struct {
  const nsc_topo *topo;
  int hier;
  int host;
} nsc_agreed;

/* The decision, made once per call: the whole plan of one all-reduce or
 * reduce-scatter (policy.h's nsc_call) on a checked communicator —
 * forwarded (PLAIN), answered by accumulation (LOCAL: `local`, the
 * learner's answer, is an input; its own updates stay in the learner),
 * fused at the group end (FUSE), or compressed (RING with its chunks,
 * TWOPHASE with its pieces, HIER), with its steps, launches, staging and
 * whether it settles the staging or is issued after the group end. A pure
 * function of the call's arguments (count, type, op, group depth, capture),
 * the settings and the agreed values: every rank makes the same plan.
 * bench/model.c makes its plans with it. */
void nsc_decide(nsc_plan *p, const nsc_config *cfg, const nsc_call *call, const nsc_agreed *a, int local);
/* The ring's chunk (elements, 0: one collective) for a compressed call of
 * count elements: NCCLSHIM_CHUNK_BYTES, or for auto the cost rule's count
 * (cost.h: chunks only where the casts they hide outweigh their launches). */
size_t nsc_plan_ring_chunk(const nsc_config *cfg, int host, size_t count);

/* The size of group `on` for a rank of t, and that rank's index in it. */
void nsc_plan_group(const nsc_topo *t, nsc_plan_on on, int *size, int *index);
/* Node j's l-th rank in rank order (t->node), -1 when it has none. Inline,
 * as the next two: the executor's walk asks them for every repetition. */
static inline int nsc_plan_node_rank(const nsc_topo *t, int j, int l) {
  for (int i = 0; i < t->nranks; i++)
    if (t->node[i] == j && l-- == 0) return i;
  return -1;
}
/* The q-th node an EACH_NODE step visits on rank t->rank: its own first,
 * then the others in order (so that an in-place reduce-scatter reads its
 * own node's blocks before anything is written to the receive buffer). */
static inline int nsc_plan_node_order(const nsc_topo *t, int q) {
  int own = t->node[t->rank];
  return q == 0 ? own : q <= own ? q - 1 : q;
}
/* Step s for node j and local index l (an EACH_NODE step's offsets, an
 * EACH_LOCAL step's root; others unchanged). */
static inline nsc_step nsc_plan_step_at(const nsc_plan *p, const nsc_topo *t, const nsc_step *s, int j, int l) {
  nsc_step x = *s;
  if (s->flags & NSC_STEP_EACH_NODE) { /* hier's reduce-scatter: node j's blocks into TMP slot j */
    int first = nsc_plan_node_rank(t, j, (s->flags & NSC_STEP_EACH_LOCAL) ? l : 0);
    x.src_off = s->src_off + (size_t)first * p->count;
    x.dst_off = s->dst_off + (size_t)j * p->count;
    if (s->flags & NSC_STEP_EACH_LOCAL) x.root = l;
  }
  return x;
}
/* The two-phase layout of a TWOPHASE step on rank t->rank's group. */
void nsc_plan_tp(const nsc_plan *p, const nsc_step *s, const nsc_config *cfg, const nsc_topo *t, nsc_tp_plan *tp);
/* The staging block hands out its takes in multiples of this many bytes
 * (staging.c asserts it), and plans count their staging so. */
#define NSC_STAGING_ALIGN 256
static inline size_t nsc_plan_round(size_t bytes) {
  size_t want = (bytes + NSC_STAGING_ALIGN - 1) / NSC_STAGING_ALIGN * NSC_STAGING_ALIGN;
  return want ? want : NSC_STAGING_ALIGN;
}
/* The staging one call of the plan takes on this rank: TMP plus every
 * two-phase step's (tp_plan.h) or the ring's wire buffers, each rounded by
 * `round` (nsc_plan_round: as the staging block rounds its takes). */
size_t nsc_plan_staging(const nsc_plan *p, const nsc_config *cfg, const nsc_topo *t, size_t (*round)(size_t));
/* NCCLSHIM_ALGO=hier (or auto) wants hier's sub-communicators on a map t:
 * N >= 2 nodes of the same L >= 2 ranks each, compression on, kernels usable
 * on every rank (untouched: they are not); *why says why not. The
 * communicator still needs NCCL's split and collectives (exec/hier.c). */
int nsc_plan_hier_wanted(const nsc_config *cfg, const nsc_topo *t, int untouched, const char **why);
/* "plain", "ring", "twophase", "hier", "local", "fuse"; "allreduce", "reducescatter", ... */
const char *nsc_plan_alg_name(nsc_plan_alg a);
const char *nsc_plan_step_name(nsc_step_kind k);
const char *nsc_plan_on_name(nsc_plan_on on);

#endif
