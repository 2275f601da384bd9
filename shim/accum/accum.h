/* accum.h — which accumulable all-reduces may be answered locally
 * (NCCLSHIM_ACCUM_STEPS=K), per communicator.
 *
 * A pure state machine (no NCCL, no clock, no data): a backward pass is
 * learned as a sequence of persistent buckets (buffer, count, datatype, op);
 * only the exact next element of the learned pass, in a pass that is to be
 * skipped, is answered locally. Agreements across ranks (small Max
 * all-reduces the caller issues when nsc_accum_take_due() says so) turn what
 * each rank saw into one decision for all. The rules and why each is the same
 * on every rank are at the top of accum.c; docs/accumulation.md has the
 * contract. Pointers are compared for identity only. */
#ifndef NSC_ACCUM_H
#define NSC_ACCUM_H

#include <stddef.h>
#include <stdint.h>

enum { NSC_ACC_LEARNING = 0, NSC_ACC_LOCKED = 1, NSC_ACC_OFF = 2 };
/* K = NCCLSHIM_ACCUM_STEPS=auto (config.h's NSC_CFG_AUTO): the passes per
 * optimizer step are learned from the program's steps (nsc_accum_steps). */
#define NSC_ACC_AUTO (-1LL)

#define NSC_ACC_LEARN_MAX 4096 /* accumulable calls while learning, at most */
#define NSC_ACC_LEARN_PASSES 16 /* passes seen by some rank without convergence: give up */
#define NSC_ACC_REPS 3          /* complete identical passes before a lock is proposed */
#define NSC_ACC_AGREE_N 7       /* int64 values of one agreement */
/* Learning: the agreement issued after accumulable call j is applied just
 * before decision j + d, d = NSC_ACC_LAG, or less when a call of call j's
 * signature came fewer than NSC_ACC_LAG calls before it (then d is that
 * distance: a pass is at least that long); while locked, or issued at a
 * group's end: before decision j + 1. A point fixed by the signatures of
 * the call sequence; so up to NSC_ACC_LAG are in flight and the host waits,
 * if at all, for one issued d buckets ago. */
#define NSC_ACC_LAG 4
#define NSC_ACC_INFLIGHT 8      /* agreements issued and not yet applied, at most */

/* One accumulable call. */
typedef struct nsc_accum_el_s {
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
  int i32_bcasts;    /* int32 broadcasts after it, before the next accumulable call */
  uint64_t i32_last; /* ... the count of the last of them */
  uint64_t fb_max;   /* the largest floating Sum/Avg call after it so far (bytes) */
  uint64_t fb_max_bcast; /* ... when the first of those broadcasts came */
} nsc_accum_ent;

/* What an issued agreement carried, kept until its result is applied (in
 * issue order). A lock proposal keeps the learning state it was made on
 * (the candidate, its anchors, how much history there was), because later
 * calls move the state on before the result comes back. */
typedef struct {
  int64_t hash;
  int mode;              /* when issued */
  int lock;              /* this rank proposed a lock */
  const char *kind;      /* the proposal's kind ("large": rejected for a call as large as the pass) */
  size_t npre;           /* lock: whole-model passes before the first learned one */
  long long m;           /* lock: micro-step of the pass that had just ended */
  size_t n0, nsm0;       /* lock: history and small calls recorded when issued */
  size_t anchor0, prev_anchor0;
  size_t nl0, pos0;       /* lock: the candidate's length, the position in its pass */
  struct nsc_accum_el_s *L0; /* lock: a copy of the candidate (owned) */
  uint64_t fed0;         /* lock: accumulable calls fed when issued */
} nsc_accum_sent;

/* A floating Sum/Avg call too small to be accumulable (a small bucket, a
 * metric), seen while learning after hist[after]. */
typedef struct {
  nsc_accum_el el;
  size_t after;
} nsc_accum_small;

typedef struct {
  int mode;
  int observe;              /* observe-only (nsc_accum_init_observe): see below */
  int late;                 /* first accumulable call came after another communicator's second pass */
  int off_recurred;         /* off: nsc_accum_recurred() when it went off (or it had begun) */
  int fl_before;            /* learning: floating Sum/Avg calls before the first accumulable one */
  uint32_t subset_no;       /* nsc_accum_recurred: candidates whose subset window matched nothing */
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
  nsc_accum_small *sm;      /* learning: the small floating calls */
  size_t nsm, capsm;
  int sm_lost;              /* learning: one could not be recorded (no lock is proposed) */
  /* the small calls on fixed buffers in every pass (locked: a pass is also seen through them) */
  nsc_accum_el *C;
  unsigned char *cseen;     /* per companion: arrived since the last L[0] */
  size_t nc, capc;          /* capc: room in C and cseen */
  /* locked: accumulable calls outside the pass on fixed buffers (a bucket not
   * learned, a metric), the first NSC_ACC_EXTRAS seen: one that comes twice
   * before the next first bucket shows a pass that lacked every bucket */
  nsc_accum_el X[8];
  unsigned char xseen[8];
  int nx;
  /* locked */
  long long m;              /* micro-step of the current pass */
  int stop;                 /* a learned bucket came out of order or went missing: no more skips */
  uint64_t pass_bytes;
  size_t sp;                /* signature-only position (agreement points) */
  long long spass;          /* signature-only pass count */
  int64_t sent_hash;        /* hash of the state the last issued agreement carried */
  nsc_accum_sent sent[NSC_ACC_INFLIGHT]; /* issued, not yet applied, oldest first */
  int nsent;
  struct { uint64_t count; int32_t dtype, op; } rsig[NSC_ACC_LAG]; /* signatures of the last calls (ring) */
  int due;                  /* an agreement must be issued after this call */
  uint64_t synced, skipped;
  /* The program's optimizer steps (nsc_accum_steps; accum.c, R6) */
  int watched;              /* the program reports its steps (the Python step hook is installed) */
  uint64_t steps;           /* steps it reported so far, as last told */
  uint64_t steps_seen;      /* ... when the current pass began */
  long long win_end;        /* locked: micro-step m of the last pass before the latest step, -1 none yet */
  long long win[2];         /* the last two windows (passes between steps), newest first, 0 none */
  long long P;              /* K = auto: the learned passes per optimizer step, 0 not yet */
  int k_off;                /* K disagreed with two windows in a row: every pass syncs */
  long last_pos;            /* locked: index in L of the last call given to nsc_accum_next, -1 if none */
} nsc_accum;

void nsc_accum_init(nsc_accum *a);
/* Observe-only (the diagnosis, NCCLSHIM_DIAG): the same machine, used to
 * find passes and never to decide anything. The caller hands each due
 * agreement's own values straight back (nsc_accum_agree_vals, then
 * nsc_accum_agreed with them: a one-rank agreement, nothing issued), with
 * K = 1 (every pass syncs). Differences to accumulation: a stable pass locks
 * even when what came before it is not DDP's (then its micro-steps count
 * from its first bucket's first call: the phase is not known, which only
 * optimizer-step numbering of K >= 2 needs), and a large foreign call does
 * not end it (foreign, ignored). An anomaly still ends it (mode OFF) at the
 * next agreement; the caller may start learning again. */
void nsc_accum_init_observe(nsc_accum *a);
void nsc_accum_free(nsc_accum *a);

/* The program's optimizer steps, told before each accumulable call:
 * watched (the step hook is installed: R6 in accum.c), and how many steps
 * it reported so far. Without it accumulation follows K alone (R3). */
void nsc_accum_steps(nsc_accum *a, int watched, uint64_t steps);

/* One accumulable call (K >= 2, or NSC_ACC_AUTO): 1 = synchronise, 0 = answer locally. When the
 * state changes in a way the user should hear about, a one-line explanation
 * is written into why (else why[0] = 0). */
int nsc_accum_next(nsc_accum *a, const nsc_accum_el *e, long long K, char *why, size_t whylen);

/* Any other all-reduce on the communicator: evidence while learning; while
 * locked, a small floating call of the learned pass (a companion) that comes
 * twice in one pass, or a pass that lacks one, stops skipping (R4).
 * int_sum: an integer Sum; fl: the call if a floating Sum/Avg, else NULL. */
void nsc_accum_observe(nsc_accum *a, int int_sum, const nsc_accum_el *fl);

/* A broadcast on the communicator (evidence while learning): DDP's bucket
 * rebuild broadcasts two int32 tensors from rank 0, the bucket indices and
 * then one size per bucket, between the whole-model pass and the first
 * rebuilt one (accum.c, R1: a one-bucket model rebuilt in place). */
void nsc_accum_broadcast(nsc_accum *a, int int32, uint64_t count);

/* 1 (once) when an agreement must be issued at this point of the call
 * sequence; the caller then fills vals with nsc_accum_agree_vals() (only
 * while nsent < NSC_ACC_INFLIGHT: a count fixed by the call sequence),
 * all-reduces them with Max across ranks and hands the results to
 * nsc_accum_agreed() in issue order, each before the accumulable decision
 * nsc_accum_apply_at() named when it was issued (raised to the previous
 * one's, so that none applies before an earlier one is due). */
int nsc_accum_take_due(nsc_accum *a);
void nsc_accum_agree_vals(nsc_accum *a, int64_t vals[NSC_ACC_AGREE_N]);
/* The same for a result applied before decision apply_at
 * (nsc_accum_apply_at()): a lock is then proposed where the calls until
 * then end the pass that completes the learning (R2), so it takes effect at
 * the same call as without the lag. nsc_accum_agree_vals() is apply_at =
 * the next decision. */
void nsc_accum_agree_vals_at(nsc_accum *a, int64_t vals[NSC_ACC_AGREE_N], uint64_t apply_at);
/* The number of the accumulable decision (1-based, counting every call fed
 * to nsc_accum_next) before which the agreement about to be issued must be
 * applied: d calls on while learning (above), the next call while locked
 * or when it is issued at a group's end (one per group: grouping is alike
 * on every rank, as accumulation requires). */
uint64_t nsc_accum_apply_at(const nsc_accum *a, int grouped);
/* Accumulable decisions made so far. */
static inline uint64_t nsc_accum_fed(const nsc_accum *a) { return a->synced + a->skipped; }
/* Applies the oldest issued agreement's result (ok = 0: it could not be
 * completed on this rank). */
void nsc_accum_agreed(nsc_accum *a, const int64_t vals[NSC_ACC_AGREE_N], int ok, long long K, char *why,
                      size_t whylen);

/* This communicator is past its first backward pass (a bucket came again, or
 * DDP's call pattern shows it: accum.c). */
int nsc_accum_recurred(nsc_accum *a); /* caches which candidates can no longer match */

/* Where the calls are in the learned pass (for logging and for state keyed
 * by position, e.g. error feedback): pure reads, valid right after
 * nsc_accum_next. While not locked all three say "unknown".
 *   nsc_accum_pass_no   the micro-step (backward pass number m, counted as in
 *                       R3) of the current pass, -1 if not locked
 *   nsc_accum_pass_pos  the index in the learned pass (0 = its first bucket)
 *                       of the last call given to nsc_accum_next, -1 if it
 *                       was not an element of the pass or not locked
 *   nsc_accum_pass_len  elements of the learned pass, 0 if not locked */
long long nsc_accum_pass_no(const nsc_accum *a);
long nsc_accum_pass_pos(const nsc_accum *a);
size_t nsc_accum_pass_len(const nsc_accum *a);

#endif
