/* core.h — process-wide state of the shim: activation, configuration,
 * process totals, and the per-thread re-entry guard.
 *
 * Activation happens once, at the first intercepted call, never in a
 * constructor: the shim is inherited by launchers, compilers and forked
 * workers, where it must do nothing at all. */
#ifndef NSC_CORE_H
#define NSC_CORE_H

#include <nccl.h>
#include <stdint.h>

#include "config.h"
#include "ncclshim.h"

enum {
  NSC_ACTIVE = 1,    /* transforming per configuration */
  NSC_DISABLED = 2,  /* NCCLSHIM_DISABLE=1 or a forked child: forward everything */
  NSC_FAILED = 3,    /* bad configuration or no NCCL: collectives fail */
};

typedef struct {
  int state;
  ncclResult_t fail_code;   /* what collectives return when NSC_FAILED */
  char fail_msg[1024];
  nsc_config cfg;
  int nccl_version;         /* ncclGetVersion of the real library, 0 if unknown */
  int forked_child;         /* set in a child after fork: inert, writes nothing */
} nsc_global_t;

extern nsc_global_t nsc_g;

/* Activate once (thread-safe) and return nsc_g.state. */
int nsc_activate(void);

/* Process totals (ncclshim_get_stats); updated with relaxed atomics. */
extern ncclshim_stats_t nsc_totals;
#define NSC_COUNT(field, n) __atomic_fetch_add(&nsc_totals.field, (uint64_t)(n), __ATOMIC_RELAXED)

/* Re-entry guard: a hook entered while this thread is already inside the shim
 * (real NCCL calling a hooked API, or a callback) forwards untouched. */
extern __thread int nsc_in_shim;

/* Bytes per element of an NCCL datatype, 0 if unknown. */
size_t nsc_dtype_size(ncclDataType_t dt);
const char *nsc_dtype_name(ncclDataType_t dt);
const char *nsc_op_name(ncclRedOp_t op);

#endif
