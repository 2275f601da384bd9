/* staging.c — see staging.h. Memory comes from the backend (stream-ordered
 * allocation on a GPU, malloc on the host); nothing here touches NCCL.
 *
 * Every change of an arena happens under the staging's spin lock; the
 * backend's alloc and release run outside it: a block to free is detached
 * first, a new block is allocated and then installed. A communicator's calls
 * come from one thread at a time (NCCL's rule); what may run beside them is
 * nsc_staging_done from a thread finishing nonblocking work, which only
 * detaches blocks. */
#include "staging.h"

#include <pthread.h>
#include <sched.h>
#include <stdlib.h>

#define ALIGN 256
#define PER_THREAD_STREAM ((nsc_stream)0x2) /* CU_STREAM_PER_THREAD / cudaStreamPerThread */

static long long fault_n;
static long long alloc_count;

void nsc_staging_fault_at(long long n) { fault_n = n; }

static void lock(nsc_staging *st) {
  while (__atomic_exchange_n(&st->lock, 1, __ATOMIC_ACQUIRE)) sched_yield();
}
static void unlock(nsc_staging *st) { __atomic_store_n(&st->lock, 0, __ATOMIC_RELEASE); }

static int backend_alloc(nsc_staging *st, const nsc_backend *be, nsc_stream s, size_t bytes, void **p) {
  long long k = __atomic_add_fetch(&alloc_count, 1, __ATOMIC_RELAXED);
  int rc;
  if (fault_n && k == fault_n) {
    nsc_backend_set_error("staging allocation %lld failed (NCCLSHIM_FAULT_ALLOC)", k);
    rc = -1;
  } else {
    rc = be->alloc(s, bytes, p);
  }
  if (rc) __atomic_add_fetch(&st->failed, 1, __ATOMIC_RELAXED);
  return rc;
}

static uintptr_t thread_of(nsc_stream s) { return s == PER_THREAD_STREAM ? (uintptr_t)pthread_self() : 0; }

/* Under the lock. */
static nsc_arena *find(nsc_staging *st, const nsc_backend *be, nsc_stream s) {
  uintptr_t t = thread_of(s);
  for (nsc_arena *a = st->arenas; a; a = a->next)
    if (a->stream == s && a->be == be && a->thread == t) return a;
  return NULL;
}

/* Under the lock. */
static nsc_arena *arena_for(nsc_staging *st, const nsc_backend *be, nsc_stream s) {
  nsc_arena *a = find(st, be, s);
  if (a) return a;
  if (!(a = calloc(1, sizeof *a))) return NULL;
  a->stream = s;
  a->thread = thread_of(s);
  a->be = be;
  a->next = st->arenas;
  st->arenas = a;
  return a;
}

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

/* Not under the lock: the blocks are detached from every arena. */
static void free_blocks(const nsc_backend *be, nsc_stream s, nsc_block *b) {
  while (b) {
    nsc_block *n = b->next;
    be->release(s, b->p);
    free(b);
    b = n;
  }
}

/* Moves arena a's release point to the end of what is enqueued on s (its
 * stream, alive: the current call's). The point is made outside the lock and
 * installed under it; a concurrent maker's extra one is given back. */
static void arena_point(nsc_staging *st, nsc_arena *a, const nsc_backend *be, nsc_stream s) {
  lock(st);
  void *old = a->pt;
  unlock(st);
  void *pt = old;
  nsc_point(be, s, &pt); /* re-recorded in place, or a new point (the first, or another context's) */
  void *extra = NULL;
  lock(st);
  if (a->pt == old) a->pt = pt;
  else if (pt != a->pt) extra = pt; /* another thread installed one meanwhile */
  unlock(st);
  if (extra) nsc_point_free(be, &extra);
}

size_t nsc_staging_round(size_t bytes) {
  size_t want = (bytes + ALIGN - 1) / ALIGN * ALIGN;
  return want ? want : ALIGN;
}

int nsc_staging_get(nsc_staging *st, const nsc_backend *be, nsc_stream s, size_t bytes,
                    size_t limit, void **p) {
  size_t want = nsc_staging_round(bytes);
  lock(st);
  nsc_arena *a = arena_for(st, be, s);
  if (!a) {
    unlock(st);
    return NSC_STAGING_NOMEM;
  }
  nsc_block *old = NULL;
  if (!a->blocks || a->used + want > a->blocks->cap) {
    size_t cap = want;
    if (a->live == 0) {
      /* Nothing in flight from the host's view: rebuild as one bigger block
       * (stream-ordered release keeps the old one valid for queued work). */
      size_t grown = a->blocks ? 2 * a->blocks->cap : 0;
      if (a->peak > cap) cap = a->peak;
      if (grown > cap) cap = grown;
      if (cap > limit) cap = limit < want ? want : limit;
      old = a->blocks;
      a->blocks = NULL;
    }
    unlock(st);
    free_blocks(be, s, old);
    nsc_block *b = calloc(1, sizeof *b);
    if (!b || backend_alloc(st, be, s, cap, &b->p)) {
      free(b);
      return NSC_STAGING_NOMEM;
    }
    b->cap = cap;
    arena_point(st, a, be, s); /* the allocation is on s: a point covers it from the start */
    lock(st);
    b->next = a->blocks;
    a->blocks = b;
    a->used = 0;
  }
  *p = (char *)a->blocks->p + a->used;
  a->used += want;
  a->need += want;
  if (a->need > a->peak) a->peak = a->need;
  a->live++;
  unlock(st);
  return NSC_STAGING_OK;
}

static void done(nsc_staging *st, nsc_stream s, int mark);
void nsc_staging_done(nsc_staging *st, nsc_stream s) { done(st, s, 1); }
void nsc_staging_dropped(nsc_staging *st, nsc_stream s) { done(st, s, 0); }

/* mark: move the arena's release point behind the call's use (not for work
 * dropped unissued, whose stream may be gone by then). */
static void done(nsc_staging *st, nsc_stream s, int mark) {
  nsc_block *old = NULL;
  const nsc_backend *be = NULL;
  nsc_arena *used = NULL;
  uintptr_t t = thread_of(s);
  lock(st);
  for (nsc_arena *a = st->arenas; a; a = a->next) {
    if (a->stream != s || a->thread != t || a->live == 0) continue;
    used = a;
    if (--a->live == 0) {
      a->used = 0;
      a->need = 0;
      if (a->blocks && a->blocks->next) {
        /* Several blocks were needed: keep none, the next get rebuilds one of the peak size. */
        old = a->blocks;
        be = a->be;
        a->blocks = NULL;
      }
    }
    break;
  }
  unlock(st);
  if (old && mark) free_blocks(be, s, old);
  else if (old) free_after(used->be, used->pt, old);
  if (used && mark) arena_point(st, used, used->be, s); /* arenas live until the communicator ends */
}

int nsc_staging_fuse_take(nsc_staging *st, const nsc_backend *be, nsc_stream s, size_t bytes, void **p) {
  size_t want = (bytes + ALIGN - 1) / ALIGN * ALIGN;
  lock(st);
  if (st->fbe && be != st->fbe) { /* another memory kind: never fused, never grown */
    unlock(st);
    return -1;
  }
  st->fwant += want;
  st->gstream = s;
  st->ghave = 1;
  if (st->fdisabled || !st->fblock || st->fused + want > st->fcap) {
    unlock(st);
    return -1;
  }
  *p = (char *)st->fblock + st->fused;
  st->fused += want;
  nsc_stream prev = st->fstream;
  int had = st->fhave;
  void *pt = st->fpt;
  st->fstream = s;
  st->fhave = 1;
  unlock(st);
  if (had && prev == s) return 0;
  if (had) return be->join(s, prev) ? 1 : 0; /* an earlier take of this group */
  /* the group's first take: after the block's uses (and making) so far */
  return pt && be->wait_point && be->wait_point(s, pt) ? 1 : 0;
}

void nsc_staging_fuse_used(nsc_staging *st, nsc_stream s) {
  lock(st);
  const nsc_backend *be = st->fbe;
  void *old = st->fpt;
  unlock(st);
  if (!be) return;
  if (old && be->wait_point) (void)be->wait_point(s, old); /* the new point covers the earlier uses */
  void *pt = old;
  nsc_point(be, s, &pt);
  lock(st);
  if (st->fpt == old) st->fpt = pt;
  unlock(st);
}

int nsc_staging_fuse_fresh(nsc_staging *st, nsc_stream s) {
  lock(st);
  int skip = st->fused || st->fdisabled || !st->fblock;
  const nsc_backend *be = st->fbe;
  size_t cap = st->fcap;
  unlock(st);
  if (skip) return 0;
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

int nsc_staging_fuse_reserve(nsc_staging *st, const nsc_backend *be, nsc_stream s, size_t bytes) {
  lock(st);
  int have = st->fblock != NULL;
  unlock(st);
  if (have) return 1;
  void *p = NULL;
  if (backend_alloc(st, be, s, bytes, &p)) return 0;
  void *pt = NULL;
  nsc_point(be, s, &pt); /* the first take waits for the allocation */
  lock(st);
  st->fbe = be;
  st->fpt = pt;
  st->fblock = p;
  st->freserved = bytes;
  unlock(st);
  return 1;
}

void nsc_staging_fuse_agreed(nsc_staging *st, const nsc_backend *be, nsc_stream s, int ok) {
  void *drop = NULL;
  lock(st);
  if (ok && st->fblock) {
    st->fcap = st->freserved;
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
static void free_retired(nsc_staging *st) {
  lock(st);
  nsc_block *b = st->fretired;
  st->fretired = NULL;
  unlock(st);
  free_after(st->fbe, st->fpt, b);
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
  if (drop) nsc_release_after(st->fbe, st->fpt, drop);
  return all;
}

void nsc_staging_fuse_resolve(nsc_staging *st) {
  if (st->gtok) apply_agreement(st, st->gag->finish(st->gtok, 1, st->gag->arg) == 1, 1);
}

int nsc_staging_fuse_settle(nsc_staging *st, size_t limit, const nsc_fuse_agreement *ag, int parked) {
  /* This group's streams, alive now; forgotten once settled. */
  lock(st);
  nsc_stream fs = st->fstream, s = st->gstream;
  int fhave = st->fhave, ghave = st->ghave;
  st->fstream = st->gstream = NULL;
  st->fhave = st->ghave = 0;
  unlock(st);
  if (fhave && st->fbe) nsc_staging_fuse_used(st, fs); /* the block's uses so far */
  if (!parked) free_retired(st);
  int grown = 0;
  if (st->gtok) grown = apply_agreement(st, st->gag->finish(st->gtok, 1, st->gag->arg) == 1, parked);
  lock(st);
  size_t want = st->fwant;
  st->fused = st->fwant = 0;
  int skip = st->fdisabled || !st->fbe || !ghave || want <= st->fcap || want > limit;
  const nsc_backend *be = st->fbe;
  unlock(st);
  if (skip) return grown;
  void *p = NULL;
  nsc_block *node = calloc(1, sizeof *node);
  int ok = node && backend_alloc(st, be, s, want, &p) == 0;
  if (ok) nsc_staging_fuse_used(st, s); /* the point covers the grown block's allocation too */
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

void nsc_staging_release(nsc_staging *st) {
  lock(st);
  nsc_arena *a = st->arenas;
  st->arenas = NULL;
  void *tok = st->gtok, *g = st->gblock, *f = st->fblock;
  nsc_block *ret = st->fretired;
  free(st->gnode);
  st->gnode = NULL;
  st->gtok = st->gblock = st->fblock = NULL;
  st->fretired = NULL;
  unlock(st);
  if (tok) st->gag->finish(tok, -1, st->gag->arg);
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
  while (a) {
    nsc_arena *n = a->next;
    free_after(a->be, a->pt, a->blocks);
    nsc_point_free(a->be, &a->pt);
    free(a);
    a = n;
  }
}
