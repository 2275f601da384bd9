/* accum.h — which accumulable all-reduces may skip synchronisation
 * (NCCLSHIM_ACCUM_STEPS=K), per communicator.
 *
 * A pure state machine over the sequence of accumulable call sizes: no
 * timings, pointers or data, so every rank reaches the same decisions. It
 * learns P, the accumulable bytes of one backward pass, syncing every call
 * until P is confirmed; then micro-step i = (bytes before this call) / P, and
 * a call syncs when i mod K == K-1. If a pass contradicts P it syncs every call
 * from then on. Other all-reduces on the communicator are recorded while
 * learning, as evidence of where passes end, and never move the counter.
 * See README "Accumulation" for the limits. */
#ifndef NSC_ACCUM_H
#define NSC_ACCUM_H

#include <stddef.h>
#include <stdint.h>

enum { NSC_ACC_LEARNING = 0, NSC_ACC_LOCKED = 1, NSC_ACC_FALLBACK = 2 };

#define NSC_ACC_LEARN_MAX 4096 /* calls observed before giving up on learning */

/* While learning: every intercepted all-reduce, accumulable (bytes > 0) or
 * not (bytes == 0, evidence only). */
typedef struct {
  uint64_t sig;    /* nsc_accum_sig() of (count, datatype, op) */
  uint64_t bytes;  /* accumulable bytes, 0 for other calls */
  uint64_t fbytes; /* other calls: floating Sum/Avg bytes (buckets below MIN_BYTES) */
} nsc_accum_entry;

typedef struct {
  int mode;
  uint64_t pass_bytes;  /* P once locked */
  uint64_t base_bytes;  /* bytes of a first pass that differs from P (DDP's whole-model bucket) */
  int base_passes;      /* 1 when such a first pass was seen, else 0 */
  uint64_t total;       /* accumulable bytes seen so far */
  nsc_accum_entry *ent; /* learning only */
  size_t n, cap;
  size_t cand[2];       /* per hypothesis: the smallest candidate not yet rejected */
  uint64_t synced, skipped;
} nsc_accum;

void nsc_accum_init(nsc_accum *a);
void nsc_accum_free(nsc_accum *a);

/* A call's signature for the evidence (any stable hash of its arguments). */
static inline uint64_t nsc_accum_sig(size_t count, int dtype, int op) {
  uint64_t h = 1469598103934665603ull;
  uint64_t v[3] = {(uint64_t)count, (uint64_t)dtype, (uint64_t)op};
  for (int i = 0; i < 3; i++) h = (h ^ v[i]) * 1099511628211ull;
  return h;
}

/* Feed one accumulable call of `bytes` (K >= 2). Returns 1 when the call must
 * synchronise, 0 when it may be answered locally. When the state changes in a
 * way the user should hear about (P learned, contradicted, learning given up),
 * a one-line explanation is written into why (else why[0] = 0). */
int nsc_accum_next(nsc_accum *a, uint64_t sig, uint64_t bytes, long long K, char *why, size_t whylen);

/* Record a call that is not accumulable (evidence while learning; it never
 * moves the micro-step counter); fbytes: its bytes if it is a floating Sum or
 * Avg (a bucket below MIN_BYTES, or a metric), else 0. */
void nsc_accum_observe(nsc_accum *a, uint64_t sig, uint64_t fbytes);

#endif
