/* policy.h — what the shim does with one ncclAllReduce, as a pure function of
 * the call's arguments and the configuration (never data, timings, pointer
 * values or local failures: every rank must reach the same answer).
 *
 * Unit-tested without NCCL or a GPU (tests/unit/test_accum.c, test_core.c; the decision: test_plan.c). */
#ifndef NSC_POLICY_H
#define NSC_POLICY_H

#include <nccl.h>
#include <stddef.h>
#include <stdint.h>

#include "config.h"

typedef enum {
  NSC_ACT_PASS = 0,     /* forward untouched */
  NSC_ACT_COMPRESS = 1, /* cast to the wire type, reduce, cast back */
  NSC_ACT_SKIP = 2,     /* accumulation: answer locally, no collective */
  NSC_ACT_FUSE = 3,     /* in a group: pack with its neighbours at group end */
  NSC_ACT_OBSERVE = 4,  /* not a reduction we transform (broadcast, all-gather, send, ...): forwarded, timed */
  NSC_ACT_COUNT
} nsc_action;

const char *nsc_action_name(nsc_action a);

/* One intercepted all-reduce or reduce-scatter: what every decision reads
 * (the policy's fields first), and what the executor needs to carry it out. */
typedef struct {
  size_t count;    /* elements the call reduces (a reduce-scatter: its whole send buffer) */
  ncclDataType_t dt;
  ncclRedOp_t op;
  int has_buffers; /* sendbuff and recvbuff non-NULL */
  int in_group;    /* inside ncclGroupStart/End on this thread */
  int capturing;   /* the stream is being captured into a CUDA graph */
  int rs;          /* a reduce-scatter */
  size_t arg;      /* the count argument (a reduce-scatter's: per rank) */
  const void *send;
  void *recv;
  ncclComm_t comm;
  cudaStream_t stream;
  uint64_t seq;    /* its number on the communicator (0 until the communicator is checked) */
} nsc_call;

/* fp32, Sum/Avg, valid buffers, count > 0, compression on. Size not checked. */
int nsc_policy_compressible_kind(const nsc_config *cfg, const nsc_call *c);
/* Compressed on its own: compressible kind and count*4 >= MIN_BYTES. */
int nsc_policy_compressible(const nsc_config *cfg, const nsc_call *c);
/* May be skipped by accumulation: floating type (fp16/bf16/fp32/fp64), Sum or
 * Avg, bytes >= MIN_BYTES, K > 1, not being captured. */
int nsc_policy_accumulable(const nsc_config *cfg, const nsc_call *c);

/* The action before accumulation is consulted: FUSE (in a group, fusion on,
 * compressible kind of any size), COMPRESS or PASS. */
nsc_action nsc_policy_transform(const nsc_config *cfg, const nsc_call *c);
/* Whether the call may be anything but forwarded (transformed, fused, two
 * phases in a group, or answered by accumulation): when not, the path needs
 * neither its memory kind, nor capture, nor a plan (the forwarded path). */
int nsc_policy_may_transform(const nsc_config *cfg, const nsc_call *c);

/* Wire datatype of the configuration as the log names it (formats.h's dt:
 * ncclFloat16, ncclBfloat16; ncclInt8 / ncclFloat8e4m3 for the 8-bit formats,
 * ncclFloat16 for fp16s's codes, ncclUint8 for int4's pairs). */
static inline ncclDataType_t nsc_policy_wire_dtype(const nsc_config *cfg) {
  switch (cfg->compress) {
#define NSC_WIRE_DT(ID, name, bits, blocked, dt, k, bound, zero, doc) \
  case NSC_COMPRESS_##ID: return dt;
    NSC_FORMATS(NSC_WIRE_DT)
#undef NSC_WIRE_DT
  default: return ncclFloat16;
  }
}

/* A block-scaled format is configured (formats.h's "blocked" column: int8, fp8, fp16s, int4):
 * NCCL cannot reduce them, so they exist only in the two-phase algorithm. */
int nsc_policy_blocked(const nsc_config *cfg);


#endif
