/* diag_nvml.h — device busy on a GPU for the diagnosis, from NVML's GPU
 * utilisation samples: libnvidia-ml.so.1 dlopen'ed (never linked) by the
 * log's writer thread, the communicator's device found by its PCI bus id
 * (cuDeviceGetPCIBusId, then nvmlDeviceGetHandleByPciBusId_v2), its samples
 * (nvmlDeviceGetSamples, NVML_GPU_UTILIZATION_SAMPLES, from the last one
 * seen; nvmlDeviceGetUtilizationRates where samples are not supported) kept
 * in memory, and a step's busy time from the samples over its wall interval
 * (nsc_nvml_map; docs/diagnosis.md has the rule and its limits).
 *
 * Calling threads only mark a device as wanted (an atomic bit) and read the
 * kept samples; every NVML and driver call is made by the writer thread
 * (nsc_nvml_poll). No NVML (library, symbol, device or permission missing):
 * no busy time, and nsc_nvml_why says why; never a failure.
 *
 * Must not: call NVML or CUDA on a calling thread, wait, or touch a stream. */
#ifndef NSC_DIAG_NVML_H
#define NSC_DIAG_NVML_H

#include <stddef.h>
#include <stdint.h>


#define NSC_NVML_MAXDEV 64        /* CUDA device ordinals followed */
#define NSC_NVML_KEEP 4096        /* samples kept per device (the oldest half leaves when full) */
#define NSC_NVML_MAX_GAP_US 5000000ull /* samples further apart cover nothing between them */

/* One utilisation sample: NVML's timestamp (µs, the wall clock) and the
 * percent of the sample period before it with a kernel running. */
typedef struct {
  uint64_t ts_us;
  uint32_t pct;
} nsc_nvml_sample;

/* Calling thread: the diagnosis wants dev's samples. Returns 1 when no
 * device was wanted before (then the caller wakes the writer). */
int nsc_nvml_want(int dev);
/* Some device is wanted (the writer then runs once a second). */
int nsc_nvml_wanted(void);
/* Writer thread: load NVML once, open the wanted devices, keep new samples. */
void nsc_nvml_poll(void);
/* Busy time of dev over [a_us, b_us] (wall clock) from the kept samples:
 * 1 and *busy_ns; 0 when the samples do not reach b_us yet; -1 never (no
 * NVML, or samples missing inside the interval). */
int nsc_nvml_busy(int dev, uint64_t a_us, uint64_t b_us, uint64_t *busy_ns);
/* Why dev has no busy time (a static or kept string, never NULL). */
const char *nsc_nvml_why(int dev);

/* The rule, pure (exposed for tests): samples s[0..n) in time order; sample
 * i >= 1 covers (s[i-1].ts, s[i].ts] at s[i].pct percent; busy = the sum over
 * samples of pct/100 times the overlap of that span with [a, b]. Returns as
 * nsc_nvml_busy: -1 when s[0] is after a (the samples start later) or a span
 * overlapping [a, b] is longer than max_gap_us. */
int nsc_nvml_map(const nsc_nvml_sample *s, size_t n, uint64_t a_us, uint64_t b_us, uint64_t max_gap_us,
                 uint64_t *busy_ns);

#endif
