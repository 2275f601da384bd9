/* settle.c — a communicator's staging between calls (staging.h): the
 * settle after a call outside any group or after the outermost group end,
 * the thread's list of communicators to settle after its group, and the
 * agreement by which the block grows (the shim's own exchanges, agree.h).
 *
 * Must not: hold the communicator's lock across an exchange, or decide
 * anything from what one rank alone sees (a settle happens at the same point
 * of the call sequence on every rank, and so does every exchange it issues). */
#include <string.h>

#include "agree.h"
#include "comm.h"
#include "core.h"
#include "msg.h"
#include "queue.h"
#include "staging.h"

/* Communicators whose staging is settled after this thread's outermost
 * group end, linked through the entries (one reference each), in the order
 * the group first named them. */
static __thread nsc_comm *to_settle, **to_settle_tail; /* NULL tail: the list is empty */

void nsc_staging_note(nsc_comm *c, const nsc_backend *be, nsc_stream s) {
  nsc_stage *st = nsc_stage_of(c);
  uint64_t gid = nsc_group_id();
  if (!gid || st->settle_gid == gid) return;
  st->settle_gid = gid;
  st->settle_be = be;
  st->settle_stream = s;
  nsc_comm_ref(c);
  st->settle_next = NULL;
  if (!to_settle_tail) to_settle_tail = &to_settle;
  *to_settle_tail = c;
  to_settle_tail = &st->settle_next;
}

/* A settle item's run, after the group's other work on its communicator:
 * settled alike on every rank, whatever the group end answered. */
static ncclResult_t settle_run(nsc_work *w, const nsc_after *a) {
  if (a->in_progress) w->c->nonblocking = 1;
  nsc_staging_settle_comm(w->c, w->stream);
  nsc_work_drop(w);
  return ncclSuccess;
}

nsc_work *nsc_staging_settle_items(void) {
  nsc_work *h = NULL, **t = &h;
  nsc_comm **keep = &to_settle;
  for (nsc_comm *c = to_settle, *n; c; c = n) {
    nsc_stage *st = nsc_stage_of(c);
    n = st->settle_next;
    nsc_work *w = nsc_work_new(c, settle_run, NSC_W_ISSUES);
    if (!w) { /* this and every later one stay on the list, in order: settled after the group's work */
      keep = NULL;
      break;
    }
    w->be = st->settle_be;
    w->stream = st->settle_stream; /* alive: its call is in this group */
    *keep = n;
    st->settle_next = NULL;
    nsc_comm_put(c); /* the item holds its own reference */
    *t = w;
    t = &w->next;
  }
  if (!keep) { /* the rest stays: find its tail */
    keep = &to_settle;
    while (*keep) keep = &nsc_stage_of(*keep)->settle_next;
  }
  to_settle_tail = to_settle ? keep : NULL;
  return h;
}

void nsc_staging_settle_group(void) {
  nsc_comm *c = to_settle;
  to_settle = NULL;
  to_settle_tail = NULL;
  while (c) {
    nsc_stage *st = nsc_stage_of(c);
    nsc_comm *n = st->settle_next;
    st->settle_next = NULL;
    nsc_staging_settle_comm(c, st->settle_stream);
    nsc_comm_put(c);
    c = n;
  }
}

/* Staging block growth: every rank reports whether its allocation succeeded;
 * all see the same maximum of the failures, so all keep or drop alike (a
 * rank without an exchange buffer sends all-ones: v[1] != -2 on every rank).
 * Nothing is waited for after the group that asked: the answer is read at
 * the communicator's next settle (polled only if its exchange has not
 * completed by then), where the confirmation that every rank could read it
 * is issued; that one is read at the settle after (the same way), which
 * applies the outcome. Two settles, so that no settle waits for an exchange
 * it has just issued behind the communicator's work. */
typedef struct {
  nsc_comm *c;
  int ok;
  nsc_xchg x;
  ncclResult_t r;
  int answered;
  int64_t v[2];
  const nsc_backend *be;
  nsc_stream s; /* the caller's stream it was issued from (the confirmation's too) */
  int confirming; /* the confirmation is issued: cx, cv, cr */
  nsc_xchg cx;
  int64_t cv;
  ncclResult_t cr;
  int cread; /* the confirmation's answer is here (or could not be read) */
  int decided; /* whether to confirm is decided (at the first settle that read the answer) */
} agreement;

static void *agree_start(int ok, const nsc_backend *be, nsc_stream s, void *arg) {
  nsc_comm *c = arg;
  nsc_stage *st = nsc_stage_of(c);
  _Static_assert(sizeof(agreement) <= sizeof st->agree_mem, "nsc_stage.agree_mem holds the agreement");
  agreement *g = (agreement *)(void *)st->agree_mem; /* one in flight at a time (staging.c): never allocated */
  memset(g, 0, sizeof *g);
  g->c = c;
  g->ok = ok;
  g->be = be;
  g->s = s;
  g->v[0] = ok ? 0 : 1;
  g->v[1] = -2;
  g->r = nsc_exchange_begin(c, be, s, g->v, 2, &g->x);
  if (!g->x.live) { /* no buffer: the poisoned exchange was issued, this rank fails it */
    g->answered = 1;
    if (g->r == ncclSuccess) g->r = ncclSystemError;
    return g;
  }
  /* Enqueue the copy back; the host backend answers at once. */
  int e = nsc_exchange_readback_fault(be->oob_end(g->x.buf, g->x.s, g->v, sizeof g->v, 0));
  if (e != 0) {
    g->x.live = 0;
    g->answered = 1;
    if (e < 0 && g->r == ncclSuccess) g->r = ncclSystemError;
  }
  return g;
}

/* Enqueues the copy back of a live exchange x into v (bytes); 1 answered,
 * 0 not yet, and the exchange is dropped (not live) with *r set on error. */
static int read_back(nsc_xchg *x, int64_t *v, size_t bytes, int wait, ncclResult_t *r) {
  int e = nsc_exchange_readback_fault(x->be->oob_end(x->buf, x->s, v, bytes, wait));
  if (e == 0) return 0;
  if (e < 0 && *r == ncclSuccess) *r = ncclSystemError;
  x->live = 0;
  return 1;
}

static int agree_finish(void *tok, int wait, const nsc_stream *now, void *arg) {
  (void)arg;
  agreement *g = tok;
  /* The stream it started on may be gone since (its group is over): what it
   * issues now goes from the current call's stream, of the same context. */
  if (now) g->s = *now;
  if (wait < 0) { /* its communicator is ending: nobody reads the answers */
    if (!g->answered && g->x.live) g->x.be->oob_abandon(g->x.buf, g->x.s);
    if (g->confirming && g->cx.live) g->cx.be->oob_abandon(g->cx.buf, g->cx.s);
    return 0;
  }
  if (!g->answered) {
    if (g->x.live && !read_back(&g->x, g->v, sizeof g->v, wait, &g->r)) return -1;
    g->answered = 1;
  }
  if (!g->decided) {
    /* Read at a settle (wait), alike on every rank, whether this rank could
     * issue the agreement or not: confirm that every rank read the answer,
     * so that a read-back failing on one rank stops compression on all. Not
     * during a capture (alike on every rank: nothing of ours is issued
     * there). Its answer is read at the next settle. */
    int capturing = 0;
    if (wait > 0 && g->be->capturing(g->s, &capturing)) capturing = 1;
    g->decided = 1;
    if (wait > 0 && !capturing) {
      g->confirming = 1;
      g->cv = g->r == ncclSuccess ? -2 : 1; /* a poisoned buffer reads -1: a failure too */
      g->cr = nsc_exchange_begin(g->c, g->be, g->s, &g->cv, 1, &g->cx);
      if (g->cx.live) {
        int e = nsc_exchange_readback_fault(g->be->oob_end(g->cx.buf, g->cx.s, &g->cv, sizeof g->cv, 0));
        if (e != 0) {
          g->cx.live = 0;
          g->cread = 1;
          if (e < 0 && g->cr == ncclSuccess) g->cr = ncclSystemError;
        }
      } else {
        g->cread = 1;
        if (g->cr == ncclSuccess) g->cr = ncclSystemError;
      }
      return -1;
    }
  }
  if (g->confirming && !g->cread) {
    ncclResult_t rb = ncclSuccess;
    if (g->cx.live && !read_back(&g->cx, &g->cv, sizeof g->cv, wait, &rb)) return -1;
    g->cread = 1;
    /* As confirm(): a rank that had the answer but cannot read the
     * confirmation assumes every rank had it, as it had. */
    if (rb != ncclSuccess && g->r == ncclSuccess && g->cr == ncclSuccess) g->cv = -2;
  }
  int confirmed = !g->confirming || (g->cr == ncclSuccess && g->cv == -2);
  int all = g->r == ncclSuccess && confirmed && g->v[0] == 0 && g->v[1] == -2;
  if (!g->ok) __atomic_add_fetch(&g->c->log.staging_failed, 1, __ATOMIC_RELAXED);
  if (!all && (g->c->rank == 0 || !g->ok))
    nsc_warn("compression stopped on communicator %p: %s; every call on it is forwarded in fp32, on every rank",
             (void *)g->c->comm, g->r != ncclSuccess || !confirmed ? "the agreement on its grown staging failed"
                                 : g->ok ? "a rank could not allocate its grown staging (that rank said why)"
                                         : "this rank could not allocate its grown staging");
  return all;
}

void nsc_staging_settle_comm(nsc_comm *c, nsc_stream s) {
  if (nsc_comm_ended(c)) return; /* destroyed or aborted meanwhile: nothing more on it */
  nsc_stage *st = nsc_stage_of(c);
  /* Cast-backs still to run read the block (parked, or run by another
   * thread right now). */
  int parked = __atomic_load_n(&c->wire_out, __ATOMIC_ACQUIRE) > 0;
  /* NCCL takes no further call on a nonblocking communicator until the last
   * one is enqueued: this rank waits for that (never for the device) before
   * a settle that may issue an exchange, whether or not it has seen
   * ncclInProgress yet (a call forwarded plain may be its first); on a
   * blocking communicator the poll answers at once. */
  if (nsc_staging_may_issue(&st->block)) (void)nsc_wait_nonblocking(c, c->comm);
  nsc_stage_arm(c); /* a grown block may be allocated */
  /* Not under the communicator's lock: agreeing calls into NCCL. */
  st->agreement = (nsc_staging_agreement){agree_start, agree_finish, c};
  nsc_stream now = s;
  nsc_staging_settle(&st->block, (size_t)nsc_g.cfg.max_staging_bytes, &st->agreement, parked, &now);
}
