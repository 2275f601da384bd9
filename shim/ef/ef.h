/* ef.h — error-feedback state of one communicator (NCCLSHIM_ERROR_FEEDBACK=1)
 * for the two-phase collectives (twophase.c): one slot per gradient bucket,
 * holding what the bucket's last call lost to the wire format's rounding, so
 * that its next call sends it along (docs/collectives.md, "Error feedback and rounding").
 *
 * Buckets are told apart by their position in the repeating sequence of the
 * communicator's two-phase calls (a backward pass; grouped two-phase calls
 * come here in call order too), learned from each call's key: element count,
 * all-reduce or reduce-scatter, wire format, block, rank count. Buffer
 * identity (recvbuff, sendbuff) is extra evidence only, never required:
 * FSDP2 and PyTorch's caching allocator pass fresh buffers.
 *   - Learning: the keys since the anchor (the first call, or the call that
 *     broke the last sequence) are kept; their smallest period P is kept up
 *     to date (KMP border), and so is that of their exact signatures (key
 *     and buffers). Once they hold two whole exact periods the sequence is
 *     locked with that period (stable buffers: equal-key buckets in buffers
 *     of their own get a slot each); else once they hold two whole key
 *     periods and twice the longest distance at which a call's exact
 *     signature came back (a buffer pattern still to show); P slots, slot =
 *     position mod P (a rotation of the pass is as good as the pass). Many
 *     equal keys in a row (a transformer's equal layers, fresh buffers) look
 *     like a shorter period only until the pass's next different key breaks
 *     it; the anchor then sits at that call and the next lock holds the
 *     whole pass.
 *   - Locked: the expected slot's key must match (its buffers may differ).
 *     Anything else breaks the sequence: every slot's state is dropped and
 *     learning starts again, anchored at this call. A slot whose buffers were
 *     stable is also broken by a call in another slot's stable buffers.
 *   - Which residual a call is fed (the rule that keeps buckets apart): a
 *     slot remembers the last NSC_EF_RING buffers it held. A call in the
 *     buffers of the slot's last call (the residual's writer) is fed. A call
 *     in buffers the slot has not held is fed only once the slot has held
 *     NSC_EF_PROBATION different buffers in a row without any coming back
 *     (proven fresh, for good: FSDP2, a caching allocator); a call in
 *     buffers the slot held before, after others, is never fed (several buckets may share the
 *     slot: models of equal bucket sizes whose passes interleave, buckets
 *     cycling through a pool), and two such calls in a row break the
 *     sequence (learned again, by buffers: key locks then wait for twice the
 *     distance at which the buffers came back). A call not fed still takes
 *     the slot and leaves its residual there. So no residual reaches a call
 *     of another bucket while at most NSC_EF_PROBATION - 1 buckets share a
 *     slot in stable buffers of their own.
 *   - An anchor that never recurs (DDP's first pass before its rebuilt
 *     buckets, a one-off call) would stall learning: while the keys since
 *     the anchor have no border, a call whose exact signature (key and
 *     buffers) came back at distance >= 2 (its latest) re-anchors there
 *     (after a break, only where the calls between hold another key too: a
 *     run of equal keys in alternating buffers would lock too short again
 *     and again) — the same bucket came again: its distance
 *     is a period); else, once the learning has gone on for its patience
 *     (twice the calls the broken sequence lived, at least
 *     NSC_EF_FIRST_LIMIT, at most NSC_EF_MAX_HIST), it re-anchors at the
 *     current call with twice the patience (a pass longer than the
 *     patience is learned once the patience has doubled past it).
 * Wrong matches (a bucket fed another bucket's residual, bounded by one
 * rounding step of that bucket; local data, results stay identical on every
 * rank) need buffers that change on every call, so that position is the
 * only evidence: a pass whose every call has the same key (all its buckets
 * share one slot); two models of equal bucket sizes, fresh buffers on every
 * call, whose passes interleave (one model to the learner); a call inserted
 * into a locked pass with the expected key shifts the rest of that pass
 * until a different key breaks it. Buffers cycling through a pool may lock
 * a multiple of the pass: a bucket then has one slot per address.
 *
 * A slot's residuals are allocated at its second use (the learning history
 * counts as the first: a slot is made at the lock, when its bucket has come
 * twice), on the call's backend and stream (device memory for device
 * buffers), and read as zero until a call has written them: feedback starts
 * at a bucket's third call (in buffers that change: once its slot is
 * proven fresh). A slot whose memory would take the communicator beyond
 * NCCLSHIM_EF_MAX_BYTES, or whose allocation fails, gets none (that
 * bucket is sent without feedback). A slot used on another backend or
 * stream starts again (its old buffers are released on their own stream).
 * Host memory: the learning history, 48 bytes per call since the anchor
 * (at most NSC_EF_MAX_HIST), freed at the lock; about 400 bytes per slot.
 *
 * Local data only: nothing here decides what is issued; a slot that differs
 * between ranks changes only what that rank's own roundings carry (results
 * stay identical on every rank: each value they all receive was rounded
 * once, by one rank).
 *
 * Must not: call NCCL, wait, dereference the buffers, or depend on data or
 * timings. */
#ifndef NSC_EF_H
#define NSC_EF_H

#include <stddef.h>
#include <stdint.h>

#include "backend.h"

#define NSC_EF_MAX_SLOTS 4096 /* buckets of one pass, at most (as the accumulation learner) */
#define NSC_EF_MAX_HIST (2 * NSC_EF_MAX_SLOTS) /* calls a learning keeps */
#define NSC_EF_FIRST_LIMIT 64 /* a first learning's patience without a border (doubles) */
#define NSC_EF_RING 16 /* buffers a slot remembers */
#define NSC_EF_PROBATION 9 /* different buffers in a row that prove a slot fresh */

typedef struct {
  uintptr_t recv, send; /* identity only */
  uint64_t count; /* all-reduce: elements; reduce-scatter: elements per rank */
  int rs, fmt, block, nranks;
  int in; /* the input type (tp_plan.h's NSC_IN_*): a bucket's slot holds one type's residuals */
} nsc_ef_sig;

typedef struct {
  nsc_ef_sig sig;
  const nsc_backend *be;
  nsc_stream s; /* compared only: the stream may be destroyed by the time the buffers are freed */
  void *pt;     /* release point after the buffers' last use (backend.h) */
  float *in;    /* this rank's input residuals: every element it encodes */
  float *out;   /* all-reduce: the residuals of the chunk it owns */
  size_t in_n, out_n, bytes;
  uint64_t uses; /* calls that took this slot since it was made */
  int have;     /* in/out hold residuals of a completed call (else read as 0) */
  int stable;   /* its last two calls had the same buffers */
  uint64_t held[NSC_EF_RING]; /* the buffers it held (a hash of recv and send), newest at held_at */
  size_t held_span[NSC_EF_RING]; /* the place (nsc_ef.span) each was last held */
  unsigned held_n, held_at;
  unsigned fresh;   /* different buffers in a row, none coming back */
  int proven;       /* fresh reached NSC_EF_PROBATION once: buffers change on every call */
  unsigned back;    /* changes in a row to buffers it held before */
  int none;     /* no memory for this bucket (cap, failed allocation) */
} nsc_ef_slot;

typedef struct {
  nsc_ef_slot *slot;
  size_t len, pos;      /* locked slots (0: learning), the next expected */
  nsc_ef_sig *hist;     /* learning: the calls since the anchor */
  uint32_t *border;     /* [i]: longest proper border of hist[0..i] by key; [hcap + i]: by key and buffers */
  size_t hn, hcap;      /* history length, allocated */
  size_t span;          /* calls since the anchor */
  size_t dist;          /* largest distance of a call's exact signature coming again in hist */
  size_t floor;         /* the least dist of the next learning: buckets sharing a slot seen that far apart */
  size_t limit;         /* learning re-anchors at this many calls without a border */
  size_t bytes;         /* residual memory held */
  uint64_t dropped;     /* slots whose state was dropped because the sequence changed */
  uint64_t breaks;      /* locked sequences broken */
} nsc_ef;

/* A zeroed nsc_ef is an initialised one too. */
void nsc_ef_init(nsc_ef *e);
/* Releases every buffer after its slot's release point (never on a stream
 * the caller may have destroyed). */
void nsc_ef_free(nsc_ef *e);
/* After a call's last use of sl's buffers on s (NULL sl: nothing): moves the
 * slot's release point there. */
void nsc_ef_used(nsc_ef_slot *sl, nsc_stream s);
/* The slot of this call, or NULL (learning, or out of host memory: no
 * feedback). Advances the learned sequence. */
nsc_ef_slot *nsc_ef_next(nsc_ef *e, const nsc_ef_sig *sig);
/* The slot's residual buffers on be/s, in_n and out_n floats: 0 when usable,
 * -1 when this call gets no feedback (the slot's first use, sl->none, or the
 * cap max_bytes). */
int nsc_ef_buffers(nsc_ef *e, nsc_ef_slot *sl, const nsc_backend *be, nsc_stream s, size_t in_n, size_t out_n,
                   size_t max_bytes);

#endif
