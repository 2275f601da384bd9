/* ncclshim.h — the small public API of libncclshim.so, beside the hooked nccl*
 * functions. Programs need not link the shim to use it: look the functions up
 * with dlsym(RTLD_DEFAULT, "ncclshim_get_stats") and treat a NULL as "the shim
 * is not loaded" (this is what bench/allreduce_perf does). */
#ifndef NCCLSHIM_H
#define NCCLSHIM_H

#include <stdint.h>

#define NCCLSHIM_VERSION_STRING "0.1.0"

#ifdef __cplusplus
extern "C" {
#endif

/* "0.1.0". */
const char *ncclshim_version(void);

/* Process-wide totals since the shim became active (all communicators). */
typedef struct {
  uint64_t calls;         /* intercepted ncclAllReduce and ncclReduceScatter calls */
  uint64_t passthrough;   /* forwarded untouched */
  uint64_t compressed;    /* sent in the wire type */
  uint64_t skipped;       /* accumulation: answered locally */
  uint64_t fused;         /* members of a fused group */
  uint64_t real_calls;    /* collectives (and, two-phase, sends/receives) the shim made to real NCCL */
  uint64_t logical_bytes; /* bytes the program asked to reduce */
  uint64_t wire_bytes;    /* bytes real NCCL was asked to reduce */
  uint64_t overflow;      /* values that became +-Inf in the wire type */
  uint64_t underflow;     /* non-zero values that became +-0 */
  char wire[8];           /* "off" or a format's name (compress/formats.h: "fp16" ... "int4") */
  int enabled;            /* 0 when NCCLSHIM_DISABLE=1 or not yet active */
  uint64_t twophase;      /* compressed calls carried out in two phases (shim/exec/) */
} ncclshim_stats_t;

/* Fills *out; returns 0, or -1 when out is NULL. */
int ncclshim_get_stats(ncclshim_stats_t *out);

/* The program's optimizer steps, for accumulation that knows the step
 * (docs/accumulation.md). The Python package's step hook calls
 * ncclshim_watch_steps() once when it is installed, before training, and
 * ncclshim_optimizer_step() before every torch.optim step. The step returns
 * 0 when every communicator's gradients are whole (the last backward pass
 * synced), 1 when some communicator's last pass was answered locally (the
 * optimizer steps before accumulation's window ended): the caller then makes
 * the gradients whole before the step (the hook averages the DDP modules'
 * gradients over their process groups, between ncclshim_catchup(1) and
 * ncclshim_catchup(0), whose all-reduces the shim forwards and never
 * accumulates) or stops. None of them activates the shim. */
void ncclshim_watch_steps(void);
int ncclshim_optimizer_step(void);
void ncclshim_catchup(int on);

/* The value of setting `name` ("NCCLSHIM_REPLICA_CHECK") as the shim parses
 * the environment, as text in buf: 0, or -1 for a name the shim does not
 * have, or a setting that is invalid (the job stops at its first collective
 * then). Parses the environment each call; activates nothing. */
int ncclshim_setting(const char *name, char *buf, size_t len);

#ifdef __cplusplus
}
#endif
#endif
