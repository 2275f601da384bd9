/* block.c — the staging block (staging.h, its first half): memory from the
 * backend (stream-ordered allocation on a GPU, malloc on the host), takes,
 * release points, the mechanics of growth. Nothing here knows a
 * communicator or issues a collective: the agreements are settle.c's and
 * the check's (coll/check.c), handed in as an nsc_staging_agreement.
 *
 * Every change of a field happens under the staging's spin lock; the
 * backend's alloc and release run outside it: a block to free is detached
 * first, a new block is allocated and then installed. A communicator's calls
 * come from one thread at a time (NCCL's rule); what may run beside them is
 * nsc_staging_used from a thread finishing nonblocking work. */
#include "staging.h"

#include <pthread.h>
#include <sched.h>
#include <stdlib.h>

#include "plan.h"

#define ALIGN NSC_STAGING_ALIGN /* plan.h: plans count staging as the block hands it out */
#define PER_THREAD_STREAM ((nsc_stream)0x2) /* CU_STREAM_PER_THREAD / cudaStreamPerThread */

static long long fault_n, fault_t;
static long long alloc_count, take_count;

/* Set by every communicator's first staging use (the same values, from the
 * configuration): atomics, since several threads may set them at once (a
 * group's after-work runs on a thread per device). */
void nsc_staging_fault_at(long long n, long long t) {
  __atomic_store_n(&fault_n, n, __ATOMIC_RELAXED);
  __atomic_store_n(&fault_t, t, __ATOMIC_RELAXED);
}

/* NCCLSHIM_FAULT_STAGE: this take's wait for the earlier use fails. */
static int take_fault(void) {
  long long t = __atomic_load_n(&fault_t, __ATOMIC_RELAXED);
  if (!t || __atomic_add_fetch(&take_count, 1, __ATOMIC_RELAXED) != t) return 0;
  nsc_backend_set_error("staging take %lld cannot wait for the block's earlier use (NCCLSHIM_FAULT_STAGE)", fault_t);
  return 1;
}

static void lock(nsc_staging *st) {
  while (__atomic_exchange_n(&st->lock, 1, __ATOMIC_ACQUIRE)) sched_yield();
}
static void unlock(nsc_staging *st) { __atomic_store_n(&st->lock, 0, __ATOMIC_RELEASE); }

static int backend_alloc(nsc_staging *st, const nsc_backend *be, nsc_stream s, size_t bytes, void **p) {
  long long k = __atomic_add_fetch(&alloc_count, 1, __ATOMIC_RELAXED);
  int rc;
  long long n = __atomic_load_n(&fault_n, __ATOMIC_RELAXED);
  if (n && k == n) {
    nsc_backend_set_error("staging allocation %lld failed (NCCLSHIM_FAULT_ALLOC)", k);
    rc = -1;
  } else {
    rc = be->alloc(s, bytes, p);
  }
  if (rc) __atomic_add_fetch(&st->failed, 1, __ATOMIC_RELAXED);
  return rc;
}

static uintptr_t thread_of(nsc_stream s) { return s == PER_THREAD_STREAM ? (uintptr_t)pthread_self() : 0; }

/* Frees a list of blocks after release point pt (never naming a stream:
 * the one they were used on may be gone); not under the lock. */
static void free_after(const nsc_backend *be, void *pt, nsc_block *b) {
  while (b) {
    nsc_block *n = b->next;
    nsc_release_after(be, pt, b->p);
    free(b);
    b = n;
  }
}

size_t nsc_staging_round(size_t bytes) {
  size_t want = (bytes + ALIGN - 1) / ALIGN * ALIGN;
  return want ? want : ALIGN;
}

/* Under the lock: counts a want of `want` bytes on s, and says whether it
 * fits in what is left of the block. */
static int want_fits(nsc_staging *st, const nsc_backend *be, nsc_stream s, size_t want) {
  if (!st->fbe) st->fbe = be; /* no initial block (NCCLSHIM_STAGING_BYTES=0): the first take's kind */
  if (be != st->fbe) return 0; /* another memory kind: never taken, never grown */
  st->fwant += want;
  st->gstream = s;
  st->ghave = 1;
  return !st->fdisabled && st->fblock && st->fused + want <= st->fcap;
}

int nsc_staging_fits(nsc_staging *st, const nsc_backend *be, nsc_stream s, size_t bytes) {
  lock(st);
  int fits = st->fused + nsc_staging_round(bytes) <= st->fcap && !st->fdisabled && st->fblock && be == st->fbe;
  if (!fits) (void)want_fits(st, be, s, nsc_staging_round(bytes));
  unlock(st);
  return fits;
}

/* plock: one mover of the release point at a time; held around waiting
 * for it too (a mover may free the point it replaces). */
static void plock_(nsc_staging *st) {
  while (__atomic_exchange_n(&st->plock, 1, __ATOMIC_ACQUIRE)) sched_yield();
}
static void punlock(nsc_staging *st) { __atomic_store_n(&st->plock, 0, __ATOMIC_RELEASE); }

int nsc_staging_take(nsc_staging *st, const nsc_backend *be, nsc_stream s, size_t bytes, void **p) {
  size_t want = nsc_staging_round(bytes);
  lock(st);
  if (!want_fits(st, be, s, want)) {
    unlock(st);
    return -1;
  }
  *p = (char *)st->fblock + st->fused;
  st->fused += want;
  nsc_stream prev = st->fstream;
  int had = st->fhave, same = had && prev == s && st->fthread == thread_of(s);
  st->fstream = s;
  st->fthread = thread_of(s);
  st->fhave = 1;
  st->fdirty = 1;
  unlock(st);
  if (take_fault()) return 1;
  if (same) return 0;
  /* An earlier take of this group on another stream (CU_STREAM_PER_THREAD
   * of another thread is one too, but cannot be named from here: its uses
   * are covered by the release point, which the group's first take and
   * each cast-back moved). */
  if (had && !(prev == PER_THREAD_STREAM && s == PER_THREAD_STREAM)) return be->join(s, prev) ? 1 : 0;
  /* The group's first take (or one after another thread's): after the
   * block's uses (and making) so far. */
  plock_(st);
  lock(st);
  void *pt = st->fpt;
  unlock(st);
  int bad = pt && be->wait_point && be->wait_point(s, pt);
  punlock(st);
  return bad ? 1 : 0;
}



void nsc_staging_used(nsc_staging *st, nsc_stream s) {
  /* One mover at a time (the owner's thread and one finishing nonblocking
   * work may both be here): each new point waits for the last one, so no
   * use drops out of the chain. */
  plock_(st);
  lock(st);
  const nsc_backend *be = st->fbe;
  void *old = st->fpt;
  unlock(st);
  if (be) {
    if (old && be->wait_point) (void)be->wait_point(s, old); /* the new point covers the earlier uses */
    void *pt = old;
    nsc_point(be, s, &pt); /* re-recorded in place, or a new one (the first, another context's) */
    lock(st);
    st->fpt = pt;
    if (st->fhave && st->fstream == s && st->fthread == thread_of(s)) st->fdirty = 0; /* that take's use is covered */
    unlock(st);
    if (old && pt != old) nsc_point_free(be, &old);
  }
  punlock(st);
}

int nsc_staging_fresh(nsc_staging *st, nsc_stream s) {
  lock(st);
  int skip = st->fused || st->fdisabled || !st->fblock;
  const nsc_backend *be = st->fbe;
  size_t cap = st->fcap;
  unlock(st);
  if (skip) return 0;
  int depth = 0;
  lock(st);
  for (nsc_block *b = st->fretired; b; b = b->next) depth++;
  unlock(st);
  if (depth >= 2) return 1; /* memory stays bounded: the caller runs the parked work instead */
  nsc_block *old = calloc(1, sizeof *old);
  void *p = NULL;
  if (!old || backend_alloc(st, be, s, cap, &p)) {
    free(old);
    return -1;
  }
  lock(st);
  old->p = st->fblock;
  old->next = st->fretired;
  st->fretired = old;
  st->fblock = p;
  unlock(st);
  return 0;
}

int nsc_staging_reserve(nsc_staging *st, const nsc_backend *be, nsc_stream s, size_t bytes) {
  lock(st);
  int have = st->fblock != NULL;
  unlock(st);
  if (have) return 1;
  void *p = NULL;
  if (backend_alloc(st, be, s, bytes, &p)) return 0;
  lock(st);
  st->fbe = be;
  unlock(st);
  nsc_staging_used(st, s); /* the first take waits for the allocation */
  lock(st);
  st->fblock = p;
  st->freserved = bytes;
  unlock(st);
  return 1;
}

void nsc_staging_agreed(nsc_staging *st, const nsc_backend *be, nsc_stream s, int ok) {
  void *drop = NULL;
  lock(st);
  if (ok && st->fblock) {
    st->fcap = st->freserved;
    st->fdisabled = 0; /* a check that failed before and is made again (every rank alike) */
  } else {
    drop = st->fblock;
    st->fblock = NULL;
    st->fcap = 0;
    st->fdisabled = 1;
  }
  unlock(st);
  if (drop) be->release(s, drop); /* s: the checking call's stream */
}


/* Blocks replaced while cast-backs were parked; not under the lock. */
void nsc_staging_free_retired(nsc_staging *st) {
  lock(st);
  nsc_block *b = st->fretired;
  st->fretired = NULL;
  unlock(st);
  if (!b) return;
  plock_(st); /* the point may not be replaced (and freed) while it is used here */
  free_after(st->fbe, st->fpt, b);
  punlock(st);
}

/* Applies a grown block's agreement (all: every rank got it); not under the
 * lock. A replaced block that parked cast-backs may still read is retired
 * (on the node taken with the grown block, so that retiring can never fail
 * on one rank only) instead of freed. */
static int apply_agreement(nsc_staging *st, int all, int parked) {
  void *drop = NULL;
  nsc_block *node = NULL;
  lock(st);
  if (all) {
    if (parked && st->fblock) {
      st->gnode->p = st->fblock;
      st->gnode->next = st->fretired;
      st->fretired = st->gnode;
    } else {
      drop = st->fblock;
      node = st->gnode;
    }
    st->fblock = st->gblock;
    st->fcap = st->gcap;
  } else {
    drop = st->gblock;
    node = st->gnode;
    st->fdisabled = 1;
  }
  st->gblock = NULL;
  st->gnode = NULL;
  st->gcap = 0;
  st->gtok = NULL;
  unlock(st);
  free(node);
  if (drop) {
    plock_(st);
    nsc_release_after(st->fbe, st->fpt, drop);
    punlock(st);
  }
  return all;
}

void nsc_staging_resolve(nsc_staging *st, const nsc_stream *now) {
  if (!st->gtok) return;
  int a;
  while ((a = st->gag->finish(st->gtok, 1, now, st->gag->arg)) < 0) {
  } /* at most two stages: the answer, then its confirmation */
  apply_agreement(st, a == 1, 1);
}

int nsc_staging_settle(nsc_staging *st, size_t limit, const nsc_staging_agreement *ag, int parked,
                       const nsc_stream *now) {
  /* This group's streams, alive now; forgotten once settled. */
  lock(st);
  nsc_stream fs = st->fstream, s = st->gstream;
  /* fs is named only on the thread that used it (CU_STREAM_PER_THREAD);
   * whether the block grows never depends on the thread (it issues an
   * agreement): s is then this thread's per-thread stream, of the same
   * context in any program that drives a communicator from several threads. */
  int fhave = st->fhave && st->fthread == thread_of(fs) && st->fdirty, ghave = st->ghave;
  st->fstream = st->gstream = NULL;
  st->fhave = st->ghave = 0;
  unlock(st);
  if (fhave && st->fbe) { /* the block's uses so far, unless a cast-back on that stream moved the point since */
    nsc_staging_used(st, fs);
    lock(st);
    st->fdirty = 0;
    unlock(st);
  }
  if (!parked) nsc_staging_free_retired(st);
  /* An agreement in flight moves one stage per settle (its answer, then the
   * confirmation that every rank read it: -1 until both are in); each stage
   * waits only if its exchange has not completed by now. */
  int grown = 0, pending = 0;
  if (st->gtok) {
    int a = st->gag->finish(st->gtok, 1, now ? now : ghave ? &s : NULL, st->gag->arg);
    if (a < 0) pending = 1;
    else grown = apply_agreement(st, a == 1, parked);
  }
  lock(st);
  size_t want = st->fwant;
  st->fused = st->fwant = 0;
  if (want > limit) want = limit; /* grown as far as allowed: calls beyond it stay plain */
  int skip = pending || st->fdisabled || !st->fbe || !ghave || want <= st->fcap;
  const nsc_backend *be = st->fbe;
  unlock(st);
  if (skip) return grown;
  void *p = NULL;
  nsc_block *node = calloc(1, sizeof *node);
  int ok = node && backend_alloc(st, be, s, want, &p) == 0;
  if (ok) nsc_staging_used(st, s); /* the point covers the grown block's allocation too */
  void *tok = ag->start(ok, be, s, ag->arg);
  lock(st);
  st->gblock = p;
  st->gnode = node;
  st->gcap = want;
  st->gtok = tok;
  st->gag = ag;
  unlock(st);
  if (!tok) apply_agreement(st, 0, parked);
  return grown;
}

int nsc_staging_may_issue(nsc_staging *st) {
  lock(st);
  int may = st->gtok != NULL || (st->ghave && st->fbe && !st->fdisabled && st->fwant > st->fcap);
  unlock(st);
  return may;
}

int nsc_staging_disabled(nsc_staging *st) {
  lock(st);
  int d = st->fdisabled;
  unlock(st);
  return d;
}

void nsc_staging_release(nsc_staging *st) {
  lock(st);
  void *tok = st->gtok, *g = st->gblock, *f = st->fblock;
  nsc_block *ret = st->fretired;
  free(st->gnode);
  st->gnode = NULL;
  st->gtok = st->gblock = st->fblock = NULL;
  st->fretired = NULL;
  unlock(st);
  if (tok) st->gag->finish(tok, -1, NULL, st->gag->arg);
  /* Every stream named here may be destroyed by now: frees go after the
   * release points, which name none. */
  if (st->fbe) {
    nsc_release_after(st->fbe, st->fpt, g);
    nsc_release_after(st->fbe, st->fpt, f);
    free_after(st->fbe, st->fpt, ret);
    nsc_point_free(st->fbe, &st->fpt);
  }
  st->fstream = st->gstream = NULL;
  st->fhave = st->ghave = 0;
}
