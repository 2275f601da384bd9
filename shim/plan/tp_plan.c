/* tp_plan.c — see tp_plan.h. */
#include "tp_plan.h"

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

/* Elements per piece: the setting's fp32 bytes / 4, in whole units (a block
 * of an 8-bit format, else 64 elements), at least one unit, and large enough
 * for at most NSC_TP_MAX_PIECES pieces per chunk and NSC_TP_MAX_PIECE_SLOTS
 * over all n chunks (each piece of each chunk is a kernel launch per step on
 * a GPU); 0 (or a chunk no longer than that): the whole chunk. */
static size_t piece_elems(const nsc_config *cfg, nsc_fmt_t f, size_t block, int n, size_t chunk) {
  size_t unit = nsc_fmt_blocked(f) ? block : 64, want = (size_t)cfg->twophase_piece_bytes / 4;
  if (!want || chunk <= want) return chunk ? chunk : 1;
  want = want / unit * unit;
  if (!want) want = unit;
  size_t most = (size_t)(n >= NSC_TP_MAX_PIECE_SLOTS ? 1 : NSC_TP_MAX_PIECE_SLOTS / n);
  if (most > NSC_TP_MAX_PIECES) most = NSC_TP_MAX_PIECES;
  size_t least = (chunk + most - 1) / most;
  if (want < least) want = (least + unit - 1) / unit * unit;
  return want < chunk ? want : chunk;
}

void nsc_tp_plan_init(nsc_tp_plan *p, const nsc_config *cfg, int n, int rank, size_t count, int rs) {
  p->n = n;
  p->rank = rank;
  p->fmt = nsc_tp_fmt(cfg);
  p->block = (size_t)cfg->block_elems;
  p->count = rs ? count * (size_t)n : count;
  size_t off, len;
  nsc_tp_chunk(p, 0, &off, &len); /* chunk 0 is a largest one */
  p->piece = piece_elems(cfg, p->fmt, p->block, n, len);
  p->npieces = len ? (int)((len + p->piece - 1) / p->piece) : 1;
  p->slot = (nsc_fmt_bytes(p->fmt, p->piece < len ? p->piece : len, p->block) + 15) / 16 * 16;
}

size_t nsc_tp_staging_bytes(const nsc_tp_plan *p, int rs) {
  return (rs ? 2 : 3) * (size_t)p->n * (size_t)p->npieces * p->slot;
}

int nsc_tp_fits(const nsc_config *cfg, int n, size_t count, int rs) {
  if (n < 2 || cfg->compress == NSC_COMPRESS_OFF || count == 0) return 0;
  nsc_tp_plan p;
  nsc_tp_plan_init(&p, cfg, n, 0, count, rs);
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
