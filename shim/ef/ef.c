/* ef.c — the error-feedback slots of ef.h: learning the call sequence's
 * period from the calls' keys, the locked slots, and each slot's residual
 * memory. */
#include <stdlib.h>
#include <string.h>

#include "ef.h"

void nsc_ef_init(nsc_ef *e) {
  memset(e, 0, sizeof *e);
  e->limit = NSC_EF_FIRST_LIMIT;
}

/* Frees after the slot's release point, never on its stream (which the
 * caller may have destroyed since). */
static void drop_buffers(nsc_ef *e, nsc_ef_slot *sl) {
  if (sl->in) nsc_release_after(sl->be, sl->pt, sl->in);
  if (sl->out) nsc_release_after(sl->be, sl->pt, sl->out);
  nsc_point_free(sl->be, &sl->pt);
  e->bytes -= sl->bytes;
  sl->in = sl->out = NULL;
  sl->in_n = sl->out_n = sl->bytes = 0;
  sl->have = sl->none = 0;
  sl->be = NULL;
  sl->s = NULL;
}

static void drop_slots(nsc_ef *e) {
  for (size_t i = 0; i < e->len; i++) {
    if (e->slot[i].have) e->dropped++;
    drop_buffers(e, &e->slot[i]);
  }
  free(e->slot);
  e->slot = NULL;
  e->len = e->pos = 0;
}

void nsc_ef_used(nsc_ef_slot *sl, nsc_stream s) {
  if (sl && sl->in) nsc_point(sl->be, s, &sl->pt);
}

void nsc_ef_free(nsc_ef *e) {
  drop_slots(e);
  free(e->hist);
  free(e->border);
  nsc_ef_init(e);
}

static int key_eq(const nsc_ef_sig *a, const nsc_ef_sig *b) {
  return a->count == b->count && a->rs == b->rs && a->fmt == b->fmt && a->block == b->block && a->nranks == b->nranks &&
         a->in == b->in;
}
static int bufs_eq(const nsc_ef_sig *a, const nsc_ef_sig *b) { return a->recv == b->recv && a->send == b->send; }

static int sig_eq(const nsc_ef_sig *a, const nsc_ef_sig *b) { return key_eq(a, b) && bufs_eq(a, b); }

static uint64_t bufs_hash(const nsc_ef_sig *s) {
  uint64_t h = (uint64_t)s->recv * 0x9e3779b97f4a7c15ull;
  return (h ^ (h >> 31) ^ (uint64_t)s->send) * 0xbf58476d1ce4e5b9ull;
}

/* What a slot's call in these buffers is (ef.h "Which residual a call is
 * fed"), the buffers remembered. *d: for BACK, the calls since the slot last
 * held them. */
enum { HELD_SAME, HELD_NEW, HELD_BACK };
static int held(nsc_ef_slot *sl, const nsc_ef_sig *sig, size_t span, size_t *d) {
  uint64_t h = bufs_hash(sig);
  if (sl->held_n && sl->held[sl->held_at] == h) {
    sl->held_span[sl->held_at] = span;
    return HELD_SAME;
  }
  for (unsigned i = 0; i < sl->held_n; i++)
    if (sl->held[i] == h) {
      *d = span - sl->held_span[i];
      sl->held_span[i] = span;
      sl->held_at = i;
      sl->fresh = 1;
      sl->back++;
      return HELD_BACK;
    }
  sl->held_at = sl->held_n < NSC_EF_RING ? sl->held_n++ : (sl->held_at + 1) % NSC_EF_RING;
  sl->held[sl->held_at] = h;
  sl->held_span[sl->held_at] = span;
  if (++sl->fresh >= NSC_EF_PROBATION) sl->proven = 1;
  sl->back = 0;
  return HELD_NEW;
}

/* The longest proper border of hist[0..i] after border[i-1] (KMP), under eq. */
static uint32_t next_border(const nsc_ef *e, const uint32_t *border, size_t i,
                            int (*eq)(const nsc_ef_sig *, const nsc_ef_sig *)) {
  if (!i) return 0;
  uint32_t k = border[i - 1];
  while (k && !eq(&e->hist[k], &e->hist[i])) k = border[k - 1];
  return eq(&e->hist[k], &e->hist[i]) ? k + 1 : 0;
}

/* Append a call to the history, its borders and the largest distance of an
 * exact recurrence; returns the distance to this call's latest exact
 * occurrence (0: none), or -1 without memory. */
static long hist_push(nsc_ef *e, const nsc_ef_sig *sig) {
  if (e->hn == e->hcap) {
    size_t cap = e->hcap ? 2 * e->hcap : 64;
    if (cap > NSC_EF_MAX_HIST) cap = NSC_EF_MAX_HIST;
    nsc_ef_sig *h = realloc(e->hist, cap * sizeof *h);
    if (!h) return -1;
    e->hist = h;
    uint32_t *b = realloc(e->border, 2 * cap * sizeof *b); /* keys, then exact */
    if (!b) return -1;
    if (e->hcap) memmove(b + cap, b + e->hcap, e->hcap * sizeof *b);
    e->border = b;
    e->hcap = cap;
  }
  size_t i = e->hn++;
  e->hist[i] = *sig;
  e->border[i] = next_border(e, e->border, i, key_eq);
  e->border[e->hcap + i] = next_border(e, e->border + e->hcap, i, sig_eq);
  for (size_t j = i; j-- > 0;)
    if (sig_eq(&e->hist[j], sig)) {
      if (i - j > e->dist) e->dist = i - j;
      return (long)(i - j);
    }
  return 0;
}

/* Learning starts again at history index `from` (the calls before it go). */
static void reanchor(nsc_ef *e, size_t from) {
  size_t n = e->hn - from;
  memmove(e->hist, e->hist + from, n * sizeof *e->hist);
  e->hn = 0;
  e->dist = e->floor;
  for (size_t i = 0; i < n; i++) {
    nsc_ef_sig s = e->hist[i];
    (void)hist_push(e, &s); /* within the allocated history: cannot fail */
  }
  e->span = n;
}

/* Lock the period p of the history: slot q = history position mod p, each
 * slot told the buffers its positions held. */
static nsc_ef_slot *lock(nsc_ef *e, size_t p) {
  nsc_ef_slot *sl = calloc(p, sizeof *sl);
  if (!sl) return NULL;
  for (size_t h = 0; h < e->hn; h++) {
    size_t d;
    (void)held(&sl[h % p], &e->hist[h], e->span - (e->hn - 1 - h), &d);
  }
  for (size_t q = 0; q < p; q++) {
    size_t h = e->hn - p + q; /* the latest call at each position */
    sl[h % p].sig = e->hist[h];
    sl[h % p].stable = bufs_eq(&e->hist[h], &e->hist[h - p]);
    sl[h % p].uses = 1; /* its bucket came already in the first period */
  }
  e->slot = sl;
  e->len = p;
  e->floor = 0; /* it served this learning */
  size_t cur = (e->hn - 1) % p;
  e->pos = (cur + 1) % p;
  free(e->hist);
  free(e->border);
  e->hist = NULL;
  e->border = NULL;
  e->hn = e->hcap = e->dist = 0;
  sl[cur].uses++;
  return &sl[cur];
}

static nsc_ef_slot *learn(nsc_ef *e, const nsc_ef_sig *sig) {
  if (!e->limit) e->limit = NSC_EF_FIRST_LIMIT; /* a zeroed nsc_ef is a fresh one */
  if (e->hn == NSC_EF_MAX_HIST) reanchor(e, e->hn - 1);
  long d = hist_push(e, sig);
  if (d < 0) return NULL;
  size_t n = e->hn, pk = n - e->border[n - 1], px = n - e->border[e->hcap + n - 1];
  /* exact signatures periodic (stable buffers) first; keys once no exact
   * recurrence seen is longer than a period could still show */
  if (n >= 2 * px && px <= NSC_EF_MAX_SLOTS) return lock(e, px);
  if (n >= 2 * pk && n >= 2 * e->dist && pk <= NSC_EF_MAX_SLOTS) return lock(e, pk);
  if (pk < n) return NULL; /* a border: the anchor's period may still come */
  /* No border: the anchor may never recur (DDP's whole-model first bucket,
   * a one-off call). This call's own buffers coming again (distance >= 2)
   * re-anchor there: the same bucket came again. After a break, only where
   * the calls between hold another key too (a run of equal keys in
   * alternating buffers, one allocator's pattern, is no evidence: it would
   * lock too short again and again). Else the patience. */
  int other = !e->breaks;
  for (size_t j = n - 1 - (size_t)(d > 0 ? d : 0); d >= 2 && !other && j < n - 1; j++)
    other = !key_eq(&e->hist[j], sig);
  if (d >= 2 && other) reanchor(e, n - 1 - (size_t)d);
  else if (e->span >= e->limit) { /* at this call, with twice the patience */
    reanchor(e, n - 1);
    e->limit = 2 * e->limit < NSC_EF_MAX_HIST ? 2 * e->limit : NSC_EF_MAX_HIST;
  }
  return NULL;
}

/* A call in stable buffers of another slot, where the expected one's were
 * stable: the sequence is out of step. */
static int contradicted(const nsc_ef *e, const nsc_ef_slot *sl, const nsc_ef_sig *sig) {
  if (bufs_eq(&sl->sig, sig) || !sl->stable) return 0;
  for (size_t q = 0; q < e->len; q++)
    if (&e->slot[q] != sl && e->slot[q].stable && key_eq(&e->slot[q].sig, sig) && bufs_eq(&e->slot[q].sig, sig))
      return 1;
  return 0;
}

nsc_ef_slot *nsc_ef_next(nsc_ef *e, const nsc_ef_sig *sig) {
  e->span++;
  if (!e->len) return learn(e, sig);
  nsc_ef_slot *sl = &e->slot[e->pos];
  if (key_eq(&sl->sig, sig) && !contradicted(e, sl, sig)) {
    size_t d = 0;
    int h = held(sl, sig, e->span, &d);
    if (h == HELD_BACK && sl->back >= 2) { /* buckets share this slot: learn by buffers */
      if (d <= NSC_EF_MAX_SLOTS && d > e->floor) e->floor = d;
      goto broken;
    }
    /* fed only from its own buffers' call, or as a proven fresh slot */
    int same = bufs_eq(&sl->sig, sig);
    if (!same && !(h == HELD_NEW && sl->proven)) sl->have = 0;
    sl->stable = same;
    sl->sig = *sig;
    sl->uses++;
    e->pos = (e->pos + 1) % e->len;
    return sl;
  }
broken:;
  /* the sequence broke: drop every slot, learn again from this call */
  size_t lived = e->span;
  drop_slots(e);
  e->breaks++;
  e->hn = 0;
  e->dist = e->floor;
  e->span = 1;
  e->limit = 2 * lived < NSC_EF_FIRST_LIMIT ? NSC_EF_FIRST_LIMIT : 2 * lived < NSC_EF_MAX_HIST ? 2 * lived : NSC_EF_MAX_HIST;
  (void)hist_push(e, sig);
  return NULL;
}

int nsc_ef_buffers(nsc_ef *e, nsc_ef_slot *sl, const nsc_backend *be, nsc_stream s, size_t in_n, size_t out_n,
                   size_t max_bytes) {
  if (sl->in && (sl->be != be || sl->s != s || sl->in_n != in_n || sl->out_n != out_n)) {
    drop_buffers(e, sl); /* another backend or stream: start again */
  }
  if (sl->none || sl->uses < 2) return -1;
  if (sl->in) return 0;
  size_t bytes = 4 * (in_n + out_n);
  if (e->bytes + bytes > max_bytes) {
    sl->none = 1;
    return -1;
  }
  sl->be = be;
  sl->s = s;
  if (be->alloc(s, 4 * in_n, (void **)&sl->in)) sl->in = NULL;
  if (sl->in && out_n && be->alloc(s, 4 * out_n, (void **)&sl->out)) {
    be->release(s, sl->in);
    sl->in = NULL;
  }
  if (!sl->in) {
    sl->none = 1;
    sl->be = NULL;
    sl->s = NULL;
    return -1;
  }
  sl->in_n = in_n;
  sl->out_n = out_n;
  sl->bytes = bytes;
  sl->have = 0;
  e->bytes += bytes;
  nsc_point(be, s, &sl->pt); /* after the allocations */
  return 0;
}
