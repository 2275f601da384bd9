/* twophase.c — compressed all-reduce and reduce-scatter whose error does not
 * grow with the rank count, over NCCL point-to-point (layout in tp_plan.h),
 * of fp32 inputs and of bf16/fp16 ones (widened to fp32 piece by piece,
 * summed in fp32, the result narrowed once: see two_phases).
 *
 *   1. every rank encodes its input once, chunk j for rank j (its own chunk
 *      straight into its receive slot);
 *   2. one group of ncclSend/ncclRecv: chunk j goes to rank j;
 *   3. the owner decodes the n contributions and sums them in fp32 in rank
 *      order 0..n-1 (the same order on every rank and for every chunk); a
 *      reduce-scatter ends here, its fp32 shard written into recvbuff;
 *   4. the owner encodes its summed chunk once;
 *   5. every owner's chunk goes to every rank: one in-place ncclAllGather of
 *      the owners' encoded slots per piece (tp_plan.h: gather; one launch,
 *      NCCL's own algorithm instead of n-1 point-to-point pairs), or one
 *      group of ncclSend/ncclRecv;
 *   6. every rank decodes the same bytes into recvbuff: identical bits on all
 *      ranks, error one input rounding plus one output rounding.
 * Each rank sends (n-1)/n of the encoded input in each phase: a ring
 * all-reduce's bytes in the same wire format. Everything is enqueued on the
 * caller's stream in this order, before the call returns.
 *
 * Error feedback and stochastic rounding (NCCLSHIM_ERROR_FEEDBACK,
 * NCCLSHIM_ROUNDING; docs/collectives.md, "Error feedback and rounding") change only the
 * two roundings, never what is issued: step 1 encodes input + the bucket's
 * input residual (ef.h) and keeps what that lost; step 4 encodes the owner's
 * sum + its output residual likewise (all-reduce only; a reduce-scatter's
 * fp32 shard is not rounded). The random stream of each encode is keyed by
 * NCCLSHIM_ROUNDING_SEED, the call counter, the encoding rank and the chunk.
 * A call that fails on this rank leaves its bucket without residuals (read
 * as zero next time), as a changed call sequence does.
 *
 * Failures: a real call that fails is the call's result (never retried);
 * every later piece's exchange is still issued, as the peers issue them, and
 * this rank's result and what it sends from then on are NaN.
 * A rank that cannot get staging, or whose encode/decode fails, still issues
 * every message its peers expect, with 0xff bytes (NaN in every format), so
 * nobody hangs and every result is NaN rather than silently wrong; it returns
 * ncclSystemError.
 *
 * The step handler (exec.h) runs flat two-phase's one step, with the staging
 * the walk took, or hier's stage between nodes on its sub-communicator, which
 * takes its own; either first takes its error-feedback slot, and a flat call
 * the walk refused or forwarded for want of staging takes it all the same
 * (nsc_twophase_unrun). Everything it reads of the settings is its plan's (format, block,
 * pieces, codec options).
 *
 * Must not: run inside a group (phase 3 needs phase 2's data), hold our lock
 * across a real call, synchronise the caller's stream (a nonblocking
 * communicator is polled only until the shim's own group is enqueued), or
 * read the configuration. */
#include <string.h>

#include "comm.h"
#include "core.h"
#include "exec.h"
#include "msg.h"
#include "real.h"
#include "staging.h"
#include "tp_plan.h"

/* One group for piece k: to every peer j send its bytes from the send
 * region, receive into the receive region. gather = 0: phase 1 (send chunk
 * j's piece, receive this rank's chunk's piece from rank j); 1: phase 2
 * (send this rank's piece, receive chunk j's piece). */
static ncclResult_t exchange(nsc_comm *c, const nsc_tp_plan *p, int k, const uint8_t *send, uint8_t *recv,
                             int gather, cudaStream_t s) {
  int r = p->rank;
  size_t own = nsc_tp_piece_bytes(p, r, k);
  ncclResult_t res = nsc_real.GroupStart();
  if (!NSC_OK(res)) return res;
  for (int j = 0; j < p->n; j++) {
    if (j == r) continue;
    size_t other = nsc_tp_piece_bytes(p, j, k);
    const uint8_t *sb = send + nsc_tp_slot(p, gather ? r : j, k);
    ncclResult_t a = NSC_ISSUE(c, Send(sb, gather ? own : other, ncclUint8, j, c->comm, s));
    ncclResult_t b = NSC_ISSUE(c, Recv(recv + nsc_tp_slot(p, j, k), gather ? other : own, ncclUint8, j, c->comm, s));
    if (NSC_OK(res) && !NSC_OK(a)) res = a;
    if (NSC_OK(res) && !NSC_OK(b)) res = b;
  }
  ncclResult_t e = nsc_real.GroupEnd(); /* always closed, also after a failed member */
  NSC_COUNT(real_calls, 2 * (p->n - 1));
  if (NSC_OK(res)) res = e;
  return nsc_enqueued(c, c->comm, res);
}

/* Phase 2 of a piece as one in-place ncclAllGather of `slot` bytes per rank
 * into the n slots at base: a piece's slots lie rank-major (slot k*n + j,
 * tp_plan.h), so this rank's own slot is its part. */
static ncclResult_t gather(nsc_comm *c, uint8_t *base, int rank, size_t slot, cudaStream_t s) {
  ncclResult_t res = NSC_ISSUE(c, AllGather(base + (size_t)rank * slot, base, slot, ncclUint8, c->comm, s));
  NSC_COUNT(real_calls, 1);
  return nsc_enqueued(c, c->comm, res);
}

/* The poisoned path: no staging on this rank. Every message its peers expect
 * is sent from and received into recvbuff (filled with 0xff, NaN everywhere;
 * the largest encoded chunk fits there, nsc_tp_fits), piece by piece as the
 * healthy ranks exchange them: first a group of the sends, then one of the
 * receives, so nothing received overwrites what is still being sent, and the
 * buffer is filled again before anything received could be sent on. A real
 * call that fails is the call's result (the first), and every later message
 * is still issued, as the peers issue theirs (rule 1). Returns
 * ncclSystemError, or the first failing call's result. */
static ncclResult_t poisoned(nsc_comm *c, const nsc_backend *be, const nsc_tp_plan *p, void *recv,
                             size_t recv_bytes, int rs, cudaStream_t s) {
  int r = p->rank;
  ncclResult_t res = ncclSuccess;
#define FIRST(x) NSC_FIRST(res, x)
  nsc_poison(be, (nsc_stream)s, recv, recv_bytes);
  for (int phase = 0; phase < (rs ? 1 : 2); phase++)
    for (int k = 0; k < p->npieces; k++)
      for (int dir = 0; dir < 2; dir++) {
        if (phase == 1 && p->gather) { /* the same gather as the peers', of n slots in recvbuff (tp_plan.h) */
          if (dir == 1) continue;
          FIRST(gather(c, recv, r, p->slot, s));
          nsc_poison(be, (nsc_stream)s, recv, recv_bytes);
          continue;
        }
        ncclResult_t gs = nsc_real.GroupStart();
        FIRST(gs);
        for (int j = 0; j < p->n; j++) {
          if (j == r) continue;
          /* phase 0: send chunk j, receive ours; phase 1: send ours, receive chunk j */
          size_t bytes = nsc_tp_piece_bytes(p, (phase == 0) == (dir == 0) ? j : r, k);
          FIRST(dir == 0 ? NSC_ISSUE(c, Send(recv, bytes, ncclUint8, j, c->comm, s))
                         : NSC_ISSUE(c, Recv(recv, bytes, ncclUint8, j, c->comm, s)));
        }
        ncclResult_t e = NSC_OK(gs) ? nsc_real.GroupEnd() : ncclSuccess;
        NSC_COUNT(real_calls, p->n - 1);
        FIRST(nsc_enqueued(c, c->comm, e));
        /* what was received is never sent on: all 0xff again */
        if (dir == 1) nsc_poison(be, (nsc_stream)s, recv, recv_bytes);
      }
#undef FIRST
  nsc_warn("rank %d could not stage a two-phase %s: it sent NaN and fails this call (its real calls returned %d)",
           r, rs ? "reduce-scatter" : "all-reduce", (int)res);
  return NSC_OK(res) ? ncclSystemError : res;
}

/* The bucket's error-feedback slot with buffers for this call, or NULL (off,
 * no memory, beyond the cap: this call then rounds without feedback). */
static nsc_ef_slot *ef_slot(nsc_comm *c, const nsc_backend *be, nsc_stream s, const nsc_tp_plan *p,
                            const nsc_codec *codec, nsc_ef_key key, size_t count, int rs) {
  if (!codec->ef) return NULL;
  size_t off, len;
  nsc_tp_chunk(p, p->rank, &off, &len);
  nsc_ef_sig sig = {(uintptr_t)key.recv, (uintptr_t)key.send, count, rs, (int)p->fmt, (int)p->block, p->n, p->in};
  pthread_mutex_lock(&c->lock);
  nsc_ef_slot *sl = nsc_ef_next(&c->ef, &sig);
  if (sl && nsc_ef_buffers(&c->ef, sl, be, s, p->count, rs ? 0 : len, codec->ef_max)) sl = NULL;
  nsc_log_ef_state(&c->log, c->ef.len, c->ef.bytes, c->ef.breaks);
  pthread_mutex_unlock(&c->lock);
  return sl;
}

/* seq: the call's own number on its communicator (taken when it was made: a
 * grouped call runs after the group end, when the counter has moved on). */
static void enc_opt(nsc_enc_opt *o, const nsc_comm *c, const nsc_codec *codec, uint64_t seq, const nsc_ef_slot *ef,
                    float *resid, uint32_t run) {
  o->resid = ef ? resid : NULL;
  o->resid_zero = ef ? !ef->have : 0;
  o->stochastic = codec->stochastic;
  /* hier's stage between nodes: keyed by the rank in the parent communicator,
   * so that the ranks of one node (one index each here) round independently */
  int who = c->internal ? c->key_rank : c->rank;
  o->key = o->stochastic ? nsc_sr_key(codec->seed, seq, (uint32_t)who, run) : 0;
}

/* Where the codec runs: on `side`, beside the caller's stream s, when the
 * call has more than one piece and the backend has a helper stream (a GPU's
 * side stream, the host's codec thread), else on s itself. The NCCL calls
 * always go on s. */
typedef struct {
  const nsc_backend *be;
  nsc_stream s, side;
  int rank;
  int bad; /* a local failure: this rank's result is NaN */
} lanes;

/* A point on one stream that the other waits for later: a mark, or (none
 * could be taken) a note that the wait must join everything so far. */
typedef struct {
  nsc_mark m;
  int ok, taken;
} point;

static void point_take(lanes *l, nsc_stream on, point *pt) {
  pt->taken = l->side != l->s;
  pt->ok = pt->taken && l->be->mark(on, &pt->m) == 0;
}

/* `waiter` waits for `on` up to pt; a failed mark wait falls back to a join. */
static void point_wait(lanes *l, nsc_stream waiter, nsc_stream on, point *pt) {
  if (!pt->taken) return;
  int rc = pt->ok ? l->be->wait_mark(waiter, &pt->m) : -1;
  if (pt->ok) l->be->mark_release(&pt->m);
  if (rc && l->be->join(waiter, on)) {
    nsc_warn("two-phase: rank %d cannot order its codec stream (%s); its result is NaN", l->rank,
             nsc_backend_error());
    l->bad = 1;
  }
  pt->ok = pt->taken = 0;
}

static void point_drop(lanes *l, point *pt) {
  if (pt->ok) l->be->mark_release(&pt->m);
  pt->ok = pt->taken = 0;
}

/* A piece's exchange answered e: a failure is the call's result (the first)
 * and makes this rank's result NaN, but every later piece's exchange is
 * still issued, as its peers issue them (rule 1): what this rank sends from
 * then on is NaN too (L.bad), never a wrong value. */
static void exchanged(lanes *l, ncclResult_t *res, ncclResult_t e) {
  if (NSC_OK(e)) return;
  if (NSC_OK(*res)) *res = e;
  l->bad = 1;
}

/* A rank without the input a two-phase step needs (hier's stage, this rank
 * without TMP) still issues every message its peers expect, NaN (0xff) from
 * and into recv (4 * count bytes, the call's receive size), and takes its
 * place in the error-feedback sequence (its residuals dropped). */
static ncclResult_t poisoned_input(nsc_comm *c, const nsc_backend *be, const nsc_plan *p, float *recv, size_t count,
                                   int rs, cudaStream_t s, nsc_ef_key key) {
  nsc_ef_slot *ef = ef_slot(c, be, (nsc_stream)s, &p->tp, &p->codec, key, count, rs); /* its place in the sequence */
  if (ef) ef->have = 0;
  return poisoned(c, be, &p->tp, recv, (size_t)nsc_in_esz(p->in) * count, rs, s);
}

/* The two phases, with this step's staging (stage) and error-feedback
 * slot (ef, NULL: none) in hand: plan pl's layout on c's group (made once,
 * by the decision) and codec.
 *
 * A 16-bit input (p.in) is encoded from its own bits, widened exactly
 * (fmt_encode16: tiles on the host; on a GPU the widening kernel writes the
 * piece into the fp32 region after the encoded ones, tp_plan.h); the owner
 * sums in fp32 into its own chunk's place in that region, and each fp32
 * result is narrowed (round to nearest even, the cast of the input's format)
 * into the caller's buffer: a reduce-scatter's sum, an all-reduce's decoded
 * chunks (fmt_decode16, through the region on a GPU). So the wires, kernels
 * and rules of the fp32 path serve every input, and the one extra rounding
 * of a 16-bit result is the narrowing (none with the input's own wire: its
 * decode is exact). */
static ncclResult_t two_phases(nsc_comm *c, const nsc_backend *be, const nsc_plan *pl, nsc_ef_slot *ef, void *stage,
                               const void *send, void *recv, size_t count, ncclRedOp_t op, cudaStream_t s, int rs,
                               uint64_t seq) {
  const nsc_tp_plan p = pl->tp;
  size_t esz = (size_t)nsc_in_esz(p.in);
  const nsc_codec *codec = &pl->codec;
  int n = p.n, r = p.rank, np = p.npieces;
  nsc_stream st = (nsc_stream)s;
  size_t enc_bytes = 0;
  for (int j = 0; j < n; j++) enc_bytes += nsc_tp_chunk_bytes(&p, j);
  ncclResult_t res = ncclSuccess;
  nsc_rec rec;
  nsc_rec_start(&rec, rs ? NSC_COLL_REDUCESCATTER : NSC_COLL_ALLREDUCE, NSC_ALG_TWOPHASE, seq, p.count,
                (ncclDataType_t)pl->idt, (ncclDataType_t)pl->wdt, op, be, st, 0);
  rec.wire_bytes = enc_bytes;
  if (!c->internal) { /* hier's stage between nodes: counted and logged as the whole call (walk.c) */
    nsc_count_call(NSC_ALG_TWOPHASE, p.count * esz, enc_bytes, 0);
    NSC_COUNT(twophase, 1);
  }
  uint8_t *enc = stage, *in = enc + nsc_tp_slot(&p, 0, np), *gat = in + nsc_tp_slot(&p, 0, np);
  size_t off, len, roff, rlen;
  nsc_tp_chunk(&p, r, &roff, &rlen);
  /* Avg multiplies every input by 1/n before the sum, as NCCL's Avg does for
   * floating types (fp32 x * (float)(1/n)): a sum of n values near FLT_MAX
   * never overflows where NCCL's does not. */
  float down = (float)(1.0 / codec->prescale), up = (float)codec->prescale;
  if (op == ncclAvg) down = down == 1.0f ? (float)(1.0 / n) : down * (float)(1.0 / n);
  /* fp32 in and out: the caller's buffers, or a 16-bit input's fp32 copy */
  float *wide = p.in ? (float *)(void *)(enc + nsc_tp_regions_bytes(&p, rs)) : NULL;
  const float *src = send; /* fp32 only (a 16-bit input is read through fmt_encode16) */
  float *out = wide ? wide : recv;
  nsc_fmt_t half = nsc_in_fmt(p.in); /* a 16-bit input's casts */
  uint8_t *recv16 = recv;
  float *acc = rs && !wide ? out : out + roff; /* the owner's fp32 sum; a reduce-scatter's result */
  double post = rs ? codec->prescale : 1.0;
  uint32_t runs = 2u * (uint32_t)n; /* stochastic streams per piece */
  nsc_enc_opt o;
  point em[NSC_TP_MAX_PIECES] = {{{0, 0}, 0, 0}}, dm[NSC_TP_MAX_PIECES] = {{{0, 0}, 0, 0}}, x;
  lanes L = {be, st, st, r, 0};
  nsc_stream side = st;
  if (np > 1 && !be->side_stream(st, &side) && side != st && !be->join(side, st)) L.side = side;

  /* 1. encode every piece once, in piece order (the codec stream runs ahead) */
  for (int k = 0; k < np; k++) {
    int bad = 0;
    for (int j = 0; j < n; j++) {
      nsc_tp_piece(&p, j, k, &off, &len);
      enc_opt(&o, c, codec, seq, ef, ef ? ef->in + off : NULL, 2u * (uint32_t)j + runs * (uint32_t)k);
      uint8_t *dst = (j == r ? in : enc) + nsc_tp_slot(&p, j, k);
      /* a 16-bit input's piece encoded from its own bits (widened exactly,
       * in tiles on the host; through its fp32 region on a GPU) */
      if (wide)
        bad |= be->fmt_encode16(L.side, half, p.fmt, p.block, (const uint8_t *)send + esz * off, wide + off, dst, len,
                                down, &o) != 0;
      else bad |= be->fmt_encode_opt(L.side, p.fmt, p.block, src + off, dst, len, down, &o) != 0;
    }
    if (bad) { /* every message of this piece NaN */
      nsc_poison(be, L.side, enc + nsc_tp_slot(&p, 0, k), (size_t)n * p.slot);
      nsc_poison(be, L.side, in + nsc_tp_slot(&p, r, k), p.slot);
      L.bad = 1;
    }
    point_take(&L, L.side, &em[k]);
  }

  /* 2. piece k of chunk j to rank j; 3. the owner's fp32 sum of piece k in
   * rank order, and (all-reduce) 4. its encoding, beside piece k+1's exchange */
  for (int k = 0; k < np; k++) {
    point_wait(&L, st, L.side, &em[k]);
    if (k == 0) nsc_log_mark(&rec, NSC_MARK_CAST_IN);
    exchanged(&L, &res, exchange(c, &p, k, enc, in, 0, s));
    point_take(&L, st, &x);
    point_wait(&L, L.side, st, &x);
    nsc_tp_piece(&p, r, k, &off, &len);
    float *a = acc + (off - roff);
    L.bad |= be->fmt_decode_sum(L.side, p.fmt, p.block, in + nsc_tp_slot(&p, 0, k), p.slot, n, a, len, (float)post) != 0;
    if (rs && wide) L.bad |= be->to_wire(L.side, half, a, recv16 + esz * (off - roff), len, 1.0f) != 0;
    if (!rs) {
      uint8_t *g = gat + nsc_tp_slot(&p, r, k);
      enc_opt(&o, c, codec, seq, ef, ef ? ef->out + (off - roff) : NULL, 2u * (uint32_t)r + 1u + runs * (uint32_t)k);
      if (be->fmt_encode_opt(L.side, p.fmt, p.block, a, g, len, 1.0f, &o) || L.bad) {
        L.bad = 1; /* this rank's chunk goes out NaN: nobody keeps a wrong value */
        nsc_poison(be, L.side, g, p.slot);
      }
    }
    point_take(&L, L.side, &dm[k]);
  }
  if (rs) goto out;

  /* 5. every owner's piece k to every rank; 6. everyone decodes the same
   * bytes, beside piece k+1's exchange */
  for (int k = 0; k < np; k++) {
    point_wait(&L, st, L.side, &dm[k]);
    if (p.gather) { /* the first piece's: the learner's sample, if it is (comm.h) */
      nsc_learn_time_begin(c, be, st, NSC_LEARN_AT_GATHER);
      ncclResult_t g = gather(c, gat + nsc_tp_slot(&p, 0, k), r, p.slot, s);
      nsc_learn_time_end(c, be, st, NSC_LEARN_AT_GATHER, g);
      exchanged(&L, &res, g);
    } else {
      exchanged(&L, &res, exchange(c, &p, k, gat, gat, 1, s));
    }
    point_take(&L, st, &x);
    point_wait(&L, L.side, st, &x);
    for (int j = 0; j < n; j++) {
      nsc_tp_piece(&p, j, k, &off, &len);
      if (wide)
        L.bad |= be->fmt_decode16(L.side, half, p.fmt, p.block, gat + nsc_tp_slot(&p, j, k), out + off,
                                  recv16 + esz * off, len, up) != 0;
      else L.bad |= be->fmt_decode(L.side, p.fmt, p.block, gat + nsc_tp_slot(&p, j, k), out + off, len, up) != 0;
    }
  }
out:
  for (int k = 0; k < np; k++) {
    point_drop(&L, &em[k]);
    point_drop(&L, &dm[k]);
  }
  /* the caller's stream (its later work, the staging's next user) after all of the codec's */
  if (L.side != st && be->join(st, L.side)) {
    nsc_warn("two-phase: rank %d cannot join its codec stream (%s); its result is NaN", c->rank, nsc_backend_error());
    L.bad = 1;
  }
  if (ef) ef->have = NSC_OK(res) && !L.bad; /* a failed call leaves no residuals to carry */
  nsc_ef_used(ef, st); /* after the join: the side stream's encodes are behind st */
  if (L.bad) nsc_poison(be, st, recv, esz * count); /* a failed cast or exchange: NaN, never a wrong value */
  if (NSC_OK(res) && L.bad) {
    nsc_warn("two-phase %s: a cast on rank %d failed (%s); its result is NaN", rs ? "reduce-scatter" : "all-reduce",
             r, nsc_backend_error());
    res = ncclSystemError;
  }
  nsc_log_mark(&rec, NSC_MARK_COLL);
  nsc_log_mark(&rec, NSC_MARK_END);
  nsc_staging_done_on(c, st);
  rec.result = res;
  if (NSC_OK(res) && !c->internal) nsc_log_commit(&c->log, &rec);
  else nsc_log_discard(&rec);
  return res;
}

void nsc_twophase_unrun(nsc_walk *w, const nsc_step *st, int forwarded) {
  nsc_stream s = (nsc_stream)w->s;
  nsc_ef_slot *ef = ef_slot(w->c, w->be, s, &w->p->tp, &w->p->codec, (nsc_ef_key){w->send, w->recv}, st->count, st->rs);
  if (!forwarded) return; /* refused: its place taken, nothing else */
  if (ef) ef->have = 0; /* forwarded in fp32: nothing of this call's to feed back */
  nsc_ef_used(ef, s);
}

ncclResult_t nsc_step_twophase(nsc_walk *w, const nsc_step *st, float **dst, size_t *wrote) {
  (void)wrote;
  const nsc_plan *p = w->p;
  nsc_comm *on = st->on == NSC_ON_CROSS ? w->c->hier_xc : w->c; /* hier's stage: the cross communicator's entry */
  ncclRedOp_t op = st->avg ? ncclAvg : ncclSum;
  const float *src = nsc_walk_src(w, st);
  float *out = *dst;
  nsc_stream s = (nsc_stream)w->s;
  nsc_ef_key key = {w->send, w->recv}; /* the call's buffers, never the stage's (exec.h) */
  if (!p->stages) *dst = NULL; /* a plan of one step: it poisons what it wrote itself */
  if (!src) {
    /* No TMP here (hier's reduce-scatter): the stage's staging is taken all
     * the same, as the healthy ranks' two-phase takes it (the block's use so
     * far is counted alike on every rank: later takes of a group, and its
     * growth, are decided from it), and every message goes out NaN. */
    void *unused = NULL;
    (void)nsc_get_staging(on, w->be, s, nsc_tp_staging_bytes(&p->tp, st->rs), "a reduce-scatter", &unused);
    return poisoned_input(on, w->be, p, out, st->count, st->rs, w->s, key);
  }
  /* its place in the sequence first (a call that fails here still takes it) */
  nsc_ef_slot *ef = ef_slot(on, w->be, s, &p->tp, &p->codec, key, st->count, st->rs);
  if (!p->stages) { /* flat two-phase: the walk took its staging */
    if (w->stage_poison) return poisoned(on, w->be, &p->tp, out, (size_t)nsc_in_esz(p->in) * st->count, st->rs, w->s);
    return two_phases(on, w->be, p, ef, w->stage, src, out, st->count, op, w->s, st->rs, w->seq);
  }
  /* hier's stage between nodes: then its staging */
  void *stage = NULL;
  switch (nsc_get_staging(on, w->be, s, nsc_tp_staging_bytes(&p->tp, st->rs), st->rs ? "a reduce-scatter" : "an all-reduce",
                          &stage)) {
  case NSC_STAGE_REFUSED: return ncclInvalidUsage; /* the limit: the same on every rank, nothing issued anywhere */
  case NSC_STAGE_PLAIN: /* no room in the agreed block: fp32 on every rank, nothing of this call's to feed back */
    if (ef) ef->have = 0;
    nsc_ef_used(ef, s);
    return nsc_forward(on, st->rs, src, out, st->count, ncclFloat32, op, w->s, NSC_WHY_STAGING);
  case NSC_STAGE_POISON: return poisoned(on, w->be, &p->tp, out, 4 * st->count, st->rs, w->s);
  default: break;
  }
  return two_phases(on, w->be, p, ef, stage, src, out, st->count, op, w->s, st->rs, w->seq);
}
