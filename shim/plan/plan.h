/* plan.h — how one fp32, bf16 or fp16 all-reduce or reduce-scatter, or one
 * fused bucket of a group (fp32 only), is carried out, as data. A 16-bit
 * call's plan is two-phase or plain: its input (nsc_plan.in) names the
 * casts that widen it into fp32 and narrow the result, its wire is
 * tp_plan.h's nsc_tp_wire, and its plain cost counts 2 bytes an element.
 *
 * A *plan* names the algorithm (nsc_alg: the one name of it, which the log
 * prints too) and lists its steps in the order they are issued: real NCCL
 * collectives, two-phase exchanges (their layout: tp_plan.h), casts and the
 * local answer, each on a named group of ranks and between named buffers.
 * Everything the executor needs to run a step is in the plan: the format,
 * the wire datatype, the codec's options (nsc_codec), the ring's chunks and
 * whether its casts go beside them, the staging and how it is taken. The
 * executor (shim/exec/) reads no configuration: the plan is its program.
 *
 * nsc_plan_make is a pure function of the call (collective, count, op), the
 * settings and what every rank of the communicator agreed at its check: the
 * rank count, the node map (topo.h) and whether the hierarchical
 * sub-communicators exist on every rank. So every rank makes the same plan
 * and issues the same collectives: rule 1 of reliability.md holds for a plan
 * because nothing else is read.
 *
 * The groups of ranks a step runs among:
 *   ALL    the caller's communicator;
 *   NODE   the ranks of this rank's node (hier's first sub-communicator);
 *   CROSS  the ranks that hold this rank's local index on every node, one
 *          per node, in node order (hier's second sub-communicator).
 * Buffers: the caller's send and receive buffers (a fused bucket's: each
 * member's), and TMP, a region of plan.tmp_elems fp32 elements taken from
 * the communicator's agreed staging block (the encoded bytes a two-phase
 * step or a cast needs come from there too; their sizes are tp_plan.h's).
 *
 * Who makes and reads plans:
 *   - nsc_decide (below) makes a call's whole plan once; shim/coll/call.c,
 *     the one path of the collectives, calls it; nsc_decide_group makes the
 *     fused buckets of a group at its outermost end, nsc_plan_bucket each
 *     bucket's plan (group.c);
 *   - the executor (shim/exec/) runs every plan with one walk over its
 *     steps, each through its step's handler;
 *   - bench/ncclshim-model makes its plans with the same functions and
 *     charges each step's bytes to the links it crosses, so the model cannot
 *     drift from what is issued.
 *
 * Launches count (cost.h): each real collective, each group of sends and
 * receives, each grouped repetition of a step (hier's per-node reduce-scatters
 * or reduces, one group) is one. Pieces and chunks are made only where the
 * codec time they hide outweighs the launches they add, and ALGO=auto
 * transforms a call only where its plan costs at most 9/10 of the plain
 * call at NCCLSHIM_LAUNCH_BYTES per launch (else the plan is PLAIN).
 *
 * Decided in the plan, from agreed values as well: whether the policy lets
 * the call be transformed (policy.h), the accumulation learner's answer (an
 * input), fusion, capture (forwarded), and what its staging is: how many
 * bytes, whether NCCLSHIM_MAX_STAGING_BYTES bounds it (a user's call: yes;
 * a fused bucket: no), and whether its stages take it or the walk. What
 * a call does when the agreed block has no room at the time is one rule,
 * applied by the walk before any step (exec.h: the call goes plain NCCL on
 * every rank), since the block's fill is the call sequence's.
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

/* The algorithm of a plan: the one enum the decision, the executor, the
 * cost model and the log name it by (nsc_alg_name). */
typedef enum {
  NSC_ALG_PLAIN = 0, /* the call as the program made it (forwarded untouched) */
  NSC_ALG_RING,      /* cast, NCCL's all-reduce in the wire type, cast back */
  NSC_ALG_TWOPHASE,  /* one two-phase step on ALL */
  NSC_ALG_HIER,      /* fp32 inside the node, two-phase between nodes */
  NSC_ALG_LOCAL,     /* accumulation: answered on this rank, no collective */
  NSC_ALG_FUSE,      /* a group's member, packed at the group end; a bucket: its segmented ring */
  NSC_ALG_COUNT
} nsc_alg;

/* "plain", "ring", "twophase", "hier", "local", "fuse" (inline: the log,
 * which links no plan, names its records by it). */
static inline const char *nsc_alg_name(nsc_alg a) {
  static const char *const n[] = {"plain", "ring", "twophase", "hier", "local", "fuse"};
  _Static_assert(sizeof n / sizeof *n == NSC_ALG_COUNT, "a name per algorithm");
  return (unsigned)a < NSC_ALG_COUNT ? n[a] : "?";
}

typedef enum { NSC_ON_ALL = 0, NSC_ON_NODE, NSC_ON_CROSS } nsc_plan_on;
typedef enum { NSC_BUF_SEND = 0, NSC_BUF_RECV, NSC_BUF_TMP } nsc_plan_buf;

typedef enum {
  NSC_STEP_ALLREDUCE = 0, /* ncclAllReduce of count elements */
  NSC_STEP_REDUCESCATTER, /* ncclReduceScatter, count per rank of the group */
  NSC_STEP_ALLGATHER,     /* ncclAllGather, count per rank of the group */
  NSC_STEP_TWOPHASE,      /* two-phase all-reduce (rs 0) or reduce-scatter (rs 1, count per rank) */
  NSC_STEP_CAST_IN,       /* fp32 to the wire type, count elements (TMP: the wire buffer) */
  NSC_STEP_CAST_OUT,      /* the wire type to fp32 */
  NSC_STEP_REDUCE,        /* ncclReduce of count elements to the group's rank `root` */
  NSC_STEP_LOCAL,         /* accumulation's answer: this rank's W * x (Sum) or x (Avg), no collective */
  NSC_STEP_SEG_CAST_IN,   /* a bucket: every member's send buffer into the wire buffer, one pass */
  NSC_STEP_SEG_CAST_OUT,  /* a bucket: the wire buffer back into every member's receive buffer */
  NSC_STEP_COUNT
} nsc_step_kind;

/* Step flags */
#define NSC_STEP_WIRE 1u      /* the collective runs in the wire type (the ring, a bucket) */
#define NSC_STEP_EACH_NODE 2u /* repeated for every node j, this rank's own first
                               * (nsc_plan_node_order): src_off and dst_off are
                               * then per node j (nsc_plan_step_at) */
#define NSC_STEP_EACH_LOCAL 4u /* with EACH_NODE: for node j, repeated for every
                                * local index l (root l, node j's l-th rank's
                                * block) */
#define NSC_STEP_CALL 8u      /* the call itself, in its own datatype: forwarded and
                               * logged as passed through (a PLAIN plan's step) */

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

/* How a plan's encodes round and scale (the settings they come from:
 * NCCLSHIM_PRESCALE, _ERROR_FEEDBACK, _ROUNDING, _ROUNDING_SEED,
 * _EF_MAX_BYTES). */
typedef struct {
  double prescale;  /* encodes take x / prescale, decodes give x * prescale */
  int ef;           /* error feedback: each bucket's residual goes into its next call */
  int stochastic;   /* stochastic rounding of every two-phase encode */
  uint64_t seed;    /* ... its seed */
  size_t ef_max;    /* residual memory per communicator (local, not hashed) */
  long long fault_cast; /* testing (NCCLSHIM_FAULT_CAST): the process's N-th cast to the wire type fails */
} nsc_codec;

typedef struct nsc_plan {
  nsc_alg alg;
  int settles;          /* it may take staging: the block is settled after the call (outside a
                         * group) or after the outermost group end (staging.h) */
  int deferred;         /* waits for the outermost group end: a fused member (packed there) or
                         * a TWOPHASE/HIER plan in a user group (issued right after the real end) */
  int rs;               /* the call is a reduce-scatter (count per rank) */
  size_t count;         /* the call's count (per rank for rs; a bucket: its members' total) */
  int in;               /* the input as the codec reads it (tp_plan.h: NSC_IN_F32, or a 16-bit row + 1) */
  int idt;              /* ... its NCCL datatype (the log's) */
  nsc_fmt_t fmt;        /* the wire format (ring and buckets: fp16 or bf16; nsc_tp_wire for a 16-bit input) */
  int wdt;              /* the wire's NCCL datatype (the format's row: the ring's collectives, the log) */
  nsc_codec codec;
  size_t tmp_elems;     /* fp32 elements of TMP */
  size_t chunk;         /* the ring: its real all-reduce in chunks of this many elements (0: one) */
  int pipelined;        /* ... each chunk's cast beside the previous chunk on the wire (not in a
                         * group; the walk runs it unpipelined once the communicator answered
                         * ncclInProgress: that changes no collective) */
  int launches;         /* NCCL launches the call issues on this rank (a grouped repetition is one) */
  nsc_cost_rule rule;   /* the call's cost rule (nsc_plan_call.rule): its chunks and two-phase layouts use it */
  uint64_t cost, plain_cost; /* the cost rule's link bytes of this plan and of the plain call (cost.h) */
  int nsteps;
  nsc_step step[NSC_PLAN_MAX_STEPS];
  nsc_why why;          /* why this algorithm (policy.h's table: nsc_why_text) */
  nsc_tp_plan tp;       /* the layout of its two-phase step on this rank's group (TWOPHASE, HIER),
                         * computed once, with the plan */
  size_t staging;       /* the staging one run of it takes on this rank (nsc_plan_staging) */
  int limited;          /* NCCLSHIM_MAX_STAGING_BYTES bounds it (with the user group's earlier
                         * calls): a user's call, not a fused bucket */
  int stages;           /* a plan of stages (hier): each takes its own staging once the walk
                         * admitted the total, and the walk keeps the call's record and turns
                         * what a failed stage wrote into NaN; else its staging is one
                         * region, taken by the walk before the steps, and its steps keep
                         * their own record (the ring, flat two-phase, a bucket) */
} nsc_plan;

typedef struct {
  int rs;              /* 0: all-reduce of count; 1: reduce-scatter, count per rank */
  size_t count;
  int avg;             /* ncclAvg (else ncclSum) */
  int compress;        /* the policy transforms the call (policy.h) */
  const nsc_topo *topo; /* the agreed map (nranks, rank, nodes); nnodes 0: unknown, one node */
  int hier;            /* the communicator adopted hier's sub-communicators (agreed at its check) */
  nsc_cost_rule rule;  /* the agreed launch price and host rule (cost.h) */
  int in;              /* the input (policy.h's nsc_policy_input; 0: fp32) */
} nsc_plan_call;

void nsc_plan_make(nsc_plan *p, const nsc_config *cfg, const nsc_plan_call *call);
/* A plan with no steps yet: the call's kind and count, the host rule, and
 * what every plan takes from the settings (format, wire datatype, codec),
 * for an fp32 input; nsc_plan_input then names another input (its wire:
 * nsc_tp_wire). */
void nsc_plan_init(nsc_plan *p, const nsc_config *cfg, int rs, size_t count, nsc_cost_rule r);
void nsc_plan_input(nsc_plan *p, const nsc_config *cfg, int in);
/* Append a step (kind k on group `on`, count, src + src_off to dst + dst_off). */
void nsc_plan_step(nsc_plan *p, nsc_step_kind k, nsc_plan_on on, unsigned flags, size_t count, nsc_plan_buf src,
                   size_t src_off, nsc_plan_buf dst, size_t dst_off, int avg, int rs);

/* What every rank agreed at a communicator's check, as the decision reads
 * it: its node map (nnodes 0: one node), whether it adopted hier's
 * sub-communicators, the host rule (cost.h), and whether some rank cannot
 * run the kernels (every call forwarded); and what its fabric measurement
 * agreed (coll/learn.c): the measured launch price once it is agreed
 * (learned; read only at NCCLSHIM_LAUNCH_BYTES=auto, cost.h's
 * nsc_cost_launch; until then the unknown price). */
typedef struct nsc_agreed {
  const nsc_topo *topo;
  int hier;
  int host;
  int untouched;
  int learned;     /* the launch price below is agreed */
  uint64_t launch; /* ... link bytes per launch */
} nsc_agreed;

/* The decision's first question, with no plan: why call k (the policy
 * asked: k->pol) is forwarded whatever else holds (a rank cannot run the
 * kernels; the policy lets it become nothing else), or NSC_WHY_NONE when it
 * takes the whole decision. nsc_decide gives such a call the PLAIN plan with
 * the same reason (test_plan.c checks it), so the forwarded path that skips
 * the plan cannot disagree with it. */
static inline nsc_why nsc_decide_untouched(const nsc_call *k, const nsc_agreed *a) {
  if (a->untouched) return NSC_WHY_KERNELS;
  return k->pol.why != NSC_WHY_NONE && !k->pol.may ? k->pol.why : NSC_WHY_NONE;
}
/* The decision, made once per call: the whole plan of one all-reduce or
 * reduce-scatter (policy.h's nsc_call, the policy asked) on a checked
 * communicator — forwarded (PLAIN), answered by accumulation (LOCAL: `local`,
 * the learner's answer, is an input; its own updates stay in the learner),
 * fused at the group end (FUSE), or compressed (RING with its chunks,
 * TWOPHASE with its pieces, HIER), with its steps, launches, staging and
 * whether it settles the staging or waits for the group end. A pure
 * function of the call's arguments (count, type, op, group depth, capture),
 * the settings and the agreed values: every rank makes the same plan.
 * bench/model.c makes its plans with it. */
void nsc_decide(nsc_plan *p, const nsc_config *cfg, const nsc_call *k, const nsc_agreed *a, int local);
/* The ring's chunk (elements, 0: one collective) for a compressed call of
 * count elements: NCCLSHIM_CHUNK_BYTES, or for auto the cost rule's count
 * (cost.h: chunks only where the casts they hide outweigh their launches). */
size_t nsc_plan_ring_chunk(const nsc_config *cfg, const nsc_cost_rule *r, size_t count);

/* ---- a group's plan (group.c) -------------------------------------------- */

/* One fused member of a group (a FUSE plan), as the group's plan reads it:
 * its communicator and memory kind as identities, op, count and stream
 * handle; the members in call order through `next`. nsc_decide_group fills
 * the rest. */
typedef struct nsc_member {
  const void *comm, *kind;
  int op;
  size_t count;
  uintptr_t stream;
  struct nsc_member *next;
  /* decided */
  struct nsc_member *bnext; /* the next member of its bucket */
  int nb;                   /* a bucket's first member: how many members it has (0: not a first) */
  size_t total;             /* ... their fp32 elements */
  uintptr_t home;           /* ... the stream it runs on: its communicator's first member's */
  int done;                 /* in a bucket already */
  struct nsc_member *bucket_next; /* a bucket's first member: the next bucket's, in issue order */
} nsc_member;
/* The group's plan at its outermost end, before the real one: the fused
 * buckets of its members (first, linked by next), from the (count, op,
 * communicator, memory kind) sequence alone, never stream handles, which
 * are local: members of one (communicator, op, memory kind) in order of
 * first appearance, in buckets of at most NCCLSHIM_FUSE_BYTES of fp32 (a
 * larger member alone), each run on its communicator's first member's
 * stream. Returns the first bucket's first member; the buckets follow in
 * the order they are issued (bucket_next: a key's buckets, then the next
 * key's). The group's other work runs after the real group end in the
 * order it was queued, the buckets' cast-backs after it
 * (coll/lifecycle.c). Allocates nothing. */
nsc_member *nsc_decide_group(nsc_member *first, const nsc_config *cfg);
/* The plan of the bucket that starts at head (nb members, total elements):
 * a segmented cast in, one real all-reduce in the wire type, a segmented cast
 * back (FUSE); or, when its total is below NCCLSHIM_MIN_BYTES, its members
 * forwarded one by one (PLAIN, why MIN_BYTES). Its staging is taken whole
 * and is not bounded by NCCLSHIM_MAX_STAGING_BYTES (the limit bounds a
 * user's call). */
void nsc_plan_bucket(nsc_plan *p, const nsc_config *cfg, const nsc_member *head);

/* ---- the plan's geometry -------------------------------------------------- */

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
/* The staging one run of the plan takes on this rank: TMP plus its two-phase
 * step's (p->tp, tp_plan.h) or the ring's or a bucket's wire buffer, each
 * rounded by `round` (nsc_plan_round: as the staging block rounds its
 * takes). */
size_t nsc_plan_staging(const nsc_plan *p, size_t (*round)(size_t));
/* NCCLSHIM_ALGO=hier (or auto) wants hier's sub-communicators on a map t:
 * N >= 2 nodes of the same L >= 2 ranks each, compression on, kernels usable
 * on every rank (untouched: they are not); *why says why not. The
 * communicator still needs NCCL's split and collectives (exec/hier.c). */
int nsc_plan_hier_wanted(const nsc_config *cfg, const nsc_topo *t, int untouched, const char **why);
/* "allreduce", "reducescatter", ... */
const char *nsc_plan_step_name(nsc_step_kind k);
const char *nsc_plan_on_name(nsc_plan_on on);

#endif
