/* diag_policy.h — the verdict rules of the diagnosis, in one place: the
 * thresholds below and nsc_diag_judge (diag_policy.c). docs/diagnosis.md
 * has them as a table; bench/ncclshim-report applies the same table across
 * ranks. Must not: depend on anything but its arguments. */
#ifndef NSC_DIAG_POLICY_H
#define NSC_DIAG_POLICY_H

#include "diag.h"

#define NSC_DIAG_MIN_STEPS 3        /* fewer complete steps: "unknown" */
#define NSC_DIAG_COMM_SHARE 0.40    /* exposed_comm_share at least this (and >= input_share): communication-bound */
#define NSC_DIAG_INPUT_SHARE 0.40   /* input_share at least this: input-bound */
#define NSC_DIAG_COMPUTE_SHARE 0.60 /* compute_share at least this: compute-bound */
#define NSC_DIAG_RUNQ_SHARE 0.25    /* runqueue_share at least this: cpu-starved */

/* What the verdict's suggestions may name. */
typedef struct {
  int compress_off;     /* NCCLSHIM_COMPRESS=off */
  const char *compress; /* NCCLSHIM_COMPRESS's value (NULL: not known) */
  int grads16;          /* most reduced bytes are bf16/fp16: the advice is about 16-bit gradients */
  long long accum_steps;
  int learned;          /* a pass was learned at some point */
  const char *why_off;  /* why learning stopped, or "" */
  uint64_t acc_calls;   /* accumulable calls seen */
  const char *busy_why; /* why no step has a busy time (GPU: diag_nvml's reason), or NULL */
} nsc_diag_ctx;

typedef struct {
  const char *verdict;  /* input-bound, communication-bound, cpu-starved, compute-bound, mixed, unknown */
  double exposed_comm_share, input_share, compute_share; /* < 0: unknown */
  double runqueue_share; /* the issuing thread waiting for a CPU (host: schedstat), < 0 unknown */
  double mean_step_us;
  char reason[420];     /* the numbers that led to it */
  char suggest[900];    /* what to try next */
} nsc_diag_result;

void nsc_diag_judge(const nsc_diag_tot *t, const nsc_diag_ctx *ctx, nsc_diag_result *out);

#endif
