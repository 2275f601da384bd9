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

#include "algo.h"
#include "comm.h"
#include "hier.h"
#include "core.h"
#include "msg.h"
#include "real.h"
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
  for (int i = 0; i < g->n; i++) (void)nsc_wait_nonblocking(g->comms[i]);
}

static ncclResult_t run_after(nsc_work *w, int in_progress, int ok, group_comms *g) {
  ncclResult_t r = ncclSuccess;
  while (w) {
    nsc_work *n = w->next;
    w->next = NULL;
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
        if (in_progress) {
          c->nonblocking = 1;
          wr = nsc_wait_nonblocking(c->comm);
        }
        rr = nsc_check_comm(c, w->be, w->stream);
      }
      if (r == ncclSuccess) r = wr != ncclSuccess ? wr : rr;
      nsc_work_drop(w);
    } else if (w->kind == NSC_W_AGREE) {
      /* Issued on every rank; a nonblocking group end completes first (an
       * error there shows in the agreement). */
      if (in_progress) (void)nsc_wait_nonblocking(w->c->comm);
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
      ncclResult_t wr = ncclSuccess;
      if (in_progress) {
        w->c->nonblocking = 1;
        wr = nsc_wait_nonblocking(w->c->comm);
      }
      ncclResult_t rr =
          nsc_twophase(w->c, w->be, w->tsend, w->trecv, w->count, w->op, (cudaStream_t)w->stream, w->rs, w->seq);
      if (rr == ncclInProgress) { /* forwarded plain (no staging room): enqueued before anything follows */
        w->c->nonblocking = 1;
        rr = nsc_wait_nonblocking(w->c->comm);
      }
      if (r == ncclSuccess) r = wr != ncclSuccess ? wr : NSC_OK(rr) ? ncclSuccess : rr;
      nsc_work_drop(w);
    } else if (w->kind == NSC_W_SETTLE) {
      /* Whatever the group end answered: every rank settles alike. */
      if (in_progress) w->c->nonblocking = 1;
      nsc_staging_settle_comm(w->c, (cudaStream_t)w->stream);
      nsc_work_drop(w);
    } else if (!ok) {
      nsc_work_drop(w);
    } else if (in_progress && w->c) {
      nsc_pending_add(w->c, w);
    } else {
      ncclResult_t rr = nsc_work_run(w);
      if (r == ncclSuccess) r = rr;
    }
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

/* After a group whose after-work waits for peers (a check, an agreement, a
 * two-phase call: each issues collectives of the shim's own and waits for
 * their answers) on communicators of several devices, each device's share
 * runs at once, in queue order, on a thread of its own made current on that
 * device's context: one thread driving several devices (ncclCommInitAll,
 * nccl-tests -g N) holds every rank of a clique, and one device's wait would
 * otherwise keep the others' collectives from being issued (issue 23,
 * defect 1: a deadlock at the first group). A process with one device (one
 * context) keeps its order: everything on the caller's thread, as before, so
 * no two ranks can order its communicators differently. Work on the
 * per-thread stream stays there too (its handle names the caller's stream).
 * A group end that answered ncclInProgress is waited for first, here, once
 * for all parts. What is issued on each communicator is unchanged. */
static ncclResult_t run_after_all(nsc_work *w, int in_progress, int ok, group_comms *g) {
  enum { MAXP = 8 };
  void *keys[MAXP];
  int np = 0, blocking = 0, serial = 0;
  for (nsc_work *x = w; x && !serial; x = x->next) {
    blocking |= blocking_kind(x);
    if (x->stream == PER_THREAD_STREAM) serial = 1;
    void *k = x->be ? nsc_backend_stream_ctx(x->be, x->stream) : NULL;
    int i = 0;
    while (i < np && keys[i] != k) i++;
    if (i == np) {
      if (np == MAXP) serial = 1;
      else keys[np++] = k;
    }
  }
  if (serial || !blocking || np <= 1) return run_after(w, in_progress, ok, g);
  if (in_progress) wait_group(g); /* once, before any part issues its own collectives */
  part *parts = calloc((size_t)np, sizeof *parts);
  pthread_t th[MAXP];
  int started[MAXP] = {0};
  if (!parts) return run_after(w, in_progress, ok, g); /* in order, as before */
  nsc_work *tail[MAXP] = {0};
  for (int k = 0; k < np; k++) parts[k] = (part){.in_progress = in_progress, .ok = ok, .g = *g, .ctx = keys[k]};
  for (nsc_work *x = w, *n; x; x = n) {
    n = x->next;
    x->next = NULL;
    void *key = x->be ? nsc_backend_stream_ctx(x->be, x->stream) : NULL;
    int k = 0;
    while (k < np - 1 && keys[k] != key) k++;
    if (tail[k]) tail[k]->next = x;
    else parts[k].w = x;
    tail[k] = x;
  }
  for (int k = 0; k < np; k++) started[k] = pthread_create(&th[k], NULL, run_part, &parts[k]) == 0;
  ncclResult_t r = ncclSuccess;
  const char *err = NULL;
  for (int k = 0; k < np; k++) {
    if (started[k]) pthread_join(th[k], NULL);
    else { /* no thread: on this one, in order (one thread per device is then all that can work) */
      nsc_warn("no thread for device %d's share of a group's work: it runs after the others'", k);
      parts[k].r = run_after(parts[k].w, in_progress, ok, &parts[k].g);
    }
    if (r == ncclSuccess && parts[k].r != ncclSuccess) {
      r = parts[k].r;
      err = parts[k].err;
    }
  }
  if (err && !strncmp(err, "ncclshim: ", 10)) nsc_note_error(err + 10);
  free(parts);
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
    /* Parked work the shim ran itself before a later call (coll/allreduce.c) */
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
