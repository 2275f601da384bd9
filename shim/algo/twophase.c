/* twophase.c — compressed all-reduce and reduce-scatter whose error does not
 * grow with the rank count, over NCCL point-to-point (layout in tp_plan.h).
 *
 *   1. every rank encodes its input once, chunk j for rank j (its own chunk
 *      straight into its receive slot);
 *   2. one group of ncclSend/ncclRecv: chunk j goes to rank j;
 *   3. the owner decodes the n contributions and sums them in fp32 in rank
 *      order 0..n-1 (the same order on every rank and for every chunk); a
 *      reduce-scatter ends here, its fp32 shard written into recvbuff;
 *   4. the owner encodes its summed chunk once;
 *   5. one group of ncclSend/ncclRecv: every owner's chunk goes to every rank;
 *   6. every rank decodes the same bytes into recvbuff: identical bits on all
 *      ranks, error one input rounding plus one output rounding.
 * Each rank sends (n-1)/n of the encoded input in each phase: a ring
 * all-reduce's bytes in the same wire format. Everything is enqueued on the
 * caller's stream in this order, before the call returns.
 *
 * Error feedback and stochastic rounding (NCCLSHIM_ERROR_FEEDBACK,
 * NCCLSHIM_ROUNDING; README "Error feedback and rounding") change only the
 * two roundings, never what is issued: step 1 encodes input + the bucket's
 * input residual (ef.h) and keeps what that lost; step 4 encodes the owner's
 * sum + its output residual likewise (all-reduce only; a reduce-scatter's
 * fp32 shard is not rounded). The random stream of each encode is keyed by
 * NCCLSHIM_ROUNDING_SEED, the call counter, the encoding rank and the chunk.
 * A call that fails on this rank leaves its bucket without residuals (read
 * as zero next time), as a changed call sequence does.
 *
 * Failures: a real call that fails ends the call at once with its result
 * (never retried; every rank failing the same call issues the same calls).
 * A rank that cannot get staging, or whose encode/decode fails, still issues
 * every message its peers expect, with 0xff bytes (NaN in every format), so
 * nobody hangs and every result is NaN rather than silently wrong; it returns
 * ncclSystemError.
 *
 * Must not: run inside a group (phase 3 needs phase 2's data), hold our lock
 * across a real call, or synchronise the caller's stream (a nonblocking
 * communicator is polled only until the shim's own group is enqueued). */
#include <string.h>

#include "comm.h"
#include "core.h"
#include "msg.h"
#include "policy.h"
#include "real.h"
#include "shim.h"
#include "tp_plan.h"

/* One group: to every peer j send `bytes(j)` from send_at(j), receive
 * `rbytes(j)` into recv + j * slot. gather = 0: phase 1 (send slot j, receive
 * this rank's chunk); 1: phase 2 (send this rank's slot, receive chunk j). */
static ncclResult_t exchange(nsc_comm *c, const nsc_tp_plan *p, const uint8_t *send, uint8_t *recv, int gather,
                             cudaStream_t s) {
  int r = p->rank;
  size_t own = nsc_tp_chunk_bytes(p, r);
  ncclResult_t res = nsc_real.GroupStart();
  if (!NSC_OK(res)) return res;
  for (int j = 0; j < p->n; j++) {
    if (j == r) continue;
    size_t other = nsc_tp_chunk_bytes(p, j);
    const uint8_t *sb = send + (size_t)(gather ? r : j) * p->slot;
    ncclResult_t a = nsc_real.Send(sb, gather ? own : other, ncclUint8, j, c->comm, s);
    ncclResult_t b = nsc_real.Recv(recv + (size_t)j * p->slot, gather ? other : own, ncclUint8, j, c->comm, s);
    if (NSC_OK(res) && !NSC_OK(a)) res = a;
    if (NSC_OK(res) && !NSC_OK(b)) res = b;
  }
  ncclResult_t e = nsc_real.GroupEnd(); /* always closed, also after a failed member */
  NSC_COUNT(real_calls, 2 * (p->n - 1));
  if (NSC_OK(res)) res = e;
  if (res == ncclInProgress) {
    c->nonblocking = 1;
    res = nsc_wait_nonblocking(c->comm);
  }
  return res;
}

/* The poisoned path: no staging on this rank. Every message its peers expect
 * is sent from and received into recvbuff (filled with 0xff, NaN everywhere;
 * the largest encoded chunk fits there, nsc_tp_fits): first a group of the
 * sends, then one of the receives, so nothing received overwrites what is
 * still being sent, and the buffer is filled again before anything received
 * could be sent on. Returns ncclSystemError, or the failing call's result. */
static ncclResult_t poisoned(nsc_comm *c, const nsc_backend *be, const nsc_tp_plan *p, void *recv,
                             size_t recv_bytes, int rs, cudaStream_t s) {
  int r = p->rank;
  ncclResult_t res = ncclSuccess;
  be->fill_ones((nsc_stream)s, recv, recv_bytes);
  for (int phase = 0; phase < (rs ? 1 : 2) && NSC_OK(res); phase++)
    for (int dir = 0; dir < 2 && NSC_OK(res); dir++) {
      res = nsc_real.GroupStart();
      if (!NSC_OK(res)) break;
      for (int j = 0; j < p->n; j++) {
        if (j == r) continue;
        /* phase 0: send chunk j, receive ours; phase 1: send ours, receive chunk j */
        size_t bytes = nsc_tp_chunk_bytes(p, (phase == 0) == (dir == 0) ? j : r);
        ncclResult_t x = dir == 0 ? nsc_real.Send(recv, bytes, ncclUint8, j, c->comm, s)
                                  : nsc_real.Recv(recv, bytes, ncclUint8, j, c->comm, s);
        if (NSC_OK(res) && !NSC_OK(x)) res = x;
      }
      ncclResult_t e = nsc_real.GroupEnd();
      NSC_COUNT(real_calls, p->n - 1);
      if (NSC_OK(res)) res = e;
      if (res == ncclInProgress) res = nsc_wait_nonblocking(c->comm);
      /* what was received is never sent on: all 0xff again */
      if (dir == 1) be->fill_ones((nsc_stream)s, recv, recv_bytes);
    }
  nsc_warn("rank %d could not stage a two-phase %s: it sent NaN and fails this call (its real calls returned %d)",
           r, rs ? "reduce-scatter" : "all-reduce", (int)res);
  return NSC_OK(res) ? ncclSystemError : res;
}

/* The bucket's error-feedback slot with buffers for this call, or NULL (off,
 * no memory, beyond the cap: this call then rounds without feedback). */
static nsc_ef_slot *ef_slot(nsc_comm *c, const nsc_backend *be, nsc_stream s, const nsc_tp_plan *p, const void *send,
                            const void *recv, size_t count, int rs) {
  const nsc_config *cfg = &nsc_g.cfg;
  if (!cfg->error_feedback) return NULL;
  size_t off, len;
  nsc_tp_chunk(p, p->rank, &off, &len);
  nsc_ef_sig sig = {(uintptr_t)recv, (uintptr_t)send, count, rs, (int)p->fmt, (int)p->block, p->n};
  pthread_mutex_lock(&c->lock);
  nsc_ef_slot *sl = nsc_ef_next(&c->ef, &sig);
  if (sl && nsc_ef_buffers(&c->ef, sl, be, s, p->count, rs ? 0 : len, (size_t)cfg->ef_max_bytes)) sl = NULL;
  pthread_mutex_unlock(&c->lock);
  return sl;
}

static void enc_opt(nsc_enc_opt *o, const nsc_comm *c, const nsc_ef_slot *ef, float *resid, uint32_t run) {
  const nsc_config *cfg = &nsc_g.cfg;
  o->resid = ef ? resid : NULL;
  o->resid_zero = ef ? !ef->have : 0;
  o->stochastic = cfg->rounding == NSC_ROUND_STOCHASTIC;
  o->key = o->stochastic ? nsc_sr_key((uint64_t)cfg->rounding_seed, c->seq, (uint32_t)c->rank, run) : 0;
}

ncclResult_t nsc_twophase(nsc_comm *c, const nsc_backend *be, const float *send, float *recv, size_t count,
                          ncclRedOp_t op, cudaStream_t s, int rs) {
  const nsc_config *cfg = &nsc_g.cfg;
  nsc_tp_plan p;
  nsc_tp_plan_init(&p, cfg, c->nranks, c->rank, count, rs);
  int n = p.n, r = p.rank;
  nsc_stream st = (nsc_stream)s;
  size_t enc_bytes = 0;
  for (int j = 0; j < n; j++) enc_bytes += nsc_tp_chunk_bytes(&p, j);
  void *stage = NULL;
  /* before staging: a call that fails here still takes its place in the sequence */
  nsc_ef_slot *ef = ef_slot(c, be, st, &p, send, recv, count, rs);
  ncclResult_t res = nsc_get_staging(c, be, s, nsc_tp_staging_bytes(&p, rs), &stage);
  if (res == ncclInvalidUsage) return res; /* the limit: the same on every rank, nothing issued anywhere */
  if (res != ncclSuccess) return poisoned(c, be, &p, recv, 4 * count, rs, s);

  nsc_rec rec;
  nsc_rec_init_kind(&rec, NSC_KIND_TWOPHASE | (rs ? NSC_KIND_REDUCESCATTER : 0), c, NSC_ACT_COMPRESS, p.count, ncclFloat32, nsc_policy_wire_dtype(cfg), op, be, s);
  rec.wire_bytes = enc_bytes;
  nsc_count_call(NSC_ACT_COMPRESS, p.count * 4, enc_bytes, 0);
  NSC_COUNT(twophase, 1);
  uint8_t *enc = stage, *in = enc + (size_t)n * p.slot, *gat = in + (size_t)n * p.slot;
  size_t off, len, roff, rlen;
  int bad = 0;
  float down = (float)(1.0 / cfg->prescale), up = (float)cfg->prescale;
  nsc_enc_opt o;

  /* 1. encode every chunk once */
  for (int j = 0; j < n; j++) {
    nsc_tp_chunk(&p, j, &off, &len);
    uint8_t *dst = (j == r ? in : enc) + (size_t)j * p.slot;
    enc_opt(&o, c, ef, ef ? ef->in + off : NULL, 2u * (uint32_t)j);
    bad |= be->fmt_encode_opt(st, p.fmt, p.block, send + off, dst, len, down, &o) != 0;
  }
  if (bad) be->fill_ones(st, enc, 2 * (size_t)n * p.slot);
  nsc_log_mark(&rec, NSC_MARK_CAST_IN);

  /* 2. chunk j to rank j */
  res = exchange(c, &p, enc, in, 0, s);
  if (!NSC_OK(res)) goto out;

  /* 3. the owner's fp32 sum in rank order; a reduce-scatter's result */
  nsc_tp_chunk(&p, r, &roff, &rlen);
  float *acc = rs ? recv : recv + roff;
  double post = (op == ncclAvg ? 1.0 / n : 1.0) * (rs ? cfg->prescale : 1.0);
  bad |= be->fmt_decode_sum(st, p.fmt, p.block, in, p.slot, n, acc, rlen, (float)post) != 0;
  if (rs) goto out;

  /* 4. encode the owner's chunk once; 5. every chunk to every rank */
  enc_opt(&o, c, ef, ef ? ef->out : NULL, 2u * (uint32_t)r + 1u);
  if (be->fmt_encode_opt(st, p.fmt, p.block, acc, gat + (size_t)r * p.slot, rlen, 1.0f, &o) || bad) {
    bad = 1;
    be->fill_ones(st, gat + (size_t)r * p.slot, p.slot);
  }
  res = exchange(c, &p, gat, gat, 1, s);
  if (!NSC_OK(res)) goto out;

  /* 6. everyone decodes the same bytes */
  for (int j = 0; j < n; j++) {
    nsc_tp_chunk(&p, j, &off, &len);
    bad |= be->fmt_decode(st, p.fmt, p.block, gat + (size_t)j * p.slot, recv + off, len, up) != 0;
  }
out:
  if (ef) ef->have = NSC_OK(res) && !bad; /* a failed call leaves no residuals to carry */
  if (NSC_OK(res) && bad) {
    be->fill_ones(st, recv, 4 * count);
    nsc_warn("two-phase %s: a cast on rank %d failed (%s); its result is NaN", rs ? "reduce-scatter" : "all-reduce",
             r, nsc_backend_error());
    res = ncclSystemError;
  }
  nsc_log_mark(&rec, NSC_MARK_COLL);
  nsc_log_mark(&rec, NSC_MARK_END);
  pthread_mutex_lock(&c->lock);
  nsc_staging_done(&c->staging, st);
  pthread_mutex_unlock(&c->lock);
  rec.result = res;
  if (NSC_OK(res)) nsc_log_commit(&c->log, &rec);
  else nsc_log_discard(&rec);
  return res;
}
