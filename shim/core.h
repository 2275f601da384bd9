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
#include "names.h"
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
  /* An invalid setting (fail_msg says which): the state stays NSC_ACTIVE with
   * the defaults and nothing transformed, so that this rank still takes part
   * in each communicator's configuration check, where every rank then fails
   * alike (check.c); no logs, no banner. */
  int bad_setting;
} nsc_global_t;

extern nsc_global_t nsc_g;

/* Activate once (thread-safe) and return nsc_g.state: after the first call
 * a load (the state is published last, with release, and never changes but
 * in a forked child, which is single-threaded there). */
int nsc_activate_once(void);
static inline int nsc_activate(void) {
  int s = __atomic_load_n(&nsc_g.state, __ATOMIC_ACQUIRE);
  return s ? s : nsc_activate_once();
}

/* Process totals (ncclshim_get_stats). Each thread adds into its own block
 * with plain stores (no locked read-modify-write on the per-call path); a
 * reader sums the blocks, and a thread's block is folded into the retired
 * totals when the thread exits. */
#define NSC_COUNTERS(X) X(calls) X(passthrough) X(compressed) X(skipped) X(fused) \
  X(real_calls) X(logical_bytes) X(wire_bytes) X(twophase)
enum {
#define X(f) NSC_C_##f,
  NSC_COUNTERS(X)
#undef X
  NSC_NCOUNTERS
};
typedef struct nsc_counts {
  uint64_t v[NSC_NCOUNTERS];
  struct nsc_counts *prev, *next;
} nsc_counts;
extern __thread nsc_counts *nsc_my_counts;
nsc_counts *nsc_counts_register(void);
void nsc_counts_sum(uint64_t v[NSC_NCOUNTERS]);
static inline void nsc_count_add(int i, uint64_t n) {
  nsc_counts *c = nsc_my_counts ? nsc_my_counts : nsc_counts_register();
  if (c) __atomic_store_n(&c->v[i], c->v[i] + n, __ATOMIC_RELAXED);
}
#define NSC_COUNT(field, n) nsc_count_add(NSC_C_##field, (uint64_t)(n))
/* wire type name and enabled flag for ncclshim_get_stats */
extern ncclshim_stats_t nsc_totals;

/* Tell the log what the casts of the process lost so far (log.h: it never
 * asks): at a communicator's end and at exit. */
void nsc_tell_log(void);

/* The program's optimizer steps (ncclshim.h): the step hook is installed,
 * and the steps it reported so far (atomics). */
extern int nsc_steps_watched;
extern uint64_t nsc_steps;
/* This thread's all-reduces are the step hook's catch-up (ncclshim_catchup):
 * transformed as any call, never fed to accumulation. */
extern __thread int nsc_catchup_on;

/* Re-entry guard: a hook entered while this thread is already inside the shim
 * (real NCCL calling a hooked API, or a callback) forwards untouched. */
extern __thread int nsc_in_shim;

/* ncclGetLastError for the shim's own errors (a refused call, an invalid or
 * differing setting): the message of the calling thread's last one, noted
 * where the error is returned and forgotten when the thread enters its next
 * collective; "" when none (then NCCL's own string is the answer). */
void nsc_note_error(const char *msg);
extern __thread char nsc_noted[512];
static inline void nsc_forget_error(void) { nsc_noted[0] = 0; }
const char *nsc_noted_error(void);


#endif
