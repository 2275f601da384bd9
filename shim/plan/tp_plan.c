/* tp_plan.c — see tp_plan.h. */
#include "tp_plan.h"

#include "cost.h"

nsc_fmt_t nsc_tp_fmt(const nsc_config *cfg) {
  switch (cfg->compress) {
  case NSC_COMPRESS_BF16: return NSC_FMT_BF16;
  case NSC_COMPRESS_INT8: return NSC_FMT_INT8;
  case NSC_COMPRESS_FP8: return NSC_FMT_FP8;
  case NSC_COMPRESS_FP16S: return NSC_FMT_FP16S;
  default: return NSC_FMT_FP16;
  }
}

void nsc_tp_chunk(const nsc_tp_plan *p, int c, size_t *off, size_t *len) {
  size_t base = p->count / (size_t)p->n, rem = p->count % (size_t)p->n, uc = (size_t)c;
  *off = uc * base + (uc < rem ? uc : rem);
  *len = base + (uc < rem);
}

size_t nsc_tp_chunk_bytes(const nsc_tp_plan *p, int c) {
  size_t off, len;
  nsc_tp_chunk(p, c, &off, &len);
  return nsc_fmt_bytes(p->fmt, len, p->block);
}

void nsc_tp_piece(const nsc_tp_plan *p, int c, int k, size_t *off, size_t *len) {
  size_t coff, clen, start = (size_t)k * p->piece;
  nsc_tp_chunk(p, c, &coff, &clen);
  *off = coff + (start < clen ? start : clen);
  *len = start >= clen ? 0 : clen - start < p->piece ? clen - start : p->piece;
}

size_t nsc_tp_piece_bytes(const nsc_tp_plan *p, int c, int k) {
  size_t off, len;
  nsc_tp_piece(p, c, k, &off, &len);
  return nsc_fmt_bytes(p->fmt, len, p->block);
}

/* The pieces "auto" allows at most: pieces of at least NSC_TP_AUTO_PIECE
 * fp32 bytes (the fixed default before launches were counted). */
#define NSC_TP_AUTO_PIECE (1u << 20)

/* Elements per piece: the setting's fp32 bytes / 4 (auto: the cost rule's
 * piece count, cost.h), in whole units (a block of an 8-bit format, else 64
 * elements), at least one unit, and large enough for at most
 * NSC_TP_MAX_PIECES pieces per chunk and NSC_TP_MAX_PIECE_SLOTS over all n
 * chunks (each piece of each chunk is a launch per phase); 0 (or a chunk no
 * longer than that): the whole chunk. */
static size_t piece_elems(const nsc_config *cfg, int host, nsc_fmt_t f, size_t block, int n, size_t chunk,
                          size_t total, int rs) {
  size_t unit = nsc_fmt_blocked(f) ? block : 64, want = (size_t)cfg->twophase_piece_bytes / 4;
  size_t most = (size_t)(n >= NSC_TP_MAX_PIECE_SLOTS ? 1 : NSC_TP_MAX_PIECE_SLOTS / n);
  if (most > NSC_TP_MAX_PIECES) most = NSC_TP_MAX_PIECES;
  if (cfg->twophase_piece_bytes == NSC_CFG_AUTO) {
    /* the codec runs over the whole input twice (encode in, decode out;
     * a reduce-scatter's second pass is its own chunk's decode-sum) and
     * each piece costs a launch per phase */
    nsc_cost_rule r = nsc_cost_rule_of(cfg, host);
    size_t cap = (4 * chunk + NSC_TP_AUTO_PIECE - 1) / NSC_TP_AUTO_PIECE;
    int k = nsc_cost_pieces(&r, nsc_cost_codec(&r, 2 * 4 * (uint64_t)total), rs ? 1 : 2,
                            (int)(cap < most ? cap : most));
    want = k > 1 ? ((chunk + (size_t)k - 1) / (size_t)k + unit - 1) / unit * unit : 0; /* k pieces, whole units */
  }
  if (!want || chunk <= want) return chunk ? chunk : 1;
  want = want / unit * unit;
  if (!want) want = unit;
  size_t least = (chunk + most - 1) / most;
  if (want < least) want = (least + unit - 1) / unit * unit;
  return want < chunk ? want : chunk;
}

void nsc_tp_plan_init(nsc_tp_plan *p, const nsc_config *cfg, int n, int rank, size_t count, int rs, int host) {
  p->n = n;
  p->rank = rank;
  p->fmt = nsc_tp_fmt(cfg);
  p->block = (size_t)cfg->block_elems;
  p->count = rs ? count * (size_t)n : count;
  size_t off, len;
  nsc_tp_chunk(p, 0, &off, &len); /* chunk 0 is a largest one */
  p->piece = piece_elems(cfg, host, p->fmt, p->block, n, len, p->count, rs);
  p->npieces = len ? (int)((len + p->piece - 1) / p->piece) : 1;
  p->slot = (nsc_fmt_bytes(p->fmt, p->piece < len ? p->piece : len, p->block) + 15) / 16 * 16;
  /* The second phase as one in-place ncclAllGather per piece: the n slots of
   * piece k lie rank-major (slot k*n + j), so rank j's piece is its part of
   * the gather, padding included; a rank without staging gathers into its
   * receive buffer, which must hold n slots (the peers' gather is the same
   * size). auto gathers on device memory, where NCCL's all-gather beat
   * pairwise sends 2.5x (the GPU rig, 4 ranks), and keeps the sends under
   * the host rule, where the host NCCL's ring of n-1 steps measured slower
   * than its concurrent sends (bench/README.md). A pure function of the
   * count, the rank count, the settings and the agreed memory kind. */
  int want = cfg->twophase_gather == NSC_GATHER_ALLGATHER || (cfg->twophase_gather == NSC_GATHER_AUTO && !host);
  p->gather = !rs && n >= 2 && want && (size_t)n * p->slot <= 4 * p->count;
}

int nsc_tp_launches(const nsc_tp_plan *p, int rs) { return p->n < 2 ? 0 : (rs ? 1 : 2) * p->npieces; }

size_t nsc_tp_staging_bytes(const nsc_tp_plan *p, int rs) {
  return (rs ? 2 : 3) * (size_t)p->n * (size_t)p->npieces * p->slot;
}

int nsc_tp_fits(const nsc_config *cfg, int n, size_t count, int rs) {
  if (n < 2 || cfg->compress == NSC_COMPRESS_OFF || count == 0) return 0;
  nsc_tp_plan p;
  nsc_tp_plan_init(&p, cfg, n, 0, count, rs, 0);
  return (nsc_tp_chunk_bytes(&p, 0) + 15) / 16 * 16 <= 4 * count; /* the largest message, whatever the pieces */
}

nsc_alg nsc_algo_choose(const nsc_config *cfg, size_t count, int nranks, int rs, int hier) {
  int fits = nsc_tp_fits(cfg, nranks, count, rs);
  if (rs || nsc_fmt_blocked(nsc_tp_fmt(cfg)))
    return fits ? NSC_ALG_TWOPHASE : NSC_ALG_RING;
  switch (cfg->algo) {
  case NSC_ALGO_RING: return NSC_ALG_RING;
  case NSC_ALGO_TWOPHASE: return fits ? NSC_ALG_TWOPHASE : NSC_ALG_RING;
  case NSC_ALGO_HIER: /* the hierarchical all-reduce where the communicator adopted it (hier.c), else auto */
    if (hier) return fits ? NSC_ALG_TWOPHASE : NSC_ALG_RING;
    /* fall through */
  default:
    /* Error feedback and stochastic rounding exist only in two phases (the
     * ring rounds inside NCCL's kernels), so asking for either makes auto
     * choose two phases wherever they fit. */
    if (cfg->error_feedback || cfg->rounding == NSC_ROUND_STOCHASTIC) return fits ? NSC_ALG_TWOPHASE : NSC_ALG_RING;
    return fits && nranks >= 4 && count / (size_t)nranks >= 16384 ? NSC_ALG_TWOPHASE : NSC_ALG_RING;
  }
}
