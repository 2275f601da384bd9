/* accum.h — which accumulable all-reduces may skip synchronisation
 * (NCCLSHIM_ACCUM_STEPS=K), per communicator.
 *
 * A pure state machine over the sequence of accumulable call sizes: no
 * timings, pointers or data, so every rank reaches the same decisions. It
 * learns P, the accumulable bytes of one backward pass, syncing every call
 * until P is confirmed; then micro-step i = (bytes before this call) / P, and
 * a call syncs when i mod K == K-1. If a pass contradicts P it syncs every call
 * from then on. See README "Accumulation" for the limits. */
#ifndef NSC_ACCUM_H
#define NSC_ACCUM_H

#include <stddef.h>
#include <stdint.h>

enum { NSC_ACC_LEARNING = 0, NSC_ACC_LOCKED = 1, NSC_ACC_FALLBACK = 2 };

#define NSC_ACC_LEARN_MAX 4096 /* calls observed before giving up on learning */

typedef struct {
  int mode;
  uint64_t pass_bytes; /* P once locked */
  uint64_t total;      /* accumulable bytes seen so far */
  uint64_t *sizes;     /* learning: every call's bytes */
  size_t n, cap;
  size_t cand;         /* learning: index of the smallest candidate not yet rejected */
  uint64_t synced, skipped;
} nsc_accum;

void nsc_accum_init(nsc_accum *a);
void nsc_accum_free(nsc_accum *a);

/* Feed one accumulable call of `bytes` (K >= 2). Returns 1 when the call must
 * synchronise, 0 when it may be answered locally. When the state changes in a
 * way the user should hear about (P learned, contradicted, learning given up),
 * a one-line explanation is written into why (else why[0] = 0). */
int nsc_accum_next(nsc_accum *a, uint64_t bytes, long long K, char *why, size_t whylen);

#endif
