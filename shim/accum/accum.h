/* accum.h — which accumulable all-reduces may be answered locally
 * (NCCLSHIM_ACCUM_STEPS=K), per communicator.
 *
 * A pure state machine (no NCCL, no clock, no data): a backward pass is
 * learned as a sequence of persistent buckets (buffer, count, datatype, op);
 * only the exact next element of the learned pass, in a pass that is to be
 * skipped, is answered locally. Agreements across ranks (small Max
 * all-reduces the caller issues when nsc_accum_take_due() says so) turn what
 * each rank saw into one decision for all. The rules and why each is the same
 * on every rank are at the top of accum.c; README "Accumulation" has the
 * contract. Pointers are compared for identity only. */
#ifndef NSC_ACCUM_H
#define NSC_ACCUM_H

#include <stddef.h>
#include <stdint.h>

enum { NSC_ACC_LEARNING = 0, NSC_ACC_LOCKED = 1, NSC_ACC_OFF = 2 };

#define NSC_ACC_LEARN_MAX 4096 /* accumulable calls while learning, at most */
#define NSC_ACC_LEARN_PASSES 16 /* passes seen by some rank without convergence: give up */
#define NSC_ACC_REPS 3          /* complete identical passes before a lock is proposed */
#define NSC_ACC_AGREE_N 7       /* int64 values of one agreement */

/* One accumulable call. */
typedef struct {
  uintptr_t recv, send; /* identity only */
  uint64_t count;
  int32_t dtype, op;
  uint64_t bytes;
} nsc_accum_el;

/* A call seen while learning, with the other all-reduces that followed it. */
typedef struct {
  nsc_accum_el el;
  uint64_t fb_after; /* bytes of floating Sum/Avg calls (small buckets, metrics) after it */
  int int_after;     /* an integer Sum call followed it (DDP's used-map) */
} nsc_accum_ent;

typedef struct {
  int mode;
  int late;                 /* first accumulable call came after another communicator's second pass */
  /* learning */
  nsc_accum_ent *hist;
  size_t n, cap;
  /* the candidate pass (learning) or the learned one (locked) */
  nsc_accum_el *L;
  unsigned char *seen;      /* per element: arrived in the current pass */
  size_t nl;
  size_t pos;               /* next expected element; nl = pass complete */
  int reps;                 /* learning: complete identical passes in a row */
  size_t anchor_at, prev_anchor_at; /* learning: hist index of the last two L[0] */
  long long passes_local;   /* learning: passes this rank has delimited */
  /* locked */
  long long m;              /* micro-step of the current pass */
  int stop;                 /* a learned bucket came out of order or went missing: no more skips */
  uint64_t pass_bytes;
  size_t sp;                /* signature-only position (agreement points) */
  long long spass;          /* signature-only pass count */
  int64_t sent_hash;        /* hash of the state an issued agreement carried */
  int due;                  /* an agreement must be issued after this call */
  uint64_t synced, skipped;
} nsc_accum;

void nsc_accum_init(nsc_accum *a);
void nsc_accum_free(nsc_accum *a);

/* One accumulable call (K >= 2): 1 = synchronise, 0 = answer locally. When the
 * state changes in a way the user should hear about, a one-line explanation
 * is written into why (else why[0] = 0). */
int nsc_accum_next(nsc_accum *a, const nsc_accum_el *e, long long K, char *why, size_t whylen);

/* Any other all-reduce on the communicator: evidence while learning only.
 * int_sum: an integer Sum; fbytes: its bytes if a floating Sum/Avg, else 0. */
void nsc_accum_observe(nsc_accum *a, int int_sum, uint64_t fbytes);

/* 1 (once) when an agreement must be issued at this point of the call
 * sequence; the caller then fills vals with nsc_accum_agree_vals(), all-reduces
 * them with Max across ranks and hands the result to nsc_accum_agreed()
 * before the next accumulable decision. */
int nsc_accum_take_due(nsc_accum *a);
void nsc_accum_agree_vals(nsc_accum *a, int64_t vals[NSC_ACC_AGREE_N]);
/* ok = 0: the agreement could not be completed on this rank. */
void nsc_accum_agreed(nsc_accum *a, const int64_t vals[NSC_ACC_AGREE_N], int ok, long long K, char *why,
                      size_t whylen);

/* This communicator has begun a second backward pass (a bucket came again). */
int nsc_accum_recurred(const nsc_accum *a);

#endif
