/* accum.c — see accum.h.
 *
 * Learning: candidates for P are the prefix sums C_c of the call sizes, tried
 * in increasing order. A candidate is rejected when the cumulative bytes cross
 * a multiple of it without landing on it, or when passes 2 and 3 differ in
 * their sequence of call sizes; it is confirmed once three whole passes are
 * seen. DDP's first iteration reduces the whole model in one bucket, so the
 * first candidate (the first call) is P there, and the rebuilt buckets of
 * passes 2 and 3 confirm it; without a rebuild the first candidate that
 * covers a whole bucket sequence wins. A pass whose buckets all have one size
 * is ambiguous (P or a multiple): the smallest consistent candidate is taken,
 * as documented. */
#include "accum.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void nsc_accum_init(nsc_accum *a) { memset(a, 0, sizeof *a); }

void nsc_accum_free(nsc_accum *a) {
  free(a->sizes);
  a->sizes = NULL;
  a->n = a->cap = 0;
}

enum { REJECT = -1, PENDING = 0, CONFIRM = 1 };

/* Is the sequence sizes[a0..a1) equal to sizes[b0..b1)? */
static int same_seq(const uint64_t *s, size_t a0, size_t a1, size_t b0, size_t b1) {
  return a1 - a0 == b1 - b0 && !memcmp(s + a0, s + b0, (a1 - a0) * sizeof *s);
}

static int verify(const nsc_accum *a, size_t c) {
  uint64_t P = 0;
  for (size_t j = 0; j <= c; j++) P += a->sizes[j];
  if (P == 0) return REJECT;
  size_t ends[4] = {c + 1, 0, 0, 0}; /* ends[m]: index after pass m */
  int m = 1;
  uint64_t C = P;
  for (size_t j = c + 1; j < a->n && m < 4; j++) {
    C += a->sizes[j];
    uint64_t next = (uint64_t)(m + 1) * P;
    if (C == next) ends[m++] = j + 1;
    else if (C > next) return REJECT;
  }
  if (m < 3) return PENDING;
  return same_seq(a->sizes, ends[0], ends[1], ends[1], ends[2]) ? CONFIRM : REJECT;
}

static int push(nsc_accum *a, uint64_t bytes) {
  if (a->n == a->cap) {
    size_t cap = a->cap ? 2 * a->cap : 64;
    uint64_t *s = realloc(a->sizes, cap * sizeof *s);
    if (!s) return -1;
    a->sizes = s;
    a->cap = cap;
  }
  a->sizes[a->n++] = bytes;
  return 0;
}

static int learn(nsc_accum *a, uint64_t bytes, char *why, size_t whylen) {
  if (a->n >= NSC_ACC_LEARN_MAX || push(a, bytes)) {
    a->mode = NSC_ACC_FALLBACK;
    snprintf(why, whylen, "no repeating pass found in %zu accumulable calls; every call syncs from now on", a->n);
    nsc_accum_free(a);
    return 1;
  }
  a->total += bytes;
  while (a->cand < a->n) {
    int v = verify(a, a->cand);
    if (v == PENDING) break;
    if (v == CONFIRM) {
      uint64_t P = 0;
      for (size_t j = 0; j <= a->cand; j++) P += a->sizes[j];
      /* Confirmation can only come with the call that ends pass 3. */
      a->pass_bytes = P;
      a->mode = NSC_ACC_LOCKED;
      snprintf(why, whylen, "learned %llu accumulable bytes per backward pass after %zu calls",
               (unsigned long long)P, a->n);
      nsc_accum_free(a);
      return 1;
    }
    a->cand++;
  }
  return 1;
}

int nsc_accum_next(nsc_accum *a, uint64_t bytes, long long K, char *why, size_t whylen) {
  if (why && whylen) why[0] = '\0';
  int sync = 1;
  switch (a->mode) {
  case NSC_ACC_LEARNING:
    sync = learn(a, bytes, why, whylen);
    break;
  case NSC_ACC_LOCKED: {
    uint64_t P = a->pass_bytes, into = a->total % P;
    if (into + bytes > P) {
      a->mode = NSC_ACC_FALLBACK;
      snprintf(why, whylen,
               "a backward pass did not match the learned %llu bytes (a call of %llu bytes at %llu bytes into the pass); "
               "every call syncs from now on",
               (unsigned long long)P, (unsigned long long)bytes, (unsigned long long)into);
      break;
    }
    uint64_t step = a->total / P;
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
