/* hier.c — NCCLSHIM_ALGO=hier: a compressed all-reduce for a communicator that
 * spans N >= 2 nodes holding the same number L >= 2 of its ranks each (the
 * node map agreed at the settings check, topo/topo.h), in three stages:
 *   a. an fp32 ncclReduceScatter among the ranks of each node, on a
 *      sub-communicator of the node (NCCL's own kernels: NVLink inside a
 *      node), giving the node's local rank l shard l (count/L elements of the
 *      first L*(count/L));
 *   b. a two-phase all-reduce of that shard in the wire format among the N
 *      ranks that hold shard l, one per node, on a second sub-communicator
 *      (twophase.c, with its pieces, error feedback, stochastic rounding and
 *      poisoned path; fp32 sums in node order, one rounding in, one out);
 *   c. an fp32 ncclAllGather of the shards inside the node.
 * The last count % L elements (fewer than L) travel in one fp32 ncclAllReduce
 * of the whole communicator. Stage b's result is the same bytes on every rank
 * that holds shard l, so every rank ends with identical bits. Each node's NICs
 * carry 2(N-1)/N of the data once, in the wire format: what NCCL's ring
 * carries in fp32, times the format's ratio.
 *
 * The sub-communicators are split at the settings check by every rank in the
 * same order (node: colour = node index, key = rank; across: colour = local
 * rank, key = node index), inheriting the parent's configuration (on a
 * nonblocking parent each split is polled to completion), and adopted only
 * when every rank has both (one more exchange); their NCCL handles end with
 * their parent (destroy or abort alike), the internal entry only when the
 * parent's entry is freed (a call may still be inside). ncclAvg: Avg inside the node (x/L) and between
 * nodes (x/N). Every stage runs on the caller's stream, one after the other,
 * and is issued whatever the earlier ones answered (the first failure is the
 * call's result; what a failed stage leaves is NaN, never a wrong value).
 *
 * Reduce-scatter (nsc_hier_rs, below) likewise, on nodes of consecutive
 * ranks: an fp32 reduce-scatter inside the node per node's blocks, then a
 * two-phase reduce-scatter between nodes.
 *
 * Must not: run inside a group (stage b needs stage a's data), retry a real
 * call, or decide anything from data, timings or local failures. */
#include "hier.h"

#include "comm.h"
#include "core.h"
#include "msg.h"
#include "policy.h"
#include "real.h"
#include "shim.h"
#include "tp_plan.h"
#include "wire.h"

int nsc_hier_wanted(const nsc_comm *c, const char **why) {
  const nsc_config *cfg = &nsc_g.cfg;
  const nsc_topo *t = &c->topo;
  *why = "";
  if (cfg->algo != NSC_ALGO_HIER && cfg->algo != NSC_ALGO_AUTO) return 0; /* auto: hier wherever the map allows */
  if (cfg->compress == NSC_COMPRESS_OFF) *why = "compression is off";
  else if (c->untouched) *why = "a rank cannot run the kernels";
  else if (t->nnodes < 2) *why = "the communicator is on one node";
  else if (t->min_local != t->max_local) *why = "its nodes hold different numbers of its ranks";
  else if (t->max_local < 2) *why = "every rank is alone on its node";
  else if (!nsc_real.CommSplit || !nsc_real.ReduceScatter || !nsc_real.AllGather) *why = "this NCCL lacks ncclCommSplit";
  return !**why;
}

/* A split's result: on a nonblocking parent NCCL answers ncclInProgress and
 * completes the child in the background; poll it (the child once NCCL has
 * set it, the parent before) until it is done. */
static ncclResult_t split_done(nsc_comm *c, ncclResult_t r, const ncclComm_t *child) {
  if (r == ncclInProgress) r = nsc_wait_nonblocking(*child ? *child : c->comm);
  return r;
}

int nsc_hier_split(nsc_comm *c) {
  const nsc_topo *t = &c->topo;
  /* config NULL: the children inherit the parent's configuration (NCCL copies
   * it only then), blocking or not; written straight into the entry, which
   * outlives any background completion */
  c->hier_intra = c->hier_cross = NULL;
  ncclResult_t a = nsc_real.CommSplit(c->comm, t->node[t->rank], t->rank, &c->hier_intra, NULL);
  a = split_done(c, a, &c->hier_intra);
  ncclResult_t b = nsc_real.CommSplit(c->comm, t->local_rank, t->node[t->rank], &c->hier_cross, NULL); /* whatever a was */
  b = split_done(c, b, &c->hier_cross);
  NSC_COUNT(real_calls, 2);
  if (a != ncclSuccess && c->hier_intra) {
    nsc_real.CommAbort(c->hier_intra);
    c->hier_intra = NULL;
  }
  if (b != ncclSuccess && c->hier_cross) {
    nsc_real.CommAbort(c->hier_cross);
    c->hier_cross = NULL;
  }
  nsc_comm *xc = c->hier_cross ? nsc_comm_get(c->hier_cross) : NULL;
  c->hier_xc = xc;
  if (!c->hier_intra || !c->hier_cross || !xc)
    nsc_warn("hier on communicator %p: rank %d could not split its sub-communicators (%d, %d%s)", (void *)c->comm,
             c->rank, (int)a, (int)b, c->hier_cross && !xc ? ", no host memory" : "");
  return c->hier_intra && c->hier_cross && xc;
}

/* The NCCL handles end (the same way as their parent); the internal entry
 * leaves the table, but the parent keeps its reference until it is freed
 * itself (comm.c), since a call on another thread may still be inside. */
static void end_parts(nsc_comm *c, ncclResult_t (*real_fn)(ncclComm_t)) {
  nsc_comm *x = c->hier_xc ? nsc_comm_detach(c->hier_cross) : NULL; /* the table's reference */
  if (c->hier_cross) real_fn(c->hier_cross);
  if (c->hier_intra) real_fn(c->hier_intra);
  nsc_comm_put(x);
}

void nsc_hier_adopt(nsc_comm *c, int all) {
  if (!all) {
    if (c->rank == 0)
      nsc_warn("hier on communicator %p: a rank could not split its sub-communicators; auto's choice (ring or "
               "flat two-phase) on every rank", (void *)c->comm);
    end_parts(c, nsc_real.CommAbort ? nsc_real.CommAbort : nsc_real.CommDestroy);
    nsc_comm_put(c->hier_xc); /* not adopted: no call ever used it */
    c->hier_intra = c->hier_cross = NULL;
    c->hier_xc = NULL;
    return;
  }
  nsc_comm *x = c->hier_xc;
  x->internal = 1;
  x->parent = c; /* the parent outlives it: it holds the reference (end_parts) */
  x->key_rank = c->rank;
  x->rank = c->topo.node[c->rank];
  x->nranks = c->topo.nnodes;
  x->checked = 1;
  c->hier_on = 1;
}

void nsc_hier_end(nsc_comm *c, ncclResult_t (*real_fn)(ncclComm_t)) {
  if (c && c->hier_on) end_parts(c, real_fn);
}

/* The call's log record ends with its result (committed on success). */
static ncclResult_t rec_end(nsc_comm *c, nsc_rec *rec, ncclResult_t r) {
  nsc_log_mark(rec, NSC_MARK_COLL);
  nsc_log_mark(rec, NSC_MARK_END);
  rec->result = r;
  if (NSC_OK(r)) nsc_log_commit(&c->log, rec);
  else nsc_log_discard(rec);
  return r;
}

/* A real call's result; on a nonblocking communicator polled (never the
 * stream) until it is enqueued. */
static ncclResult_t settle(nsc_comm *c, ncclComm_t on, ncclResult_t r) {
  NSC_COUNT(real_calls, 1);
  if (r == ncclInProgress) {
    c->nonblocking = 1;
    r = nsc_wait_nonblocking(on);
  }
  return r;
}

ncclResult_t nsc_hier(nsc_comm *c, const nsc_backend *be, const float *send, float *recv, size_t count,
                      ncclRedOp_t op, cudaStream_t s, uint64_t seq) {
  const nsc_config *cfg = &nsc_g.cfg;
  size_t L = (size_t)c->topo.local_size, shard = count / L, main = shard * L, tail = count - main;
  size_t l = (size_t)c->topo.local_rank;
  ncclRedOp_t inner = op == ncclAvg ? ncclAvg : ncclSum;
  nsc_fmt_t fmt = nsc_tp_fmt(cfg);
  /* Stage b's staging beyond NCCLSHIM_MAX_STAGING_BYTES: refused before
   * anything is issued, as flat two-phase is (the same need on every rank:
   * count, the map, settings), so recvbuff stays untouched (fuzzer seed 43545:
   * stages a and c had written it) */
  if (shard) {
    nsc_tp_plan pb;
    nsc_tp_plan_init(&pb, cfg, c->hier_xc->nranks, c->hier_xc->rank, shard, 0);
    /* checked on the caller's communicator (its message names it): outside
     * any group, as stage b runs, the need alone decides on both */
    ncclResult_t lim = nsc_staging_refused(c, nsc_tp_staging_bytes(&pb, 0), "an all-reduce");
    if (lim != ncclSuccess) return lim;
    /* Stage b takes from this communicator's agreed block: without room
     * there, the whole call is plain NCCL on every rank (never a partly
     * hierarchical fp32 sum, whose order would differ). */
    if (!nsc_staging_room(c, be, s, nsc_tp_staging_bytes(&pb, 0)))
      return nsc_forward_plain(c, send, recv, count, op, s, 0);
  }
  nsc_rec rec;
  nsc_rec_init_kind(&rec, NSC_KIND_TWOPHASE, c, NSC_ACT_COMPRESS, count, ncclFloat32, nsc_policy_wire_dtype(cfg), op,
                    be, s);
  rec.wire_bytes = nsc_fmt_bytes(fmt, shard, (size_t)cfg->block_elems) + 4 * tail; /* what leaves the node per rank */
  rec.seq = seq;
  nsc_count_call(NSC_ACT_COMPRESS, count * 4, rec.wire_bytes, 0);
  NSC_COUNT(twophase, 1);
  ncclResult_t r = ncclSuccess;
  nsc_log_mark(&rec, NSC_MARK_CAST_IN);
  /* Every stage is issued whatever the earlier ones answered on this rank (its
   * peers issue them: skipping one would hang them). A stage that failed here
   * leaves NaN behind (0xff bytes), so that nobody keeps a wrong value: the
   * shard it sends on, and through the all-gather its node's result. */
  if (shard) {
    float *mine = recv + l * shard;
    ncclComm_t intra = c->hier_intra;
    ncclResult_t a = settle(c, intra, nsc_real.ReduceScatter(send, mine, shard, ncclFloat32, inner, intra, s));
    if (!NSC_OK(a)) be->fill_ones((nsc_stream)s, mine, 4 * shard);
    ncclResult_t b = nsc_twophase(c->hier_xc, be, mine, mine, shard, inner, s, 0, seq);
    if (!NSC_OK(b)) be->fill_ones((nsc_stream)s, mine, 4 * shard);
    ncclResult_t g = settle(c, intra, nsc_real.AllGather(mine, recv, shard, ncclFloat32, intra, s));
    if (!NSC_OK(g)) be->fill_ones((nsc_stream)s, recv, 4 * main);
    r = !NSC_OK(a) ? a : !NSC_OK(b) ? b : g;
  }
  if (tail) {
    ncclResult_t t = settle(c, c->comm, nsc_real.AllReduce(send + main, recv + main, tail, ncclFloat32, op, c->comm, s));
    if (!NSC_OK(t)) be->fill_ones((nsc_stream)s, recv + main, 4 * tail);
    if (NSC_OK(r)) r = t;
  }
  return rec_end(c, &rec, r);
}

/* The reduce-scatter: rank r's result is the sum of every rank's block r
 * (count elements at r * count). Nodes hold consecutive ranks, so node j's
 * ranks' blocks lie together (L * count elements from its first rank's):
 *   a. for each node j, an fp32 ncclReduceScatter of node j's blocks inside
 *      this node: local rank l gets this node's sum of block (j, l), into
 *      slot j of an fp32 staging buffer of N * count elements. This rank's
 *      own node comes first (the same order for every rank of the intra
 *      communicator, all on one node): it reads the blocks recvbuff may
 *      alias (in place) before anything is written there;
 *   b. a two-phase reduce-scatter of the N slots in the wire format among
 *      the N ranks that hold local index l (slot j for node j), its shard
 *      written into recvbuff: each node's NICs carry L (N - 1) / N of the
 *      shards' bytes once, compressed, where flat two-phase carries L times
 *      that.
 * Its error feedback is keyed by the user's sendbuff. Avg: Avg in both
 * stages. Staging for both stages is checked against the limit before
 * anything is issued (refused alike on every rank); a rank without the
 * fp32 buffer still issues stage a (into recvbuff, its own node first, so
 * no peer's input changes) and sends NaN in stage b. */
ncclResult_t nsc_hier_rs(nsc_comm *c, const nsc_backend *be, const float *send, float *recv, size_t count,
                         ncclRedOp_t op, cudaStream_t s, uint64_t seq) {
  const nsc_config *cfg = &nsc_g.cfg;
  const nsc_topo *t = &c->topo;
  nsc_comm *xc = c->hier_xc;
  int N = t->nnodes, own = t->node[t->rank];
  size_t tbytes = 4 * count * (size_t)N;
  ncclRedOp_t inner = op == ncclAvg ? ncclAvg : ncclSum;
  nsc_tp_plan pb;
  nsc_tp_plan_init(&pb, cfg, N, xc->rank, count, 1);
  /* the limit bounds the call: the fp32 buffer and stage b's staging together */
  ncclResult_t r = nsc_staging_refused(c, tbytes + nsc_staging_round(nsc_tp_staging_bytes(&pb, 1)), "a reduce-scatter");
  if (r != ncclSuccess) return r; /* nothing issued anywhere */
  /* Both stages take from the agreed block: without room for both, plain
   * NCCL on every rank. */
  if (!nsc_staging_room(c, be, s, nsc_staging_round(tbytes) + nsc_staging_round(nsc_tp_staging_bytes(&pb, 1))))
    return nsc_forward_plain(c, send, recv, count, op, s, 1);
  void *tmp = NULL;
  if (nsc_get_staging(c, be, s, tbytes, "a reduce-scatter", &tmp) != NSC_STAGE_OK) tmp = NULL; /* poisoned below */
  nsc_rec rec;
  nsc_rec_init_kind(&rec, NSC_KIND_TWOPHASE | NSC_KIND_REDUCESCATTER, c, NSC_ACT_COMPRESS, count * (size_t)c->nranks,
                    ncclFloat32, nsc_policy_wire_dtype(cfg), op, be, s);
  rec.wire_bytes = 0; /* stage b's encoded input, as flat two-phase counts its own (N chunks, not n) */
  for (int j = 0; j < N; j++) rec.wire_bytes += nsc_tp_chunk_bytes(&pb, j);
  rec.seq = seq;
  if (tmp) { /* as flat two-phase: counted once it has its staging */
    nsc_count_call(NSC_ACT_COMPRESS, 4 * count * (size_t)c->nranks, rec.wire_bytes, 0);
    NSC_COUNT(twophase, 1);
  }
  nsc_log_mark(&rec, NSC_MARK_CAST_IN);
  ncclResult_t a = ncclSuccess;
  for (int q = 0; q < N; q++) {
    int j = q == 0 ? own : q <= own ? q - 1 : q; /* own node first, then the others in order */
    int first = 0;
    while (t->node[first] != j) first++;
    float *out = tmp ? (float *)tmp + (size_t)j * count : recv;
    ncclResult_t x = settle(c, c->hier_intra,
                            nsc_real.ReduceScatter(send + (size_t)first * count, out, count, ncclFloat32, inner,
                                                   c->hier_intra, s));
    if (NSC_OK(a) && !NSC_OK(x)) a = x;
  }
  ncclResult_t b;
  if (tmp) {
    if (!NSC_OK(a)) be->fill_ones((nsc_stream)s, tmp, tbytes); /* stage b sends NaN, never a wrong sum */
    b = nsc_twophase_keyed(xc, be, tmp, recv, count, inner, s, 1, seq, send);
    nsc_staging_done_on(c, s);
  } else {
    /* Stage b's take all the same, as the healthy ranks' two-phase makes it:
     * the block's use so far is counted alike on every rank (later takes of
     * the group, and its growth, are decided from it). */
    void *unused = NULL;
    (void)nsc_get_staging(xc, be, s, nsc_tp_staging_bytes(&pb, 1), "a reduce-scatter", &unused);
    b = nsc_twophase_poisoned(xc, be, recv, count, 1, s, send);
  }
  r = !NSC_OK(a) ? a : !tmp && NSC_OK(b) ? ncclSystemError : b;
  if (!NSC_OK(r)) be->fill_ones((nsc_stream)s, recv, 4 * count);
  return rec_end(c, &rec, r);
}
