/* policy.c — see policy.h. Argument errors (NULL buffers, invalid datatype or
 * op, count 0) are always passed through, so the caller gets exactly the
 * result code plain NCCL would give. */
#include "policy.h"

static const char *names[NSC_ACT_COUNT] = {"passthrough", "compressed", "skipped", "fused", "observed"};

const char *nsc_action_name(nsc_action a) { return (unsigned)a < NSC_ACT_COUNT ? names[a] : "?"; }

static int sum_or_avg(ncclRedOp_t op) { return op == ncclSum || op == ncclAvg; }

int nsc_policy_compressible_kind(const nsc_config *cfg, const nsc_call *c) {
  return cfg->compress != NSC_COMPRESS_OFF && c->dt == ncclFloat32 && sum_or_avg(c->op) &&
         c->has_buffers && c->count > 0;
}

int nsc_policy_compressible(const nsc_config *cfg, const nsc_call *c) {
  return nsc_policy_compressible_kind(cfg, c) && c->count * 4 >= (size_t)cfg->min_bytes;
}

static size_t float_size(ncclDataType_t dt) {
  switch (dt) {
  case ncclFloat16: case ncclBfloat16: return 2;
  case ncclFloat32: return 4;
  case ncclFloat64: return 8;
  default: return 0; /* integers and fp8: never accumulated */
  }
}

int nsc_policy_accumulable(const nsc_config *cfg, const nsc_call *c) {
  size_t es = float_size(c->dt);
  return cfg->accum_steps > 1 && es && sum_or_avg(c->op) && c->has_buffers && c->count > 0 &&
         !c->capturing && c->count * es >= (size_t)cfg->min_bytes;
}

nsc_action nsc_policy_transform(const nsc_config *cfg, const nsc_call *c) {
  /* A capture freezes whatever is enqueued; staging growth there is not
   * allowed, so captured calls are forwarded as they are. */
  if (c->capturing) return NSC_ACT_PASS;
  /* Two-phase needs the data of its first phase before its second: not inside
   * a group, where nothing runs before the outermost end. */
  if (c->in_group && nsc_policy_blocked(cfg)) return NSC_ACT_PASS;
  if (c->in_group && cfg->fuse_bytes > 0 && nsc_policy_compressible_kind(cfg, c)) return NSC_ACT_FUSE;
  if (nsc_policy_compressible(cfg, c)) return NSC_ACT_COMPRESS;
  return NSC_ACT_PASS;
}

ncclDataType_t nsc_policy_wire_dtype(const nsc_config *cfg) {
  switch (cfg->compress) {
  case NSC_COMPRESS_BF16: return ncclBfloat16;
  case NSC_COMPRESS_INT8: return ncclInt8;
  case NSC_COMPRESS_FP8: return ncclFloat8e4m3;
  default: return ncclFloat16; /* fp16, and fp16s's codes */
  }
}

int nsc_policy_blocked(const nsc_config *cfg) {
  return cfg->compress == NSC_COMPRESS_INT8 || cfg->compress == NSC_COMPRESS_FP8 || cfg->compress == NSC_COMPRESS_FP16S;
}
