/* log_int.h — what the pieces of the log share among themselves (not used by
 * the rest of the shim): the histogram of times, the process identity used in
 * file names, and the writers called at communicator close and process exit.
 *
 *   log_rec.c    hot path: records, ring, reading marks, totals, open/close,
 *                and what the writer takes from the open logs (told to the
 *                writer as an nsc_log_source: it never calls log_rec.c)
 *   log_writer.c the writer thread, its queue of closed logs, SIGTERM
 *   log_out.c    output files (path templates), summary table, JSON Lines
 *   log_trace.c  Chrome trace events
 *   log_nvtx.c   NVTX ranges when the program has libnvToolsExt loaded
 *   log_fmt.c    what they all share: the settings read at activation, the
 *                process's rank and host, the histogram, number and JSON
 *                formats
 * Each file calls only those listed after it (log_rec.c the writer, log_out,
 * log_nvtx and log_fmt; log_writer log_out and log_fmt; log_out log_trace
 * and log_fmt; log_trace log_fmt): no circle inside the room. 
 *
 * Formatting and file I/O run on the writer thread on copies taken under the
 * communicator's lock, never on the hook path of a collective (and, when no
 * thread could be started, on the closing thread at destroy or exit). */
#ifndef NSC_LOG_INT_H
#define NSC_LOG_INT_H

#include <stdio.h>
#include <time.h>

#include "diag.h"
#include "log.h"

/* Log-linear histogram: exact below 16 ns, then 16 bins per power of two, so
 * a percentile read from it is within 1/32 (3.1%) of the true value. */
#define NSC_LOG_HIST_BINS (16 + 60 * 16)
void nsc_hist_add(uint64_t *h, uint64_t ns);
/* The q-quantile (0 < q <= 1) of the counts in h (several histograms summed
 * when n > 1; NULL entries skipped), in ns; 0 when empty. */
uint64_t nsc_hist_quantile(uint64_t *const *h, int n, double q);

/* log_fmt.c: the settings as read at activation (nsc_log_init). */
void nsc_log_fmt_init(const nsc_config *cfg);
/* What the log keeps: detail records (calls mode or a trace file). */
int nsc_log_detail(void);
int nsc_log_level(void);
/* This process's rank in the first communicator it logged (-1 if unknown;
 * told by log_rec.c when that communicator is named). */
int nsc_log_proc_rank(void);
void nsc_log_set_proc_rank(int rank);

/* Who a communicator's lines name. */
typedef struct {
  uint64_t id;
  int rank, nranks, comm_seq;
} nsc_log_who;

/* The writer's state of one communicator: its trace tracks (a track per
 * stream, each with the end of its last slice). Created by nsc_log_collect,
 * read and grown by the writer only. */
typedef struct {
  nsc_stream stream;
  int tid;
  uint64_t cursor; /* wall ns */
} nsc_log_track;
typedef struct nsc_log_wstate {
  nsc_log_track *tr;
  int nt, cap;
  int step_track;  /* the diagnosis's step track was named */
} nsc_log_wstate;

/* Records a ring holds: n of them from head in a ring of alloc entries. */
typedef struct {
  const nsc_rec *ring;
  size_t head, alloc, n;
} nsc_log_recs;

/* Detail records taken from an open log (recs and steps owned by the batch). */
typedef struct {
  nsc_log_who who;
  nsc_log_wstate *w;
  nsc_rec *recs;
  size_t n;
  nsc_diag_step *steps;    /* closed diagnosis steps (after the records) */
  size_t nsteps;
} nsc_log_batch;

/* A closed communicator's log handed to the writer: a copy of the log whose
 * ring (the records not yet written), histograms and writer state it owns. */
typedef struct nsc_log_final {
  nsc_comm_log l;
  struct nsc_log_final *next;
} nsc_log_final;

nsc_log_who nsc_log_who_of(const nsc_comm_log *l);
/* What the writer takes from the open logs (log_rec.c's, told at nsc_log_init).
 *   collect        the resolved detail records of every open log whose rank
 *                  is known (once the first communicator's rank is known: it
 *                  names the files); deadline: lock with a time limit
 *                  (SIGTERM), NULL: wait;
 *   close_all_now  SIGTERM, the process about to die: close every open log
 *                  without querying the device (records not read yet are
 *                  "unknown"), each handed to the writer;
 *   final_settle   the diagnosis's GPU steps still waiting for NVML samples
 *                  get what the samples so far give (busy unknown
 *                  otherwise), before the final is written;
 *   final_free     a written final. */
typedef struct {
  void (*collect)(nsc_log_batch **out, size_t *n, const struct timespec *deadline);
  void (*close_all_now)(const struct timespec *deadline);
  void (*final_settle)(nsc_log_final *f);
  void (*final_free)(nsc_log_final *f);
} nsc_log_source;

/* log_writer.c */
/* Where the open logs are (before any other writer call). */
void nsc_log_writer_told(const nsc_log_source *src);
/* Tests: 0 = no thread, closes and exit write on the calling thread. */
void nsc_log_writer_threaded(int on);
/* Start the writer (once, at the first record) and the SIGTERM hook. */
void nsc_log_writer_start(void);
/* A ring is half full: write it now rather than at the next second. */
void nsc_log_writer_nudge(void);
/* Hand over a closed log (written by the writer, or here without one). */
void nsc_log_writer_final(nsc_log_final *f);
/* Process exit: write everything, end the trace, close the files, stop. */
void nsc_log_writer_stop(void);

/* log_out.c */
/* Diagnosis JSON of one step (a JSON Lines "step" record) and of a closed log's verdict. */
void nsc_log_json_step(FILE *f, const nsc_log_who *who, const nsc_diag_step *s, long long accum_steps);
void nsc_log_out_init(const nsc_config *cfg);
/* One writing round: the closed logs (their last records, summary line,
 * table), then the detail batches; each file gets one write() per round. */
void nsc_log_out_round(const nsc_log_batch *b, size_t nb, const nsc_log_final *finals);
/* Process exit or a fatal SIGTERM: terminate the trace, close files. */
void nsc_log_out_finish(void);

/* log_fmt.c: shared formatting. algbw/busbw in GB/s (1e9 B/s) of bytes moved in ns. */
double nsc_log_algbw(uint64_t bytes, uint64_t ns);
double nsc_log_busbw(double algbw, int nranks);
/* JSON string body (quotes excluded) of s into f. */
void nsc_log_json_str(FILE *f, const char *s);
/* ns as microseconds with three decimals, exact ("12.345"). */
void nsc_log_put_us(FILE *f, uint64_t ns);
/* ,"key":share (4 decimals) or ,"key":null (v < 0); ,"key":us or null (ns < 0). */
void nsc_log_put_share(FILE *f, const char *key, double v);
void nsc_log_put_us_or_null(FILE *f, const char *key, int64_t ns);
/* A diagnosis step's fields only ("pass":...,"captured":N), for a JSON
 * Lines step record and the trace's args; accum_steps: NCCLSHIM_ACCUM_STEPS. */
void nsc_log_json_step_body(FILE *f, const nsc_diag_step *s, long long accum_steps);
const char *nsc_log_host(void);

/* log_trace.c: a trace file is a JSON array: its opening and process
 * metadata, then the events as they are written (each as ",\n{...}"), then
 * "]" at process exit or a fatal SIGTERM. */
void nsc_log_trace_begin(FILE *f);
/* Events of rs into f; metadata of tracks first seen also into meta. */
void nsc_log_trace_recs(FILE *f, FILE *meta, const nsc_log_who *who, nsc_log_wstate *w, nsc_log_recs rs);
/* Diagnosis steps as slices on the communicator's step track (accum_steps:
 * NCCLSHIM_ACCUM_STEPS, for their optimizer-step numbers). */
void nsc_log_trace_steps(FILE *f, FILE *meta, const nsc_log_who *who, nsc_log_wstate *w, const nsc_diag_step *s,
                         size_t n, long long accum_steps);

/* log_nvtx.c */
void nsc_nvtx_init(void);
void nsc_nvtx_start(nsc_rec *r);
void nsc_nvtx_end(nsc_rec *r);

#endif
