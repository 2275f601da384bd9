/* policy.h — which calls the shim may transform, as a pure function of the
 * call's arguments and the configuration (never data, timings, pointer
 * values or local failures: every rank must reach the same answer): the
 * policy's answer (nsc_policy), asked once per call (nsc_policy_ask) and
 * read by the decision (plan.h: nsc_decide_untouched, nsc_decide), so that
 * the forwarded path and the plan cannot disagree; and why a call got the
 * plan it got (the NSC_WHYS table).
 *
 * Unit-tested without NCCL or a GPU (tests/unit/test_accum.c, test_core.c;
 * the decision: test_plan.c). */
#ifndef NSC_POLICY_H
#define NSC_POLICY_H

#include <nccl.h>
#include <stddef.h>
#include <stdint.h>

#include "config.h"

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
  X(DTYPE, "datatype", "its datatype is not fp32, bf16 or fp16 (only they are transformed)")                       \
  X(OP, "op", "its op is not Sum or Avg")                                                                          \
  X(ARGS, "arguments", "count 0 or a NULL buffer (NCCL's own answer)")                                             \
  X(MIN_BYTES, "min_bytes", "below NCCLSHIM_MIN_BYTES")                                                            \
  X(NO_GAIN, "no_gain", "no plan gains 10 % over NCCL at the launch cost (NCCLSHIM_LAUNCH_BYTES)")                 \
  X(TOO_SMALL, "too_small", "too small for two phases, and NCCL cannot sum a block-scaled format or a 16-bit input in fp32") \
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

/* The policy's answer for one call (nsc_policy_ask): why it stays untouched
 * on its own (NSC_WHY_NONE: it is compressible: fp32, bf16 or fp16, Sum or
 * Avg, both buffers, count > 0, at least NCCLSHIM_MIN_BYTES of its own
 * type), and what else it may become whatever its size: a member of a fused
 * bucket (in a group, fusion on, a compressible fp32 kind: 16-bit calls are
 * never fused, so a bucket holds one input type), or a call accumulation may
 * answer locally (floating, Sum or Avg, at least MIN_BYTES, K > 1; capture
 * is the decision's to weigh). A reduce-scatter is never fused or
 * accumulated. A 16-bit call is only ever two-phase (fp32 sums) or
 * untouched: the ring would sum it in 16 bits. */
#define NSC_MAY_FUSE 1u
#define NSC_MAY_ACCUM 2u
typedef struct {
  nsc_why why;
  unsigned may; /* NSC_MAY_* */
} nsc_policy;

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
  nsc_policy pol;  /* the policy's answer (nsc_policy_ask), once per call */
} nsc_call;

/* Ask the policy about call c (its count, type, op, buffers, group, rs):
 * fills c->pol. */
void nsc_policy_ask(const nsc_config *cfg, nsc_call *c);
/* May accumulation answer c (the NSC_MAY_ACCUM rule, with c's capture: a
 * decision would be frozen into a graph)? For a call the policy was not
 * asked about yet (a communicator's first calls). */
int nsc_policy_accumulable(const nsc_config *cfg, const nsc_call *c);

/* The input of datatype dt as the codec reads it (tp_plan.h: NSC_IN_F32,
 * else 1 + the unblocked 16-bit format row whose NCCL datatype is dt), -1
 * for a datatype the shim never transforms. */
int nsc_policy_input(ncclDataType_t dt);

/* A block-scaled format is configured (formats.h's "blocked" column: int8, fp8, fp16s, int4):
 * NCCL cannot reduce them, so they exist only in the two-phase algorithm. */
int nsc_policy_blocked(const nsc_config *cfg);


#endif
