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

/* Not under the lock: the blocks are detached from every arena. */
static void free_blocks(const nsc_backend *be, nsc_stream s, nsc_block *b) {
  while (b) {
    nsc_block *n = b->next;
    be->release(s, b->p);
    free(b);
    b = n;
  }
}

int nsc_staging_get(nsc_staging *st, const nsc_backend *be, nsc_stream s, size_t bytes,
                    size_t limit, void **p) {
  size_t want = (bytes + ALIGN - 1) / ALIGN * ALIGN;
  if (want == 0) want = ALIGN;
  lock(st);
  nsc_arena *a = arena_for(st, be, s);
  if (!a) {
    unlock(st);
    return NSC_STAGING_NOMEM;
  }
  if (a->need + want > limit) {
    unlock(st);
    return NSC_STAGING_LIMIT;
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

void nsc_staging_done(nsc_staging *st, nsc_stream s) {
  nsc_block *old = NULL;
  const nsc_backend *be = NULL;
  uintptr_t t = thread_of(s);
  lock(st);
  for (nsc_arena *a = st->arenas; a; a = a->next) {
    if (a->stream != s || a->thread != t || a->live == 0) continue;
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
  if (old) free_blocks(be, s, old);
}

int nsc_staging_fuse_take(nsc_staging *st, const nsc_backend *be, nsc_stream s, size_t bytes, void **p) {
  size_t want = (bytes + ALIGN - 1) / ALIGN * ALIGN;
  int rc = -1;
  lock(st);
  nsc_arena *a = arena_for(st, be, s);
  if (a) { /* (no arena cannot happen on one rank only without the process failing) */
    a->fwant += want;
    if (!a->fdisabled && a->fblock && a->fused + want <= a->fcap) {
      *p = (char *)a->fblock + a->fused;
      a->fused += want;
      rc = 0;
    }
  }
  unlock(st);
  return rc;
}

int nsc_staging_fuse_reserve(nsc_staging *st, const nsc_backend *be, nsc_stream s, size_t bytes) {
  lock(st);
  nsc_arena *a = arena_for(st, be, s);
  int have = !a || a->fblock;
  unlock(st);
  if (have) return a != NULL;
  void *p = NULL;
  if (backend_alloc(st, be, s, bytes, &p)) return 0;
  lock(st);
  a->fblock = p;
  a->freserved = bytes;
  unlock(st);
  return 1;
}

void nsc_staging_fuse_agreed(nsc_staging *st, const nsc_backend *be, nsc_stream s, int ok) {
  void *drop = NULL;
  lock(st);
  nsc_arena *a = arena_for(st, be, s);
  if (a && ok && a->fblock) {
    a->fcap = a->freserved;
  } else if (a) {
    drop = a->fblock;
    a->fblock = NULL;
    a->fcap = 0;
    a->fdisabled = 1;
  }
  unlock(st);
  if (drop) be->release(s, drop);
}

/* Applies a grown block's agreement; not under the lock. */
static int apply_agreement(nsc_staging *st, nsc_arena *a, int all) {
  void *drop;
  lock(st);
  if (all) {
    drop = a->fblock;
    a->fblock = a->gblock;
    a->fcap = a->gcap;
  } else {
    drop = a->gblock;
    a->fdisabled = 1;
  }
  a->gblock = NULL;
  a->gcap = 0;
  a->gtok = NULL;
  unlock(st);
  if (drop) a->be->release(a->stream, drop);
  return all;
}

void nsc_staging_fuse_resolve(nsc_staging *st) {
  lock(st);
  nsc_arena *a = st->arenas;
  unlock(st);
  for (; a; a = a->next)
    if (a->gtok) apply_agreement(st, a, a->gag->finish(a->gtok, 1, a->gag->arg) == 1);
}

int nsc_staging_fuse_settle(nsc_staging *st, size_t limit, const nsc_fuse_agreement *ag) {
  int grown = 0;
  /* Arenas are only ever prepended and freed by nsc_staging_release, so the
   * list can be walked with the lock taken per arena. */
  lock(st);
  nsc_arena *a = st->arenas;
  unlock(st);
  for (; a; a = a->next) {
    if (a->gtok) grown += apply_agreement(st, a, a->gag->finish(a->gtok, 1, a->gag->arg) == 1);
    lock(st);
    size_t want = a->fwant;
    a->fused = a->fwant = 0;
    int skip = a->fdisabled || want <= a->fcap || want > limit;
    unlock(st);
    if (skip) continue;
    void *p = NULL;
    int ok = backend_alloc(st, a->be, a->stream, want, &p) == 0;
    void *tok = ag->start(ok, a->be, a->stream, ag->arg);
    lock(st);
    a->gblock = p;
    a->gcap = want;
    a->gtok = tok;
    a->gag = ag;
    unlock(st);
    if (!tok) apply_agreement(st, a, 0);
  }
  return grown;
}

void nsc_staging_release(nsc_staging *st) {
  lock(st);
  nsc_arena *a = st->arenas;
  st->arenas = NULL;
  unlock(st);
  while (a) {
    nsc_arena *n = a->next;
    if (a->gtok) a->gag->finish(a->gtok, 0, a->gag->arg);
    if (a->gblock) a->be->release(a->stream, a->gblock);
    if (a->fblock) a->be->release(a->stream, a->fblock);
    free_blocks(a->be, a->stream, a->blocks);
    free(a);
    a = n;
  }
}
