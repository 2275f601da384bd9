/* tp_plan.h — the layout of a two-phase collective (twophase.c): how the
 * elements are cut into one chunk per rank and where each encoded chunk lives
 * in the staging buffer. A pure function of the count, the rank count and the
 * configuration, so every rank computes the same plan (and the same messages).
 *
 * Chunk c of an all-reduce starts at c*(count/n) + min(c, count%n) and holds
 * count/n elements, one more for the first count%n chunks (the host NCCL's
 * ring uses the same cut); a reduce-scatter's chunks are its n equal shards.
 * Encoded chunks sit `slot` bytes apart (the largest chunk's encoding, padded
 * to 16 bytes) in three regions of n slots: what this rank sends (slot j for
 * rank j), what it receives for its own chunk (slot i from rank i; its own
 * contribution is encoded straight into slot rank), and the gathered result
 * (all-reduce only).
 *
 * Must not: call NCCL or touch memory. */
#ifndef NSC_TP_PLAN_H
#define NSC_TP_PLAN_H

#include <stddef.h>

#include "config.h"
#include "wire.h"

typedef struct {
  int n, rank;
  nsc_fmt_t fmt;
  size_t block;
  size_t count; /* elements in all chunks together */
  size_t slot;  /* bytes between encoded chunks */
} nsc_tp_plan;

/* rs = 0: all-reduce of `count`; rs = 1: reduce-scatter of `count` per rank. */
void nsc_tp_plan_init(nsc_tp_plan *p, const nsc_config *cfg, int n, int rank, size_t count, int rs);
void nsc_tp_chunk(const nsc_tp_plan *p, int c, size_t *off, size_t *len);
size_t nsc_tp_chunk_bytes(const nsc_tp_plan *p, int c);
/* Staging bytes: 3 * n * slot (all-reduce) or 2 * n * slot (reduce-scatter). */
size_t nsc_tp_staging_bytes(const nsc_tp_plan *p, int rs);
/* Two-phase is possible: n >= 2, compression on, and the largest encoded
 * chunk fits in recvbuff (4 * count bytes; reduce-scatter: 4 * its shard),
 * which a rank that could not get staging sends and receives from, so that
 * it still issues every message its peers expect (twophase.c). */
int nsc_tp_fits(const nsc_config *cfg, int n, size_t count, int rs);
/* How a compressed call is carried out, from its count, the rank count and
 * the configuration only: for an all-reduce of `count` fp32 elements (rs = 0)
 * or a reduce-scatter of `count` per rank (rs = 1). int8/fp8 and every
 * reduce-scatter: two-phase where nsc_tp_fits (else the caller passes the
 * call through: NCCL cannot reduce 8-bit blocks, and a reduce-scatter has no
 * compressed ring here); NCCLSHIM_ALGO=ring: the ring; twophase: two-phase
 * where it fits; auto: two-phase from 4 ranks and 16384 fp32 elements (64 KiB)
 * per rank, where it fits, else the ring (README "Choosing the algorithm"). */
typedef enum { NSC_ALG_RING = 0, NSC_ALG_TWOPHASE = 1 } nsc_alg;
nsc_alg nsc_algo_choose(const nsc_config *cfg, size_t count, int nranks, int rs);
/* The wire format of the configuration (fp16 when compression is off). */
nsc_fmt_t nsc_tp_fmt(const nsc_config *cfg);

#endif
