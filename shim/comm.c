/* comm.c — the communicator table: a small chained hash under one mutex,
 * what the shim does when a communicator is created (its CUDA context's
 * one-time setup, after the real init returned), and the optimizer step's
 * report of the communicators' skipped passes (ncclshim_optimizer_step).
 *
 * Lookups are on the per-call path, so the critical section is a few loads;
 * creation allocates outside the lock and races are resolved by re-checking. */
#include "comm.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "core.h"
#include "real.h"

nsc_comm *nsc_comm_table[NSC_COMM_BUCKETS];
pthread_mutex_t nsc_comm_table_lock = PTHREAD_MUTEX_INITIALIZER;

void nsc_accum_release(nsc_comm *c) {
  for (int i = 0; i < c->nagree; i++)
    if (c->agree[i].x.live) c->agree[i].x.be->oob_abandon(c->agree[i].x.buf, c->agree[i].x.s); /* never waits */
  c->nagree = 0;
}

void nsc_learn_release(nsc_comm *c) {
  nsc_learn *l = &c->learn;
  for (int i = 0; i < NSC_LEARN_PENDING; i++)
    if (l->pend[i].be) {
      l->pend[i].be->mark_release(&l->pend[i].m[0]);
      l->pend[i].be->mark_release(&l->pend[i].m[1]);
      l->pend[i].be = NULL;
    }
  nsc_learn_drop_open(c);
  if (l->x.live) l->x.be->oob_abandon(l->x.buf, l->x.s); /* never waits */
  l->x.live = 0;
  l->issued = 0;
}

void nsc_learn_drop_open(nsc_comm *c) {
  nsc_learn *l = &c->learn;
  if (l->m0_be) l->m0_be->mark_release(&l->m0);
  l->m0_be = NULL;
  l->at = NSC_LEARN_AT_NONE;
}

void nsc_learn_time_begin(nsc_comm *c, const nsc_backend *be, nsc_stream s, int at) {
  nsc_learn *l = &c->learn;
  if (l->at != at || l->take < 0) return;
  if (l->m0_be || be->mark(s, &l->m0) != 0) l->at = NSC_LEARN_AT_NONE; /* not timed: a peer may time it */
  else l->m0_be = be;
}

void nsc_learn_time_end(nsc_comm *c, const nsc_backend *be, nsc_stream s, int at, ncclResult_t r) {
  nsc_learn *l = &c->learn;
  if (l->at != at || l->take < 0) return;
  l->at = NSC_LEARN_AT_NONE; /* one launch per call */
  if (!l->m0_be) return;
  int i = 0;
  while (i < NSC_LEARN_PENDING && l->pend[i].be) i++;
  if (r == ncclSuccess && i < NSC_LEARN_PENDING && be->mark(s, &l->pend[i].m[1]) == 0) {
    l->pend[i].m[0] = l->m0;
    l->pend[i].size = l->take;
    l->pend[i].be = be;
  } else {
    be->mark_release(&l->m0);
  }
  l->m0_be = NULL;
}

static void free_entry(nsc_comm *c) {
  nsc_comm_put(c->hier_xc); /* hier's internal entry lives as long as its parent's (calls may still be inside) */
  if (c->drop) c->drop(c); /* what the rooms above allocated in the entry (queue.c, staging.c) */
  if (c->drop_stage) c->drop_stage(c);
  nsc_accum_release(c);
  nsc_learn_release(c);
  nsc_accum_free(&c->accum);
  nsc_ef_free(&c->ef);
  nsc_topo_free(&c->topo);
  if (nsc_log_on()) { /* the log is told the process's totals before it writes this communicator's summary */
    nsc_tell_log();
  }
  nsc_log_comm_close(&c->log);
  pthread_mutex_destroy(&c->lock);
  pthread_mutex_destroy(&c->finish_lock);
  free(c);
}

nsc_comm *nsc_comm_create(ncclComm_t comm) {
  nsc_comm *c;
  nsc_comm *fresh = calloc(1, sizeof *fresh);
  if (!fresh) return NULL;
  fresh->comm = comm;
  fresh->refs = 2; /* the table's and the caller's */
  fresh->rank = -1;
  nsc_log_comm_init(&fresh->log, (uint64_t)(uintptr_t)comm);
  pthread_mutex_init(&fresh->lock, NULL);
  pthread_mutex_init(&fresh->finish_lock, NULL);
  nsc_accum_init(&fresh->accum);
  nsc_fab_init(&fresh->learn.f);
  pthread_mutex_lock(&nsc_comm_table_lock);
  c = nsc_comm_lookup_locked(comm);
  if (c) {
    __atomic_add_fetch(&c->refs, 1, __ATOMIC_RELAXED);
  } else {
    unsigned b = nsc_comm_bucket(comm);
    fresh->next = nsc_comm_table[b];
    nsc_comm_table[b] = fresh;
    c = fresh;
    fresh = NULL;
  }
  pthread_mutex_unlock(&nsc_comm_table_lock);
  if (fresh) {
    pthread_mutex_destroy(&fresh->lock);
    pthread_mutex_destroy(&fresh->finish_lock);
    free(fresh);
  }
  return c;
}

/* A reference is taken only from one already held (the table's, found under
 * its lock, or the caller's), so the count cannot rise from 0: it is an
 * atomic of its own (comm.h), and letting go of one takes no lock (the
 * forwarded path pays for every lock it takes). */

void nsc_comm_put(nsc_comm *c) {
  if (c && __atomic_sub_fetch(&c->refs, 1, __ATOMIC_ACQ_REL) == 0) free_entry(c);
}

/* The optimizer's step (ncclshim.h), counted in the core; it answers 1
 * when some communicator's last accumulable call was answered locally since
 * the last step, each such mark cleared (here: the marks are the
 * communicators'). */
__attribute__((visibility("default"))) int ncclshim_optimizer_step(void) {
  __atomic_add_fetch(&nsc_steps, 1, __ATOMIC_ACQ_REL);
  int any = 0;
  pthread_mutex_lock(&nsc_comm_table_lock);
  for (unsigned b = 0; b < NSC_COMM_BUCKETS; b++)
    for (nsc_comm *c = nsc_comm_table[b]; c; c = c->next) any |= __atomic_exchange_n(&c->accum_skip, 0, __ATOMIC_ACQ_REL);
  pthread_mutex_unlock(&nsc_comm_table_lock);
  return any;
}

nsc_comm *nsc_comm_detach(ncclComm_t comm) {
  pthread_mutex_lock(&nsc_comm_table_lock);
  nsc_comm **pp = &nsc_comm_table[nsc_comm_bucket(comm)], *c = NULL;
  for (; *pp; pp = &(*pp)->next)
    if ((*pp)->comm == comm) {
      c = *pp;
      *pp = c->next;
      c->next = NULL;
      break; /* the table's reference passes to the caller */
    }
  pthread_mutex_unlock(&nsc_comm_table_lock);
  return c;
}

/* NCCL's init synchronises the device anyway: the shim's one-time context
 * setup (module load, pinned and device allocations) costs nothing extra
 * here, and would be hidden synchronisation inside a user's collective. */
ncclResult_t nsc_comm_created(ncclResult_t r, const int *devs, int ndev) {
  if ((r == ncclSuccess || r == ncclInProgress) && nsc_activate() == NSC_ACTIVE) nsc_backend_prepare(devs, ndev);
  return r;
}

ncclResult_t nsc_ended(const nsc_comm *c) {
  char m[160];
  snprintf(m, sizeof m, "communicator %p was destroyed or aborted while the shim was issuing its calls",
           (void *)c->comm);
  nsc_note_error(m);
  return ncclInvalidUsage;
}

ncclResult_t nsc_wait_nonblocking(const nsc_comm *c, ncclComm_t on) {
  ncclResult_t e = ncclInProgress;
  if (!nsc_real.CommGetAsyncError) return ncclSuccess;
  while (e == ncclInProgress) {
    ncclResult_t r = NSC_ISSUE(c, CommGetAsyncError(on, &e));
    if (r != ncclSuccess) return r;
    if (e == ncclInProgress) sched_yield();
  }
  return e;
}
