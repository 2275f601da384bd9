/* task.c — the executor's entry (exec.h): a call's plan is a task, walked
 * now, or, when it waits for the outermost group end, queued as the group's:
 *   - a fused member (FUSE): packed with its neighbours by the group's plan
 *     before the real group end (coll/lifecycle.c: nsc_decide_group), whose
 *     buckets come back here (nsc_exec_bucket);
 *   - a two-phase or hierarchical call in a user group (its second phase
 *     needs the first one's data, and nothing of a group runs before its
 *     outermost end): queued with its own copy of its plan and walked right
 *     after the real group end, in the order it was queued, on its own
 *     stream, by every rank alike.
 * Ungrouped calls are walked at once: a group of one.
 *
 * Must not: decide anything (the plan did), or let a host allocation that
 * fails on one rank change what is issued unnoticed (it fails the call, with
 * a message: its peers' group issues it). */
#include <string.h>

#include "comm.h"
#include "core.h"
#include "exec.h"
#include "msg.h"

/* A queued call's run, right after the real group end: its plan, made when
 * it was called. Issued whatever the group end answered (a failed group end
 * may be this rank's alone, and its peers issue it); after an
 * ncclInProgress the group's work is waited for first, so that the two
 * phases follow it on the communicator and the stream, as on every other
 * rank. */
static ncclResult_t run_deferred(nsc_work *w, const nsc_after *a) {
  nsc_comm *c = w->c;
  ncclResult_t wr = a->in_progress ? nsc_enqueued(c, c->comm, ncclInProgress) : ncclSuccess;
  /* the call's own datatype (its plan's input: fp32, bf16 or fp16), which a
   * call forwarded for want of staging is issued in */
  nsc_call k = {.count = w->count, .dt = (ncclDataType_t)w->plan->idt, .op = w->op, .has_buffers = 1, .rs = w->plan->rs,
                .arg = w->count, .send = w->src, .recv = w->dst, .comm = c->comm, .stream = (cudaStream_t)w->stream};
  ncclResult_t rr = nsc_walk_run(c, w->be, &k, w->plan, w->seq, NULL);
  rr = nsc_enqueued(c, c->comm, rr); /* forwarded plain (no staging room): enqueued before anything follows */
  nsc_work_drop(w);
  return wr != ncclSuccess ? wr : NSC_OK(rr) ? ncclSuccess : rr;
}

/* A fused member: its descriptor for the group's plan (identities, op,
 * count and stream handle). */
static ncclResult_t queue_member(nsc_comm *c, const nsc_backend *be, const nsc_call *k) {
  nsc_work *w = nsc_work_of_call(c, be, k, NULL, NSC_W_MEMBER); /* run in its bucket, never alone */
  if (!w) return ncclSystemError; /* same on every rank only by luck: say so loudly */
  w->m = (nsc_member){.comm = c, .kind = be, .op = (int)k->op, .count = k->arg, .stream = (uintptr_t)k->stream};
  nsc_group_defer(w);
  return ncclSuccess;
}

static ncclResult_t queue_call(nsc_comm *c, const nsc_backend *be, const nsc_call *k, const nsc_plan *p) {
  nsc_work *w = nsc_work_of_call(c, be, k, run_deferred, NSC_W_ISSUES);
  nsc_plan *own = w ? nsc_coll_zalloc(sizeof *own) : NULL;
  if (!own) { /* heap and reserve exhausted at once: the peers' group issues it, this one cannot */
    if (w) nsc_work_drop(w);
    nsc_warn("out of host memory on rank %d for a grouped two-phase call on communicator %p: its peers will wait "
             "for it", c->rank, (void *)c->comm);
    return ncclSystemError;
  }
  *own = *p;
  w->plan = own;
  w->seq = c->seq;
  nsc_group_defer(w);
  return ncclSuccess;
}

ncclResult_t nsc_exec(nsc_comm *c, const nsc_backend *be, const nsc_call *k, const nsc_plan *p) {
  if (!p->deferred) return nsc_walk_run(c, be, k, p, c->seq, NULL);
  return p->alg == NSC_ALG_FUSE ? queue_member(c, be, k) : queue_call(c, be, k, p);
}

ncclResult_t nsc_exec_bucket(const nsc_member *head, const nsc_plan *p) {
  nsc_work *m0 = nsc_work_of_member(head);
  nsc_comm *c = m0->c;
  nsc_call k = {.count = head->total, .dt = ncclFloat32, .op = m0->op, .has_buffers = 1, .in_group = 1,
                .arg = head->total, .comm = c->comm, .stream = (cudaStream_t)head->home};
  /* The context its members' streams named at their calls (the caller may
   * have made another device current since: handle 0 names the current
   * context's legacy stream). */
  int pushed = nsc_backend_enter_ctx(m0->ctx);
  ncclResult_t r = nsc_walk_run(c, m0->be, &k, p, c->seq, m0);
  nsc_backend_leave_ctx(pushed);
  return r;
}
