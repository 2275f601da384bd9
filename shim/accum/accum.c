/* accum.c — see accum.h.
 *
 * Learning. Decisions count accumulable bytes only, but while learning every
 * intercepted all-reduce is recorded (its signature: count, datatype, op) as
 * evidence. Two hypotheses are tried, each with candidates P in increasing
 * order:
 *   H0  the call sequence repeats from the first call: P is a prefix sum of
 *       the accumulable calls (find_unused_parameters=True, no rebuild; also
 *       DDP's default when every rebuilt bucket is accumulable, with P equal
 *       to the first call).
 *   H1  the first accumulable call is a pass of its own (DDP's first
 *       iteration: the whole model in one bucket) and the passes after it
 *       repeat with P <= that first call: rebuilt buckets below MIN_BYTES are
 *       no longer accumulable, so later passes may count fewer bytes.
 * A candidate is rejected when the accumulable bytes cross a multiple of P
 * without landing on it. It is confirmed once passes 0..3 are complete and
 * passes 2 and 3 are the same sequence of calls — all calls, accumulable or
 * not — so a candidate that cuts passes in the wrong place (equal bucket sizes
 * make such cuts line up in bytes) is told apart by the small buckets, the
 * used-map and the metric calls in between. Under H1 the first pass also
 * bounds P: P <= first, and first - P must be covered by the floating
 * Sum/Avg calls below MIN_BYTES of one pass; this settles equal-sized buckets.
 * H1 is tried first. Without a whole-model first pass (H0) and with nothing
 * else between equal-sized buckets, the smallest candidate is taken (README).
 * Non-accumulable calls never move the micro-step counter. */
#include "accum.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void nsc_accum_init(nsc_accum *a) { memset(a, 0, sizeof *a); }

void nsc_accum_free(nsc_accum *a) {
  free(a->ent);
  a->ent = NULL;
  a->n = a->cap = 0;
}

enum { REJECT = -1, PENDING = 0, CONFIRM = 1 };

static int push(nsc_accum *a, uint64_t sig, uint64_t bytes, uint64_t fbytes) {
  if (a->n == a->cap) {
    size_t cap = a->cap ? 2 * a->cap : 64;
    nsc_accum_entry *e = realloc(a->ent, cap * sizeof *e);
    if (!e) return -1;
    a->ent = e;
    a->cap = cap;
  }
  a->ent[a->n++] = (nsc_accum_entry){sig, bytes, fbytes};
  return 0;
}

static int same_seq(const nsc_accum *a, size_t a0, size_t a1, size_t b0, size_t b1) {
  if (a1 - a0 != b1 - b0) return 0;
  for (size_t i = 0; i < a1 - a0; i++)
    if (a->ent[a0 + i].sig != a->ent[b0 + i].sig) return 0;
  return 1;
}

/* Hypothesis `off` (0 = H0, 1 = H1) with the candidate made of accumulable
 * calls off..c. On CONFIRM, *Pout and *base (the bytes of pass 0 under H1)
 * are set. */
static int verify(const nsc_accum *a, int off, size_t c, uint64_t *Pout, uint64_t *base) {
  uint64_t first = 0, P = 0, C = 0; /* C: accumulable bytes since pass `off` began */
  size_t k = 0, ends[4];            /* ends[m]: entry index just after pass m */
  int m = 0;                        /* passes complete */
  for (size_t i = 0; i < a->n && m < 4; i++) {
    uint64_t b = a->ent[i].bytes;
    if (!b) continue;
    if (k < (size_t)off) { /* H1: pass 0 is the first call alone */
      first = b;
      ends[m++] = i + 1;
    } else if (k <= c) {
      P += b;
      C += b;
      if (k == c) {
        if (off && P > first) return REJECT; /* a pass cannot hold more than the whole model */
        ends[m++] = i + 1;
      }
    } else {
      C += b;
      uint64_t target = P * (uint64_t)(m - off + 1);
      if (C == target) ends[m++] = i + 1;
      else if (C > target) return REJECT;
    }
    k++;
  }
  if (m < 4) return PENDING;
  if (!same_seq(a, ends[1], ends[2], ends[2], ends[3])) return REJECT;
  if (off) {
    /* H1: what the whole-model pass reduced beyond P must be the buckets that
     * fell below MIN_BYTES, i.e. other floating Sum/Avg calls of one pass. */
    uint64_t small = 0;
    for (size_t i = ends[1]; i < ends[2]; i++) small += a->ent[i].fbytes;
    if (first - P > small) return REJECT;
  }
  *Pout = P;
  *base = off ? first : 0;
  return CONFIRM;
}

static void lock(nsc_accum *a, uint64_t P, uint64_t base, int off, char *why, size_t whylen) {
  a->pass_bytes = P;
  a->base_bytes = base;
  a->base_passes = off;
  a->mode = NSC_ACC_LOCKED;
  size_t nacc = 0;
  for (size_t i = 0; i < a->n; i++) nacc += a->ent[i].bytes != 0;
  snprintf(why, whylen, "learned %llu accumulable bytes per backward pass after 4 passes (%zu accumulable calls)%s",
           (unsigned long long)P, nacc, off && base > P ? "; the first pass (the whole model in one bucket) reduced more" : "");
  nsc_accum_free(a);
}

static void learn(nsc_accum *a, char *why, size_t whylen) {
  /* H1 first: when DDP's whole-model pass explains the byte counts, it also
   * tells equal-sized buckets apart (P must account for that first pass). */
  for (int off = 1; off >= 0 && a->mode == NSC_ACC_LEARNING; off--) {
    size_t nacc = 0;
    for (size_t i = 0; i < a->n; i++) nacc += a->ent[i].bytes != 0;
    while (a->cand[off] + (size_t)off < nacc) {
      uint64_t P = 0, base = 0;
      int v = verify(a, off, a->cand[off] + (size_t)off, &P, &base);
      if (v == PENDING) break;
      if (v == CONFIRM) {
        lock(a, P, base, off, why, whylen);
        return;
      }
      a->cand[off]++;
    }
  }
}

static void give_up(nsc_accum *a, char *why, size_t whylen) {
  a->mode = NSC_ACC_FALLBACK;
  snprintf(why, whylen, "no repeating backward pass found in %zu all-reduces; every call syncs from now on", a->n);
  nsc_accum_free(a);
}

void nsc_accum_observe(nsc_accum *a, uint64_t sig, uint64_t fbytes) {
  if (a->mode != NSC_ACC_LEARNING) return;
  /* Evidence only: when it cannot be kept, learning just has less of it. */
  if (a->n < NSC_ACC_LEARN_MAX) (void)push(a, sig | 1, 0, fbytes);
}

int nsc_accum_next(nsc_accum *a, uint64_t sig, uint64_t bytes, long long K, char *why, size_t whylen) {
  char scratch[8];
  if (!why || !whylen) { why = scratch; whylen = sizeof scratch; }
  why[0] = '\0';
  int sync = 1;
  switch (a->mode) {
  case NSC_ACC_LEARNING:
    a->total += bytes;
    if (bytes == 0) break;
    if (a->n >= NSC_ACC_LEARN_MAX || push(a, sig & ~(uint64_t)1, bytes, 0)) { give_up(a, why, whylen); break; }
    learn(a, why, whylen);
    break;
  case NSC_ACC_LOCKED: {
    uint64_t P = a->pass_bytes, t = a->total - a->base_bytes, into = t % P;
    if (bytes == 0 || into + bytes > P) {
      a->mode = NSC_ACC_FALLBACK;
      snprintf(why, whylen,
               "a backward pass did not match the learned %llu bytes (a call of %llu bytes at %llu bytes into the pass); "
               "every call syncs from now on",
               (unsigned long long)P, (unsigned long long)bytes, (unsigned long long)into);
      break;
    }
    uint64_t step = (uint64_t)a->base_passes + t / P;
    sync = (long long)(step % (uint64_t)K) == K - 1;
    a->total += bytes;
    break;
  }
  default:
    break;
  }
  if (sync) a->synced++;
  else a->skipped++;
  return sync;
}
