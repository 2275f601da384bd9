/* fuse.c — fusion of grouped fp32 Sum/Avg all-reduces (NCCLSHIM_FUSE_BYTES).
 *
 * Members queued during a group are packed, at the outermost group end and
 * before the real one, by (communicator, op, memory kind) in order of first
 * appearance, into buckets of at most FUSE_BYTES fp32 bytes (a larger member
 * gets a bucket of its own). A bucket whose total reaches MIN_BYTES is cast
 * into one wire buffer by one segmented cast and reduced by one real
 * collective; a smaller one is forwarded member by member in fp32. All of it
 * depends on the sequence of (count, datatype, op) only — never on the
 * callers' stream handles, which are local to each rank — so every rank
 * issues the same real operations in the same order. A bucket runs on its
 * communicator's home stream for this group (its first fused member's); the
 * other members' streams are joined to it with events (home waits for them
 * before the cast-in, they wait for home after the cast-back), as NCCL
 * itself joins the streams of one group. A local failure (a cast, a join,
 * host memory) poisons the bucket: the same collective is issued on NaN.
 * A bucket's wire buffer comes from the communicator's agreed staging block
 * (staging/staging.h); one that does not fit is forwarded member by member
 * in fp32, alike on every rank, and the block grows after the group. */
#include <stdlib.h>
#include <string.h>

#include "comm.h"
#include "core.h"
#include "exec.h"
#include "msg.h"
#include "policy.h"
#include "real.h"
#include "staging.h"

ncclResult_t nsc_fuse_queue(nsc_comm *c, const nsc_backend *be, const nsc_call *k, const nsc_plan *p) {
  (void)p;
  nsc_work *w = nsc_work_of_call(NSC_W_FUSE, c, be, k);
  if (!w) return ncclSystemError; /* same on every rank only by luck: say so loudly */
  nsc_group_defer(w);
  return ncclSuccess;
}

static int same_key(const nsc_work *a, const nsc_work *b) {
  return a->c == b->c && a->op == b->op && a->be == b->be;
}

static void forward_members(nsc_work *m, ncclResult_t *r, nsc_why why) {
  nsc_group_enter(); /* still inside the real group: the log must not time these */
  for (; m; m = m->bnext) {
    ncclResult_t rr = nsc_forward(m->c, 0, m->src, m->dst, m->count, ncclFloat32, m->op, (cudaStream_t)m->stream, why);
    if (*r == ncclSuccess && !NSC_OK(rr)) *r = rr;
  }
  nsc_group_leave();
}

/* One bucket: n members linked by bnext from m0, of one key, total elements
 * T, reduced on home. */
static ncclResult_t issue_bucket(nsc_work *m0, int n, size_t T, nsc_stream home) {
  nsc_comm *c = m0->c;
  const nsc_backend *be = m0->be;
  ncclResult_t r = ncclSuccess;
  if (T * 4 < (size_t)nsc_g.cfg.min_bytes) {
    forward_members(m0, &r, NSC_WHY_MIN_BYTES); /* the bucket's total */
    return r;
  }
  nsc_work *w = nsc_castback_new(c);
  nsc_seg *segs = nsc_coll_calloc((size_t)n, sizeof *segs);
  nsc_stream *joins = nsc_coll_calloc((size_t)n, sizeof *joins);
  void *stage = NULL;
  int rc = nsc_staging_take_comm(c, be, home, T * 2, &stage);
  if (rc < 0) {
    /* Not (yet) agreed space for this fused buffer: forwarded in fp32 this
     * time, alike on every rank; the block grows after the group. */
    free(segs);
    free(joins);
    if (w) nsc_work_drop(w);
    forward_members(m0, &r, NSC_WHY_STAGING);
    return r;
  }
  int bad = rc > 0 || !w || !segs || !joins, nj = 0;
  size_t off = 0;
  int i = 0;
  for (nsc_work *m = m0; m; m = m->bnext, i++) {
    if (segs) segs[i] = (nsc_seg){m->src, m->dst, m->count, off};
    off += m->count;
    int seen = m->stream == home;
    for (int j = 0; j < nj && !seen; j++) seen = joins[j] == m->stream;
    if (!seen && joins) {
      joins[nj++] = m->stream;
      if (be->join(home, m->stream)) bad = 1;
    }
  }
  ncclDataType_t wdt = nsc_policy_wire_dtype(&nsc_g.cfg);
  nsc_fmt_t wire = nsc_g.cfg.compress == NSC_COMPRESS_BF16 ? NSC_FMT_BF16 : NSC_FMT_FP16;
  float down = (float)(1.0 / nsc_g.cfg.prescale);
  if (!bad && (nsc_cast_fault() || be->seg_to_wire(home, wire, segs, n, stage, down))) bad = 1;
  if (bad) {
    nsc_warn("fusion: a fused collective could not be prepared on rank %d (%s); it contributes NaN and fails "
             "the group's members", c->rank, nsc_backend_error());
    nsc_poison(be, home, stage, T * 2);
  }
  NSC_COUNT(fused, (uint64_t)n);
  NSC_COUNT(logical_bytes, T * 4);
  NSC_COUNT(wire_bytes, T * 2);
  if (!w || !segs || !joins) { /* no item to carry the cast-back: NaN now, the same collective all the same */
    for (nsc_work *m = m0; m; m = m->bnext) nsc_poison(be, home, m->dst, m->count * 4);
    free(segs);
    free(joins);
    if (w) nsc_work_drop(w);
    ncclResult_t rr = nsc_wire_calls(c, stage, 1, T, 0, wdt, m0->op, (cudaStream_t)home, 1);
    return NSC_OK(rr) ? ncclSystemError : rr;
  }
  w->be = be;
  w->stream = home;
  w->ctx = m0->ctx; /* home is a member's stream, named on the caller's thread */
  w->wire = wire;
  w->op = m0->op;
  nsc_work_hold_wire(w, stage);
  w->count = T;
  w->segs = segs;
  w->nseg = n;
  w->joins = joins;
  w->njoin = nj;
  w->poison = bad;
  w->scale = (float)nsc_g.cfg.prescale;
  nsc_rec_start(&w->rec, NSC_KIND_ALLREDUCE, c->seq, NSC_ACT_FUSE, T, ncclFloat32, wdt, w->op, be, w->stream,
                nsc_group_depth() > 0);
  w->rec.nmembers = n;
  return nsc_reduce_wire(c, w, T, 0, 1);
}

/* A bucket with the context its members' streams named at their calls
 * current (the caller may have made another device current since: handle 0
 * names the current context's legacy stream). */
static ncclResult_t issue_in_ctx(nsc_work *m0, int n, size_t T, nsc_stream home) {
  int pushed = nsc_backend_enter_ctx(m0->ctx);
  ncclResult_t r = issue_bucket(m0, n, T, home);
  nsc_backend_leave_ctx(pushed);
  return r;
}

/* Allocates nothing: the members stay in their linked list (done, bnext),
 * so that what is issued can never depend on host memory. */
ncclResult_t nsc_fuse_flush(nsc_work **list) {
  /* Split the list: FUSE members out (in order), everything else stays. */
  nsc_work *m = NULL, **mt = &m, *keep = NULL, **tail = &keep;
  for (nsc_work *w = *list, *next; w; w = next) {
    next = w->next;
    w->next = NULL;
    w->done = 0;
    w->bnext = NULL;
    if (w->kind != NSC_W_FUSE) { *tail = w; tail = &w->next; continue; }
    *mt = w;
    mt = &w->next;
  }
  *list = keep;
  ncclResult_t r = ncclSuccess;
  const size_t cap_elems = (size_t)nsc_g.cfg.fuse_bytes / 4;
  /* Every bucket is issued even after an error, so the real operations stay
   * matched across ranks; the first error is returned. */
  for (nsc_work *i = m; i; i = i->next) {
    if (i->done) continue;
    int nb = 0;
    size_t T = 0;
    nsc_work *head = NULL, *last = NULL;
    nsc_stream home = i->stream; /* the communicator's first fused member's stream */
    for (nsc_work *k = m; k != i; k = k->next)
      if (k->c == i->c) { home = k->stream; break; }
    for (nsc_work *j = i; j; j = j->next) {
      if (j->done || !same_key(i, j)) continue;
      if (nb > 0 && T + j->count > cap_elems) {
        ncclResult_t rr = issue_in_ctx(head, nb, T, home);
        if (r == ncclSuccess && !NSC_OK(rr)) r = rr;
        nb = 0;
        T = 0;
        head = last = NULL;
      }
      if (last) last->bnext = j;
      else head = j;
      last = j;
      nb++;
      T += j->count;
      j->done = 1;
    }
    if (nb) {
      ncclResult_t rr = issue_in_ctx(head, nb, T, home);
      if (r == ncclSuccess && !NSC_OK(rr)) r = rr;
    }
  }
  nsc_work_drop_list(m);
  return r;
}
