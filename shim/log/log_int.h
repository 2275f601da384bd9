/* log_int.h — what the pieces of the log share among themselves (not used by
 * the rest of the shim): the histogram of times, the process identity used in
 * file names, and the writers called at communicator close and process exit.
 *
 *   log.c        hot path: records, ring, reading marks, totals, open/close
 *   log_out.c    output files (path templates), summary table, JSON Lines
 *   log_trace.c  Chrome trace events
 *   log_nvtx.c   NVTX ranges when the program has libnvToolsExt loaded
 *
 * Writers run with the communicator's log lock held and never on the hook
 * path of a collective. */
#ifndef NSC_LOG_INT_H
#define NSC_LOG_INT_H

#include <stdio.h>

#include "log.h"

/* Log-linear histogram: exact below 16 ns, then 16 bins per power of two, so
 * a percentile read from it is within 1/32 (3.1%) of the true value. */
#define NSC_LOG_HIST_BINS (16 + 60 * 16)
void nsc_hist_add(uint64_t *h, uint64_t ns);
/* The q-quantile (0 < q <= 1) of the counts in h (several histograms summed
 * when n > 1; NULL entries skipped), in ns; 0 when empty. */
uint64_t nsc_hist_quantile(uint64_t *const *h, int n, double q);

/* What the log keeps: detail records (calls mode or a trace file). */
int nsc_log_detail(void);
int nsc_log_level(void);
/* This process's rank in the first communicator it logged (-1 if unknown). */
int nsc_log_proc_rank(void);

/* log_out.c */
void nsc_log_out_init(const nsc_config *cfg);
/* One communicator's sections (summary, JSON lines, trace events). */
void nsc_log_out_comm(const nsc_comm_log *l);
/* Process exit: terminate the trace, close files. */
void nsc_log_out_finish(void);
/* Shared formatting: algbw/busbw in GB/s (1e9 B/s) of bytes moved in ns. */
double nsc_log_algbw(uint64_t bytes, uint64_t ns);
double nsc_log_busbw(double algbw, int nranks);
/* JSON string body (quotes excluded) of s into f. */
void nsc_log_json_str(FILE *f, const char *s);
/* ns as microseconds with three decimals, exact ("12.345"). */
void nsc_log_put_us(FILE *f, uint64_t ns);
const char *nsc_log_host(void);

/* log_trace.c: a trace file is a JSON array: its opening and process
 * metadata, then each communicator's events (each written as ",\n{...}"),
 * then "]" at process exit. */
void nsc_log_trace_begin(FILE *f);
void nsc_log_trace_comm(FILE *f, const nsc_comm_log *l);
void nsc_log_trace_end(FILE *f);

/* log_nvtx.c */
void nsc_nvtx_init(void);
void nsc_nvtx_start(nsc_rec *r);
void nsc_nvtx_end(nsc_rec *r);

#endif
