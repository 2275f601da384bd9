/* queue.c — see queue.h. Per-thread state lives in thread-locals; parked work
 * of nonblocking communicators lives in the communicator entry under its lock
 * (never held while calling NCCL or enqueuing casts). */
#include "queue.h"

#include <stdlib.h>
#include <string.h>

#include "comm.h"
#include "core.h"
#include "msg.h"

__thread int nsc_gdepth;
__thread uint64_t nsc_gid; /* the outermost group this thread is in */
static uint64_t gid_last;
static __thread nsc_work *q_head, *q_tail;

static __thread ncclComm_t gcomms[NSC_GROUP_COMMS];
static __thread int ngcomms;

void nsc_group_note_in(ncclComm_t comm) {
  if (!comm) return;
  for (int i = 0; i < ngcomms; i++)
    if (gcomms[i] == comm) return;
  if (ngcomms < NSC_GROUP_COMMS) gcomms[ngcomms++] = comm;
}

int nsc_group_comms(ncclComm_t *out) {
  int n = ngcomms;
  memcpy(out, gcomms, (size_t)n * sizeof *out);
  ngcomms = 0;
  return n;
}
void nsc_group_enter(void) {
  if (nsc_gdepth++ == 0) nsc_gid = __atomic_add_fetch(&gid_last, 1, __ATOMIC_RELAXED);
}
int nsc_group_leave(void) { return nsc_gdepth > 0 ? --nsc_gdepth : 0; }

static void append(nsc_work **h, nsc_work **t, nsc_work *w) {
  w->next = NULL;
  if (*t) (*t)->next = w;
  else *h = w;
  *t = w;
}

void nsc_group_defer(nsc_work *w) {
  if (!w->ctx && w->be) w->ctx = nsc_backend_stream_ctx(w->be, w->stream);
  append(&q_head, &q_tail, w);
}

nsc_work *nsc_group_take(void) {
  nsc_work *w = q_head;
  q_head = q_tail = NULL;
  return w;
}

void *nsc_coll_calloc(size_t n, size_t size) {
  static long long k;
  long long f = nsc_g.cfg.fault_host_alloc;
  if (f && __atomic_add_fetch(&k, 1, __ATOMIC_RELAXED) == f) {
    nsc_warn("host allocation %lld of the collectives failed (NCCLSHIM_FAULT_HOST_ALLOC)", f);
    return NULL;
  }
  return calloc(n ? n : 1, size);
}

/* The reserve: taken only when the heap fails, released by whichever
 * thread frees the block. */
static _Alignas(64) unsigned char reserve[NSC_RESERVE_N][NSC_RESERVE_SLOT];
static int reserve_held[NSC_RESERVE_N];

void *nsc_coll_zalloc(size_t bytes) {
  void *p = nsc_coll_calloc(1, bytes);
  for (int i = 0; !p && bytes <= NSC_RESERVE_SLOT && i < NSC_RESERVE_N; i++)
    if (!__atomic_exchange_n(&reserve_held[i], 1, __ATOMIC_ACQUIRE)) {
      p = reserve[i];
      memset(p, 0, bytes);
    }
  return p;
}

void nsc_coll_free(void *p) {
  unsigned char *b = p;
  if (b >= &reserve[0][0] && b < &reserve[0][0] + sizeof reserve)
    __atomic_store_n(&reserve_held[(b - &reserve[0][0]) / NSC_RESERVE_SLOT], 0, __ATOMIC_RELEASE);
  else free(p);
}

_Static_assert(sizeof(nsc_work) <= NSC_RESERVE_SLOT, "a work item fits a reserve slot");
_Static_assert(sizeof(nsc_plan) <= NSC_RESERVE_SLOT, "a deferred call's plan fits a reserve slot");

nsc_work *nsc_work_new(struct nsc_comm *c, nsc_work_fn run, unsigned flags) {
  nsc_work *w = nsc_coll_zalloc(sizeof *w);
  if (!w) return NULL;
  w->run = run;
  w->flags = flags;
  w->c = c;
  if (c) nsc_comm_ref(c); /* the item's own: the caller's may go before it runs */
  return w;
}

nsc_work *nsc_work_of_call(struct nsc_comm *c, const nsc_backend *be, const nsc_call *k, nsc_work_fn run,
                           unsigned flags) {
  nsc_work *w = nsc_work_new(c, run, flags);
  if (!w) return NULL;
  w->be = be;
  w->stream = (nsc_stream)k->stream;
  w->op = k->op;
  w->src = k->send;
  w->dst = k->recv;
  w->count = k->arg;
  return w;
}

void nsc_work_free(nsc_work *w) {
  if (w->own) w->be->release(w->stream, w->own); /* stream-ordered: after what is queued */
  free(w->segs);
  free(w->joins);
  nsc_coll_free((void *)(uintptr_t)w->plan);
  nsc_comm_put(w->c);
  nsc_coll_free(w);
}

void nsc_work_hold_wire(nsc_work *w, void *p) {
  w->wirebuf = p;
  if (w->c && p) __atomic_add_fetch(&w->c->wire_out, 1, __ATOMIC_ACQ_REL);
}

void nsc_work_drop(nsc_work *w) {
  /* Unissued: its staging is simply not used (the block is reset at the
   * settle) and its stream is not named again. */
  if (w->c && w->wirebuf) __atomic_sub_fetch(&w->c->wire_out, 1, __ATOMIC_ACQ_REL);
  nsc_log_discard(&w->rec);
  nsc_work_free(w);
}

void nsc_work_drop_list(nsc_work *w) {
  while (w) {
    nsc_work *n = w->next;
    nsc_work_drop(w);
    w = n;
  }
}

nsc_work *nsc_work_take_members(nsc_work **list) {
  nsc_work *m = NULL, **mt = &m, *keep = NULL, **kt = &keep;
  nsc_member *prev = NULL;
  for (nsc_work *w = *list, *next; w; w = next) {
    next = w->next;
    w->next = NULL;
    if (!(w->flags & NSC_W_MEMBER)) {
      *kt = w;
      kt = &w->next;
      continue;
    }
    *mt = w;
    mt = &w->next;
    w->m.next = NULL;
    if (prev) prev->next = &w->m;
    prev = &w->m;
  }
  *list = keep;
  return m;
}

/* The entry is freed (comm.c): its list goes with it. */
static void drop_pending(struct nsc_comm *c) { nsc_pending_drop(&c->pending); }

int nsc_pending_reserve(struct nsc_comm *c) {
  pthread_mutex_lock(&c->lock);
  if (!c->pending) c->pending = nsc_coll_calloc(1, sizeof *c->pending);
  if (c->pending) c->drop = drop_pending;
  int ok = c->pending != NULL;
  pthread_mutex_unlock(&c->lock);
  return ok;
}

void nsc_pending_add(struct nsc_comm *c, nsc_work *w) {
  pthread_mutex_lock(&c->lock);
  if (c->pending) { /* reserved at the configuration check */
    w->pseq = ++c->pending->last_seq;
    append(&c->pending->head, &c->pending->tail, w);
  }
  pthread_mutex_unlock(&c->lock);
  if (!c->pending) { /* unreachable after a passed check, which reserved the list */
    nsc_warn("no list for parked work on communicator %p: a cast-back is lost", (void *)c->comm);
    nsc_work_drop(w);
  }
}

void nsc_pending_drop(struct nsc_pending **p) {
  if (!*p) return;
  nsc_work *w = (*p)->head;
  free(*p);
  *p = NULL;
  nsc_work_drop_list(w);
}

uint64_t nsc_pending_mark(struct nsc_comm *c) {
  pthread_mutex_lock(&c->lock);
  uint64_t m = c->pending ? c->pending->last_seq : 0;
  pthread_mutex_unlock(&c->lock);
  return m;
}

ncclResult_t nsc_pending_finish(struct nsc_comm *c, int ok, uint64_t upto) {
  pthread_mutex_lock(&c->finish_lock);
  pthread_mutex_lock(&c->lock);
  nsc_work *w = NULL, **tail = &w;
  if (c->pending) {
    while (c->pending->head && c->pending->head->pseq <= upto) {
      nsc_work *x = c->pending->head;
      c->pending->head = x->next;
      x->next = NULL;
      *tail = x;
      tail = &x->next;
    }
    if (!c->pending->head) c->pending->tail = NULL;
  }
  pthread_mutex_unlock(&c->lock);
  ncclResult_t r = ncclSuccess;
  while (w) { /* each item runs (ok) or is dropped (a failed completion) by its own run */
    nsc_work *n = w->next;
    w->next = NULL;
    ncclResult_t rr = nsc_work_run(w, ok);
    if (r == ncclSuccess) r = rr;
    w = n;
  }
  pthread_mutex_unlock(&c->finish_lock);
  return r;
}
