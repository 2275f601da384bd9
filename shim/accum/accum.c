/* accum.c — see accum.h. Design note: the rules, and why each one gives the
 * same decision on every rank.
 *
 * Element: an accumulable call (floating type, Sum/Avg, >= MIN_BYTES, not
 * captured) as (recvbuff, sendbuff, count, datatype, op). Its signature is
 * (count, datatype, op): identical on every rank because every rank runs the
 * same program. Buffers are compared for identity only.
 *
 * Assumption B (buffers): a learned bucket stays allocated while accumulation
 * is active (DDP's buckets live from the rebuild to the end of the run), and a
 * live bucket cannot be aliased by another tensor. Under B, "this call's
 * buffer is learned bucket j" has the same truth value on every rank, because
 * the same program point all-reduces the same logical tensor everywhere. All
 * local state below is a function of signatures, configuration, agreed values
 * and such comparisons, so under B it is identical on every rank. Agreements
 * check B where it matters and end accumulation on all ranks when a rank saw
 * anything else; they are issued at points fixed by signatures alone, so an
 * agreement itself is always issued at the same call on every rank.
 *
 * R1 Learning. Every call syncs. A candidate pass is formed when an element
 *    comes again: the elements since its previous occurrence, if they are
 *    distinct and this element was the first of them to appear (a pass starts
 *    at its first bucket, never at a rotation of it). Then each pass is
 *    tracked against the candidate: other elements are foreign (ignored); a
 *    missing element shrinks the candidate (syncing a bucket is always safe);
 *    an element out of order drops it. A lock is proposed when NSC_ACC_REPS
 *    identical complete passes followed each other and what came before the
 *    first of them is DDP's: either k >= 1 passes of one whole-model bucket
 *    not in the pass, at least as large as the pass and at most the pass plus
 *    one pass of small floating calls (default, static_graph: k = 2), or
 *    nothing, with an integer Sum (the used-map) after each pass, right after
 *    its last bucket (find_unused_parameters; a candidate the used-map does
 *    not end is a rotation of the pass: fuzzer seed 13114); when the passes have used-maps, so must the
 *    whole-model passes (a call of the pass's size before the first pass
 *    without one is foreign: counting it as micro-step 0 would shift the
 *    phase, so no lock). A call of no bucket's signature, at least as large
 *    as the pass, after the pass's first bucket rejects (R4's whole-pass
 *    rule: it may begin a re-created model). Anything else is rejected: a metric-only
 *    communicator never locks. Foreign calls never prevent learning for good.
 * R2 Agreement while learning: after every accumulable call (a point fixed by
 *    the call sequence) one agreement carries a hash of (signatures of the
 *    candidate, position, micro-step, preamble, proposal), the proposal, the
 *    "late" flag and the passes seen. All ranks lock only if all proposed the
 *    same hash; all reject alike; all give up when some rank has seen
 *    NSC_ACC_LEARN_PASSES passes, or after NSC_ACC_LEARN_MAX calls (a count
 *    of signatures: calls on fresh buffers every time never form a pass).
 *    Decisions use only the agreed outcome. The outcome of the agreement
 *    issued after accumulable call j is applied just before decision j + d,
 *    d = NSC_ACC_LAG or the distance back to the last call of call j's
 *    signature if shorter, and never before an earlier agreement's point
 *    (signatures only, so the same on every rank; the host never waits for
 *    the collective of the bucket it just issued): up to NSC_ACC_LAG are in
 *    flight, each carrying what its proposal was made on. A lock is proposed
 *    d - 1 calls before the pass end that would complete NSC_ACC_REPS
 *    identical passes (d <= the pass length), else at that end; agreed, it
 *    is applied as of that state and the calls since are fed to the locked
 *    machine, so it takes effect at the next pass's first bucket as without
 *    the lag (a call of those that does not continue the pass stops
 *    skipping: R4/R5).
 * R3 Micro-steps are counted per communicator from its first accumulable
 *    call: each whole-model pass before the rebuild is one, then each pass of
 *    the learned sequence (a pass begins at its first bucket). Pass m syncs
 *    when m mod K == K-1. A communicator whose first accumulable call comes
 *    after another communicator of this process is past its first pass
 *    (nsc_accum_recurred: a bucket came again, or DDP's pattern shows it) is
 *    "late" (created mid-training: its phase is unknown) and never skips;
 *    the flag is agreed (Max), so it is the same on every rank.
 * R4 Locked. A call is answered locally only when it is exactly the next
 *    expected element of the learned pass, in a pass to be skipped, with no
 *    anomaly seen. Anything else syncs and does not move the counter: the
 *    next expected element re-aligns. The first bucket starts the next pass,
 *    so a missing or extra bucket cannot shift the phase. A learned bucket
 *    that comes out of order, or a pass that lacks one, stops skipping on this
 *    rank at once (under B: on every rank) and ends accumulation at the next
 *    agreement. A pass that lacks every accumulable bucket would be invisible
 *    and shift the phase, so the small floating calls that came exactly once
 *    in each of the last two learned passes (buckets below MIN_BYTES, on
 *    buffers of their own under B; their signatures are in the lock's hash)
 *    are the pass's companions: one that comes twice before the next first
 *    bucket, or a pass that lacks one, stops skipping the same way; so does
 *    an accumulable call outside the pass on a fixed buffer (a bucket never
 *    learned, the first 8 such buffers) that comes twice before the next
 *    first bucket. While
 *    learning, a small call that came once in the last complete pass but
 *    twice between two first buckets since the first pass rejects the lock
 *    (a pass without accumulable buckets came while learning: fuzzer seed
 *    15160). A call of a signature not in the pass and at least as large
 *    as the pass (a re-created model's whole-model bucket, or a parameter
 *    average: they cannot be told apart, and the first would shift the phase)
 *    ends accumulation at once: a signature-only rule, the same everywhere.
 * R5 Agreement while locked: a signature-only tracker counts passes by
 *    signatures; after every K-th such pass (normally right after a synced
 *    pass) one agreement carries a hash of (micro-step, position, stopped)
 *    and an anomaly flag. Any mismatch or anomaly ends accumulation on all
 *    ranks. The caller waits for its result only before the next accumulable
 *    decision (normally the next pass's first bucket, after a forward): one
 *    small all-reduce per optimizer step, rarely waited for.
 * R6 The optimizer step (the program reports each one before it runs: the
 *    Python step hook, docs/accumulation.md). A step between two passes ends
 *    a window; the window's length is the passes since the step before
 *    (told at the next pass's first bucket, from the process's step count).
 *    With the steps known, pass m of a window (j = m - the last pass before
 *    the latest step - 1) is answered locally only when the window before
 *    this one had exactly P passes and j < P - 1, P = K, or for K = auto
 *    the length of the last two windows when they were equal (>= 2); any
 *    other pass syncs. So a window longer than P syncs its passes from
 *    P - 1 on (safe), a window shorter than P ends on a skipped pass only
 *    when the one before it had P passes (the step hook then makes the
 *    gradients whole before the step, or stops: never a step on a skipped
 *    sync), and the first window after the lock never skips (the step
 *    before it is not known). With K set by hand, two windows in a row of
 *    another length turn skipping off for good (said once): K disagrees
 *    with the program. The steps a rank reports are its program's, the
 *    same on every rank; the window state is in R5's hash, so ranks that
 *    saw other steps end accumulation at the next agreement.
 * Residual risk, stated in docs/accumulation.md: under a violation of B (a learned bucket
 * freed and its address reused on some ranks but not others, e.g. a DDP
 * re-created on the same communicator with asymmetric allocations) ranks may
 * decide differently before the next agreement catches it. R4's companions
 * extend B to the small floating calls that came on one buffer exactly once
 * in each of the last two learned passes (the companion signatures are in
 * the lock's hash, so all ranks lock with the same number of them): a
 * temporary that got the same address in those passes on every rank and
 * later does not on some rank stops that rank alone until the next
 * agreement. */
#include "accum.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void nsc_accum_init(nsc_accum *a) {
  memset(a, 0, sizeof *a);
  a->last_pos = -1;
  a->win_end = -1;
}

void nsc_accum_steps(nsc_accum *a, int watched, uint64_t steps) {
  a->watched = watched != 0;
  a->steps = steps;
}

void nsc_accum_init_observe(nsc_accum *a) {
  nsc_accum_init(a);
  a->observe = 1;
}

static void drop_learning(nsc_accum *a) {
  free(a->hist);
  a->hist = NULL;
  a->n = a->cap = 0;
  free(a->sm);
  a->sm = NULL;
  a->nsm = a->capsm = 0;
}

void nsc_accum_free(nsc_accum *a) {
  drop_learning(a);
  for (int i = 0; i < a->nsent; i++) free(a->sent[i].L0);
  a->nsent = 0;
  free(a->L);
  free(a->seen);
  free(a->C);
  free(a->cseen);
  a->L = NULL;
  a->seen = NULL;
  a->C = NULL;
  a->cseen = NULL;
  a->nl = a->nc = a->capc = 0;
}

static int el_eq(const nsc_accum_el *x, const nsc_accum_el *y) {
  return x->recv == y->recv && x->send == y->send && x->count == y->count && x->dtype == y->dtype && x->op == y->op;
}

static int sig_eq(const nsc_accum_el *x, const nsc_accum_el *y) {
  return x->count == y->count && x->dtype == y->dtype && x->op == y->op;
}

static long find_in_pass(const nsc_accum *a, const nsc_accum_el *e) {
  /* The pass's elements are distinct: the expected next one, when it
   * matches, is the only match (the common case, checked first). */
  if (a->pos < a->nl && el_eq(&a->L[a->pos], e)) return (long)a->pos;
  for (size_t k = 0; k < a->nl; k++)
    if (el_eq(&a->L[k], e)) return (long)k;
  return -1;
}

static int sig_in_pass(const nsc_accum *a, const nsc_accum_el *e) {
  for (size_t k = 0; k < a->nl; k++)
    if (sig_eq(&a->L[k], e)) return 1;
  return 0;
}

/* Off for good: whether the communicator was past its first pass is latched
 * (nsc_accum_recurred), and where that can no longer be told (it had begun:
 * an accumulable call came), it counts as past it — a model re-wrapped on a
 * new communicator after a failed agreement here must not count its phase
 * from its own first pass (fuzzer seeds 17411, 17416). */
static void off(nsc_accum *a) {
  if (a->mode != NSC_ACC_OFF) a->off_recurred = a->n > 0 || nsc_accum_recurred(a);
  a->mode = NSC_ACC_OFF;
  a->due = 0;
  nsc_accum_free(a);
}

static int set_pass(nsc_accum *a, const nsc_accum_ent *from, size_t n) {
  nsc_accum_el *L = realloc(a->L, (n ? n : 1) * sizeof *L);
  if (!L) return -1;
  a->L = L;
  unsigned char *s = realloc(a->seen, n ? n : 1);
  if (!s) return -1;
  a->seen = s;
  for (size_t i = 0; i < n; i++) L[i] = from[i].el;
  a->nl = n;
  return 0;
}

static long prev_occurrence(const nsc_accum *a, size_t idx) {
  for (size_t j = idx; j-- > 0;)
    if (el_eq(&a->hist[j].el, &a->hist[idx].el)) return (long)j;
  return -1;
}

static size_t first_occurrence(const nsc_accum *a, const nsc_accum_el *e) {
  for (size_t j = 0; j < a->n; j++)
    if (el_eq(&a->hist[j].el, e)) return j;
  return a->n;
}

/* R1: the elements hist[j..idx-1] as a candidate, when they are distinct and
 * hist[idx] (= hist[j]) is the first of them to have appeared. */
static int form(nsc_accum *a, size_t idx) {
  long j = prev_occurrence(a, idx);
  if (j < 0) return 0;
  size_t f = first_occurrence(a, &a->hist[idx].el);
  for (size_t x = (size_t)j; x < idx; x++) {
    for (size_t y = (size_t)j; y < x; y++)
      if (el_eq(&a->hist[x].el, &a->hist[y].el)) return 0;
    if (first_occurrence(a, &a->hist[x].el) < f) return 0;
  }
  if (set_pass(a, &a->hist[j], idx - (size_t)j)) return 0; /* less evidence; learning goes on */
  memset(a->seen, 0, a->nl);
  a->seen[0] = 1;
  a->pos = 1;
  a->reps = a->nl == 1 ? 2 : 1; /* hist[j..idx-1] was one complete pass */
  a->prev_anchor_at = (size_t)j;
  a->anchor_at = idx;
  a->passes_local++;
  return 1;
}

static int all_seen(const nsc_accum *a) {
  for (size_t k = 0; k < a->nl; k++)
    if (!a->seen[k]) return 0;
  return 1;
}

/* The candidate restricted to the elements seen in the pass that just ended. */
static void shrink(nsc_accum *a) {
  size_t w = 0;
  for (size_t k = 0; k < a->nl; k++)
    if (a->seen[k]) a->L[w++] = a->L[k];
  a->nl = w;
}

static void learn_step(nsc_accum *a, size_t idx) {
  const nsc_accum_el *e = &a->hist[idx].el;
  if (a->nl) {
    long k = find_in_pass(a, e);
    if (k == 0) { /* the next pass begins */
      if (a->pos < a->nl || !all_seen(a)) {
        shrink(a);
        a->reps = 1;
      }
      memset(a->seen, 0, a->nl);
      a->seen[0] = 1;
      a->pos = 1;
      a->prev_anchor_at = a->anchor_at;
      a->anchor_at = idx;
      a->passes_local++;
      if (a->nl == 1) a->reps++;
      return;
    }
    if (k > 0 && (size_t)k >= a->pos) {
      a->seen[k] = 1;
      a->pos = (size_t)k + 1;
      if (a->pos == a->nl && all_seen(a)) a->reps++;
      return;
    }
    if (k < 0) {
      /* Foreign to the candidate. It may start a pass of its own only when
       * the candidate's first bucket has not come since its last occurrence
       * (static_graph: the whole-model passes end, the rebuilt ones begin). */
      long j = prev_occurrence(a, idx);
      if (j >= 0 && (size_t)j >= a->anchor_at) (void)form(a, idx);
      return;
    }
    a->nl = 0; /* out of order: the candidate is wrong */
    a->reps = 0;
  }
  (void)form(a, idx);
}

static uint64_t mix(uint64_t h, uint64_t v) {
  for (int i = 0; i < 8; i++) h = (h ^ ((v >> (8 * i)) & 0xff)) * 1099511628211ull;
  return h;
}

enum { V_NONE = 0, V_LOCK = 1, V_REJECT = 2 };

typedef struct {
  int verdict;
  size_t npre;     /* whole-model passes before the first learned pass */
  long long m;     /* micro-step of the pass that just ended */
  const char *kind;
} proposal;

static uint64_t pass_bytes_of(const nsc_accum *a) {
  uint64_t b = 0;
  for (size_t k = 0; k < a->nl; k++) b += a->L[k].bytes;
  return b;
}

static int seg_has_int(const nsc_accum *a, size_t s, size_t t) {
  for (size_t i = s; i < t; i++)
    if (a->hist[i].int_after) return 1;
  return 0;
}

/* In hist[s..t-1], the last call of the pass's last bucket has a used-map
 * (an integer Sum) right after it. */
static int ends_with_map(const nsc_accum *a, size_t s, size_t t) {
  for (size_t i = t; i-- > s;)
    if (el_eq(&a->hist[i].el, &a->L[a->nl - 1])) return a->hist[i].int_after;
  return 0;
}

/* seen[0..pos-1]: the current pass so far came in order, none left out. */
static int prefix_seen(const nsc_accum *a) {
  for (size_t k = 0; k < a->pos && k < a->nl; k++)
    if (!a->seen[k]) return 0;
  return 1;
}

static proposal propose_ddp(const nsc_accum *a, size_t ahead);
static int invisible_pass(const nsc_accum *a, size_t f);

/* hist[i] is followed by DDP's bucket-rebuild broadcasts for a model of one
 * bucket: two int32 broadcasts from rank 0, the bucket indices, then one
 * size per bucket (count 1). */
static int rebuild_mark(const nsc_accum_ent *h) { return h->i32_bcasts == 2 && h->i32_last == 1; }

/* Floating calls between the whole-model bucket and DDP's rebuild may be a
 * loss or a few scalar metrics, never a gradient bucket: at most this many
 * bytes each. */
#define NSC_ACC_TINY 64

/* R1's one-bucket model rebuilt in place. The rebuilt bucket of a
 * model that fits in one bucket has the whole-model bucket's count, and a
 * caching allocator may give it the whole-model bucket's freed block (3 of 4
 * torchrun jobs at 4 ranks): the all-reduces alone are then those of a
 * metric on a fixed buffer. DDP's rebuild tells them apart: its two int32
 * broadcasts right after the whole-model pass(es) (call j < 2: static_graph
 * has two), no int32 broadcast after any other call, no used-map. And the
 * first accumulable call must be the model's first floating all-reduce, with
 * nothing but tiny floating calls (a loss) between it and the rebuild: a
 * model whose whole gradient bucket is below MIN_BYTES, beside a large
 * metric on a fixed buffer all-reduced before or after its backward, shows
 * the same broadcasts with the metric as the only accumulable call (which
 * must never be taken for the model: the metric would be answered locally). Returns
 * the number of whole-model passes (j + 1), or 0 (*more = 1: it may still
 * be, once more passes came; else *why says what was missing). They are the
 * pass's own first calls, so micro-steps count from the first call as in
 * R3; the lock waits for NSC_ACC_REPS rebuilt passes after them, as R1 does
 * elsewhere. */
static size_t rebuilt_in_place(const nsc_accum *a, int *more, const char **why) {
  *more = 0;
  *why = "not a pass of one buffer";
  if (a->nl != 1) return 0;
  size_t j = a->n, after = 0;
  *why = "a used-map came (find_unused_parameters)";
  for (size_t i = 0; i < a->n; i++) {
    const nsc_accum_ent *h = &a->hist[i];
    if (h->int_after) return 0;
    if (h->i32_bcasts && (!rebuild_mark(h) || j < a->n)) {
      *why = "other int32 broadcasts came";
      return 0;
    }
    if (rebuild_mark(h)) j = i;
  }
  *why = j == a->n ? "no such broadcasts came" : "the broadcasts came after a later pass";
  if (j >= 2) return 0;
  *why = "a floating all-reduce came before the first accumulable one";
  if (a->fl_before) return 0;
  *why = "a floating all-reduce larger than a loss came between the first pass and the broadcasts";
  if (a->hist[j].fb_max_bcast > NSC_ACC_TINY) return 0;
  *why = "another accumulable call came before the broadcasts";
  for (size_t i = 0; i < a->n; i++) {
    int in = el_eq(&a->hist[i].el, &a->L[0]);
    if (i <= j && !in) return 0;
    after += i > j && in;
  }
  *why = "";
  *more = after < NSC_ACC_REPS;
  return *more ? 0 : j + 1;
}

/* R1's verdict on the current candidate (only when stable). Observe-only:
 * any stable pass locks (not DDP's: micro-steps from its first bucket). */
static proposal propose(const nsc_accum *a, size_t ahead) {
  proposal p = propose_ddp(a, ahead);
  if (!a->observe || p.verdict != V_REJECT) return p;
  size_t f = first_occurrence(a, &a->L[0]), occ = 0;
  for (size_t i = f; i < a->n; i++) occ += el_eq(&a->hist[i].el, &a->L[0]);
  p.verdict = V_LOCK;
  p.npre = 0;
  p.m = (long long)occ - 1;
  p.kind = "a repeating pass (observe only)";
  return p;
}

/* DDP's verdict, for a result applied `ahead` accumulable calls from now
 * (R2's lag): proposed where, if those calls continue the candidate, they
 * end a pass that completes NSC_ACC_REPS identical ones, so that the lock
 * takes effect at the next pass's first bucket as it would without the lag. */
static proposal propose_ddp(const nsc_accum *a, size_t ahead) {
  proposal p = {V_NONE, 0, 0, ""};
  if (a->mode != NSC_ACC_LEARNING || !a->nl || a->sm_lost || !prefix_seen(a)) return p;
  /* Early: ahead calls before the end of the pass that completes the
   * learning. At the end of a complete one: where no call of the pass was
   * that far ahead of its end (then the lock applies ahead calls late). */
  int early = ahead > 0 && ahead < a->nl && a->pos + ahead == a->nl && (size_t)a->reps + 1 >= NSC_ACC_REPS;
  int at_end = a->pos == a->nl && a->reps >= NSC_ACC_REPS;
  if (!early && !at_end) return p;
  size_t f = first_occurrence(a, &a->L[0]), occ = 0;
  for (size_t i = f; i < a->n; i++) occ += el_eq(&a->hist[i].el, &a->L[0]);
  p.npre = f;
  p.m = (long long)(f + occ) - 1;
  uint64_t P = pass_bytes_of(a);
  int more;
  const char *why;
  p.verdict = V_REJECT;
  /* R4's whole-pass rule while learning: a call as large as the pass and of
   * no bucket's signature after the first bucket may be a re-created model's
   * first pass, which resets the phase (fuzz seed 113: with a pass missing
   * its first bucket before it, the pass was learned rotated). */
  for (size_t i = f; i < a->n; i++)
    if (!sig_in_pass(a, &a->hist[i].el) && a->hist[i].el.bytes >= P) {
      p.kind = "large";
      return p;
    }
  /* R4's companions while learning: a pass that lacked every accumulable
   * bucket is invisible in hist and would shift the phase; a small floating
   * call that came once in the last complete pass but twice between two
   * first buckets since the first pass shows one (fuzzer seed 15160: the
   * only accumulable bucket missing from pass 2, pass 3 counted as 2). */
  if (invisible_pass(a, f)) {
    p.kind = "invisible";
    return p;
  }
  if (f > 0) {
    const nsc_accum_el *w = &a->hist[0].el;
    for (size_t i = 1; i < f; i++)
      if (!el_eq(&a->hist[i].el, w)) return p;
    if (find_in_pass(a, w) >= 0 || w->bytes < P) return p;
    /* Passes with a used-map after each are find_unused_parameters', which
     * has no whole-model pass (its buckets exist from the start): a call
     * before the first pass is foreign (a metric, a parameter average), and
     * counting it as micro-step 0 would shift the phase (fuzzer seed 133;
     * seed 34223: an integer Sum after it by chance had passed it for one). */
    if (a->prev_anchor_at < a->anchor_at && seg_has_int(a, a->prev_anchor_at, a->anchor_at)) return p;
    uint64_t small = 0; /* floating calls of the last complete pass */
    for (size_t i = a->prev_anchor_at; i < a->anchor_at; i++) small += a->hist[i].fb_after;
    if (w->bytes - P > small) return p;
    p.verdict = V_LOCK;
    p.kind = f == 1 ? "after DDP's whole-model pass" : "after DDP's whole-model passes (static_graph)";
  } else if ((p.npre = rebuilt_in_place(a, &more, &why)) || more) {
    p.verdict = more ? V_NONE : V_LOCK;
    p.kind = "after DDP's whole-model pass, its one bucket rebuilt in place (the rebuild's broadcasts between them)";
  } else if (a->nl == 1 && !seg_has_int(a, 0, a->n)) {
    p.kind = "one buffer"; /* rejected: say what was seen */
  } else {
    /* find_unused_parameters: the used-map after each of the last two complete passes */
    if (a->prev_anchor_at >= a->anchor_at) return p;
    size_t pp = 0; /* the anchor before prev_anchor_at */
    int found = 0;
    for (size_t i = a->prev_anchor_at; i-- > 0;)
      if (el_eq(&a->hist[i].el, &a->L[0])) { pp = i; found = 1; break; }
    if (!found || !seg_has_int(a, pp, a->prev_anchor_at) || !seg_has_int(a, a->prev_anchor_at, a->anchor_at)) return p;
    /* ... right after the pass's last bucket: the used-map ends a pass, so a
     * candidate it does not end is a rotation of the pass (fuzzer seed 13114:
     * a first pass without its first bucket made [b1 b2 b3 b0] look first,
     * and the sync pass's first bucket was answered locally) */
    if (!ends_with_map(a, pp, a->prev_anchor_at) || !ends_with_map(a, a->prev_anchor_at, a->anchor_at)) return p;
    p.verdict = V_LOCK;
    p.kind = "with a used-map after every pass (find_unused_parameters)";
  }
  return p;
}

/* Small floating calls after hist[s..t-1] that are el_eq to *e. */
static size_t sm_count(const nsc_accum *a, const nsc_accum_el *e, size_t s, size_t t) {
  size_t c = 0;
  for (size_t i = 0; i < a->nsm; i++) c += a->sm[i].after >= s && a->sm[i].after < t && el_eq(&a->sm[i].el, e);
  return c;
}

/* Since hist[f] (the first pass), some stretch between two occurrences of
 * the candidate's first bucket (or after the last) holds twice a small call
 * that the last complete pass held once: a pass without any accumulable
 * bucket came there. */
static int invisible_pass(const nsc_accum *a, size_t f) {
  if (a->prev_anchor_at >= a->anchor_at) return 0;
  for (size_t k = 0; k < a->nsm; k++) {
    const nsc_accum_el *e = &a->sm[k].el;
    if (a->sm[k].after < a->prev_anchor_at || a->sm[k].after >= a->anchor_at) continue;
    if (sm_count(a, e, a->prev_anchor_at, a->anchor_at) != 1) continue;
    size_t from = f;
    for (size_t i = f + 1; i <= a->n; i++) {
      if (i < a->n && !el_eq(&a->hist[i].el, &a->L[0])) continue;
      if (sm_count(a, e, from, i) >= 2) return 1;
      from = i;
    }
  }
  return 0;
}

/* R4's companions of a stable candidate: the small floating calls that came
 * exactly once in the last complete pass and exactly once in the pass before
 * it (when there is one). Written to out and their signatures mixed into *h
 * when those are not NULL; returns how many. A function of signatures and
 * buffer identities, like L. */
static size_t companions(const nsc_accum *a, nsc_accum_el *out, uint64_t *h) {
  size_t s = a->prev_anchor_at, t = a->anchor_at, pp = s, n = 0;
  for (size_t i = s; i-- > 0;)
    if (el_eq(&a->hist[i].el, &a->L[0])) { pp = i; break; }
  for (size_t i = 0; i < a->nsm; i++) {
    const nsc_accum_el *e = &a->sm[i].el;
    if (a->sm[i].after < s || a->sm[i].after >= t || sm_count(a, e, s, t) != 1) continue;
    if (pp < s && sm_count(a, e, pp, s) != 1) continue;
    if (out) out[n] = *e;
    if (h) *h = mix(mix(mix(*h, e->count), (uint64_t)e->dtype), (uint64_t)e->op);
    n++;
  }
  return n;
}

static int64_t state_hash(const nsc_accum *a, const proposal *p) {
  uint64_t h = mix(1469598103934665603ull, (uint64_t)a->mode);
  if (a->mode == NSC_ACC_LEARNING) {
    h = mix(mix(mix(mix(h, (uint64_t)p->verdict), p->npre), (uint64_t)p->m), a->nl);
    for (size_t k = 0; k < a->nl; k++)
      h = mix(mix(mix(h, a->L[k].count), (uint64_t)a->L[k].dtype), (uint64_t)a->L[k].op);
    if (p->verdict == V_LOCK) h = mix(h, companions(a, NULL, &h));
  } else {
    h = mix(mix(mix(h, (uint64_t)a->m), a->pos), (uint64_t)a->stop);
    h = mix(mix(mix(mix(h, (uint64_t)a->watched), (uint64_t)a->win_end), (uint64_t)a->win[0]), (uint64_t)a->P);
    h = mix(h, (uint64_t)a->k_off);
  }
  return (int64_t)(h >> 2); /* non-negative: -h never overflows */
}

int nsc_accum_take_due(nsc_accum *a) {
  int d = a->due && a->mode != NSC_ACC_OFF;
  a->due = 0;
  return d;
}

/* Room for the companions, taken before a lock is proposed so that locking
 * itself never fails on one rank: without it this rank never proposes. */
static void reserve_companions(nsc_accum *a) {
  size_t nc = companions(a, NULL, NULL);
  if (nc <= a->capc && a->C) return; /* never shrinks: an earlier proposal may still lock */
  nsc_accum_el *C = realloc(a->C, (nc ? nc : 1) * sizeof *C);
  if (C) a->C = C;
  unsigned char *cs = C ? realloc(a->cseen, nc ? nc : 1) : NULL;
  if (cs) a->cseen = cs;
  if (!C || !cs) a->sm_lost = 1;
  else a->capc = nc;
}

uint64_t nsc_accum_apply_at(const nsc_accum *a, int grouped) {
  uint64_t fed = nsc_accum_fed(a), d = NSC_ACC_LAG;
  if (a->mode != NSC_ACC_LEARNING || grouped || !fed) return fed + 1;
  const __typeof__(a->rsig[0]) *last = &a->rsig[(fed - 1) % NSC_ACC_LAG];
  for (uint64_t t = 1; t < NSC_ACC_LAG && t < fed; t++) {
    const __typeof__(a->rsig[0]) *o = &a->rsig[(fed - 1 - t) % NSC_ACC_LAG];
    if (o->count == last->count && o->dtype == last->dtype && o->op == last->op) {
      d = t; /* the pass is at least this long: a lock can still be proposed in it */
      break;
    }
  }
  return fed + d;
}

void nsc_accum_agree_vals(nsc_accum *a, int64_t v[NSC_ACC_AGREE_N]) {
  nsc_accum_agree_vals_at(a, v, nsc_accum_fed(a) + 1);
}

void nsc_accum_agree_vals_at(nsc_accum *a, int64_t v[NSC_ACC_AGREE_N], uint64_t apply_at) {
  uint64_t fed = nsc_accum_fed(a);
  size_t ahead = apply_at > fed + 1 ? (size_t)(apply_at - fed - 1) : 0;
  if (a->nsent == NSC_ACC_INFLIGHT) { /* the caller must not: go off, and every rank with this one */
    off(a);
    for (int i = 0; i < NSC_ACC_AGREE_N; i++) v[i] = -1;
    return;
  }
  proposal p = propose(a, ahead);
  nsc_accum_sent *r = &a->sent[a->nsent];
  memset(r, 0, sizeof *r);
  if (p.verdict == V_LOCK) {
    reserve_companions(a);
    p = propose(a, ahead);
  }
  if (p.verdict == V_LOCK && !(r->L0 = malloc(a->nl * sizeof *r->L0))) {
    a->sm_lost = 1; /* no room to keep what it proposes: this rank never proposes, no rank locks */
    p = propose(a, ahead);
  }
  int64_t h = state_hash(a, &p);
  a->sent_hash = h;
  r->hash = h;
  r->mode = a->mode;
  r->kind = p.kind;
  if ((r->lock = p.verdict == V_LOCK)) {
    memcpy(r->L0, a->L, a->nl * sizeof *r->L0);
    r->nl0 = a->nl;
    r->pos0 = a->pos;
    r->npre = p.npre;
    r->m = p.m;
    r->n0 = a->n;
    r->nsm0 = a->nsm;
    r->anchor0 = a->anchor_at;
    r->prev_anchor0 = a->prev_anchor_at;
    r->fed0 = nsc_accum_fed(a);
  }
  a->nsent++;
  v[0] = h;
  v[1] = -h;
  v[2] = a->mode == NSC_ACC_LEARNING ? -(int64_t)(p.verdict == V_LOCK) : 0;
  v[3] = a->mode == NSC_ACC_LEARNING ? a->late : a->stop;
  v[4] = a->mode == NSC_ACC_LEARNING ? a->passes_local : 0;
  v[5] = a->mode == NSC_ACC_LEARNING ? -(int64_t)(p.verdict == V_REJECT) : 0;
  v[6] = -2; /* a rank without a buffer for the agreement sends all-ones (-1): every rank sees it */
}

static const char *in_place_why(const nsc_accum *a) {
  int more;
  const char *why;
  (void)rebuilt_in_place(a, &more, &why);
  return why;
}

static void say_learning(const nsc_accum *a, char *why, size_t whylen) {
  size_t nacc = a->n;
  snprintf(why, whylen,
           "no stable backward pass after %d passes (%zu accumulable all-reduces; last candidate: %zu bucket(s) seen "
           "%d time(s) in a row): every call syncs from now on. Accumulation needs DDP's buckets at fixed addresses "
           "in the same order every pass; if buckets are reallocated or other large fp32 all-reduces interleave "
           "with them each pass, use model.no_sync() instead",
           NSC_ACC_LEARN_PASSES, nacc, a->nl, a->reps);
}

/* Locked mode from the state p was proposed on, at position pos0 of pass
 * p->m (pos0 = nl: at its end); the learning history stays (lock_late
 * replays from it). */
static void lock_core(nsc_accum *a, const proposal *p, size_t pos0) {
  a->mode = NSC_ACC_LOCKED;
  a->m = p->m;
  a->pos = pos0;
  a->stop = 0;
  a->pass_bytes = pass_bytes_of(a);
  a->sp = pos0 < a->nl ? pos0 : 0;
  a->spass = pos0 < a->nl ? p->m : p->m + 1;
  a->nc = companions(a, a->C, NULL); /* room reserved when the lock was proposed */
  for (size_t k = 0; k < a->nc; k++) a->cseen[k] = sm_count(a, &a->C[k], a->anchor_at, a->n) > 0;
}

static int locked_next(nsc_accum *a, const nsc_accum_el *e, long long K, char *why, size_t whylen);

/* An agreed lock, applied after the calls that came since it was proposed
 * (R2 with a lag): locked mode as it would have been had the lock been
 * applied at once, then those calls and small calls fed to it in their
 * order. They were all synced, which is always safe; a decision they would
 * have allowed to skip is simply not taken. History that could not be
 * recorded meanwhile stops skipping (R5's agreement then ends accumulation
 * if that differs between ranks). */
static void lock_late(nsc_accum *a, nsc_accum_sent *r, long long K, char *why, size_t whylen) {
  size_t n = a->n, nsm = a->nsm;
  int lost = a->sm_lost || nsc_accum_fed(a) - r->fed0 != n - r->n0;
  free(a->L);
  a->L = r->L0;
  r->L0 = NULL;
  a->nl = r->nl0;
  a->anchor_at = r->anchor0;
  a->prev_anchor_at = r->prev_anchor0;
  a->n = r->n0;
  a->nsm = r->nsm0;
  proposal p = {V_LOCK, r->npre, r->m, r->kind};
  lock_core(a, &p, r->pos0);
  a->n = n;
  a->nsm = nsm;
  char said[512];
  size_t si = r->nsm0;
  for (size_t i = r->n0; a->mode == NSC_ACC_LOCKED && i < n; i++) {
    for (; si < nsm && a->sm[si].after < i; si++) nsc_accum_observe(a, 0, &a->sm[si].el);
    said[0] = '\0';
    (void)locked_next(a, &a->hist[i].el, K, said, sizeof said);
    if (said[0]) snprintf(why, whylen, "%s", said);
  }
  for (; a->mode == NSC_ACC_LOCKED && si < nsm; si++) nsc_accum_observe(a, 0, &a->sm[si].el);
  a->due = 0; /* the pass the replay ended is the one the lock begins after: no R5 agreement for it */
  if (a->mode != NSC_ACC_LOCKED) return; /* why says why it ended */
  if (lost) a->stop = 1;
  drop_learning(a);
  char rule[200];
  if (a->watched)
    snprintf(rule, sizeof rule, "the optimizer's steps decide which passes sync (%s; skipping from the second "
             "window after the lock on)", K == NSC_ACC_AUTO ? "auto: the passes per step learned from them"
                                                          : "K checked against them");
  else if (K == NSC_ACC_AUTO)
    snprintf(rule, sizeof rule, "NCCLSHIM_ACCUM_STEPS=auto needs the optimizer steps (the Python step hook) and has "
             "none: every pass syncs");
  else
    snprintf(rule, sizeof rule, "passes m with m mod %lld = %lld sync; unchecked: no optimizer step signal (the "
             "Python step hook is not installed)", K, K - 1);
  snprintf(why, whylen,
           "learned a backward pass of %zu bucket(s), %llu bytes, on buffers that stayed put for %d passes, %s; "
           "micro-steps count from this communicator's first accumulable all-reduce (%zu whole-model pass(es)); "
           "pass %lld is next, %s",
           a->nl, (unsigned long long)a->pass_bytes, NSC_ACC_REPS, p.kind, p.npre, a->m + 1, rule);
}

void nsc_accum_agreed(nsc_accum *a, const int64_t v[NSC_ACC_AGREE_N], int ok, long long K, char *why,
                      size_t whylen) {
  char scratch[8];
  if (!why || !whylen) { why = scratch; whylen = sizeof scratch; }
  why[0] = '\0';
  if (a->mode == NSC_ACC_OFF) return;
  if (!ok) {
    off(a);
    snprintf(why, whylen, "the accumulation agreement failed on this rank: every call syncs from now on");
    return;
  }
  if (v[6] != -2) { /* that rank went off on its own failure: all go off with it */
    off(a);
    snprintf(why, whylen, "an accumulation agreement failed on another rank: every call syncs from now on");
    return;
  }
  if (!a->nsent) return; /* nothing was issued: nothing to apply */
  nsc_accum_sent r = a->sent[0];
  memmove(&a->sent[0], &a->sent[1], (size_t)(a->nsent - 1) * sizeof a->sent[0]);
  a->nsent--;
  int same = v[0] == -v[1] && v[0] == r.hash;
  if (r.mode != a->mode) { /* issued while learning, applied after the lock: it only checks */
    free(r.L0);
    if (!same) {
      off(a);
      snprintf(why, whylen, "the ranks disagreed about the backward pass being learned: every call syncs from now on");
    }
    return;
  }
  if (a->mode == NSC_ACC_LEARNING) {
    proposal p = {V_NONE, 0, 0, r.kind};
    if (same && v[2] == -1 && r.lock) {
      if (v[3]) {
        off(a);
        snprintf(why, whylen,
                 "this communicator's first accumulable all-reduce came after another communicator's second backward "
                 "pass (created mid-training): the phase of its micro-steps is unknown, every call syncs");
      } else lock_late(a, &r, K, why, whylen);
    } else if (same && v[5] == -1 && !strcmp(p.kind, "invisible")) {
      snprintf(why, whylen,
               "while a backward pass of %zu bucket(s) was learned, a pass came without any of its accumulable "
               "buckets (its small all-reduces came twice between two first buckets): the phase of the micro-steps is "
               "unknown, every call syncs",
               a->nl);
      off(a);
    } else if (same && v[5] == -1 && !strcmp(p.kind, "large")) {
      snprintf(why, whylen,
               "an all-reduce as large as the backward pass being learned (%zu buffer(s)) but not one of its buckets "
               "came after its first bucket (a re-created model's first pass, or a parameter average): the phase of "
               "the micro-steps is unknown, every call syncs",
               a->nl);
      off(a);
    } else if (same && v[5] == -1 && !strcmp(p.kind, "one buffer")) {
      snprintf(why, whylen,
               "all-reduces repeat on one buffer from this communicator's first accumulable all-reduce on, but not "
               "as a DDP model of one bucket rebuilt at its whole-model bucket's address (that is learned from DDP's "
               "rebuild right after the first pass: two int32 broadcasts, the second of one element, with at most a "
               "loss all-reduced in between; here %s): a metric on a fixed buffer, not provably a gradient bucket, "
               "every call syncs (use model.no_sync() to accumulate)",
               in_place_why(a));
      off(a);
    } else if (same && v[5] == -1) {
      snprintf(why, whylen,
               "all-reduces repeat as a pass of %zu buffer(s) but not as DDP's gradients (no whole-model pass before "
               "them, no used-map after them): every call syncs (a metric-only communicator, or two models on one)",
               a->nl);
      off(a);
    } else if (v[4] >= NSC_ACC_LEARN_PASSES) {
      say_learning(a, why, whylen);
      off(a);
    }
    free(r.L0); /* NULL once lock_late took it */
    return;
  }
  free(r.L0);
  if (!same || v[3]) {
    off(a);
    snprintf(why, whylen,
             "a learned bucket did not come where expected on some rank (a bucket missing or out of order, a buffer "
             "moved, a new layout): every call syncs from now on");
  }
}

/* This communicator is past its first backward pass: a bucket came again, or,
 * before any did (a rebuilt pass has new buffers: fuzzer seed 2023), what
 * DDP's call pattern shows. With a used-map (find_unused: no whole-model
 * pass, several buckets from the start) an accumulable call after the first
 * map; without one, calls after a whole-model candidate (small floating
 * ones included) adding up to exactly its size: DDP's rebuilt pass after its
 * whole-model bucket (or static_graph's second whole-model pass) is over.
 * The candidates are the first NSC_ACC_WHOLE_TRIES calls: the whole-model
 * bucket is the model's largest call, but an earlier all-reduce of the
 * script (a metric, a parameter average) may come first, smaller (fuzzer
 * seed 6127: taking only the first call missed the rebuilt pass, and a model
 * re-wrapped two passes later was skipped out of phase) or larger (seeds
 * 17411, 17416: only calls larger than all before them were tried). A
 * candidate that is no whole-model bucket and matches by chance makes later
 * communicators "late" (they sync: safe).
 * Not seen: a model re-wrapped during the rebuilt pass that follows its
 * whole-model one (docs/accumulation.md, limits).
 * Exact, so that a find_unused pass before its first map rarely matches
 * (it does when its second bucket is as large as its first: a later
 * communicator then syncs, which is safe). Scans the learning history (each
 * candidate only until its sum is reached): the caller asks only until some
 * communicator of the process answered yes. */
#define NSC_ACC_WHOLE_TRIES 16
/* Fuzzer seed 26039: foreign floating calls between a whole-model bucket
 * and the end of its rebuilt pass (an all-reduce of a bucket's size, below
 * MIN_BYTES, at a buffer of its own) break the running sums: the rebuilt
 * pass is then a subset of the calls after the candidate. Every subset of
 * the first NSC_ACC_SUBSET calls after it (small and accumulable, in call
 * order) is tried: at most 2^10 sums per candidate and call, while learning
 * and only until some communicator answered yes. A chance match makes later
 * communicators "late" (they sync: safe). */
#define NSC_ACC_SUBSET 10
static int subset_is_whole(nsc_accum *a, size_t c) {
  if (a->subset_no >> c & 1u) return 0; /* its window was complete and matched nothing */
  uint64_t v[NSC_ACC_SUBSET], size = a->hist[c].el.bytes;
  unsigned nv = 0;
  size_t k = 0;
  while (k < a->nsm && a->sm[k].after < c) k++; /* sm is in call order */
  for (size_t i = c; i < a->n && nv < NSC_ACC_SUBSET; i++) {
    for (; k < a->nsm && a->sm[k].after == i && nv < NSC_ACC_SUBSET; k++) v[nv++] = a->sm[k].el.bytes;
    if (i + 1 < a->n && nv < NSC_ACC_SUBSET) v[nv++] = a->hist[i + 1].el.bytes;
  }
  uint64_t total = 0;
  for (unsigned j = 0; j < nv; j++) total += v[j];
  if (total >= size) /* else no subset reaches it (the common case while the pass is still coming) */
    for (unsigned m = 1; m < (1u << nv); m++) {
      uint64_t sum = 0;
      for (unsigned j = 0; j < nv; j++)
        if (m >> j & 1u) sum += v[j];
      if (sum == size) return 1;
    }
  if (nv == NSC_ACC_SUBSET) a->subset_no |= 1u << c; /* its first calls are all known: never again */
  return 0;
}

int nsc_accum_recurred(nsc_accum *a) {
  if (a->mode == NSC_ACC_OFF) return a->off_recurred;
  if (a->mode == NSC_ACC_LOCKED || a->passes_local > 0) return 1;
  if (a->mode != NSC_ACC_LEARNING || a->n < 2) return 0;
  for (size_t i = 0; i < a->n; i++)
    if (a->hist[i].int_after) return i + 1 < a->n;
  for (size_t c = 0; c + 1 < a->n && c < NSC_ACC_WHOLE_TRIES; c++) {
    uint64_t size = a->hist[c].el.bytes, after = a->hist[c].fb_after, acc = 0;
    /* the rebuilt pass adds up to the whole-model bucket with its small
     * buckets, or without small calls at all (one of them may be foreign, a
     * metric: fuzzer seed 16942, where a re-wrapped model counted its phase
     * from its own first pass) */
    for (size_t i = c + 1; i < a->n && (after < size || acc < size); i++) {
      after += a->hist[i].el.bytes + a->hist[i].fb_after;
      acc += a->hist[i].el.bytes;
      if (after == size || acc == size) return 1;
    }
    if (subset_is_whole(a, c)) return 1;
  }
  return 0;
}

void nsc_accum_observe(nsc_accum *a, int int_sum, const nsc_accum_el *fl) {
  if (a->mode == NSC_ACC_LOCKED && fl) { /* R4: a pass seen through its small calls */
    for (size_t k = 0; k < a->nc; k++)
      if (el_eq(&a->C[k], fl)) {
        if (a->cseen[k]) a->stop = 1; /* again before the first bucket: a pass began without it */
        a->cseen[k] = 1;
        return;
      }
    return;
  }
  if (a->mode != NSC_ACC_LEARNING) return;
  if (!a->n) {
    a->fl_before += fl && a->fl_before < 1000;
    return;
  }
  a->hist[a->n - 1].int_after |= int_sum != 0;
  if (!fl) return;
  a->hist[a->n - 1].fb_after += fl->bytes;
  if (fl->bytes > a->hist[a->n - 1].fb_max) a->hist[a->n - 1].fb_max = fl->bytes;
  if (a->nsm == a->capsm) {
    size_t cap = a->capsm ? 2 * a->capsm : 64;
    nsc_accum_small *m = cap <= 4 * (size_t)NSC_ACC_LEARN_MAX ? realloc(a->sm, cap * sizeof *m) : NULL;
    if (!m) {
      a->sm_lost = 1; /* this rank never proposes a lock: no rank locks */
      return;
    }
    a->sm = m;
    a->capsm = cap;
  }
  a->sm[a->nsm++] = (nsc_accum_small){*fl, a->n - 1};
}

void nsc_accum_broadcast(nsc_accum *a, int int32, uint64_t count) {
  if (a->mode != NSC_ACC_LEARNING || !a->n || !int32) return;
  nsc_accum_ent *h = &a->hist[a->n - 1];
  if (!h->i32_bcasts) h->fb_max_bcast = h->fb_max;
  if (h->i32_bcasts < 1000) h->i32_bcasts++;
  h->i32_last = count;
}

static int learning_next(nsc_accum *a, const nsc_accum_el *e, char *why, size_t whylen) {
  if (a->n == a->cap) {
    size_t cap = a->cap ? 2 * a->cap : 64;
    nsc_accum_ent *h = a->n < NSC_ACC_LEARN_MAX ? realloc(a->hist, cap * sizeof *h) : NULL;
    if (!h) {
      /* A count of calls: the same on every rank. (An allocation failure is
       * local: then this rank stops proposing, and no rank can lock.) */
      if (a->n >= NSC_ACC_LEARN_MAX) {
        snprintf(why, whylen, "no backward pass learned in %d accumulable all-reduces: every call syncs from now on",
                 NSC_ACC_LEARN_MAX);
        off(a);
      } else a->due = 1;
      return 1;
    }
    a->hist = h;
    a->cap = cap;
  }
  a->hist[a->n] = (nsc_accum_ent){*e, 0, 0, 0, 0, 0, 0};
  a->n++;
  learn_step(a, a->n - 1);
  a->due = 1; /* R2 */
  return 1;
}

/* The passes per optimizer step accumulation follows (R6): K, or the learned
 * window (auto); 1 when there is nothing to accumulate. */
static long long passes_per_step(const nsc_accum *a, long long K) {
  if (K == NSC_ACC_AUTO) return a->P >= 2 ? a->P : 1;
  return a->k_off ? 1 : K;
}

/* R6: a pass begins (its first bucket, before m moves on) after optimizer
 * steps: the window that ended holds the passes since the step before. */
static void step_boundary(nsc_accum *a, long long K, char *why, size_t whylen) {
  if (!a->watched || a->steps == a->steps_seen) return;
  a->steps_seen = a->steps;
  long long len = a->win_end < 0 ? 0 : a->m - a->win_end; /* 0: the step before this one is not known */
  a->win_end = a->m;
  if (len <= 0 && a->win[0]) return; /* another step of the same boundary (several optimizers) */
  a->win[1] = a->win[0];
  a->win[0] = len;
  if (!len || a->win[0] != a->win[1]) return;
  if (K == NSC_ACC_AUTO && a->P != len) {
    a->P = len;
    if (len >= 2)
      snprintf(why, whylen, "NCCLSHIM_ACCUM_STEPS=auto: the optimizer steps after every %lld backward passes; the "
               "first %lld of each step's passes are answered locally, the last one syncs", len, len - 1);
    else
      snprintf(why, whylen, "NCCLSHIM_ACCUM_STEPS=auto: the optimizer steps after every backward pass (the loop syncs "
               "once per step, e.g. no_sync or accelerate's accumulate()): nothing to accumulate, every pass syncs");
  } else if (K != NSC_ACC_AUTO && len != K && !a->k_off) {
    a->k_off = 1;
    snprintf(why, whylen, "NCCLSHIM_ACCUM_STEPS=%lld, but the optimizer stepped after %lld backward pass(es) twice in "
             "a row: every pass syncs from now on (set NCCLSHIM_ACCUM_STEPS=%lld or auto)", K, len, len);
  }
}

/* Pass m syncs (R3, R6). */
static int pass_syncs(const nsc_accum *a, long long K) {
  if (!a->watched) return K == NSC_ACC_AUTO || a->m % K == K - 1; /* auto needs the steps */
  long long P = passes_per_step(a, K);
  if (P < 2 || a->win_end < 0 || a->win[0] != P) return 1;
  return a->m - a->win_end - 1 >= P - 1;
}

/* R5's points: passes counted by signatures alone. */
static void sig_track(nsc_accum *a, const nsc_accum_el *e, long long K) {
  if (sig_eq(e, &a->L[a->sp])) a->sp++;
  else if (sig_eq(e, &a->L[0])) a->sp = 1;
  else return;
  if (a->sp < a->nl) return;
  a->sp = 0;
  a->spass++;
  if (a->spass % passes_per_step(a, K) == 0) a->due = 1;
}

static int locked_next(nsc_accum *a, const nsc_accum_el *e, long long K, char *why, size_t whylen) {
  sig_track(a, e, K);
  long k = find_in_pass(a, e);
  a->last_pos = k;
  if (k < 0) {
    if (!a->observe && !sig_in_pass(a, e) && e->bytes >= a->pass_bytes) {
      snprintf(why, whylen,
               "an all-reduce of %llu elements, as large as a whole backward pass (%llu bytes) but not one of its "
               "buckets, came (a re-created model's first pass, or a parameter average): every call syncs from now on",
               (unsigned long long)e->count, (unsigned long long)a->pass_bytes);
      off(a);
    }
    /* R4 for accumulable calls outside the pass on fixed buffers: one that
     * comes twice before the next first bucket means a pass went by without
     * any learned bucket, invisible to the count (fuzzer seed 21621: a sync
     * pass with only a bucket that was never learned shifted the phase) */
    int x = 0;
    while (x < a->nx && !el_eq(&a->X[x], e)) x++;
    if (x < a->nx) {
      if (a->xseen[x]) a->stop = 1;
      a->xseen[x] = 1;
    } else if (a->nx < (int)(sizeof a->X / sizeof a->X[0])) {
      a->X[a->nx] = *e;
      a->xseen[a->nx++] = 1;
    }
    return 1; /* foreign: synced, the counter does not move */
  }
  if (k == 0) {
    step_boundary(a, K, why, whylen);
    if (a->pos < a->nl) a->stop = 1; /* the last pass lacked a bucket */
    memset(a->xseen, 0, sizeof a->xseen);
    for (size_t c = 0; c < a->nc; c++) {
      if (!a->cseen[c]) a->stop = 1; /* ... or one of its small calls */
      a->cseen[c] = 0;
    }
    a->m++;
    a->pos = 1;
  } else if ((size_t)k < a->pos) {
    a->stop = 1; /* out of order: a pass may have begun without its first bucket */
    return 1;
  } else {
    if ((size_t)k > a->pos) a->stop = 1;
    a->pos = (size_t)k + 1;
  }
  return a->stop || pass_syncs(a, K);
}

int nsc_accum_next(nsc_accum *a, const nsc_accum_el *e, long long K, char *why, size_t whylen) {
  char scratch[8];
  if (!why || !whylen) { why = scratch; whylen = sizeof scratch; }
  why[0] = '\0';
  int sync = 1;
  a->last_pos = -1;
  uint64_t fed = nsc_accum_fed(a);
  a->rsig[fed % NSC_ACC_LAG].count = e->count;
  a->rsig[fed % NSC_ACC_LAG].dtype = e->dtype;
  a->rsig[fed % NSC_ACC_LAG].op = e->op;
  if (a->mode == NSC_ACC_LEARNING) sync = learning_next(a, e, why, whylen);
  else if (a->mode == NSC_ACC_LOCKED) sync = locked_next(a, e, K, why, whylen);
  if (sync) a->synced++;
  else a->skipped++;
  return sync;
}

long long nsc_accum_pass_no(const nsc_accum *a) { return a->mode == NSC_ACC_LOCKED ? a->m : -1; }
long nsc_accum_pass_pos(const nsc_accum *a) { return a->mode == NSC_ACC_LOCKED ? a->last_pos : -1; }
size_t nsc_accum_pass_len(const nsc_accum *a) { return a->mode == NSC_ACC_LOCKED ? a->nl : 0; }
