/* plan.c — see plan.h. The rules in one place: which algorithm a call runs
 * (nsc_algo_choose, tp_plan.h, for flat two-phase against the ring; the
 * communicator's adoption of hier for the hierarchical one) and the steps
 * each algorithm issues. */
#include "plan.h"

static void step(nsc_plan *p, nsc_step_kind k, nsc_plan_on on, unsigned flags, size_t count, nsc_plan_buf src,
                 size_t src_off, nsc_plan_buf dst, size_t dst_off, int avg, int rs) {
  nsc_step *s = &p->step[p->nsteps++];
  *s = (nsc_step){k, on, flags, rs, avg, 0, count, src, dst, src_off, dst_off};
}

static void make_ring(nsc_plan *p, int avg) {
  p->alg = NSC_PLAN_RING;
  step(p, NSC_STEP_CAST_IN, NSC_ON_ALL, 0, p->count, NSC_BUF_SEND, 0, NSC_BUF_TMP, 0, 0, 0);
  step(p, NSC_STEP_ALLREDUCE, NSC_ON_ALL, NSC_STEP_WIRE, p->count, NSC_BUF_TMP, 0, NSC_BUF_TMP, 0, avg, 0);
  step(p, NSC_STEP_CAST_OUT, NSC_ON_ALL, 0, p->count, NSC_BUF_TMP, 0, NSC_BUF_RECV, 0, 0, 0);
}

static void make_plain(nsc_plan *p, int avg) {
  p->alg = NSC_PLAN_PLAIN;
  step(p, p->rs ? NSC_STEP_REDUCESCATTER : NSC_STEP_ALLREDUCE, NSC_ON_ALL, 0, p->count, NSC_BUF_SEND, 0, NSC_BUF_RECV,
       0, avg, 0);
}

/* hier.c's all-reduce: node l's shard of count/L elements through the three
 * stages, the last count % L elements in one fp32 all-reduce of everyone. */
static void make_hier_ar(nsc_plan *p, const nsc_topo *t, int avg) {
  size_t L = (size_t)t->local_size, shard = p->count / L, main = shard * L, tail = p->count - main;
  size_t mine = (size_t)t->local_rank * shard;
  p->alg = NSC_PLAN_HIER;
  if (shard) {
    step(p, NSC_STEP_REDUCESCATTER, NSC_ON_NODE, 0, shard, NSC_BUF_SEND, 0, NSC_BUF_RECV, mine, avg, 0);
    step(p, NSC_STEP_TWOPHASE, NSC_ON_CROSS, 0, shard, NSC_BUF_RECV, mine, NSC_BUF_RECV, mine, avg, 0);
    step(p, NSC_STEP_ALLGATHER, NSC_ON_NODE, 0, shard, NSC_BUF_RECV, mine, NSC_BUF_RECV, 0, 0, 0);
  }
  if (tail) step(p, NSC_STEP_ALLREDUCE, NSC_ON_ALL, 0, tail, NSC_BUF_SEND, main, NSC_BUF_RECV, main, avg, 0);
}

/* The hierarchical reduce-scatter: rank r's result is the sum of every
 * rank's block r (count elements at r * count).
 *   a. for each node j (this rank's own first, nsc_plan_node_order), node
 *      j's blocks are reduced inside this node, local rank l getting this
 *      node's sum of node j's l-th rank's block in TMP slot j (count
 *      elements at j * count): one ncclReduceScatter when node j's ranks are
 *      consecutive (its blocks lie together, L * count elements from its
 *      first rank's), else one ncclReduce per block to root l;
 *   b. a two-phase reduce-scatter of the N slots in the wire format among
 *      the N ranks of local index l (one per node, node j's at index j): node
 *      j's l-th rank gets slot j summed over the nodes, the sum of its own
 *      block over every rank.
 * Own node first: an in-place call reads the blocks its receive buffer
 * aliases before a rank without TMP writes anything there. */
static void make_hier_rs(nsc_plan *p, const nsc_topo *t, int avg) {
  p->alg = NSC_PLAN_HIER;
  p->tmp_elems = p->count * (size_t)t->nnodes;
  if (t->contiguous)
    step(p, NSC_STEP_REDUCESCATTER, NSC_ON_NODE, NSC_STEP_EACH_NODE, p->count, NSC_BUF_SEND, 0, NSC_BUF_TMP, 0, avg,
         0);
  else
    step(p, NSC_STEP_REDUCE, NSC_ON_NODE, NSC_STEP_EACH_NODE | NSC_STEP_EACH_LOCAL, p->count, NSC_BUF_SEND, 0,
         NSC_BUF_TMP, 0, avg, 0);
  step(p, NSC_STEP_TWOPHASE, NSC_ON_CROSS, 0, p->count, NSC_BUF_TMP, 0, NSC_BUF_RECV, 0, avg, 1);
}

void nsc_plan_make(nsc_plan *p, const nsc_config *cfg, const nsc_plan_call *in) {
  const nsc_topo *t = in->topo;
  *p = (nsc_plan){0};
  p->rs = in->rs;
  p->count = in->count;
  p->fmt = nsc_tp_fmt(cfg);
  int blocked = nsc_fmt_blocked(p->fmt);
  if (!in->compress) {
    p->why = "not compressed";
    make_plain(p, in->avg);
    return;
  }
  if (nsc_algo_choose(cfg, in->count, t->nranks, in->rs, in->hier) != NSC_ALG_TWOPHASE) {
    if (in->rs || blocked) {
      p->why = in->rs ? "too small for two-phase (a reduce-scatter has no compressed ring)"
                      : "too small for two-phase (NCCL cannot reduce block-scaled runs)";
      make_plain(p, in->avg);
    } else {
      p->why = cfg->algo == NSC_ALGO_RING ? "NCCLSHIM_ALGO=ring" : "below two-phase's thresholds";
      make_ring(p, in->avg);
    }
    return;
  }
  /* auto runs hier from NCCLSHIM_HIER_MIN_BYTES of fp32 per call (the whole
   * buffer, as MIN_BYTES counts it): below, the latency of three stages
   * costs more than the bytes they save (bench/model/auto-rule.sh) */
  size_t bytes = 4 * in->count * (in->rs ? (size_t)t->nranks : 1);
  if (in->hier && (cfg->algo == NSC_ALGO_HIER || bytes >= (size_t)cfg->hier_min_bytes)) {
    p->why = "nodes of several ranks each: compressed between nodes only";
    if (in->rs) make_hier_rs(p, t, in->avg);
    else make_hier_ar(p, t, in->avg);
    return;
  }
  p->alg = NSC_PLAN_TWOPHASE;
  p->why = in->hier ? "below NCCLSHIM_HIER_MIN_BYTES: flat two-phase" : "two-phase";
  step(p, NSC_STEP_TWOPHASE, NSC_ON_ALL, 0, p->count, NSC_BUF_SEND, 0, NSC_BUF_RECV, 0, in->avg, in->rs);
}

void nsc_plan_group(const nsc_topo *t, nsc_plan_on on, int *size, int *index) {
  switch (on) {
  case NSC_ON_NODE:
    *size = t->local_size;
    *index = t->local_rank;
    break;
  case NSC_ON_CROSS:
    *size = t->nnodes;
    *index = t->node[t->rank];
    break;
  default:
    *size = t->nranks;
    *index = t->rank;
    break;
  }
}

int nsc_plan_node_rank(const nsc_topo *t, int j, int l) {
  for (int i = 0; i < t->nranks; i++)
    if (t->node[i] == j && l-- == 0) return i;
  return -1;
}

int nsc_plan_node_order(const nsc_topo *t, int q) {
  int own = t->node[t->rank];
  return q == 0 ? own : q <= own ? q - 1 : q;
}

nsc_step nsc_plan_step_at(const nsc_plan *p, const nsc_topo *t, const nsc_step *s, int j, int l) {
  nsc_step x = *s;
  if (s->flags & NSC_STEP_EACH_NODE) { /* hier's reduce-scatter: node j's blocks into TMP slot j */
    int first = nsc_plan_node_rank(t, j, (s->flags & NSC_STEP_EACH_LOCAL) ? l : 0);
    x.src_off = s->src_off + (size_t)first * p->count;
    x.dst_off = s->dst_off + (size_t)j * p->count;
    if (s->flags & NSC_STEP_EACH_LOCAL) x.root = l;
  }
  return x;
}

void nsc_plan_tp(const nsc_plan *p, const nsc_step *s, const nsc_config *cfg, const nsc_topo *t, nsc_tp_plan *tp) {
  int n, idx;
  (void)p;
  nsc_plan_group(t, s->on, &n, &idx);
  nsc_tp_plan_init(tp, cfg, n, idx, s->count, s->rs);
}

size_t nsc_plan_staging(const nsc_plan *p, const nsc_config *cfg, const nsc_topo *t, size_t (*round)(size_t)) {
  size_t sum = p->tmp_elems ? round(4 * p->tmp_elems) : 0;
  for (int i = 0; i < p->nsteps; i++) {
    const nsc_step *s = &p->step[i];
    if (s->kind == NSC_STEP_TWOPHASE) {
      nsc_tp_plan tp;
      nsc_plan_tp(p, s, cfg, t, &tp);
      sum += round(nsc_tp_staging_bytes(&tp, s->rs));
    } else if (s->kind == NSC_STEP_CAST_IN) {
      sum += round(2 * s->count); /* fp16 or bf16 */
    }
  }
  return sum;
}

const char *nsc_plan_alg_name(nsc_plan_alg a) {
  static const char *const n[] = {"plain", "ring", "twophase", "hier"};
  return (unsigned)a < sizeof n / sizeof *n ? n[a] : "?";
}

const char *nsc_plan_step_name(nsc_step_kind k) {
  static const char *const n[] = {"allreduce", "reducescatter", "allgather", "twophase", "cast_in", "cast_out",
                                  "reduce"};
  return (unsigned)k < sizeof n / sizeof *n ? n[k] : "?";
}

const char *nsc_plan_on_name(nsc_plan_on on) {
  static const char *const n[] = {"all", "node", "cross"};
  return (unsigned)on < sizeof n / sizeof *n ? n[on] : "?";
}
