/* fuse.c — a fused bucket's first step (plan.h's bucket plan, made by the
 * group's plan at the outermost group end: plan/group.c): every member's
 * send buffer cast into the bucket's one wire buffer by one segmented cast,
 * on the bucket's home stream, which first waits for every other member's
 * stream (they wait for it after the cast-back, as NCCL itself joins the
 * streams of one group); the bucket's wire all-reduce and cast-back are the
 * ring's steps (ring.c).
 *
 * A local failure (a cast, a join, host memory for the segment tables)
 * poisons the bucket: the same collective is issued on NaN, and this rank
 * fails its members; without a cast-back item the members' results are
 * filled with NaN at once.
 *
 * Must not: allocate anything that decides what is issued (the members and
 * their order are the group's plan's), or name a stream the members did not
 * name at their calls. */
#include <stdlib.h>
#include <string.h>

#include "comm.h"
#include "core.h"
#include "exec.h"
#include "msg.h"

ncclResult_t nsc_step_seg_cast_in(nsc_walk *w, const nsc_step *st, float **dst, size_t *wrote) {
  (void)wrote;
  *dst = NULL;
  size_t T = st->count;
  nsc_work *m0 = w->members, *cb = nsc_castback_of(w, T);
  int n = m0->m.nb;
  const nsc_backend *be = w->be;
  const nsc_plan *p = w->p;
  nsc_stream home = (nsc_stream)w->s; /* its communicator's first member's stream */
  nsc_seg *segs = nsc_coll_calloc((size_t)n, sizeof *segs);
  nsc_stream *joins = nsc_coll_calloc((size_t)n, sizeof *joins);
  void *stage = w->stage;
  int bad = w->stage_poison || !cb || !segs || !joins, nj = 0, i = 0;
  size_t off = 0;
  for (const nsc_member *d = &m0->m; d; d = d->bnext, i++) {
    nsc_work *m = nsc_work_of_member(d);
    if (segs) segs[i] = (nsc_seg){m->src, m->dst, m->count, off};
    off += m->count;
    int seen = m->stream == home;
    for (int j = 0; j < nj && !seen; j++) seen = joins[j] == m->stream;
    if (!seen && joins) {
      joins[nj++] = m->stream;
      if (be->join(home, m->stream)) bad = 1;
    }
  }
  if (!bad && (nsc_cast_fault(&p->codec) || be->seg_to_wire(home, p->fmt, segs, n, stage, (float)(1.0 / p->codec.prescale))))
    bad = 1;
  if (bad) {
    nsc_warn("fusion: a fused collective could not be prepared on rank %d (%s); it contributes NaN and fails "
             "the group's members", w->c->rank, nsc_backend_error());
    nsc_poison(be, home, stage, T * 2);
  }
  NSC_COUNT(fused, (uint64_t)n);
  NSC_COUNT(logical_bytes, T * 4);
  NSC_COUNT(wire_bytes, T * 2);
  w->wire = stage;
  w->advance = 1;
  if (!cb || !segs || !joins) { /* no item to carry the cast-back: NaN now, the same collective all the same */
    for (const nsc_member *d = &m0->m; d; d = d->bnext) {
      nsc_work *m = nsc_work_of_member(d);
      nsc_poison(be, home, m->dst, m->count * 4);
    }
    free(segs);
    free(joins);
    if (cb) nsc_work_drop(cb);
    return ncclSuccess;
  }
  cb->ctx = m0->ctx; /* home is a member's stream, named on the caller's thread */
  cb->segs = segs;
  cb->nseg = n;
  cb->joins = joins;
  cb->njoin = nj;
  cb->poison = bad;
  nsc_rec_start(&cb->rec, NSC_COLL_ALLREDUCE, NSC_ALG_FUSE, w->seq, T, ncclFloat32, (ncclDataType_t)p->wdt, cb->op, be,
                home, nsc_group_depth() > 0);
  cb->rec.nmembers = n;
  w->cb = cb;
  return ncclSuccess;
}
