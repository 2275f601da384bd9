/* staging.c — see staging.h. Memory comes from the backend (stream-ordered
 * allocation on a GPU, malloc on the host); nothing here touches NCCL. */
#include "staging.h"

#include <stdlib.h>

#define ALIGN 256

static long long fault_n;
static long long alloc_count;

void nsc_staging_fault_at(long long n) { fault_n = n; }

static int backend_alloc(const nsc_backend *be, nsc_stream s, size_t bytes, void **p) {
  long long k = __atomic_add_fetch(&alloc_count, 1, __ATOMIC_RELAXED);
  if (fault_n && k == fault_n) {
    nsc_backend_set_error("staging allocation %lld failed (NCCLSHIM_FAULT_ALLOC)", k);
    return -1;
  }
  return be->alloc(s, bytes, p);
}

static nsc_arena *arena_for(nsc_staging *st, const nsc_backend *be, nsc_stream s) {
  for (nsc_arena *a = st->arenas; a; a = a->next)
    if (a->stream == s && a->be == be) return a;
  nsc_arena *a = calloc(1, sizeof *a);
  if (!a) return NULL;
  a->stream = s;
  a->be = be;
  a->next = st->arenas;
  st->arenas = a;
  return a;
}

static void free_blocks(nsc_arena *a, nsc_block *b) {
  while (b) {
    nsc_block *n = b->next;
    a->be->release(a->stream, b->p);
    free(b);
    b = n;
  }
}

static int add_block(nsc_arena *a, size_t cap) {
  nsc_block *b = calloc(1, sizeof *b);
  if (!b) return -1;
  if (backend_alloc(a->be, a->stream, cap, &b->p)) { free(b); return -1; }
  b->cap = cap;
  b->next = a->blocks;
  a->blocks = b;
  a->used = 0;
  return 0;
}

int nsc_staging_get(nsc_staging *st, const nsc_backend *be, nsc_stream s, size_t bytes,
                    size_t limit, void **p) {
  size_t want = (bytes + ALIGN - 1) / ALIGN * ALIGN;
  if (want == 0) want = ALIGN;
  nsc_arena *a = arena_for(st, be, s);
  if (!a) return NSC_STAGING_NOMEM;
  if (a->need + want > limit) return NSC_STAGING_LIMIT;
  if (!a->blocks || a->used + want > a->blocks->cap) {
    size_t cap = want;
    if (a->live == 0) {
      /* Nothing in flight from the host's view: rebuild as one bigger block
       * (stream-ordered release keeps the old one valid for queued work). */
      size_t grown = a->blocks ? 2 * a->blocks->cap : 0;
      if (a->peak > cap) cap = a->peak;
      if (grown > cap) cap = grown;
      if (cap > limit) cap = limit < want ? want : limit;
      free_blocks(a, a->blocks);
      a->blocks = NULL;
    }
    if (add_block(a, cap)) return NSC_STAGING_NOMEM;
  }
  *p = (char *)a->blocks->p + a->used;
  a->used += want;
  a->need += want;
  if (a->need > a->peak) a->peak = a->need;
  a->live++;
  return NSC_STAGING_OK;
}

void nsc_staging_done(nsc_staging *st, nsc_stream s) {
  for (nsc_arena *a = st->arenas; a; a = a->next) {
    if (a->stream != s || a->live == 0) continue;
    if (--a->live == 0) {
      a->used = 0;
      a->need = 0;
      if (a->blocks && a->blocks->next) {
        /* Several blocks were needed: keep none, the next get rebuilds one of the peak size. */
        free_blocks(a, a->blocks);
        a->blocks = NULL;
      }
    }
    return;
  }
}

int nsc_staging_fuse_take(nsc_staging *st, const nsc_backend *be, nsc_stream s, size_t bytes, void **p) {
  size_t want = (bytes + ALIGN - 1) / ALIGN * ALIGN;
  if (st->fbe && be != st->fbe) return -1; /* another memory kind: never fused, never grown */
  st->fwant += want;
  if (st->fdisabled || !st->fblock || st->fused + want > st->fcap) return -1;
  *p = (char *)st->fblock + st->fused;
  st->fused += want;
  if (st->fstream == s) return 0;
  int rc = be->join(s, st->fstream) ? 1 : 0;
  st->fstream = s;
  return rc;
}

int nsc_staging_fuse_fresh(nsc_staging *st, nsc_stream s) {
  if (st->fused || st->fdisabled || !st->fblock) return 0;
  nsc_block *old = calloc(1, sizeof *old);
  void *p = NULL;
  if (!old || backend_alloc(st->fbe, s, st->fcap, &p)) { free(old); return -1; }
  old->p = st->fblock;
  old->next = st->fretired;
  st->fretired = old;
  st->fblock = p;
  return 0;
}

int nsc_staging_fuse_reserve(nsc_staging *st, const nsc_backend *be, nsc_stream s, size_t bytes) {
  if (st->fblock) return 1;
  void *p = NULL;
  if (backend_alloc(be, s, bytes, &p)) return 0;
  st->fbe = be;
  st->fstream = s;
  st->fblock = p;
  st->freserved = bytes;
  return 1;
}

void nsc_staging_fuse_agreed(nsc_staging *st, const nsc_backend *be, nsc_stream s, int ok) {
  (void)be;
  (void)s;
  if (ok && st->fblock) {
    st->fcap = st->freserved;
    return;
  }
  if (st->fblock) st->fbe->release(st->fstream, st->fblock);
  st->fblock = NULL;
  st->fcap = 0;
  st->fdisabled = 1;
}

int nsc_staging_fuse_settle(nsc_staging *st, size_t limit, int (*agree)(int ok, const nsc_backend *be, void *arg),
                            void *arg, int parked) {
  size_t want = st->fwant;
  st->fused = st->fwant = 0;
  if (!parked) {
    for (nsc_block *b = st->fretired, *n; b; b = n) {
      n = b->next;
      st->fbe->release(st->fstream, b->p);
      free(b);
    }
    st->fretired = NULL;
  }
  if (st->fdisabled || !st->fbe || want <= st->fcap || want > limit) return 0;
  void *p = NULL;
  int ok = backend_alloc(st->fbe, st->fstream, want, &p) == 0;
  if (agree(ok, st->fbe, arg)) {
    nsc_block *old = st->fblock && parked ? calloc(1, sizeof *old) : NULL;
    if (old) {
      old->p = st->fblock;
      old->next = st->fretired;
      st->fretired = old;
    } else if (st->fblock && parked) {
      st->fbe->release(st->fstream, p); /* no host memory to retire the old one: keep it, do not grow */
      return 0;
    } else if (st->fblock) {
      st->fbe->release(st->fstream, st->fblock);
    }
    st->fblock = p;
    st->fcap = want;
    return 1;
  }
  if (p) st->fbe->release(st->fstream, p);
  st->fdisabled = 1;
  return 0;
}

void nsc_staging_release(nsc_staging *st) {
  if (st->fblock) st->fbe->release(st->fstream, st->fblock);
  st->fblock = NULL;
  for (nsc_block *b = st->fretired, *n; b; b = n) {
    n = b->next;
    st->fbe->release(st->fstream, b->p);
    free(b);
  }
  st->fretired = NULL;
  nsc_arena *a = st->arenas;
  while (a) {
    nsc_arena *n = a->next;
    free_blocks(a, a->blocks);
    free(a);
    a = n;
  }
  st->arenas = NULL;
}
