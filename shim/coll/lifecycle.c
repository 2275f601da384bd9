/* lifecycle.c — the calls that close work the shim has open: the outermost
 * ncclGroupEnd (fusion, queued cast-backs, deferred checks, grouped two-phase
 * calls), completion of a
 * nonblocking communicator (ncclCommGetAsyncError) and the end of a
 * communicator (destroy/abort: state and staging released, summary written).
 *
 * Must not: hold a lock of ours across a real call (the watchdog may abort a
 * communicator from another thread at any time), or retry a real call. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm.h"
#include "core.h"
#include "exec.h"
#include "hier.h"
#include "msg.h"
#include "real.h"
#include "staging.h"
#include "coll.h"

ncclResult_t nsc_group_start(void) {
  int st = nsc_activate();
  if (st == NSC_FAILED) {
    nsc_note_error(nsc_g.fail_msg);
    return nsc_g.fail_code;
  }
  if (st != NSC_ACTIVE) return nsc_real.GroupStart();
  nsc_group_enter();
  ncclResult_t r = nsc_real.GroupStart();
  if (!NSC_OK(r)) nsc_group_leave();
  return r;
}

static nsc_work *concat(nsc_work *a, nsc_work *b) {
  if (!a) return b;
  nsc_work *t = a;
  while (t->next) t = t->next;
  t->next = b;
  return a;
}

/* After the real group end: cast-backs, deferred checks, grouped two-phase
 * calls and accumulation agreements, in the order they were queued. A deferred check and an
 * agreement are issued whatever the group end answered (ncclSuccess or
 * ncclInProgress is timing on a nonblocking communicator, not a decision,
 * and a failure may be this rank's alone): after an ncclInProgress the
 * group's work is first waited for, so that they are the communicator's
 * next operations, as on every other rank. When the group end failed (ok = 0)
 * nothing of the group reached the stream: cast-backs are dropped. */
/* The group's work on every communicator it touched, waited for once before
 * the first call of the shim's own after an ncclInProgress group end: on a
 * real NCCL the group progresses by itself and a peer may be blocked in it,
 * so the calls after it must not be the only thing this rank waits on (fuzzer
 * seed 9385: a nonblocking group on c1, then a two-phase call on c0 waited
 * on c0 alone while the blocking peer sat in its c1 group end). Their errors
 * are the caller's to see at its own poll. */
typedef struct {
  ncclComm_t comms[NSC_GROUP_COMMS];
  int n, waited;
} group_comms;

static void wait_group(group_comms *g) {
  if (g->waited) return;
  g->waited = 1;
  for (int i = 0; i < g->n; i++) {
    nsc_comm *c = nsc_comm_find(g->comms[i]); /* none: ended since (its entry left the table), nothing to wait for */
    if (c) (void)nsc_wait_nonblocking(c, c->comm);
    nsc_comm_put(c);
  }
}

static ncclResult_t run_after(nsc_work *w, int in_progress, int ok, group_comms *g) {
  ncclResult_t r = ncclSuccess;
  while (w) {
    nsc_work *n = w->next;
    w->next = NULL;
    /* its stream handle as it was meant at its call (an item that names
     * no context keeps whatever is current) */
    int pushed = nsc_backend_enter_ctx(w->ctx);
    if (in_progress && (w->kind == NSC_W_CHECK || w->kind == NSC_W_AGREE || w->kind == NSC_W_TWOPHASE ||
                        w->kind == NSC_W_SETTLE))
      wait_group(g);
    if (w->kind == NSC_W_CHECK) {
      nsc_comm *c = w->c;
      c->check_queued = 0;
      /* A stream being captured (the group was captured, alike on every
       * rank) gets no check yet: the first uncaptured call makes it. */
      int capturing = 0;
      if (w->be->capturing(w->stream, &capturing)) capturing = 1;
      ncclResult_t wr = ncclSuccess, rr = ncclSuccess;
      if (!capturing) {
        if (in_progress) wr = nsc_enqueued(c, c->comm, ncclInProgress);
        rr = nsc_check_comm(c, w->be, w->stream);
      }
      if (r == ncclSuccess) r = wr != ncclSuccess ? wr : rr;
      nsc_work_drop(w);
    } else if (w->kind == NSC_W_AGREE) {
      /* Issued on every rank; a nonblocking group end completes first (an
       * error there shows in the agreement). */
      if (in_progress) (void)nsc_wait_nonblocking(w->c, w->c->comm);
      /* Not after the group's check found a bad or differing setting: every
       * rank saw that check's answer, and a rank with a bad setting queued
       * no agreement (its calls failed before accumulation). */
      if (w->c->checked >= 0) nsc_accum_issue(w->c, w->be, w->stream);
      nsc_work_drop(w);
    } else if (w->kind == NSC_W_TWOPHASE) {
      /* Issued whatever the group end answered (a failed group end may be
       * this rank's alone, and its peers issue it); after an ncclInProgress
       * the group's work is waited for first, so that the two phases follow
       * it on the communicator and the stream, as on every other rank. */
      ncclResult_t wr = in_progress ? nsc_enqueued(w->c, w->c->comm, ncclInProgress) : ncclSuccess;
      ncclResult_t rr = nsc_exec_deferred(w); /* its plan, made when it was called */
      if (r == ncclSuccess) r = wr != ncclSuccess ? wr : NSC_OK(rr) ? ncclSuccess : rr;
      nsc_work_drop(w);
    } else if (w->kind == NSC_W_SETTLE) {
      /* Whatever the group end answered: every rank settles alike. */
      if (in_progress) w->c->nonblocking = 1;
      nsc_staging_settle_comm(w->c, w->stream);
      nsc_work_drop(w);
    } else if (!ok) {
      nsc_work_drop(w);
    } else if (in_progress && w->c) {
      nsc_pending_add(w->c, w);
    } else {
      ncclResult_t rr = nsc_work_run(w);
      if (r == ncclSuccess) r = rr;
    }
    nsc_backend_leave_ctx(pushed);
    w = n;
  }
  return r;
}

/* One device's share of a group's after-work, run on a thread of its own. */
typedef struct {
  nsc_work *w;
  int in_progress, ok;
  group_comms g;
  void *ctx;
  ncclResult_t r;
  char err[512]; /* the message the part noted for ncclGetLastError */
} part;

static void *run_part(void *arg) {
  part *p = arg;
  nsc_in_shim = 1; /* as on the caller's thread: NCCL calling back in goes straight through */
  nsc_backend_adopt_ctx(p->ctx);
  nsc_forget_error();
  p->r = run_after(p->w, p->in_progress, p->ok, &p->g);
  snprintf(p->err, sizeof p->err, "%s", nsc_noted_error());
  return NULL;
}

static int blocking_kind(const nsc_work *w) {
  return w->kind == NSC_W_CHECK || w->kind == NSC_W_AGREE || w->kind == NSC_W_TWOPHASE || w->kind == NSC_W_SETTLE;
}

#define PER_THREAD_STREAM ((nsc_stream)0x2) /* CU_STREAM_PER_THREAD */

/* The part a communicator's after-work runs in: its device (the CUDA
 * context its items' streams named when they were queued, on the caller's
 * thread: for the legacy and per-thread handles the context current at the
 * call, never the one current at the group end), else the communicator
 * itself. Host memory names no device, and a host communicator may be one
 * of several ranks of a clique that this thread drives, so each gets a part
 * of its own. A communicator's items always stay together, in queue order. */
typedef struct {
  const nsc_comm *c;
  void *key;
} comm_key;

static void *part_key(comm_key *ck, int *nck, const nsc_work *x) {
  int i = 0;
  while (i < *nck && ck[i].c != x->c) i++;
  if (i == *nck) ck[(*nck)++] = (comm_key){x->c, x->ctx ? x->ctx : (void *)x->c};
  else if (x->ctx && ck[i].key == (void *)x->c) ck[i].key = x->ctx; /* a later item names its device */
  return ck[i].key;
}

/* After a group whose after-work waits for peers (a check with hier's
 * splits, an agreement, a two-phase call, a settle: each issues collectives
 * of the shim's own and waits for their answers) on communicators of several
 * parts, each part runs at once, in queue order, on a thread of its own (made
 * current on its device's context where it has one): one thread driving
 * several ranks (ncclCommInitAll, nccl-tests -g N, several host
 * communicators) holds every rank of a clique, and one part's wait would
 * otherwise keep the others' collectives from being issued (fuzzer seed
 * 120067). Communicators of one CUDA device share a part and keep their
 * order on one thread (concurrent launches from several threads on one
 * device risk NCCL's cross-communicator deadlock). Host memory is the host
 * NCCL's (NCCL's kernels cannot reach pageable memory; pinned memory has the
 * CUDA backend and its context), so a part per host communicator launches
 * nothing on a device. The legacy handle (0) names its context's one stream
 * on any thread; the per-thread handle (0x2) names the caller's thread's
 * stream, so a device part's items on it run on a proxy (backend.h:
 * nsc_backend_ptd_proxy) that waits for the group's work there, and the
 * caller's per-thread stream waits for the proxy before the group end
 * returns; a part whose proxy cannot be made runs on this thread. A group
 * end that answered ncclInProgress is waited for first, here, once for all
 * parts. What is issued on each communicator is unchanged. */
typedef struct {
  part p;
  void *key;
  nsc_work *tail;
  pthread_t th;
  int started;
  int here;       /* runs on the caller's thread */
  nsc_stream ptd; /* the proxy of the caller's per-thread stream (0x2: none) */
} part_run;

/* Items of a device part on the per-thread handle go to its proxy. */
static void proxy_ptd(part_run *sl) {
  int any = 0;
  for (nsc_work *x = sl->p.w; x && !any; x = x->next) {
    any = x->stream == PER_THREAD_STREAM;
    for (int j = 0; j < x->njoin && !any; j++) any = x->joins[j] == PER_THREAD_STREAM;
  }
  if (!any) return;
  if (nsc_backend_ptd_proxy(sl->p.ctx, &sl->ptd)) {
    nsc_warn("a group's work on the per-thread stream of one device runs on the caller's thread: %s",
             nsc_backend_error());
    sl->ptd = PER_THREAD_STREAM;
    sl->here = 1;
    return;
  }
  for (nsc_work *x = sl->p.w; x; x = x->next) {
    if (x->stream == PER_THREAD_STREAM) x->stream = sl->ptd;
    for (int j = 0; j < x->njoin; j++)
      if (x->joins[j] == PER_THREAD_STREAM) x->joins[j] = sl->ptd;
  }
}

static ncclResult_t run_after_all(nsc_work *w, int in_progress, int ok, group_comms *g) {
  int n = 0, blocking = 0, nck = 0, np = 0;
  for (nsc_work *x = w; x; x = x->next) n++, blocking |= blocking_kind(x);
  if (!blocking || n <= 1) return run_after(w, in_progress, ok, g);
  comm_key *ck = calloc((size_t)n, sizeof *ck);
  void **key = calloc((size_t)n, sizeof *key);
  part_run *sl = calloc((size_t)n, sizeof *sl);
  ncclResult_t r = ncclSuccess;
  if (!ck || !key || !sl) goto serial; /* in order, as before */
  int i = 0;
  for (nsc_work *x = w; x; x = x->next) key[i++] = part_key(ck, &nck, x);
  for (i = 0; i < n; i++) { /* each item's communicator's final key, then its part */
    for (int j = 0; j < nck; j++)
      if (key[i] == (void *)ck[j].c) key[i] = ck[j].key;
    int k = 0;
    while (k < np && sl[k].key != key[i]) k++;
    if (k == np) sl[np++].key = key[i];
  }
  if (np <= 1) goto serial;
  if (in_progress) wait_group(g); /* once, before any part issues its own collectives */
  for (int k = 0; k < np; k++) {
    void *ctx = sl[k].key;
    for (int j = 0; j < nck; j++)
      if (ctx == (void *)ck[j].c) ctx = NULL; /* a communicator's own part: no device */
    sl[k].p = (part){.in_progress = in_progress, .ok = ok, .g = *g, .ctx = ctx};
    sl[k].ptd = PER_THREAD_STREAM;
  }
  i = 0;
  for (nsc_work *x = w, *nx; x; x = nx, i++) {
    nx = x->next;
    x->next = NULL;
    int k = 0;
    while (sl[k].key != key[i]) k++;
    if (sl[k].tail) sl[k].tail->next = x;
    else sl[k].p.w = x;
    sl[k].tail = x;
  }
  for (int k = 0; k < np; k++) {
    if (sl[k].p.ctx) proxy_ptd(&sl[k]);
    sl[k].started = !sl[k].here && pthread_create(&sl[k].th, NULL, run_part, &sl[k].p) == 0;
  }
  /* A part without a thread runs on this one, before any join: a started
   * part may be waiting for its peer collectives there. */
  for (int k = 0; k < np; k++)
    if (!sl[k].started) {
      if (!sl[k].here) nsc_warn("no thread for part %d of a group's work: it runs on the caller's thread", k);
      sl[k].p.r = run_after(sl[k].p.w, in_progress, ok, &sl[k].p.g);
    }
  const char *err = NULL;
  for (int k = 0; k < np; k++) {
    if (sl[k].started) pthread_join(sl[k].th, NULL);
    /* the caller's per-thread stream after what its proxy got */
    if (sl[k].ptd != PER_THREAD_STREAM && nsc_backend_ptd_rejoin(sl[k].p.ctx, sl[k].ptd)) {
      nsc_warn("a group's work could not be ordered before the per-thread stream's later work: %s",
               nsc_backend_error());
      if (sl[k].p.r == ncclSuccess) sl[k].p.r = ncclSystemError;
    }
    if (r == ncclSuccess && sl[k].p.r != ncclSuccess) {
      r = sl[k].p.r;
      err = sl[k].p.err;
    }
  }
  if (err && !strncmp(err, "ncclshim: ", 10)) nsc_note_error(err + 10);
  goto out;
serial:
  r = run_after(w, in_progress, ok, g);
out:
  free(ck);
  free(key);
  free(sl);
  return r;
}

ncclResult_t nsc_group_end(void) {
  int st = nsc_activate();
  if (st == NSC_FAILED) {
    nsc_note_error(nsc_g.fail_msg);
    return nsc_g.fail_code;
  }
  if (st != NSC_ACTIVE) return nsc_real.GroupEnd();
  if (nsc_group_depth() == 0) return nsc_real.GroupEnd(); /* unbalanced: NCCL's answer */
  if (nsc_group_leave() > 0) return nsc_real.GroupEnd();
  group_comms g = {.waited = 0};
  g.n = nsc_group_comms(g.comms);
  nsc_work *w = nsc_group_take();
  ncclResult_t fr = nsc_fuse_flush(&w); /* fused collectives join the open group */
  w = concat(w, nsc_group_take());
  w = concat(w, nsc_staging_settle_items()); /* after every other item of its communicator */
  ncclResult_t r = nsc_real.GroupEnd();
  ncclResult_t ar = run_after_all(w, r == ncclInProgress, NSC_OK(r), &g);
  /* Outside any group now: staging is settled alike on every rank,
   * whatever this rank's group end answered. */
  nsc_staging_settle_group();
  if (!NSC_OK(r)) return r;
  /* A fused collective this rank could not prepare (it went out on NaN) is
   * this rank's failure whether the group end said ncclSuccess or
   * ncclInProgress (fuzzer seed 3331: dropped on nonblocking communicators). */
  if (!NSC_OK(fr)) return fr;
  /* A failed deferred check is the same answer on every rank: returned even
   * where the group end said ncclInProgress (the check waited for it). */
  return r == ncclSuccess || !NSC_OK(ar) ? ar : r;
}

ncclResult_t nsc_async_error(ncclComm_t comm, ncclResult_t *err) {
  nsc_comm *c = nsc_g.state == NSC_ACTIVE && err ? nsc_comm_find(comm) : NULL;
  /* Only work parked before this poll may be released by its answer. */
  uint64_t upto = c ? nsc_pending_mark(c) : 0;
  ncclResult_t r = nsc_real.CommGetAsyncError(comm, err);
  if (c && r == ncclSuccess && *err != ncclInProgress) {
    /* Completed: the collectives are on their streams, cast-backs may follow.
     * Failed: nothing to cast back; the error is the caller's to see. */
    ncclResult_t pr = nsc_pending_finish(c, *err == ncclSuccess, upto);
    if (*err == ncclSuccess && pr != ncclSuccess) *err = pr;
    /* Parked work the shim ran itself before a later call (staging.c) */
    ncclResult_t fe = __atomic_exchange_n(&c->flush_err, ncclSuccess, __ATOMIC_ACQ_REL);
    if (*err == ncclSuccess && fe != ncclSuccess) *err = fe;
  }
  nsc_comm_put(c);
  return r;
}

ncclResult_t nsc_comm_end(ncclComm_t comm, ncclResult_t (*real_fn)(ncclComm_t)) {
  nsc_comm *c = nsc_g.state == NSC_ACTIVE ? nsc_comm_detach(comm) : NULL;
  if (c) __atomic_store_n(&c->ended, 1, __ATOMIC_RELEASE); /* a settle still due on it issues nothing */
  nsc_hier_end(c, real_fn); /* its sub-communicators first, the same way */
  ncclResult_t r = real_fn(comm);
  nsc_comm_put(c); /* frees once calls still inside on other threads leave */
  return r;
}
