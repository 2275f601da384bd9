/* ef.c — the error-feedback slots of ef.h: the learned call sequence and
 * each slot's residual memory. */
#include <stdlib.h>
#include <string.h>

#include "ef.h"

void nsc_ef_init(nsc_ef *e) { memset(e, 0, sizeof *e); }

static void drop_buffers(nsc_ef *e, nsc_ef_slot *sl) {
  if (sl->in) sl->be->release(sl->s, sl->in);
  if (sl->out) sl->be->release(sl->s, sl->out);
  e->bytes -= sl->bytes;
  sl->in = sl->out = NULL;
  sl->in_n = sl->out_n = sl->bytes = 0;
  sl->have = sl->none = 0;
  sl->be = NULL;
  sl->s = NULL;
}

void nsc_ef_free(nsc_ef *e) {
  for (size_t i = 0; i < e->len; i++) drop_buffers(e, &e->slot[i]);
  free(e->slot);
  nsc_ef_init(e);
}

static int sig_eq(const nsc_ef_sig *a, const nsc_ef_sig *b) {
  return a->recv == b->recv && a->send == b->send && a->count == b->count && a->rs == b->rs && a->fmt == b->fmt && a->block == b->block &&
         a->nranks == b->nranks;
}

/* Remove slots [from, to), shifting the rest down. */
static void remove_slots(nsc_ef *e, size_t from, size_t to) {
  for (size_t i = from; i < to; i++) {
    if (e->slot[i].have) e->dropped++;
    drop_buffers(e, &e->slot[i]);
  }
  memmove(e->slot + from, e->slot + to, (e->len - to) * sizeof *e->slot);
  e->len -= to - from;
}

static void remake(nsc_ef *e, nsc_ef_slot *sl, const nsc_ef_sig *sig) {
  if (sl->have) e->dropped++;
  drop_buffers(e, sl);
  sl->sig = *sig;
  sl->uses = 0;
}

static nsc_ef_slot *take(nsc_ef *e, size_t i) {
  e->pos = i + 1;
  e->slot[i].uses++;
  return &e->slot[i];
}

nsc_ef_slot *nsc_ef_next(nsc_ef *e, const nsc_ef_sig *sig) {
  if (e->pos < e->len) {
    size_t p = e->pos;
    if (sig_eq(&e->slot[p].sig, sig)) return take(e, p);
    if (sig_eq(&e->slot[0].sig, sig)) { /* the pass ended early */
      remove_slots(e, p, e->len);
      return take(e, 0);
    }
    remake(e, &e->slot[p], sig); /* the sequence changed here */
    return take(e, p);
  }
  for (size_t j = 0; j < e->len; j++) /* a new pass begins at j */
    if (sig_eq(&e->slot[j].sig, sig)) {
      remove_slots(e, 0, j);
      return take(e, 0);
    }
  if (e->len == NSC_EF_MAX_SLOTS) { /* room from the oldest slot used once */
    size_t i = 0;
    while (i < e->len && e->slot[i].uses > 1) i++;
    if (i == e->len) return NULL;
    remove_slots(e, i, i + 1);
  }
  if (e->len == e->cap) {
    size_t cap = e->cap ? 2 * e->cap : 16;
    if (cap > NSC_EF_MAX_SLOTS) cap = NSC_EF_MAX_SLOTS;
    nsc_ef_slot *ns = cap > e->cap ? realloc(e->slot, cap * sizeof *ns) : NULL;
    if (!ns) return NULL;
    e->slot = ns;
    e->cap = cap;
  }
  nsc_ef_slot *sl = &e->slot[e->len++];
  memset(sl, 0, sizeof *sl);
  sl->sig = *sig;
  return take(e, e->len - 1);
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
  return 0;
}
