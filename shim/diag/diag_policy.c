/* diag_policy.c — the verdict: shares of step time from the totals over
 * complete steps, the first rule of the table below that holds, and what to
 * try next with the numbers behind it (thresholds in diag_policy.h):
 *
 *   1 fewer than NSC_DIAG_MIN_STEPS steps        unknown (and why)
 *   2 busy time unknown (no source)              communication-bound if
 *                                                exposed >= COMM, else unknown
 *   3 runqueue >= RUNQ                           cpu-starved
 *   4 exposed >= COMM and exposed >= input       communication-bound
 *   5 input >= INPUT                             input-bound
 *   6 compute >= COMPUTE                         compute-bound
 *   7 otherwise                                  mixed
 *
 *   exposed  = exposed communication / step time  (all counted steps)
 *   input    = idle, no collective in flight / step time  (steps with a busy time)
 *   compute  = 1 - exposed - input                        (the same steps)
 *   runqueue = the issuing thread's time runnable but waiting for a CPU /
 *              step time (steps where schedstat was read; part of compute,
 *              which counts CPU and run-queue time as busy). It comes before
 *              communication: a thread that waits for a CPU launches late
 *              and arrives late at every collective, so its peers' and its
 *              own exposed communication grow with it (and the host NCCL's
 *              collectives run on those CPUs).
 * Must not: depend on anything but its arguments. */
#include "diag_policy.h"

#include <stdio.h>
#include <string.h>

static double share(uint64_t part, uint64_t whole) { return whole ? (double)part / (double)whole : 0.0; }

static void add(char *buf, size_t len, const char *s) {
  size_t n = strlen(buf);
  if (n + 1 < len) snprintf(buf + n, len - n, "%s", s);
}

/* The wire to try: for fp32 gradients a 16-bit wire, then int8; for bf16/fp16
 * ones (docs/collectives.md, "16-bit inputs") only the 8- and 4-bit wires
 * cut bytes: their own type buys fp32 sums at the same bytes. */
static void try_wire(char *b, size_t n, const nsc_diag_ctx *c) {
  const char *w = c->compress ? c->compress : "";
  int on8 = !strcmp(w, "int8") || !strcmp(w, "fp8"), on4 = !strcmp(w, "int4");
  if (c->grads16) {
    if (on4) return;
    add(b, n, on8 ? "NCCLSHIM_COMPRESS=int4 (a quarter of the 16-bit gradients' bytes, two phases with fp32 sums; "
                    "error up to 1/7.5 of a block's largest value); "
                  : "NCCLSHIM_COMPRESS=int8 (half of the 16-bit gradients' bytes, two phases with fp32 sums; int4: a "
                    "quarter; bf16 or fp16 alone keep the bytes and only sum in fp32); ");
    return;
  }
  if (on4) return;
  add(b, n, c->compress_off ? "NCCLSHIM_COMPRESS=bf16 or fp16 (half the wire bytes; int8: a quarter); "
            : on8           ? "NCCLSHIM_COMPRESS=int4 (an eighth of fp32's wire bytes, two-phase); "
                            : "NCCLSHIM_COMPRESS=int8 (a quarter of fp32's wire bytes, two-phase); ");
}

static void try_comm(char *b, size_t n, const nsc_diag_ctx *c) {
  try_wire(b, n, c);
  if (c->accum_steps <= 1)
    add(b, n, "gradient accumulation (model.no_sync(), or NCCLSHIM_ACCUM_STEPS=K for a loop without it) to sync "
              "once per K passes; ");
  add(b, n, "the preset for the fabric (env/ethernet-1g.env, ethernet-25g.env, roce.env, infiniband.env, "
            "nvlink.env; env/ncclshim-tune sweeps them); NCCL: NCCL_SOCKET_NTHREADS and NCCL_NSOCKS_PERTHREAD on "
            "TCP, NCCL_IB_HCA on InfiniBand, NCCL_DEBUG=INFO to see the transport; a straggler shows in "
            "bench/ncclshim-report across ranks");
}

static void try_input(char *b, size_t n) {
  add(b, n, "DataLoader(num_workers=N with N up to the CPU cores per rank, pin_memory=True, prefetch_factor=4, "
            "persistent_workers=True); move decoding and augmentation off the training loop's thread");
}

/* What competes for the cores, in the words of what this process is known
 * to have: DataLoader workers are named only where it has child processes
 * (or where the kernel does not list them). */
static void try_cpu(char *b, size_t n, double rq, const nsc_diag_tot *t) {
  char m[560], cores[120] = "";
  if (t->cpus > 0 && t->threads > 0)
    snprintf(cores, sizeof cores, " this process may run on %d core%s and has %d threads;", t->cpus,
             t->cpus == 1 ? "" : "s", t->threads);
  if (t->children_reads && t->children > 0)
    snprintf(m, sizeof m,
             "the training thread waited for a CPU %.0f%% of its step (run queue):%s it had up to %d child "
             "process%s (DataLoader workers or others of its own), so more DataLoader workers would make it worse: "
             "use fewer workers and torch threads than the cores each rank has (num_workers, torch.set_num_threads "
             "/ OMP_NUM_THREADS), give augmentation its own cores (taskset, numactl) or lighten it",
             100 * rq, cores, t->children, t->children == 1 ? "" : "es");
  else if (t->children_reads)
    snprintf(m, sizeof m,
             "the training thread waited for a CPU %.0f%% of its step (run queue):%s it has no child processes "
             "(no DataLoader workers), so other processes compete for its cores (the other ranks on this machine, "
             "or other jobs): fewer torch threads per rank (torch.set_num_threads / OMP_NUM_THREADS), fewer ranks "
             "per machine, or cores of their own for each rank (taskset, numactl)",
             100 * rq, cores);
  else
    snprintf(m, sizeof m,
             "the training thread waited for a CPU %.0f%% of its step (run queue):%s other ranks, torch threads, "
             "DataLoader workers or other processes compete for its cores: fewer torch threads per rank "
             "(torch.set_num_threads / OMP_NUM_THREADS), and if it has DataLoader workers fewer of them (more "
             "would make it worse), or cores of its own for each rank (taskset, numactl)",
             100 * rq, cores);
  add(b, n, m);
}

static void try_compute(char *b, size_t n) {
  add(b, n, "communication is not what the device waits for: speed up the model itself (mixed precision, "
            "torch.compile, a larger batch per device); the shim's settings will not change much");
}

void nsc_diag_judge(const nsc_diag_tot *t, const nsc_diag_ctx *c, nsc_diag_result *o) {
  memset(o, 0, sizeof *o);
  o->exposed_comm_share = o->input_share = o->compute_share = o->runqueue_share = -1;
  o->verdict = "unknown";
  if (t->steps < NSC_DIAG_MIN_STEPS) {
    if (!c->learned && !c->acc_calls)
      snprintf(o->reason, sizeof o->reason,
               "no accumulable all-reduce or reduce-scatter on this communicator (floating Sum/Avg of at least "
               "NCCLSHIM_MIN_BYTES): no steps to find");
    else if (!c->learned)
      snprintf(o->reason, sizeof o->reason,
               "no repeating backward pass was learned from this communicator's %llu accumulable call(s)%s%s",
               (unsigned long long)c->acc_calls, c->why_off && c->why_off[0] ? ": " : "",
               c->why_off ? c->why_off : "");
    else
      snprintf(o->reason, sizeof o->reason,
               "%llu complete step(s), %d needed (%llu more with calls captured into a CUDA graph, not timed)",
               (unsigned long long)t->steps, NSC_DIAG_MIN_STEPS, (unsigned long long)t->steps_captured);
    return;
  }
  o->mean_step_us = (double)t->wall_ns / 1e3 / (double)t->steps;
  double ex = share(t->exposed_ns, t->wall_ns);
  o->exposed_comm_share = ex;
  if (!t->busy_steps || !t->busy_wall_ns) {
    snprintf(o->reason, sizeof o->reason,
             "exposed communication %.1f%% of %llu step(s) (mean %.3f ms); device busy time unknown (%s), so input "
             "and compute are not told apart",
             100 * ex, (unsigned long long)t->steps, o->mean_step_us / 1e3,
             c->busy_why && c->busy_why[0] ? c->busy_why : t->gpu ? "no source" : "the CPU time could not be read");
    if (ex >= NSC_DIAG_COMM_SHARE) {
      o->verdict = "communication-bound";
      try_comm(o->suggest, sizeof o->suggest, c);
    }
    return;
  }
  /* input and compute from the steps with a busy time (all of them normally) */
  uint64_t w = t->busy_wall_ns, e = t->busy_exposed_ns, free_ns = w > e ? w - e : 0;
  uint64_t busy = t->busy_ns < free_ns ? t->busy_ns : free_ns;
  double in = share(free_ns - busy, w);
  o->input_share = in;
  o->compute_share = share(busy, w);
  if (t->runq_steps && t->runq_wall_ns) o->runqueue_share = share(t->runq_ns, t->runq_wall_ns);
  if (o->runqueue_share >= NSC_DIAG_RUNQ_SHARE) {
    o->verdict = "cpu-starved";
    try_cpu(o->suggest, sizeof o->suggest, o->runqueue_share, t);
  } else if (ex >= NSC_DIAG_COMM_SHARE && ex >= in) {
    o->verdict = "communication-bound";
    try_comm(o->suggest, sizeof o->suggest, c);
  } else if (in >= NSC_DIAG_INPUT_SHARE) {
    o->verdict = "input-bound";
    try_input(o->suggest, sizeof o->suggest);
  } else if (o->compute_share >= NSC_DIAG_COMPUTE_SHARE) {
    o->verdict = "compute-bound";
    try_compute(o->suggest, sizeof o->suggest);
  } else {
    o->verdict = "mixed";
    if (ex >= in) try_comm(o->suggest, sizeof o->suggest, c);
    else try_input(o->suggest, sizeof o->suggest);
  }
  char rq[64] = "";
  if (o->runqueue_share >= 0) snprintf(rq, sizeof rq, " (%.1f%% of it waiting for a CPU)", 100 * o->runqueue_share);
  char gap[80] = ""; /* host only: a GPU's records have no common time origin */
  if (!t->gpu) snprintf(gap, sizeof gap, ", longest gap without a collective %.3f ms", (double)t->max_gap_ns / 1e6);
  snprintf(o->reason, sizeof o->reason,
           "exposed communication %.1f%%, input (device idle, no collective in flight) %.1f%%, compute %.1f%%%s of "
           "%llu step(s), mean %.3f ms%s; busy from %s",
           100 * ex, 100 * in, 100 * o->compute_share, rq, (unsigned long long)t->steps, o->mean_step_us / 1e3, gap,
           t->src == NSC_DIAG_SRC_CPU    ? "process CPU time (host stand-in for the device)"
           : t->src == NSC_DIAG_SRC_NVML ? "NVML GPU utilisation samples (kernel time less the exposed communication)"
                                         : nsc_diag_src_name(t->src));
}
