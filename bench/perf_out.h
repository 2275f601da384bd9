/* perf_out.h — allreduce_perf's report: nccl-tests' text layout on stdout
 * (header, the all_reduce_perf table, footer; only rank 0 prints) and the
 * same content as one JSON document (-J).
 *
 * The standard columns are byte-for-byte nccl-tests' classic layout, so the
 * rows diff against all_reduce_perf output; our extra columns (shim wire type,
 * max relative error) are appended at the end of each row.
 *
 * Must not: call MPI, NCCL or CUDA (the harness gathers, this formats). */
#ifndef PERF_OUT_H
#define PERF_OUT_H

#include <stdio.h>
#include <sys/types.h>
#include "perf_args.h"
#include "ncclshim.h"

/* One half of a row: out-of-place or in-place. */
typedef struct {
  double time_us, algbw, busbw;
  long long wrong;        /* -1 when not checked (-c 0) */
  double max_relerr;      /* meaningful when wrong >= 0 */
  const char *wire;       /* "fp16"/"bf16" compressed, "skip" answered locally, "-" neither */
} perf_result_t;

typedef struct {
  int rank, device;
  pid_t pid;
  char host[64];
  char desc[128];         /* "[0000:04:00] NVIDIA H200" */
} perf_device_t;

typedef struct {
  int print;              /* this rank writes stdout (rank 0) */
  int extra;              /* append the wire / relerr columns */
  FILE *json;             /* NULL: no JSON */
  int json_rows;          /* rows written so far (for commas) */
} perf_out_t;

/* Opens the JSON file (rank 0 only, when path != NULL) and writes its start.
 * Returns 0, or -1 with a message in err. */
int perf_out_open(perf_out_t *o, int print, int extra, const char *path,
                  int argc, char **argv, char *err, size_t errlen);

/* "# nThread 1 nGpus 1 minBytes ..." and our own '#' lines. shim_version is
 * NULL when the shim is not loaded. */
void perf_out_config(perf_out_t *o, const perf_opts_t *opts, int nranks, const char *mem,
                     int graphs_ok, const char *shim_version, const ncclshim_stats_t *shim);

void perf_out_devices(perf_out_t *o, const perf_device_t *d, int n);
void perf_out_table_header(perf_out_t *o);
void perf_out_row(perf_out_t *o, size_t bytes, size_t count, const char *type,
                  const char *op, const perf_result_t res[2]);

/* After the last row. */
void perf_out_table_end(perf_out_t *o);

/* The shim's counters after the table; differ: the ranks' counts disagree. */
/* chk_over, chk_under: the casts' counts of the checked launches only. */
void perf_out_shim(perf_out_t *o, const ncclshim_stats_t *s, int differ, uint64_t chk_over, uint64_t chk_under);

/* "# Out of bounds values : N OK|FAILED", "# Avg bus bandwidth : X"; min_bw
 * < 0 when NCCL_TESTS_MIN_BW is unset. Closes the JSON document. */
void perf_out_footer(perf_out_t *o, int errors, double avg_bw, double min_bw);

#endif
