/* fabric.h — what a communicator learns of its fabric: the fixed cost of one
 * NCCL launch and its link's rate, measured from real calls it makes anyway,
 * and from them the one number the cost rule prices launches at
 * (plan/cost.h): the launch price in link bytes, alpha x bandwidth, the
 * bytes one rank's link moves in the time a launch costs.
 *
 * A sample is one real launch: the bytes one rank's link carries for it
 * (nsc_fab_ring_bytes: a ring all-reduce of S bytes on n ranks moves
 * 2(n-1)/n S) and the time it took on the stream; the learner keeps, per
 * size (up to NSC_FAB_SIZES of them), the fastest. Only sizes of at least
 * NSC_FAB_PER_SIZE calls count (one call's time is one draw of the noise).
 * It samples at least NSC_FAB_CALLS calls, and on until the sizes that count
 * are NSC_FAB_SPREAD times apart, at most NSC_FAB_MAX_CALLS (a job whose
 * first calls all have one size cannot tell a launch from its bytes). Every rank takes the same
 * samples (the same launches of the same calls, decided from the call
 * sequence only); their times differ, by the link's noise and by arrival
 * skew: a rank that reached the collective early also measured its wait
 * for a late peer. The latest arriver waited least, so a sample's agreed
 * time is the minimum over the ranks that timed it (nsc_fab_agree_vals /
 * _agreed: one int64 Max exchange of negated times); a sample no rank
 * timed is dropped, alike on every rank. Every rank then fits the same
 * agreed samples, in integer arithmetic, to the same price bit for bit.
 *
 * The fit: least squares t = a + x b over the agreed samples, a the ns per
 * launch, b the ns per link byte; the price is a / b link bytes (0 when a
 * comes out negative: launches are noise there). It needs samples of at
 * least two sizes a factor 4 apart (else the two costs cannot be told
 * apart); without, the communicator keeps the conservative price (the
 * cost rule's, plan/cost.h), and says why.
 *
 * Must not: call NCCL, read clocks or the configuration, allocate, or use
 * floating point (every rank must compute the same bits). */
#ifndef NSC_FABRIC_H
#define NSC_FABRIC_H

#include <stdint.h>

/* Calls one communicator times at least, and at most (its first plain
 * launches after NSC_FAB_WARMUP), and the sizes it keeps. */
#define NSC_FAB_CALLS 16
#define NSC_FAB_MAX_CALLS 64
#define NSC_FAB_WARMUP 2
#define NSC_FAB_SIZES 16
#define NSC_FAB_PER_SIZE 3
/* Sizes a fit needs: the largest sample's bytes at least this many times the
 * smallest's. */
#define NSC_FAB_SPREAD 8

enum { NSC_FAB_MEASURING = 0, NSC_FAB_LEARNED = 1, NSC_FAB_FAILED = 2 };

typedef struct {
  int state;                        /* NSC_FAB_* */
  int n;                            /* calls taken (the warm-up counts from -NSC_FAB_WARMUP) */
  int nsizes;                       /* sizes seen */
  uint64_t bytes[NSC_FAB_SIZES];    /* link bytes of size i */
  int calls[NSC_FAB_SIZES];         /* calls of size i taken (from the call sequence: every rank's the same) */
  int64_t ns[NSC_FAB_SIZES];        /* this rank's fastest time of size i (-1: none timed yet); after
                                     * the agreement, the fastest over the ranks, -1: dropped */
  int missed;                       /* agreed: some rank timed no call of some size (dropped where no
                                     * rank timed one) */
  /* the fit (LEARNED) */
  uint64_t launch_ns;               /* a: ns per launch */
  uint64_t ps_per_byte;             /* b: picoseconds per link byte (the rate: 1e12 / b bytes/s) */
  uint64_t price;                   /* the launch price, link bytes */
  const char *why;                  /* FAILED: why, for the summary */
} nsc_fab;

/* Link bytes one rank's link carries in a ring all-reduce of `bytes` on n
 * ranks (2(n-1)/n S), a reduce-scatter's or all-gather's ((n-1)/n S). */
static inline uint64_t nsc_fab_ring_bytes(uint64_t bytes, int n, int rs) {
  if (n < 2) return 0;
  return (rs ? 1 : 2) * (bytes / (uint64_t)n) * (uint64_t)(n - 1);
}

void nsc_fab_init(nsc_fab *f);
/* A launch is about to be made while measuring: the index of its size, to
 * time it by, or -1 (a warm-up launch, a size past the NSC_FAB_SIZES kept,
 * measured enough, or not measuring). */
int nsc_fab_take(nsc_fab *f, uint64_t link_bytes);
/* The time this rank measured for a call of size i (ns < 0: it could not). */
void nsc_fab_timed(nsc_fab *f, int i, int64_t ns);
/* Sampled enough: the agreement is due (from the call sequence alone: the
 * same call on every rank). */
int nsc_fab_due(const nsc_fab *f);
/* The agreement's values (NSC_FAB_VALS int64 for an int64 Max exchange):
 * per size its bytes and -bytes (every rank's must be the same) and its
 * negated time (the Max is the minimum time; INT64_MIN where this rank
 * timed no call of it), and whether this rank missed a size. */
#define NSC_FAB_VALS (3 * NSC_FAB_SIZES + 1)
void nsc_fab_agree_vals(const nsc_fab *f, int64_t v[NSC_FAB_VALS]);
/* The agreed Maxima (ok = 0: the exchange failed on this rank: every rank
 * then fails it alike, the exchange's confirmation says so): the fit, or
 * FAILED with why. */
void nsc_fab_agreed(nsc_fab *f, const int64_t v[NSC_FAB_VALS], int ok);
/* The fit alone, on n samples (bytes, ns): 0 and a, b, price; -1 and *why
 * when they cannot be fitted. Exposed for tests and the cost model. */
int nsc_fab_fit(const uint64_t *bytes, const int64_t *ns, int n, uint64_t *launch_ns, uint64_t *ps_per_byte,
                uint64_t *price, const char **why);

#endif
