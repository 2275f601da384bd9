/* ef.h — error-feedback state of one communicator (NCCLSHIM_ERROR_FEEDBACK=1)
 * for the two-phase collectives (twophase.c): one slot per gradient bucket,
 * holding what the bucket's last call lost to the wire format's rounding, so
 * that its next call sends it along (README "Error feedback and rounding").
 *
 * Buckets are told apart by their position in the repeating sequence of the
 * communicator's two-phase calls (a backward pass), learned here as calls
 * come, from their signature: buffer identity (recvbuff, sendbuff, as the
 * accumulation learner tells buckets apart: DDP's and ZeRO's buckets are
 * persistent buffers), element count, all-reduce or reduce-scatter, wire
 * format, block, rank count:
 *   - the expected next slot matches: it is this call's;
 *   - at the end of the learned sequence, a call matching slot j begins a
 *     new pass there (slots before j, a first pass that never came again
 *     such as DDP's whole-model bucket before its rebuild, are dropped);
 *     none matching: the sequence grows by a slot;
 *   - before the end, a call that does not match: if it matches slot 0 the
 *     pass ended early (the slots after it are dropped), else the sequence
 *     changed at this position (that slot's state is dropped and the slot
 *     re-made for this call).
 * A slot's residuals are allocated at its second use (a bucket that never
 * comes again, such as DDP's whole-model first bucket, or a buffer the
 * program allocates afresh for every call, costs no device memory), on the
 * call's backend and stream (device memory for device buffers), and read as
 * zero until a call has written them: feedback starts at a bucket's third
 * call. At NSC_EF_MAX_SLOTS the oldest slot used only once makes room; a slot whose memory would take the communicator
 * beyond NCCLSHIM_EF_MAX_BYTES, or whose allocation fails, gets none (that
 * bucket is sent without feedback). A slot used on another backend or
 * stream starts again (its old buffers are released on their own stream).
 *
 * Local data only: nothing here decides what is issued; a slot that differs
 * between ranks changes only what that rank's own roundings carry (results
 * stay identical on every rank: each value they all receive was rounded
 * once, by one rank). Limit: a program that passes one buffer for several
 * buckets of the same count within a pass (a reused scratch buffer) makes
 * its second use look like a new pass: those buckets then share a slot, so
 * one carries another's residual (bounded by a rounding step, never
 * accumulating beyond it).
 *
 * Must not: call NCCL, wait, dereference the buffers, or depend on data or
 * timings. */
#ifndef NSC_EF_H
#define NSC_EF_H

#include <stddef.h>
#include <stdint.h>

#include "backend.h"

#define NSC_EF_MAX_SLOTS 4096 /* buckets of one pass, at most (as the accumulation learner) */

typedef struct {
  uintptr_t recv, send; /* identity only */
  uint64_t count; /* all-reduce: elements; reduce-scatter: elements per rank */
  int rs, fmt, block, nranks;
} nsc_ef_sig;

typedef struct {
  nsc_ef_sig sig;
  const nsc_backend *be;
  nsc_stream s;
  float *in;    /* this rank's input residuals: every element it encodes */
  float *out;   /* all-reduce: the residuals of the chunk it owns */
  size_t in_n, out_n, bytes;
  uint64_t uses; /* calls that took this slot since it was made */
  int have;     /* in/out hold residuals of a completed call (else read as 0) */
  int none;     /* no memory for this bucket (cap, failed allocation) */
} nsc_ef_slot;

typedef struct {
  nsc_ef_slot *slot;
  size_t len, cap, pos; /* learned slots, allocated, the next expected */
  size_t bytes;         /* residual memory held */
  uint64_t dropped;     /* slots whose state was dropped because the sequence changed */
} nsc_ef;

void nsc_ef_init(nsc_ef *e);
/* Releases every buffer (stream-ordered on the stream it was last used on). */
void nsc_ef_free(nsc_ef *e);
/* The slot of this call (NULL only when out of host memory, or with
 * NSC_EF_MAX_SLOTS slots all used more than once). Advances the learned
 * sequence. */
nsc_ef_slot *nsc_ef_next(nsc_ef *e, const nsc_ef_sig *sig);
/* The slot's residual buffers on be/s, in_n and out_n floats: 0 when usable,
 * -1 when this call gets no feedback (the slot's first use, sl->none, or the
 * cap max_bytes). */
int nsc_ef_buffers(nsc_ef *e, nsc_ef_slot *sl, const nsc_backend *be, nsc_stream s, size_t in_n, size_t out_n,
                   size_t max_bytes);

#endif
