/* tp_plan.c — see tp_plan.h. */
#include "tp_plan.h"

nsc_fmt_t nsc_tp_fmt(const nsc_config *cfg) {
  switch (cfg->compress) {
  case NSC_COMPRESS_BF16: return NSC_FMT_BF16;
  case NSC_COMPRESS_INT8: return NSC_FMT_INT8;
  case NSC_COMPRESS_FP8: return NSC_FMT_FP8;
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

void nsc_tp_plan_init(nsc_tp_plan *p, const nsc_config *cfg, int n, int rank, size_t count, int rs) {
  p->n = n;
  p->rank = rank;
  p->fmt = nsc_tp_fmt(cfg);
  p->block = (size_t)cfg->block_elems;
  p->count = rs ? count * (size_t)n : count;
  p->slot = (nsc_tp_chunk_bytes(p, 0) + 15) / 16 * 16; /* chunk 0 is a largest one */
}

size_t nsc_tp_staging_bytes(const nsc_tp_plan *p, int rs) { return (rs ? 2 : 3) * (size_t)p->n * p->slot; }

int nsc_tp_fits(const nsc_config *cfg, int n, size_t count, int rs) {
  if (n < 2 || cfg->compress == NSC_COMPRESS_OFF || count == 0) return 0;
  nsc_tp_plan p;
  nsc_tp_plan_init(&p, cfg, n, 0, count, rs);
  return p.slot <= 4 * count;
}

nsc_alg nsc_algo_choose(const nsc_config *cfg, size_t count, int nranks, int rs) {
  int fits = nsc_tp_fits(cfg, nranks, count, rs);
  if (rs || cfg->compress == NSC_COMPRESS_INT8 || cfg->compress == NSC_COMPRESS_FP8)
    return fits ? NSC_ALG_TWOPHASE : NSC_ALG_RING;
  switch (cfg->algo) {
  case NSC_ALGO_RING: return NSC_ALG_RING;
  case NSC_ALGO_TWOPHASE: return fits ? NSC_ALG_TWOPHASE : NSC_ALG_RING;
  default:
    /* Error feedback exists only in two phases (the ring rounds inside NCCL's
     * kernels), so asking for it makes auto choose two phases wherever they fit. */
    if (cfg->error_feedback) return fits ? NSC_ALG_TWOPHASE : NSC_ALG_RING;
    return fits && nranks >= 4 && count / (size_t)nranks >= 16384 ? NSC_ALG_TWOPHASE : NSC_ALG_RING;
  }
}
