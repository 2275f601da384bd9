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

/* Why a call got the plan it got: one table for the plan's own reason (the
 * cost model prints it), a forwarded call's record (the summary's "left
 * untouched" line, the JSON "why", ncclshim-report), so that a call the shim
 * leaves to NCCL always says why. X(ID, key, text): key is the JSON and
 * report name, text the summary's phrase. */
#define NSC_WHYS(X)                                                                                               \
  X(NONE, "", "")                                                                                                 \
  X(RING_GAINS, "ring_gains", "the ring in the wire type gains 10 % at the launch cost")                          \
  X(TP_GAINS, "twophase_gains", "two phases gain 10 % at the launch cost")                                         \
  X(HIER_NODES, "hier", "nodes of several ranks each: compressed between nodes only")                              \
  X(HIER_FLAT, "below_hier_min", "below NCCLSHIM_HIER_MIN_BYTES: flat two phases")                                 \
  X(ASKED_RING, "asked_ring", "NCCLSHIM_ALGO=ring")                                                                \
  X(ASKED_TP, "asked_twophase", "two phases, as NCCLSHIM_ALGO asks")                                               \
  X(NO_FIT, "no_fit_ring", "two phases do not fit: the ring")                                                      \
  X(FUSED, "fused", "a group's member: fused at the group end")                                                    \
  X(LOCAL, "accumulated", "accumulation: answered locally")                                                        \
  X(OFF, "off", "NCCLSHIM_COMPRESS=off")                                                                           \
  X(DTYPE, "datatype", "its datatype is not fp32 (only fp32 calls are transformed)")                               \
  X(OP, "op", "its op is not Sum or Avg")                                                                          \
  X(ARGS, "arguments", "count 0 or a NULL buffer (NCCL's own answer)")                                             \
  X(MIN_BYTES, "min_bytes", "below NCCLSHIM_MIN_BYTES")                                                            \
  X(NO_GAIN, "no_gain", "no plan gains 10 % over NCCL at the launch cost (NCCLSHIM_LAUNCH_BYTES)")                 \
  X(TOO_SMALL, "too_small", "too small for two phases, and NCCL cannot sum a block-scaled format")                 \
  X(CAPTURED, "captured", "its stream was being captured into a CUDA graph")                                       \
  X(BEFORE_CHECK, "before_check", "made before its communicator's settings check (a first group or capture)")     \
  X(KERNELS, "kernels", "a rank of the communicator cannot run the CUDA kernels")                                  \
  X(STAGING, "staging", "no room in the agreed staging block at the time (it grows after)")
typedef enum {
#define NSC_WHY_ENUM(ID, key, text) NSC_WHY_##ID,
  NSC_WHYS(NSC_WHY_ENUM)
#undef NSC_WHY_ENUM
  NSC_WHY_COUNT
} nsc_why;
static inline const char *nsc_why_key(nsc_why w) {
  static const char *const k[] = {
#define NSC_WHY_KEY(ID, key, text) key,
      NSC_WHYS(NSC_WHY_KEY)
#undef NSC_WHY_KEY
  };
  return (unsigned)w < NSC_WHY_COUNT ? k[w] : "?";
}
static inline const char *nsc_why_text(nsc_why w) {
  static const char *const t[] = {
#define NSC_WHY_TEXT(ID, key, text) text,
      NSC_WHYS(NSC_WHY_TEXT)
#undef NSC_WHY_TEXT
  };
  return (unsigned)w < NSC_WHY_COUNT ? t[w] : "?";
}

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

/* Why a call is not compressed on its own: the first of OFF, DTYPE, OP,
 * ARGS, MIN_BYTES that holds (NONE when nsc_policy_compressible). */
nsc_why nsc_policy_why(const nsc_config *cfg, const nsc_call *c);

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
