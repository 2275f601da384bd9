/* tp_plan.h — the layout of a two-phase collective (exec/twophase.c; made
 * once per call in plan.c with the rest of its plan): how the
 * elements are cut into one chunk per rank and where each encoded chunk lives
 * in the staging buffer. A pure function of the count, the rank count and the
 * configuration, so every rank computes the same plan (and the same messages).
 *
 * Chunk c of an all-reduce starts at c*(count/n) + min(c, count%n) and holds
 * count/n elements, one more for the first count%n chunks (the host NCCL's
 * ring uses the same cut); a reduce-scatter's chunks are its n equal shards.
 * Each chunk travels in `npieces` pieces (NCCLSHIM_TWOPHASE_PIECE_BYTES, or
 * the cost rule's count for auto, at most NSC_TP_MAX_PIECES, and n * npieces
 * <= NSC_TP_MAX_PIECE_SLOTS): piece k of every chunk starts k*piece elements
 * into it, `piece` a multiple of the format's block (so pieces hold whole
 * blocks and encode to the same codes and scales as the whole chunk would),
 * the last piece of a chunk shorter or empty. Encoded pieces sit `slot`
 * bytes apart (the largest piece's encoding, padded to 16 bytes), piece k of
 * chunk j in slot k*n + j of three regions of n*npieces slots: what this rank
 * sends (chunk j for rank j), what it receives for its own chunk (chunk
 * index i = from rank i; its own contribution is encoded straight in), and
 * the gathered result (all-reduce only). With one piece this is one slot per
 * chunk.
 *
 * Must not: call NCCL or touch memory. */
#ifndef NSC_TP_PLAN_H
#define NSC_TP_PLAN_H

#include <stddef.h>

#include "config.h"
#include "cost.h"
#include "wire.h"

#define NSC_TP_MAX_PIECES 64
#define NSC_TP_MAX_PIECE_SLOTS 256 /* pieces times ranks */

/* A call's input as the codec reads it: NSC_IN_F32 (0), or 1 + the row of
 * the unblocked 16-bit format whose casts widen and narrow it (formats.h:
 * fp16's for ncclFloat16, bf16's for ncclBfloat16; policy.h's
 * nsc_policy_input finds the row by its datatype). A 16-bit input is
 * widened to fp32 (exactly) before it is encoded, summed in fp32, and its
 * result rounded once to nearest even into the input's type. */
#define NSC_IN_F32 0
static inline int nsc_in_esz(int in) { return in ? 2 : 4; }
static inline nsc_fmt_t nsc_in_fmt(int in) { return (nsc_fmt_t)(in - 1); }

typedef struct {
  int n, rank;
  int in;         /* the input (NSC_IN_F32, else a 16-bit row + 1) */
  nsc_fmt_t fmt;
  size_t block;
  size_t count;   /* elements in all chunks together */
  size_t piece;   /* elements per piece (the last of a chunk may be shorter) */
  int npieces;    /* pieces per chunk, 1..NSC_TP_MAX_PIECES */
  size_t slot;    /* bytes between encoded pieces */
  int gather;     /* all-reduce: the second phase is one in-place ncclAllGather of slot bytes per piece */
} nsc_tp_plan;

/* rs = 0: all-reduce of `count`; rs = 1: reduce-scatter of `count` per rank.
 * r: the cost rule (cost.h: the agreed launch price and host rule):
 * NCCLSHIM_TWOPHASE_PIECE_BYTES=auto makes pieces only where the codec time
 * they hide outweighs the launches they add; auto's second phase follows
 * the host rule. */
void nsc_tp_plan_init(nsc_tp_plan *p, const nsc_config *cfg, int n, int rank, size_t count, int rs,
                      const nsc_cost_rule *r);
/* The same for input `in` (NSC_IN_F32: nsc_tp_plan_init): its wire format
 * (nsc_tp_wire) and its receive buffer's size (2 bytes an element for a
 * 16-bit input) where a rank without staging gathers. */
void nsc_tp_plan_init_in(nsc_tp_plan *p, const nsc_config *cfg, int n, int rank, size_t count, int rs,
                         const nsc_cost_rule *r, int in);
/* The launches one two-phase collective issues: a group of sends and
 * receives per piece in phase 1, and (all-reduce) one per piece in phase 2,
 * a group or an ncclAllGather. */
static inline int nsc_tp_launches(const nsc_tp_plan *p, int rs) { return p->n < 2 ? 0 : (rs ? 1 : 2) * p->npieces; }
static inline void nsc_tp_chunk(const nsc_tp_plan *p, int c, size_t *off, size_t *len) {
  size_t base = p->count / (size_t)p->n, rem = p->count % (size_t)p->n, uc = (size_t)c;
  *off = uc * base + (uc < rem ? uc : rem);
  *len = base + (uc < rem);
}
static inline size_t nsc_tp_chunk_bytes(const nsc_tp_plan *p, int c) {
  size_t off, len;
  nsc_tp_chunk(p, c, &off, &len);
  return nsc_fmt_bytes(p->fmt, len, p->block);
}
/* Piece k of chunk c: its element offset in the whole count and its length
 * (0 for a piece past the chunk's end), and its encoded bytes. */
static inline void nsc_tp_piece(const nsc_tp_plan *p, int c, int k, size_t *off, size_t *len) {
  size_t coff, clen, start = (size_t)k * p->piece;
  nsc_tp_chunk(p, c, &coff, &clen);
  *off = coff + (start < clen ? start : clen);
  *len = start >= clen ? 0 : clen - start < p->piece ? clen - start : p->piece;
}
static inline size_t nsc_tp_piece_bytes(const nsc_tp_plan *p, int c, int k) {
  size_t off, len;
  nsc_tp_piece(p, c, k, &off, &len);
  return nsc_fmt_bytes(p->fmt, len, p->block);
}
/* Byte offset of piece k of chunk c in a region. */
static inline size_t nsc_tp_slot(const nsc_tp_plan *p, int c, int k) {
  return ((size_t)k * (size_t)p->n + (size_t)c) * p->slot;
}
/* Staging bytes: 3 or 2 (reduce-scatter) regions of n * npieces slots,
 * then, for a 16-bit input, its fp32 copy (4 * count bytes: the widened
 * input, the owner's sum in its own chunk's place, the decoded result before
 * it is narrowed). */
static inline size_t nsc_tp_regions_bytes(const nsc_tp_plan *p, int rs) {
  return (rs ? 2 : 3) * (size_t)p->n * (size_t)p->npieces * p->slot;
}
static inline size_t nsc_tp_staging_bytes(const nsc_tp_plan *p, int rs) {
  return nsc_tp_regions_bytes(p, rs) + (p->in ? 4 * p->count : 0);
}
/* Two-phase is possible: n >= 2, compression on, and the largest encoded
 * chunk fits in recvbuff (4 * count bytes; reduce-scatter: 4 * its shard;
 * a 16-bit input's: 2 bytes an element), which a rank that could not get
 * staging sends and receives from, so that it still issues every message
 * its peers expect (twophase.c). */
int nsc_tp_fits(const nsc_config *cfg, int n, size_t count, int rs);
int nsc_tp_fits_in(const nsc_config *cfg, int n, size_t count, int rs, int in);
/* The wire format of the configuration (fp16 when compression is off). */
nsc_fmt_t nsc_tp_fmt(const nsc_config *cfg);
/* The wire of input `in`: the configured format, but a 16-bit input's own
 * type where that format is an unblocked 16-bit one (NCCLSHIM_COMPRESS=fp16
 * or bf16 on a bf16 or fp16 input: the input's bytes as they are, fp32
 * sums; docs/collectives.md, "16-bit inputs"). */
nsc_fmt_t nsc_tp_wire(const nsc_config *cfg, int in);

#endif
