/* diag.h — "why is the GPU idle?": steps found from a communicator's
 * all-reduces and what each step spent its time on, for the log (summary
 * verdict, JSON Lines "step" records, trace slices). docs/diagnosis.md has
 * the definitions; the verdict rules are in diag_policy.c.
 *
 * Steps: the accumulation learner (accum/accum.c) in its observe-only mode
 * finds the backward pass in the sequence of accumulable all-reduces and
 * reduce-scatters (FSDP2 / ZeRO reduce gradients with those); a step
 * runs from the call of the pass's first bucket to the call of the next
 * pass's first bucket. What the learner says is used for logging only: it
 * never decides anything, issues nothing (its agreements are one-rank
 * agreements answered here with its own values) and answers nothing.
 *
 * Per step, from the log's records as they are read (in commit order, under
 * the log's lock): the time with a collective in flight, the exposed
 * communication, the longest gap without a collective, and (host backend)
 * the process's CPU time over the step, read at the step's boundary call;
 * (GPU) NVML's utilisation samples over the step (diag_nvml.h), mapped by the
 * writer once they cover the step.
 *
 * Must not: call NCCL or CUDA, wait, allocate per call (the state is
 * allocated once per communicator; learning allocates as accum.c does), or
 * change anything the shim issues. */
#ifndef NSC_DIAG_H
#define NSC_DIAG_H

#include <stddef.h>
#include <stdint.h>

#include "accum.h"


/* Where "device busy" came from. */
enum { NSC_DIAG_SRC_NONE = 0, NSC_DIAG_SRC_CPU = 1, NSC_DIAG_SRC_NVML = 2 };
const char *nsc_diag_src_name(int src);

#define NSC_DIAG_BND 16       /* pass boundaries remembered (records are read a few passes late at most) */
#define NSC_DIAG_STEPS 1024   /* closed steps waiting for the writer (detail) */
#define NSC_DIAG_RELEARN 4    /* the learner starts again at most this many times */
#define NSC_DIAG_HOST_EVERY 16 /* the process around the boundary thread is read at every 16th boundary */

/* One step: pass `pass` from its first bucket's call to the next pass's. */
typedef struct {
  int64_t pass;             /* backward pass number (the learner's micro-step) */
  uint64_t first_call;      /* the shim's call counter at the pass's first bucket */
  uint64_t start_ns;        /* CLOCK_MONOTONIC at that call */
  uint64_t wall_start_ns;   /* the same on CLOCK_REALTIME */
  uint64_t wall_ns;         /* to the next pass's first bucket */
  uint64_t records;         /* log records in the step */
  uint64_t inflight_ns;     /* time with at least one collective in flight (host: union; GPU: sum, capped) */
  uint64_t exposed_ns;      /* exposed communication (host: = inflight; GPU: the last bucket's collective) */
  uint64_t max_gap_ns;      /* longest time without a collective in flight (host) */
  int64_t cpu_ns;           /* the boundary thread's CPU time over the step, -1 if not read */
  int64_t runq_ns;          /* its wait for a CPU (run queue) over the step, -1 if not read */
  uint64_t coll_busy_ns;    /* of those, inside its accumulable collectives (host) */
  int64_t busy_ns;          /* device busy with no collective in flight, -1 if unknown */
  uint32_t untimed, captured; /* records without a time; those captured into a CUDA graph */
  int src;                  /* NSC_DIAG_SRC_* of busy_ns */
  int gpu;                  /* its records were timed with device events */
} nsc_diag_step;

/* Totals over the complete, fully timed steps (the verdict's input). */
typedef struct {
  uint64_t steps;           /* steps counted below */
  uint64_t steps_untimed;   /* of those, steps with a record without a time (grouped, timing unknown) */
  uint64_t steps_captured;  /* complete steps left out: a record captured into a CUDA graph */
  uint64_t steps_broken;    /* steps cut short by the learner starting again */
  uint64_t wall_ns, inflight_ns, exposed_ns, max_gap_ns;
  uint64_t busy_steps, busy_wall_ns, busy_ns, busy_exposed_ns; /* steps with a known busy time, and their sums */
  uint64_t runq_steps, runq_wall_ns, runq_ns; /* steps with a known run-queue time (host: schedstat), their sums */
  int src;                  /* NSC_DIAG_SRC_* of the busy times */
  int gpu;
  /* The process around the boundary thread, what the cpu-starved advice may
   * name (read at boundaries, nsc_diag_host_read): the cores its affinity
   * allows and its threads at the last reading (0: never read), and the most
   * child processes its threads had (DataLoader workers are such children),
   * over children_reads readings (0: the kernel does not list children). */
  int cpus, threads, children;
  uint32_t children_reads;
} nsc_diag_tot;

/* A pass boundary, taken at the call of the pass's first bucket. */
typedef struct {
  int64_t pass;
  uint64_t call, t_ns, wall_ns;
  int64_t cpu_ns, runq_ns;  /* of the calling thread (-1: not read) */
  uint64_t tid;             /* that thread (readings of different threads do not subtract) */
} nsc_diag_bnd;

typedef struct nsc_diag {
  nsc_accum learn;          /* observe-only */
  int relearns;             /* times learning started again */
  uint64_t acc_calls;       /* accumulable calls fed */
  char why_off[256];        /* why the learner last stopped, if it did */
  size_t pass_len;          /* the learned pass (for the summary) */
  uint64_t pass_bytes;
  long long accum_steps;    /* K, for optimizer-step numbering */
  /* written at the call, read when its record is committed */
  int64_t cur_pass;         /* pass of the calls from now on, -1 none */
  uint64_t last_call;       /* call counter of the pass's last bucket, when it came */
  nsc_diag_bnd bnd[NSC_DIAG_BND];
  uint64_t wall_off;        /* CLOCK_REALTIME - CLOCK_MONOTONIC at the first boundary */
  int have_wall_off;
  uint64_t boundaries;      /* boundaries taken (the host readings' cadence) */
  int want_cpu;             /* read the CPU time at boundaries (host backend, or not known yet) */
  /* accounting, in the order records are read */
  nsc_diag_step open;
  int have_open;
  uint64_t cursor_ns;       /* host: end of the latest collective interval in the open step */
  uint64_t open_tid;        /* the thread of the open step's boundary */
  nsc_diag_tot tot;
  /* closed steps for the writer (detail mode) */
  nsc_diag_step *steps;
  size_t shead, slen;
  uint64_t steps_dropped;
  /* GPU: steps waiting for NVML samples that cover them (diag_nvml.h) */
  int cudev;                /* the CUDA device of its records, -1 not known yet, -2 none */
  nsc_diag_step *pend;      /* NSC_DIAG_STEPS, allocated at the first GPU step */
  size_t phead, plen;
} nsc_diag;

/* A fresh state (NULL when out of memory: no diagnosis for it). */
nsc_diag *nsc_diag_new(long long accum_steps, int keep_steps);
void nsc_diag_free(nsc_diag *d);

/* The learner's element of one call: an all-reduce as it is; a
 * reduce-scatter (rs; count = the whole send buffer) with NSC_DIAG_RS_OP
 * added to its op, so that it never matches an all-reduce of the same
 * buffers and count. */
#define NSC_DIAG_RS_OP 0x100000
nsc_accum_el nsc_diag_el(int rs, const void *send, const void *recv, uint64_t count, int dtype, int op,
                         uint64_t bytes);

/* One intercepted all-reduce or reduce-scatter, before its real call (call = the shim's call
 * counter). acc: accumulable by signature (floating Sum/Avg, at least
 * NCCLSHIM_MIN_BYTES, both buffers); int_sum: an integer Sum. Returns 1
 * when this call begins a pass (then the caller fills the boundary's clocks
 * with nsc_diag_boundary). */
int nsc_diag_call(nsc_diag *d, uint64_t call, const nsc_accum_el *e, int acc, int int_sum, int fl);
void nsc_diag_boundary(nsc_diag *d, uint64_t t_ns, uint64_t wall_ns, int64_t cpu_ns, int64_t runq_ns, uint64_t tid);

/* Read the process around the calling thread into t's cpus, threads and
 * children (nsc_diag_boundary does, every NSC_DIAG_HOST_EVERY boundaries). */
void nsc_diag_host_read(nsc_diag_tot *t);

/* One record read by the log (in commit order), as the log tells it. */
typedef struct {
  int64_t pass;       /* its pass tag (-1: the learner had none) */
  int last_bucket;    /* its call was the pass's last bucket */
  uint64_t host_ns;   /* when the call was made (CLOCK_MONOTONIC) */
  uint64_t dur_ns;    /* the length of its timed work */
  int timed;          /* its work was timed */
  int gpu;            /* timed on a device (else on the host) */
  int captured;       /* made while its stream was captured */
  int skipped;        /* answered locally: work, not communication */
  int64_t busy_in_ns; /* host: the calling thread's CPU and run-queue time inside it (-1: not read) */
} nsc_diag_in;
void nsc_diag_rec(nsc_diag *d, const nsc_diag_in *in);

/* GPU steps closed while their device is followed by NVML wait here until
 * samples cover them (then busy = the samples' kernel time less the exposed
 * communication, source "nvml"), or until force (then busy unknown). Called
 * by the writer each round (after nsc_nvml_poll) and on a log's close. */
void nsc_diag_settle(nsc_diag *d, int force);
/* A GPU step's busy time from its device's kernel time over the step (pure). */
int64_t nsc_diag_gpu_busy(const nsc_diag_step *s, uint64_t kernel_ns);

/* Closed steps waiting for the writer: up to max copied to out, removed. */
size_t nsc_diag_take(nsc_diag *d, nsc_diag_step *out, size_t max);

/* Pure accounting of one closed step into totals (exposed for tests). */
void nsc_diag_tot_add(nsc_diag_tot *t, const nsc_diag_step *s);
/* Busy time of a host step: the boundary thread's CPU time plus its wait
 * for a CPU (on a busy machine: work that wanted to run), less what of both
 * it spent inside its collectives, at most the time with no collective in
 * flight (-1 when the CPU time is unknown). */
int64_t nsc_diag_host_busy(const nsc_diag_step *s);

/* The pass and the position of the last call in it (efx: error-feedback
 * state keyed by position): -1 when not known. Pure reads of d->learn. */
void nsc_diag_position(const nsc_diag *d, long long *pass, long *pos);

#endif
