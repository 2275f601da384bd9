/* lifecycle.c — the calls that close work the shim has open: the outermost
 * ncclGroupEnd (the group's plan: its fused buckets, nsc_decide_group, run
 * before the real group end; then its queued work: cast-backs, deferred
 * checks, grouped two-phase calls, agreements, settles, each by its own
 * run), completion of a nonblocking communicator (ncclCommGetAsyncError) and
 * the end of a communicator (destroy/abort: state and staging released,
 * summary written).
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

/* After the real group end: the group's queued work, in the order it was
 * queued, each item by its own run (queue.h), told how the group end
 * answered: a check, an agreement, a deferred call and a settle issue what
 * they issue whatever it answered (ncclSuccess or ncclInProgress is timing
 * on a nonblocking communicator, not a decision, and a failure may be this
 * rank's alone), after waiting for the group's work when it answered
 * ncclInProgress; a cast-back is parked then, or dropped when the group end
 * failed (nothing of the group reached the stream). */
static ncclResult_t run_after(nsc_work *w, const nsc_after *a, group_comms *g) {
  ncclResult_t r = ncclSuccess;
  while (w) {
    nsc_work *n = w->next;
    w->next = NULL;
    /* its stream handle as it was meant at its call (an item that names
     * no context keeps whatever is current) */
    int pushed = nsc_backend_enter_ctx(w->ctx);
    if (a->in_progress && (w->flags & NSC_W_ISSUES)) wait_group(g);
    ncclResult_t rr = w->run(w, a); /* the item is its run's from here */
    if (r == ncclSuccess) r = rr;
    nsc_backend_leave_ctx(pushed);
    w = n;
  }
  return r;
}

/* One device's share of a group's after-work, run on a thread of its own. */
typedef struct {
  nsc_work *w;
  nsc_after a;
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
  p->r = run_after(p->w, &p->a, &p->g);
  snprintf(p->err, sizeof p->err, "%s", nsc_noted_error());
  return NULL;
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

static ncclResult_t run_after_all(nsc_work *w, const nsc_after *a, group_comms *g) {
  int n = 0, blocking = 0, nck = 0, np = 0;
  for (nsc_work *x = w; x; x = x->next) n++, blocking |= (x->flags & NSC_W_ISSUES) != 0;
  if (!blocking || n <= 1) return run_after(w, a, g);
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
  if (a->in_progress) wait_group(g); /* once, before any part issues its own collectives */
  for (int k = 0; k < np; k++) {
    void *ctx = sl[k].key;
    for (int j = 0; j < nck; j++)
      if (ctx == (void *)ck[j].c) ctx = NULL; /* a communicator's own part: no device */
    sl[k].p = (part){.a = *a, .g = *g, .ctx = ctx};
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
      sl[k].p.r = run_after(sl[k].p.w, a, &sl[k].p.g);
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
  r = run_after(w, a, g);
out:
  free(ck);
  free(key);
  free(sl);
  return r;
}

/* The group's plan, before the real group end: its fused members in
 * buckets (nsc_decide_group, from the sequence of counts, ops,
 * communicators and memory kinds alone), each bucket's plan
 * (nsc_plan_bucket) walked by the executor, on its home stream, into the
 * open group. Every bucket is issued even after an error, so the real
 * operations stay matched across ranks; the first error is returned. The
 * members are freed after (their cast-backs carry what they need). */
static ncclResult_t run_buckets(nsc_work *members) {
  ncclResult_t r = ncclSuccess;
  for (nsc_member *b = members ? nsc_decide_group(&members->m, &nsc_g.cfg) : NULL; b; b = b->bucket_next) {
    nsc_plan p;
    nsc_plan_bucket(&p, &nsc_g.cfg, b);
    ncclResult_t rr = nsc_exec_bucket(b, &p);
    if (r == ncclSuccess && !NSC_OK(rr)) r = rr;
  }
  nsc_work_drop_list(members);
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
  ncclResult_t fr = run_buckets(nsc_work_take_members(&w)); /* fused collectives join the open group */
  w = concat(w, nsc_group_take()); /* the buckets' cast-backs */
  w = concat(w, nsc_staging_settle_items()); /* after every other item of its communicator */
  ncclResult_t r = nsc_real.GroupEnd();
  nsc_after a = {r == ncclInProgress, NSC_OK(r)};
  ncclResult_t ar = run_after_all(w, &a, &g);
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
