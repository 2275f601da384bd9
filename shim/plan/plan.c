/* plan.c — see plan.h. The decision in one place: which calls may be
 * transformed (the policy, policy.h: asked once per call), the two-phase
 * layout (tp_plan.h: made once per plan), the launch-aware cost rule
 * (cost.h) and, from them, a call's plan: its algorithm, the steps and
 * launches it issues, and everything its steps need (format, codec,
 * staging). A group's buckets are group.c's. Pure: nothing here reads
 * anything but its arguments. */
#include "plan.h"

#include "cost.h"
#include "policy.h"

/* ---- the policy (policy.h): which calls may be transformed. Argument
 * errors (NULL buffers, invalid datatype or op, count 0) are always passed
 * through, so the caller gets exactly the result code plain NCCL would give. */

static int sum_or_avg(ncclRedOp_t op) { return op == ncclSum || op == ncclAvg; }

int nsc_policy_input(ncclDataType_t dt) {
  if (dt == ncclFloat32) return NSC_IN_F32;
#define NSC_IN_ROW(ID, name, bits, blocked, dt_, k, bound, zero, doc) \
  if (!(blocked) && (bits) == 16 && dt == (dt_)) return 1 + (int)NSC_FMT_##ID;
  NSC_FORMATS(NSC_IN_ROW)
#undef NSC_IN_ROW
  return -1;
}

/* fp32, bf16 or fp16, Sum/Avg, valid buffers, count > 0, compression on:
 * its size aside. */
static int compressible_kind(const nsc_config *cfg, const nsc_call *c) {
  return cfg->compress != NSC_COMPRESS_OFF && nsc_policy_input(c->dt) >= 0 && sum_or_avg(c->op) &&
         c->has_buffers && c->count > 0;
}

static size_t float_size(ncclDataType_t dt) {
  switch (dt) {
  case ncclFloat16: case ncclBfloat16: return 2;
  case ncclFloat32: return 4;
  case ncclFloat64: return 8;
  default: return 0; /* integers and fp8: never accumulated */
  }
}

/* Floating, Sum/Avg, valid buffers, count > 0, at least MIN_BYTES, K > 1:
 * capture aside. */
static int accumulable_kind(const nsc_config *cfg, const nsc_call *c) {
  size_t es = float_size(c->dt);
  return nsc_cfg_accumulating(cfg) && es && sum_or_avg(c->op) && c->has_buffers && c->count > 0 &&
         c->count * es >= (size_t)cfg->min_bytes;
}

/* Why a call is not compressible on its own: the first of OFF, DTYPE, OP,
 * ARGS, MIN_BYTES that holds. */
static nsc_why why_not(const nsc_config *cfg, const nsc_call *c) {
  if (cfg->compress == NSC_COMPRESS_OFF) return NSC_WHY_OFF;
  if (nsc_policy_input(c->dt) < 0) return NSC_WHY_DTYPE;
  if (!sum_or_avg(c->op)) return NSC_WHY_OP;
  if (!c->has_buffers || c->count == 0) return NSC_WHY_ARGS;
  return NSC_WHY_MIN_BYTES;
}

void nsc_policy_ask(const nsc_config *cfg, nsc_call *c) {
  int kind = compressible_kind(cfg, c);
  c->pol.why = kind && c->count * float_size(c->dt) >= (size_t)cfg->min_bytes ? NSC_WHY_NONE : why_not(cfg, c);
  c->pol.may = 0;
  if (c->rs) return; /* two phases or untouched: never fused or accumulated */
  /* fused buckets are fp32 (the ring's casts): a 16-bit call is never fused */
  if (c->in_group && cfg->fuse_bytes > 0 && kind && c->dt == ncclFloat32) c->pol.may |= NSC_MAY_FUSE;
  if (accumulable_kind(cfg, c)) c->pol.may |= NSC_MAY_ACCUM;
}

int nsc_policy_accumulable(const nsc_config *cfg, const nsc_call *c) {
  return !c->capturing && accumulable_kind(cfg, c);
}

int nsc_policy_blocked(const nsc_config *cfg) {
  return cfg->compress != NSC_COMPRESS_OFF && nsc_fmt_blocked(nsc_tp_fmt(cfg));
}

/* ---- the two-phase layout (tp_plan.h) ---- */

/* NCCLSHIM_COMPRESS's value is the format's position + 1 (config.h). */
nsc_fmt_t nsc_tp_fmt(const nsc_config *cfg) {
  return cfg->compress > NSC_COMPRESS_OFF && cfg->compress <= NSC_FMT_COUNT ? (nsc_fmt_t)(cfg->compress - 1)
                                                                            : NSC_FMT_FP16;
}

nsc_fmt_t nsc_tp_wire(const nsc_config *cfg, int in) {
  nsc_fmt_t f = nsc_tp_fmt(cfg);
  return in != NSC_IN_F32 && !nsc_fmt_blocked(f) ? nsc_in_fmt(in) : f;
}

/* The pieces "auto" allows at most: pieces of at least NSC_TP_AUTO_PIECE
 * fp32 bytes (the fixed default before launches were counted). */
#define NSC_TP_AUTO_PIECE (1u << 20)

/* Elements per piece: the setting's fp32 bytes / 4 (auto: the cost rule's
 * piece count, cost.h), in whole units (a block of an 8-bit format, else 64
 * elements), at least one unit, and large enough for at most
 * NSC_TP_MAX_PIECES pieces per chunk and NSC_TP_MAX_PIECE_SLOTS over all n
 * chunks (each piece of each chunk is a launch per phase); 0 (or a chunk no
 * longer than that): the whole chunk. */
static size_t piece_elems(const nsc_config *cfg, const nsc_cost_rule *r, nsc_fmt_t f, size_t block, int n, size_t chunk,
                          size_t total, int rs) {
  size_t unit = nsc_fmt_blocked(f) ? block : 64, want = (size_t)cfg->twophase_piece_bytes / 4;
  size_t most = (size_t)(n >= NSC_TP_MAX_PIECE_SLOTS ? 1 : NSC_TP_MAX_PIECE_SLOTS / n);
  if (most > NSC_TP_MAX_PIECES) most = NSC_TP_MAX_PIECES;
  if (cfg->twophase_piece_bytes == NSC_CFG_AUTO) {
    /* the codec runs over the whole input twice (encode in, decode out;
     * a reduce-scatter's second pass is its own chunk's decode-sum) and
     * each piece costs a launch per phase */
    size_t cap = (4 * chunk + NSC_TP_AUTO_PIECE - 1) / NSC_TP_AUTO_PIECE;
    int k = nsc_cost_pieces(r, nsc_cost_codec(r, 2 * 4 * (uint64_t)total), rs ? 1 : 2,
                            (int)(cap < most ? cap : most));
    want = k > 1 ? ((chunk + (size_t)k - 1) / (size_t)k + unit - 1) / unit * unit : 0; /* k pieces, whole units */
  }
  if (!want || chunk <= want) return chunk ? chunk : 1;
  want = want / unit * unit;
  if (!want) want = unit;
  size_t least = (chunk + most - 1) / most;
  if (want < least) want = (least + unit - 1) / unit * unit;
  return want < chunk ? want : chunk;
}

void nsc_tp_plan_init(nsc_tp_plan *p, const nsc_config *cfg, int n, int rank, size_t count, int rs,
                      const nsc_cost_rule *r) {
  nsc_tp_plan_init_in(p, cfg, n, rank, count, rs, r, NSC_IN_F32);
}

void nsc_tp_plan_init_in(nsc_tp_plan *p, const nsc_config *cfg, int n, int rank, size_t count, int rs,
                         const nsc_cost_rule *r, int in) {
  p->n = n;
  p->rank = rank;
  p->in = in;
  p->fmt = nsc_tp_wire(cfg, in);
  p->block = (size_t)cfg->block_elems;
  p->count = rs ? count * (size_t)n : count;
  size_t off, len;
  nsc_tp_chunk(p, 0, &off, &len); /* chunk 0 is a largest one */
  p->piece = piece_elems(cfg, r, p->fmt, p->block, n, len, p->count, rs);
  p->npieces = len ? (int)((len + p->piece - 1) / p->piece) : 1;
  p->slot = (nsc_fmt_bytes(p->fmt, p->piece < len ? p->piece : len, p->block) + 15) / 16 * 16;
  /* The second phase as one in-place ncclAllGather per piece: the n slots of
   * piece k lie rank-major (slot k*n + j), so rank j's piece is its part of
   * the gather, padding included; a rank without staging gathers into its
   * receive buffer, which must hold n slots (the peers' gather is the same
   * size). auto gathers on device memory, where NCCL's all-gather beat
   * pairwise sends 2.5x (the GPU rig, 4 ranks), and keeps the sends under
   * the host rule, where the host NCCL's ring of n-1 steps measured slower
   * than its concurrent sends (bench/README.md). A pure function of the
   * count, the rank count, the settings and the agreed memory kind. */
  int want = cfg->twophase_gather == NSC_GATHER_ALLGATHER || (cfg->twophase_gather == NSC_GATHER_AUTO && !r->host);
  p->gather = !rs && n >= 2 && want && (size_t)n * p->slot <= (size_t)nsc_in_esz(in) * p->count;
}

int nsc_tp_fits(const nsc_config *cfg, int n, size_t count, int rs) {
  return nsc_tp_fits_in(cfg, n, count, rs, NSC_IN_F32);
}

int nsc_tp_fits_in(const nsc_config *cfg, int n, size_t count, int rs, int in) {
  if (n < 2 || cfg->compress == NSC_COMPRESS_OFF || count == 0) return 0;
  /* chunk 0 is a largest one (nsc_tp_chunk); the largest message, whatever the pieces */
  size_t total = rs ? count * (size_t)n : count, len = total / (size_t)n + (total % (size_t)n != 0);
  return (nsc_fmt_bytes(nsc_tp_wire(cfg, in), len, (size_t)cfg->block_elems) + 15) / 16 * 16 <=
         (size_t)nsc_in_esz(in) * count;
}

/* ---- the plans' steps ---- */

/* The format's NCCL datatype as its row names it (fp16's when compression is off). */
static int wire_dtype(nsc_fmt_t f) {
  switch (f) {
#define NSC_WIRE_DT(ID, name, bits, blocked, dt, k, bound, zero, doc) \
  case NSC_FMT_##ID: return (int)dt;
    NSC_FORMATS(NSC_WIRE_DT)
#undef NSC_WIRE_DT
  default: return (int)ncclFloat16;
  }
}

void nsc_plan_init(nsc_plan *p, const nsc_config *cfg, int rs, size_t count, nsc_cost_rule r) {
  *p = (nsc_plan){0};
  p->rs = rs;
  p->count = count;
  p->rule = r;
  nsc_plan_input(p, cfg, NSC_IN_F32);
  p->codec = (nsc_codec){cfg->prescale, cfg->error_feedback != 0, cfg->rounding == NSC_ROUND_STOCHASTIC,
                         (uint64_t)cfg->rounding_seed, (size_t)cfg->ef_max_bytes, cfg->fault_cast};
}

void nsc_plan_input(nsc_plan *p, const nsc_config *cfg, int in) {
  p->in = in;
  p->idt = in == NSC_IN_F32 ? (int)ncclFloat32 : wire_dtype(nsc_in_fmt(in));
  p->fmt = nsc_tp_wire(cfg, in);
  p->wdt = wire_dtype(p->fmt);
}

void nsc_plan_step(nsc_plan *p, nsc_step_kind k, nsc_plan_on on, unsigned flags, size_t count, nsc_plan_buf src,
                   size_t src_off, nsc_plan_buf dst, size_t dst_off, int avg, int rs) {
  nsc_step *s = &p->step[p->nsteps++];
  *s = (nsc_step){k, on, flags, rs, avg, 0, count, src, dst, src_off, dst_off};
}
#define step(...) nsc_plan_step(__VA_ARGS__)

static void make_ring(nsc_plan *p, int avg) {
  p->alg = NSC_ALG_RING;
  step(p, NSC_STEP_CAST_IN, NSC_ON_ALL, 0, p->count, NSC_BUF_SEND, 0, NSC_BUF_TMP, 0, 0, 0);
  step(p, NSC_STEP_ALLREDUCE, NSC_ON_ALL, NSC_STEP_WIRE, p->count, NSC_BUF_TMP, 0, NSC_BUF_TMP, 0, avg, 0);
  step(p, NSC_STEP_CAST_OUT, NSC_ON_ALL, 0, p->count, NSC_BUF_TMP, 0, NSC_BUF_RECV, 0, 0, 0);
}

static void make_plain(nsc_plan *p, int avg) {
  p->alg = NSC_ALG_PLAIN;
  step(p, p->rs ? NSC_STEP_REDUCESCATTER : NSC_STEP_ALLREDUCE, NSC_ON_ALL, NSC_STEP_CALL, p->count, NSC_BUF_SEND, 0,
       NSC_BUF_RECV, 0, avg, 0);
  p->launches = 1;
}

/* hier's all-reduce: node l's shard of count/L elements through the three
 * stages, the last count % L elements in one fp32 all-reduce of everyone. */
static void make_hier_ar(nsc_plan *p, const nsc_topo *t, int avg) {
  size_t L = (size_t)t->local_size, shard = p->count / L, main = shard * L, tail = p->count - main;
  size_t mine = (size_t)t->local_rank * shard;
  p->alg = NSC_ALG_HIER;
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
  p->alg = NSC_ALG_HIER;
  p->tmp_elems = p->count * (size_t)t->nnodes;
  if (t->contiguous)
    step(p, NSC_STEP_REDUCESCATTER, NSC_ON_NODE, NSC_STEP_EACH_NODE, p->count, NSC_BUF_SEND, 0, NSC_BUF_TMP, 0, avg,
         0);
  else
    step(p, NSC_STEP_REDUCE, NSC_ON_NODE, NSC_STEP_EACH_NODE | NSC_STEP_EACH_LOCAL, p->count, NSC_BUF_SEND, 0,
         NSC_BUF_TMP, 0, avg, 0);
  step(p, NSC_STEP_TWOPHASE, NSC_ON_CROSS, 0, p->count, NSC_BUF_TMP, 0, NSC_BUF_RECV, 0, avg, 1);
}

static void make_twophase(nsc_plan *p, const nsc_plan_call *in) {
  p->alg = NSC_ALG_TWOPHASE;
  step(p, NSC_STEP_TWOPHASE, NSC_ON_ALL, 0, p->count, NSC_BUF_SEND, 0, NSC_BUF_RECV, 0, in->avg, in->rs);
}

static void make_hier(nsc_plan *p, const nsc_plan_call *in) {
  if (in->rs) make_hier_rs(p, in->topo, in->avg);
  else make_hier_ar(p, in->topo, in->avg);
}

/* ---- the cost rule (cost.h) over the plans ---- */

#define RING_AUTO_CHUNK (32u << 20) /* "auto" makes chunks of at least this many fp32 bytes */

size_t nsc_plan_ring_chunk(const nsc_config *cfg, const nsc_cost_rule *r, size_t count) {
  if (cfg->chunk_bytes == NSC_CFG_AUTO) {
    size_t cap = (4 * count + RING_AUTO_CHUNK - 1) / RING_AUTO_CHUNK;
    int k = nsc_cost_pieces(r, nsc_cost_codec(r, 2 * 4 * (uint64_t)count), 1, cap > 64 ? 64 : (int)cap);
    return k > 1 ? (count + (size_t)k - 1) / (size_t)k : 0;
  }
  size_t ce = (size_t)cfg->chunk_bytes / 4;
  return ce == 0 || count <= ce ? 0 : ce;
}

/* The plain call: one launch; a ring all-reduce sends 2(n-1)/n of the
 * buffer, a reduce-scatter (n-1)/n of its whole input. */
static uint64_t cost_plain(const nsc_cost_rule *r, int n, uint64_t S, int rs) {
  uint64_t wire = n < 2 ? 0 : (rs ? 1 : 2) * S / (uint64_t)n * (uint64_t)(n - 1);
  return r->launch + wire;
}

/* The ring in the wire type: fp16/bf16 (half the bytes), a launch per
 * chunk, the casts' time not hidden by the chunks. */
static uint64_t cost_ring(const nsc_config *cfg, const nsc_cost_rule *r, int n, size_t count, int *launches) {
  size_t ce = nsc_plan_ring_chunk(cfg, r, count);
  int k = ce ? (int)((count + ce - 1) / ce) : 1;
  uint64_t S = 4 * (uint64_t)count;
  *launches = k;
  return (uint64_t)k * r->launch + cost_plain(r, n, S / 2, 0) - r->launch + nsc_cost_codec(r, 2 * S) / (uint64_t)k;
}

/* A two-phase collective of layout tp (rank 0's messages: every rank's are
 * the same but for the last chunk's): its launches, the encoded bytes it
 * sends, the codec's time the pieces do not hide. */
static uint64_t tp_phase2_msg(const nsc_tp_plan *tp) {
  return tp->gather ? (uint64_t)tp->slot * (uint64_t)tp->npieces : nsc_tp_chunk_bytes(tp, 0);
}
static uint64_t cost_tp_nic(const nsc_tp_plan *tp, const nsc_cost_rule *r, int rs, int *launches, uint64_t nic) {
  uint64_t wire = 0;
  for (int j = 1; j < tp->n; j++) wire += nsc_tp_chunk_bytes(tp, j); /* phase 1 */
  if (!rs) wire += (uint64_t)(tp->n - 1) * tp_phase2_msg(tp);      /* phase 2 */
  *launches = nsc_tp_launches(tp, rs);
  return (uint64_t)*launches * r->launch + (nic > wire ? nic : wire) +
         nsc_cost_codec(r, 2 * 4 * (uint64_t)tp->count) / (uint64_t)tp->npieces;
}

/* A node's NIC. The rule takes one per node, shared by the node's ranks: it
 * cannot see how many a node has, and a shared NIC is where two phases lose
 * (where each rank has its own, they are priced high and auto keeps NCCL's
 * ring, never slower than the plain call). NCCL's ring crosses a node's NIC
 * with what one rank's link carries (the plain call and the ring need no
 * term); a flat two-phase call on several nodes sends, from each of a
 * node's ranks, every rank of the other nodes its message: on the fullest
 * node (the agreed max_local, the same on every rank). */
static uint64_t nic_tp(const nsc_tp_plan *tp, const nsc_topo *t, int rs) {
  if (t->nnodes < 2 || tp->n != t->nranks) return 0;
  uint64_t L = (uint64_t)t->max_local, off = (uint64_t)(t->nranks - t->min_local);
  return L * off * (nsc_tp_chunk_bytes(tp, 0) + (rs ? 0 : tp_phase2_msg(tp)));
}

static uint64_t cost_tp(const nsc_tp_plan *tp, const nsc_cost_rule *r, int rs, const nsc_topo *t, int *launches) {
  return cost_tp_nic(tp, r, rs, launches, nic_tp(tp, t, rs));
}

/* The plan's two-phase step, if it has one (at most one). */
static const nsc_step *tp_step(const nsc_plan *p) {
  for (int i = 0; i < p->nsteps; i++)
    if (p->step[i].kind == NSC_STEP_TWOPHASE) return &p->step[i];
  return NULL;
}

/* The launches of a plan's steps (a repetition per node or per local rank
 * is one group: one launch). */
static int plan_launches(const nsc_plan *p, const nsc_config *cfg) {
  int n = 0;
  for (int i = 0; i < p->nsteps; i++) {
    const nsc_step *s = &p->step[i];
    switch (s->kind) {
    case NSC_STEP_TWOPHASE: n += nsc_tp_launches(&p->tp, s->rs); break;
    case NSC_STEP_CAST_IN:
    case NSC_STEP_CAST_OUT: break;
    default:
      if (s->flags & NSC_STEP_WIRE) { /* the ring's real all-reduce, in chunks */
        size_t ce = nsc_plan_ring_chunk(cfg, &p->rule, s->count);
        n += ce ? (int)((s->count + ce - 1) / ce) : 1;
      } else n += 1;
      break;
    }
  }
  return n;
}

/* hier: its launches, its two-phase step between nodes, whose bytes all of
 * a node's ranks send through the node's one NIC (nic_tp: the fullest
 * node's max_local times one rank's), and its fp32 stages inside the node,
 * each intra-node byte at 1/NSC_COST_INTRA_DIV of a link byte (cost.h). */
static uint64_t cost_hier(const nsc_cost_rule *r, const nsc_plan *h, const nsc_topo *t) {
  uint64_t c = 0;
  for (int i = 0; i < h->nsteps; i++) { /* a ring of L ranks moves (L-1)/L of its fp32 buffer per stage */
    const nsc_step *st = &h->step[i];
    if (st->on != NSC_ON_NODE || t->max_local < 2) continue;
    uint64_t L = (uint64_t)t->max_local, b = 4 * (uint64_t)st->count * L;
    c += b / L * (L - 1) / NSC_COST_INTRA_DIV;
  }
  const nsc_step *s = tp_step(h);
  if (s) {
    int l;
    uint64_t one = cost_tp_nic(&h->tp, r, s->rs, &l, 0) - (uint64_t)l * r->launch;
    c += one * (uint64_t)(t->max_local > 0 ? t->max_local : 1);
  }
  return c + (uint64_t)h->launches * r->launch;
}

/* ---- the plans ---- */

typedef enum { C_RING, C_TP, C_HIER } cand;

/* The plan of candidate k (C_HIER only where the communicator adopted hier
 * and two phases fit), its two-phase layout made once, on this rank's group,
 * for its launches, its cost and its staging alike. */
static void make_cand(nsc_plan *p, const nsc_config *cfg, const nsc_plan_call *in, cand k, const nsc_cost_rule *r) {
  const nsc_topo *t = in->topo;
  nsc_plan x;
  nsc_plan_init(&x, cfg, p->rs, p->count, p->rule);
  nsc_plan_input(&x, cfg, in->in);
  if (k == C_RING) make_ring(&x, in->avg);
  else if (k == C_TP) make_twophase(&x, in);
  else make_hier(&x, in);
  const nsc_step *s = tp_step(&x);
  if (s) nsc_plan_tp(&x, s, cfg, t, &x.tp);
  x.launches = plan_launches(&x, cfg);
  int l;
  x.cost = k == C_RING ? cost_ring(cfg, r, t->nranks, x.count, &l)
         : k == C_TP  ? cost_tp(&x.tp, r, x.rs, t, &l)
                      : cost_hier(r, &x, t);
  x.plain_cost = p->plain_cost;
  if (k == C_RING) x.chunk = nsc_plan_ring_chunk(cfg, &in->rule, x.count);
  *p = x;
}

/* The candidates of a compressible call, in the order the settings prefer
 * them; returns how many. */
static int candidates(cand *order, const nsc_config *cfg, const nsc_plan_call *in, uint64_t S, int fits) {
  int nc = 0, n = in->topo->nranks;
  /* a 16-bit input: two phases with fp32 sums or nothing (the ring would sum
   * in 16 bits; hier's node stages are fp32 steps: flat two-phase instead) */
  if (in->in != NSC_IN_F32) {
    if (fits) order[nc++] = C_TP;
    return nc;
  }
  if (in->hier && fits && (cfg->algo == NSC_ALGO_HIER || S >= (uint64_t)cfg->hier_min_bytes)) order[nc++] = C_HIER;
  if (in->rs || nsc_fmt_blocked(nsc_tp_fmt(cfg))) {
    if (fits) order[nc++] = C_TP;
  } else if (cfg->algo == NSC_ALGO_RING) {
    order[nc++] = C_RING;
  } else if (cfg->algo == NSC_ALGO_TWOPHASE || (cfg->algo == NSC_ALGO_HIER && in->hier)) {
    order[nc++] = fits ? C_TP : C_RING;
  } else if (cfg->error_feedback || cfg->rounding == NSC_ROUND_STOCHASTIC) {
    /* error feedback and stochastic rounding exist only in two phases */
    order[nc++] = fits ? C_TP : C_RING;
  } else if (fits && n >= 4 && in->count / (size_t)n >= 16384) {
    order[nc++] = C_TP; /* auto: two phases from 4 ranks and 64 KiB per rank (fp32 sums) */
    order[nc++] = C_RING;
  } else {
    order[nc++] = C_RING;
    if (fits && n >= 2) order[nc++] = C_TP;
  }
  return nc;
}

/* The call as it is, for reason why. */
static void plain(nsc_plan *p, int avg, nsc_why why) {
  p->why = why;
  make_plain(p, avg);
  p->cost = p->plain_cost;
}

void nsc_plan_make(nsc_plan *p, const nsc_config *cfg, const nsc_plan_call *in) {
  const nsc_topo *t = in->topo;
  nsc_plan_init(p, cfg, in->rs, in->count, in->rule);
  nsc_plan_input(p, cfg, in->in);
  nsc_cost_rule r = in->rule;
  int n = t->nranks;
  /* the plain call's bytes in its own type: 2 an element for a 16-bit input */
  uint64_t S = (uint64_t)nsc_in_esz(in->in) * in->count * (in->rs ? (uint64_t)n : 1);
  p->plain_cost = cost_plain(&r, n, S, in->rs);
  if (!in->compress) {
    plain(p, in->avg, NSC_WHY_OFF);
    return;
  }
  cand order[3];
  int nc = candidates(order, cfg, in, S, nsc_tp_fits_in(cfg, n, in->count, in->rs, in->in));
  if (nc == 0) {
    plain(p, in->avg, NSC_WHY_TOO_SMALL);
    return;
  }
  /* ALGO=auto: the first candidate, in the order preferred, that gains at
   * least 10 % over the call as it is and costs at most 10 % more than the
   * cheapest candidate at the agreed launch cost; none: the call as it is.
   * An explicit algorithm is what the user asked for (its pieces and chunks
   * still follow the rule). */
  int gain_rule = cfg->algo == NSC_ALGO_AUTO || (cfg->algo == NSC_ALGO_HIER && !in->hier);
  /* a 16-bit input runs in two phases only where they are asked for
   * (ALGO=twophase or hier: fp32 sums at their price) or gain: ALGO=ring
   * names the fp32 calls' algorithm */
  if (in->in != NSC_IN_F32) gain_rule = cfg->algo != NSC_ALGO_TWOPHASE && cfg->algo != NSC_ALGO_HIER;
  uint64_t least = p->plain_cost;
  if (gain_rule)
    for (int i = 0; i < nc; i++) {
      nsc_plan x = *p;
      make_cand(&x, cfg, in, order[i], &r);
      if (x.cost < least) least = x.cost;
    }
  for (int i = 0; i < nc; i++) {
    nsc_plan x = *p;
    make_cand(&x, cfg, in, order[i], &r);
    if (gain_rule && (!nsc_cost_gains(x.cost, p->plain_cost) || !nsc_cost_within(x.cost, least))) continue;
    switch (order[i]) {
    case C_RING:
      x.why = gain_rule ? NSC_WHY_RING_GAINS : cfg->algo == NSC_ALGO_RING ? NSC_WHY_ASKED_RING : NSC_WHY_NO_FIT;
      break;
    case C_TP:
      x.why = in->hier && in->in == NSC_IN_F32 ? NSC_WHY_HIER_FLAT : gain_rule ? NSC_WHY_TP_GAINS : NSC_WHY_ASKED_TP;
      break;
    default: x.why = NSC_WHY_HIER_NODES; break;
    }
    *p = x;
    return;
  }
  plain(p, in->avg, NSC_WHY_NO_GAIN);
}

/* ---- the decision ---- */

int nsc_plan_hier_wanted(const nsc_config *cfg, const nsc_topo *t, int untouched, const char **why) {
  *why = "";
  if (cfg->algo != NSC_ALGO_HIER && cfg->algo != NSC_ALGO_AUTO) return 0; /* auto: hier wherever the map allows */
  if (cfg->compress == NSC_COMPRESS_OFF) *why = "compression is off";
  else if (untouched) *why = "a rank cannot run the kernels";
  else if (t->nnodes < 2) *why = "the communicator is on one node";
  else if (t->min_local != t->max_local) *why = "its nodes hold different numbers of its ranks";
  else if (t->max_local < 2) *why = "every rank is alone on its node";
  return !**why;
}

/* What the policy lets a call become before its cost is weighed. */
typedef enum { ACT_PASS, ACT_COMPRESS, ACT_FUSE } act;

static act transform(const nsc_config *cfg, const nsc_call *k) {
  if (k->rs) return ACT_PASS; /* a reduce-scatter is its plan (two phases) or untouched */
  /* A capture freezes whatever is enqueued; staging growth there is not
   * allowed, so captured calls are forwarded as they are. */
  if (k->capturing) return ACT_PASS;
  /* Two-phase needs the data of its first phase before its second: not inside
   * a group, where nothing runs before the outermost end. */
  if (k->in_group && nsc_policy_blocked(cfg)) return ACT_PASS;
  if (k->pol.may & NSC_MAY_FUSE) return ACT_FUSE;
  return k->pol.why == NSC_WHY_NONE ? ACT_COMPRESS : ACT_PASS;
}

/* The plain call's plan (forwarded untouched), or a plan of its shape
 * (LOCAL, a fused member). */
static void plain_of(nsc_plan *p, const nsc_call *k, nsc_why why) {
  nsc_plan x = {0};
  x.rs = k->rs;
  x.count = k->arg;
  x.rule = p->rule;
  x.in = p->in;
  x.idt = p->idt;
  x.fmt = p->fmt;
  x.wdt = p->wdt;
  x.codec = p->codec;
  x.plain_cost = p->plain_cost;
  plain(&x, k->op == ncclAvg, why);
  *p = x;
}

void nsc_decide(nsc_plan *p, const nsc_config *cfg, const nsc_call *k, const nsc_agreed *a, int local) {
  nsc_cost_rule rule = nsc_cost_rule_of(nsc_cost_launch(cfg, a->learned, a->launch), a->host);
  int input = nsc_policy_input(k->dt);
  nsc_plan_call in = {k->rs, k->arg, k->op == ncclAvg, 1, a->topo, a->hier, rule, input < 0 ? NSC_IN_F32 : input};
  act act = transform(cfg, k);
  int tp = 0;
  nsc_plan_init(p, cfg, k->rs, k->arg, rule);
  if (input > 0) nsc_plan_input(p, cfg, input);
  if (a->untouched) { /* every rank forwards every call (agreed at the check) */
    plain_of(p, k, NSC_WHY_KERNELS);
    return;
  }
  if (k->pol.why == NSC_WHY_NONE) { /* the plan only where it can be more than the call itself */
    nsc_plan_make(p, cfg, &in);
    tp = p->alg == NSC_ALG_TWOPHASE || p->alg == NSC_ALG_HIER;
    /* no plan gains at the agreed launch cost (plan.h): the call as it is */
    if (p->alg == NSC_ALG_PLAIN && act == ACT_COMPRESS) act = ACT_PASS;
  } else {
    uint64_t S = (uint64_t)(input > 0 ? 2 : 4) * k->arg * (k->rs ? (uint64_t)a->topo->nranks : 1);
    p->plain_cost = cost_plain(&rule, a->topo->nranks, S, k->rs);
  }
  /* A capture freezes what is enqueued: captured calls are forwarded. */
  if (k->capturing) tp = 0;
  /* Calls that may take staging settle it: after the call, or after the
   * outermost group end (decided by the call alone, as the takes are). */
  int settles = !k->capturing && (tp || act == ACT_COMPRESS || act == ACT_FUSE);
  if (local) { /* accumulation answers it: this rank's W * x (Sum) or x (Avg) */
    plain_of(p, k, NSC_WHY_LOCAL);
    p->alg = NSC_ALG_LOCAL;
    p->step[0].kind = NSC_STEP_LOCAL;
    p->step[0].flags = 0;
    p->launches = 0;
  } else if (tp) {
    /* two phases inside a group as outside (there after the real group
     * end); it takes precedence over fusion: a two-phase member is not
     * packed with the ring's fused members. Hier runs in stages, each
     * taking its staging. */
    p->deferred = k->in_group;
    p->staging = nsc_plan_staging(p, nsc_plan_round);
    p->limited = 1;
    p->stages = p->alg == NSC_ALG_HIER;
  } else if (act == ACT_COMPRESS && !nsc_policy_blocked(cfg)) {
    /* the ring (nsc_plan_make's plan): too small for two phases; outside a
     * group its chunks' casts go beside the chunks on the wire */
    p->staging = nsc_plan_staging(p, nsc_plan_round);
    p->limited = 1;
    p->pipelined = p->chunk && !k->in_group;
  } else if (act == ACT_FUSE) {
    plain_of(p, k, NSC_WHY_FUSED);
    p->alg = NSC_ALG_FUSE;
    p->nsteps = 0;
    p->deferred = 1;
  } else {
    plain_of(p, k, act == ACT_COMPRESS ? NSC_WHY_TOO_SMALL
                   : k->capturing      ? NSC_WHY_CAPTURED
                   : p->why != NSC_WHY_NONE ? p->why : k->pol.why);
  }
  p->settles = settles;
}

/* ---- the plan's geometry ---- */

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

void nsc_plan_tp(const nsc_plan *p, const nsc_step *s, const nsc_config *cfg, const nsc_topo *t, nsc_tp_plan *tp) {
  int n, idx;
  nsc_plan_group(t, s->on, &n, &idx);
  nsc_tp_plan_init_in(tp, cfg, n, idx, s->count, s->rs, &p->rule, p->in);
}

size_t nsc_plan_staging(const nsc_plan *p, size_t (*round)(size_t)) {
  size_t sum = p->tmp_elems ? round(4 * p->tmp_elems) : 0;
  for (int i = 0; i < p->nsteps; i++) {
    const nsc_step *s = &p->step[i];
    if (s->kind == NSC_STEP_TWOPHASE) sum += round(nsc_tp_staging_bytes(&p->tp, s->rs));
    else if (s->kind == NSC_STEP_CAST_IN || s->kind == NSC_STEP_SEG_CAST_IN) sum += round(2 * s->count); /* fp16 or bf16 */
  }
  return sum;
}

const char *nsc_plan_step_name(nsc_step_kind k) {
  static const char *const n[] = {"allreduce", "reducescatter", "allgather", "twophase", "cast_in", "cast_out",
                                  "reduce", "local", "seg_cast_in", "seg_cast_out"};
  _Static_assert(sizeof n / sizeof *n == NSC_STEP_COUNT, "a name per step kind");
  return (unsigned)k < NSC_STEP_COUNT ? n[k] : "?";
}

const char *nsc_plan_on_name(nsc_plan_on on) {
  static const char *const n[] = {"all", "node", "cross"};
  return (unsigned)on < sizeof n / sizeof *n ? n[on] : "?";
}
