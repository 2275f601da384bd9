/* accumulate.c — accumulation's glue between the pure state machine
 * (accum/accum.c) and a communicator: every intercepted all-reduce is fed to
 * it (accumulable calls get their decision, others are evidence), and the
 * agreements it asks for are issued and collected here.
 *
 * An agreement is issued right after the call that made it due (or, inside a
 * group, right after the outermost group end), on a private buffer and
 * stream, and collected just before the next accumulable decision on the
 * communicator: so every rank issues it at the same point of the call
 * sequence and decides on its result, never on "not ready yet". The wait is
 * the host's only wait, normally for a collective issued a forward pass ago.
 *
 * Must not: hold the communicator's lock across a real call or a wait, or let
 * anything but arguments, configuration and agreed values decide what is
 * issued. */
#include <stdio.h>
#include <string.h>

#include "accum.h"
#include "comm.h"
#include "core.h"
#include "msg.h"
#include "shim.h"

/* Process-wide: some communicator has begun its second backward pass. A
 * communicator whose first accumulable call comes later is "late" (R3 in
 * accum.c); the flag is agreed across ranks before it is used. */
static int recurred;

static void say(const nsc_comm *c, const char *why) {
  if (why[0] && c->rank == 0) nsc_info("accumulation on communicator %p: %s", (void *)c->comm, why);
}

/* Hand a pending agreement's result to the machine. */
static void collect(nsc_comm *c) {
  pthread_mutex_lock(&c->lock);
  nsc_xchg x = c->agree;
  c->agree.live = 0;
  pthread_mutex_unlock(&c->lock);
  if (!x.live) return;
  int64_t v[NSC_ACC_AGREE_N] = {0};
  ncclResult_t r = nsc_exchange_end(&x, v);
  char why[512] = "";
  pthread_mutex_lock(&c->lock);
  nsc_accum_agreed(&c->accum, v, r == ncclSuccess, nsc_g.cfg.accum_steps, why, sizeof why);
  pthread_mutex_unlock(&c->lock);
  if (r != ncclSuccess) nsc_warn("accumulation agreement on communicator %p failed on rank %d (%d): %s",
                                 (void *)c->comm, c->rank, (int)r, why);
  else say(c, why);
}

void nsc_accum_issue(nsc_comm *c, const nsc_backend *be, nsc_stream caller) {
  int64_t v[NSC_ACC_AGREE_N];
  pthread_mutex_lock(&c->lock);
  c->agree_queued = 0;
  int go = c->accum.mode != NSC_ACC_OFF && !c->agree.live;
  if (go) nsc_accum_agree_vals(&c->accum, v);
  pthread_mutex_unlock(&c->lock);
  if (!go) return;
  nsc_xchg x;
  ncclResult_t r = nsc_exchange_begin(c, be, caller, v, NSC_ACC_AGREE_N, &x);
  pthread_mutex_lock(&c->lock);
  if (x.live) c->agree = x; /* a failed collective is reported when collected */
  else nsc_accum_agreed(&c->accum, v, 0, nsc_g.cfg.accum_steps, NULL, 0);
  pthread_mutex_unlock(&c->lock);
  if (!x.live)
    nsc_warn("accumulation agreement on communicator %p could not be issued on rank %d (%d): every call syncs",
             (void *)c->comm, c->rank, (int)r);
}

void nsc_accum_release(nsc_comm *c) {
  if (!c->agree.live) return;
  c->agree.live = 0;
  c->agree.be->oob_abandon(c->agree.buf, c->agree.s); /* never waits */
}

int nsc_accum_feed(nsc_comm *c, const nsc_call *call, const void *send, void *recv, int acc, int *agree) {
  const nsc_config *cfg = &nsc_g.cfg;
  *agree = 0;
  if (cfg->accum_steps <= 1) return 1;
  if (acc) collect(c);
  size_t bytes = call->count * nsc_dtype_size(call->dt);
  int sync = 1;
  char why[512] = "";
  pthread_mutex_lock(&c->lock);
  nsc_accum *a = &c->accum;
  if (acc) {
    if (a->mode == NSC_ACC_LEARNING && a->synced == 0) a->late = __atomic_load_n(&recurred, __ATOMIC_ACQUIRE);
    nsc_accum_el el = {(uintptr_t)recv, (uintptr_t)send, call->count, (int32_t)call->dt, (int32_t)call->op, bytes};
    sync = nsc_accum_next(a, &el, cfg->accum_steps, why, sizeof why);
    nsc_log_accum(&c->log, sync);
    if (nsc_accum_recurred(a)) __atomic_store_n(&recurred, 1, __ATOMIC_RELEASE);
    *agree = nsc_accum_take_due(a);
  } else if (a->mode != NSC_ACC_OFF) {
    int fl = (call->dt == ncclFloat16 || call->dt == ncclBfloat16 || call->dt == ncclFloat32 ||
              call->dt == ncclFloat64) && (call->op == ncclSum || call->op == ncclAvg);
    int in = call->op == ncclSum && (call->dt == ncclInt8 || call->dt == ncclUint8 || call->dt == ncclInt32 ||
                                     call->dt == ncclUint32 || call->dt == ncclInt64 || call->dt == ncclUint64);
    nsc_accum_el el = {(uintptr_t)recv, (uintptr_t)send, call->count, (int32_t)call->dt, (int32_t)call->op, bytes};
    nsc_accum_observe(a, in, fl ? &el : NULL);
  }
  pthread_mutex_unlock(&c->lock);
  say(c, why);
  return sync;
}

void nsc_accum_after(nsc_comm *c, const nsc_backend *be, cudaStream_t s, int in_group, ncclResult_t last) {
  if (!in_group) {
    /* A nonblocking communicator takes the next call once this one completed
     * (only the timing depends on ncclInProgress, never what is issued). */
    if (last == ncclInProgress) (void)nsc_wait_nonblocking(c->comm); /* an error shows in the agreement */
    nsc_accum_issue(c, be, (nsc_stream)s);
    return;
  }
  if (c->agree_queued) return;
  nsc_work *w = nsc_work_new(NSC_W_AGREE, c);
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
