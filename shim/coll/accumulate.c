/* accumulate.c — accumulation's glue between the pure state machine
 * (accum/accum.c) and a communicator: every intercepted all-reduce is fed to
 * it (accumulable calls get their decision, others are evidence), and the
 * agreements it asks for are issued and collected here.
 *
 * An agreement is issued right after the call that made it due (or, inside a
 * group, right after the outermost group end), on a private buffer and
 * stream, with the copy of its result into pinned host memory enqueued right
 * behind it; it is applied just before the accumulable decision the state
 * machine named when it was issued (nsc_accum_apply_at(): NSC_ACC_LAG calls
 * later while learning, the next one while locked), in issue order. So every
 * rank issues it and applies it at the same points of the call sequence and
 * decides on its result, never on "not ready yet". The result is read by a
 * non-blocking event query; the host waits (polling, never a synchronise)
 * only when it is not there yet at that point, because then it is truly
 * needed: whether the next agreement is issued, and whether the following
 * calls may be answered locally, depend on it. That wait is for a
 * collective issued NSC_ACC_LAG buckets ago while learning (not the one just
 * issued: the host stays that far ahead of the device), and a forward pass
 * ago while locked (one agreement per optimizer step).
 *
 * Must not: hold the communicator's lock across a real call or a wait, or let
 * anything but arguments, configuration and agreed values decide what is
 * issued. */
#include <stdio.h>
#include <string.h>

#include "accum.h"
#include "agree.h"
#include "comm.h"
#include "core.h"
#include "msg.h"
#include "coll.h"

/* Process-wide: some communicator has begun its second backward pass. A
 * communicator whose first accumulable call comes later is "late" (R3 in
 * accum.c); the flag is agreed across ranks before it is used. */
static int recurred;

static void say(nsc_comm *c, const char *why) {
  if (!why[0]) return;
  nsc_log_accum_state(&c->log, why); /* the summary's confirmation, on every rank */
  if (c->rank == 0) nsc_info("accumulation on communicator %p: %s", (void *)c->comm, why);
}

/* Reads an agreement's result into g->v once it is there (its buffer then
 * given back): 1, or 0 while it is not (only when !wait; polls a
 * non-blocking query, never synchronises). A failure shows in g->x.r. */
static int answer(nsc_agree *g, int wait) {
  if (g->answered) return 1;
  int e = g->x.be->oob_end(g->x.buf, g->x.s, g->v, (size_t)g->x.n * sizeof g->v[0], wait);
  if (e == 0) return 0;
  g->x.live = 0;
  g->answered = 1;
  if (e < 0 && g->x.r == ncclSuccess) g->x.r = ncclSystemError;
  return 1;
}

/* Before the next accumulable decision: hand the machine, oldest first,
 * every agreement due before it (and those issued before them). */
static void collect(nsc_comm *c) {
  for (;;) {
    pthread_mutex_lock(&c->lock);
    uint64_t now = nsc_accum_fed(&c->accum) + 1;
    int last = -1;
    for (int i = 0; i < c->nagree; i++)
      if (c->agree[i].apply_at <= now) last = i;
    nsc_agree g;
    if (last >= 0) {
      g = c->agree[0];
      memmove(&c->agree[0], &c->agree[1], (size_t)(c->nagree - 1) * sizeof c->agree[0]);
      c->nagree--;
    }
    pthread_mutex_unlock(&c->lock);
    if (last < 0) return;
    (void)answer(&g, 1); /* not under the lock: the abort path needs it */
    ncclResult_t r = g.x.r;
    char why[512] = "";
    pthread_mutex_lock(&c->lock);
    nsc_accum_agreed(&c->accum, g.v, r == ncclSuccess, nsc_g.cfg.accum_steps, why, sizeof why);
    pthread_mutex_unlock(&c->lock);
    if (r != ncclSuccess) {
      nsc_log_accum_state(&c->log, why);
      nsc_warn("accumulation agreement on communicator %p failed on rank %d (%d): %s", (void *)c->comm, c->rank,
               (int)r, why);
    } else {
      say(c, why);
    }
  }
}

/* grouped: issued at a group's end (applied before the next decision). */
static void issue(nsc_comm *c, const nsc_backend *be, nsc_stream caller, int grouped) {
  int64_t v[NSC_ACC_AGREE_N];
  pthread_mutex_lock(&c->lock);
  c->agree_queued = 0;
  /* How many are in flight is fixed by the call sequence, like the rest. */
  int go = c->accum.mode != NSC_ACC_OFF && c->nagree < NSC_ACC_INFLIGHT;
  nsc_agree g;
  memset(&g, 0, sizeof g);
  if (go) {
    g.apply_at = nsc_accum_apply_at(&c->accum, grouped);
    /* Never before one issued earlier (applied in issue order): a lock
     * proposed ahead of its pass end must not apply before that end. */
    if (c->nagree && g.apply_at < c->agree[c->nagree - 1].apply_at) g.apply_at = c->agree[c->nagree - 1].apply_at;
    nsc_accum_agree_vals_at(&c->accum, v, g.apply_at);
  }
  pthread_mutex_unlock(&c->lock);
  if (!go) return;
  ncclResult_t r = nsc_exchange_begin(c, be, caller, v, NSC_ACC_AGREE_N, &g.x);
  if (g.x.live) { /* a private buffer was taken (a failed collective is reported when applied) */
    (void)answer(&g, 0); /* the copy back right behind the collective */
  } else {
    /* No buffer (nsc_exchange_begin said so): the peers see this rank's
     * poison when they apply this agreement, and this rank fails it at that
     * same point. Ending accumulation now would stop this rank issuing the
     * agreements its peers still issue until then. */
    g.answered = 1;
    g.x.r = r == ncclSuccess ? ncclSystemError : r;
  }
  pthread_mutex_lock(&c->lock);
  c->agree[c->nagree++] = g;
  pthread_mutex_unlock(&c->lock);
}

void nsc_accum_issue(nsc_comm *c, const nsc_backend *be, nsc_stream caller) { issue(c, be, caller, 1); }

int nsc_accum_feed(nsc_comm *c, const nsc_call *call, const void *send, void *recv, int acc, int *agree) {
  const nsc_config *cfg = &nsc_g.cfg;
  *agree = 0;
  if (!nsc_cfg_accumulating(cfg)) return 1;
  if (acc) collect(c);
  size_t bytes = call->count * nsc_dtype_size(call->dt);
  int sync = 1;
  char why[512] = "";
  int first = 0;
  pthread_mutex_lock(&c->lock);
  nsc_accum *a = &c->accum;
  if (acc) {
    first = nsc_accum_fed(a) == 0;
    if (a->mode == NSC_ACC_LEARNING && a->synced == 0) a->late = __atomic_load_n(&recurred, __ATOMIC_ACQUIRE);
    nsc_accum_el el = {(uintptr_t)recv, (uintptr_t)send, call->count, (int32_t)call->dt, (int32_t)call->op, bytes};
    nsc_accum_steps(a, __atomic_load_n(&nsc_steps_watched, __ATOMIC_ACQUIRE), __atomic_load_n(&nsc_steps, __ATOMIC_ACQUIRE));
    sync = nsc_accum_next(a, &el, cfg->accum_steps, why, sizeof why);
    __atomic_store_n(&c->accum_skip, !sync, __ATOMIC_RELEASE);
    nsc_log_accum(&c->log, sync);
    if (!__atomic_load_n(&recurred, __ATOMIC_ACQUIRE) && nsc_accum_recurred(a)) __atomic_store_n(&recurred, 1, __ATOMIC_RELEASE);
    *agree = nsc_accum_take_due(a);
  } else if (a->mode != NSC_ACC_OFF) {
    int fl = (call->dt == ncclFloat16 || call->dt == ncclBfloat16 || call->dt == ncclFloat32 ||
              call->dt == ncclFloat64) && (call->op == ncclSum || call->op == ncclAvg);
    int in = call->op == ncclSum && (call->dt == ncclInt8 || call->dt == ncclUint8 || call->dt == ncclInt32 ||
                                     call->dt == ncclUint32 || call->dt == ncclInt64 || call->dt == ncclUint64);
    nsc_accum_el el = {(uintptr_t)recv, (uintptr_t)send, call->count, (int32_t)call->dt, (int32_t)call->op, bytes};
    nsc_accum_observe(a, in, fl ? &el : NULL);
    if (!__atomic_load_n(&recurred, __ATOMIC_ACQUIRE) && nsc_accum_recurred(a)) __atomic_store_n(&recurred, 1, __ATOMIC_RELEASE);
  }
  pthread_mutex_unlock(&c->lock);
  /* the summary's word until the learner has one: a job too short to learn
   * its pass, or whose pass it cannot tell apart, still says why nothing
   * was skipped */
  if (first && !why[0])
    nsc_log_accum_state(&c->log, "no backward pass learned: every accumulable all-reduce synced (what a pass must look "
                                 "like: docs/accumulation.md, the contract)");
  say(c, why);
  return sync;
}

void nsc_accum_saw_broadcast(ncclComm_t comm, ncclDataType_t dt, size_t count) {
  if (!nsc_cfg_accumulating(&nsc_g.cfg)) return;
  nsc_comm *c = nsc_comm_find(comm); /* none yet: nothing learned on it to mark */
  if (!c) return;
  pthread_mutex_lock(&c->lock);
  nsc_accum_broadcast(&c->accum, dt == ncclInt32, count);
  pthread_mutex_unlock(&c->lock);
  nsc_comm_put(c);
}

/* An agreement queued for the group end: issued on every rank whatever the
 * group end answered (a nonblocking one completes first: an error there
 * shows in the agreement), but not after the group's check found a bad or
 * differing setting (every rank saw that check's answer, and a rank with a
 * bad setting queued no agreement: its calls failed before accumulation).
 * Issued or not, the next group may queue one. */
static ncclResult_t agree_run(nsc_work *w, const nsc_after *a) {
  nsc_comm *c = w->c;
  if (a->in_progress) (void)nsc_wait_nonblocking(c, c->comm);
  if (c->checked >= 0) nsc_accum_issue(c, w->be, w->stream);
  c->agree_queued = 0;
  nsc_work_drop(w);
  return ncclSuccess;
}

void nsc_accum_after(nsc_comm *c, const nsc_backend *be, cudaStream_t s, int in_group, ncclResult_t last) {
  if (!in_group) {
    /* A nonblocking communicator takes the next call once this one completed
     * (only the timing depends on ncclInProgress, never what is issued). */
    if (last == ncclInProgress) (void)nsc_wait_nonblocking(c, c->comm); /* an error shows in the agreement */
    issue(c, be, (nsc_stream)s, 0);
    return;
  }
  if (c->agree_queued) return;
  nsc_work *w = nsc_work_new(c, agree_run, NSC_W_ISSUES);
  if (!w) { /* the same outcome as a failed agreement: every call syncs */
    pthread_mutex_lock(&c->lock);
    nsc_accum_agreed(&c->accum, NULL, 0, nsc_g.cfg.accum_steps, NULL, 0);
    pthread_mutex_unlock(&c->lock);
    nsc_warn("accumulation on communicator %p: out of memory on rank %d: every call syncs", (void *)c->comm, c->rank);
    return;
  }
  c->agree_queued = 1;
  w->be = be;
  w->stream = (nsc_stream)s;
  nsc_group_defer(w);
}
