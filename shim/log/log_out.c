/* log_out.c — where the log goes and what it looks like: output files from
 * path templates, the per-communicator summary table, and JSON Lines.
 *
 * Destinations:
 *   summary, no NCCLSHIM_LOG_FILE  each communicator's rank 0 prints its table
 *                                  on stderr (one write, lines prefixed
 *                                  "ncclshim[host:pid]")
 *   summary, NCCLSHIM_LOG_FILE     every rank writes its tables to its file
 *   calls                          tables as above on stderr (rank 0), JSON
 *                                  Lines in NCCLSHIM_LOG_FILE, by default
 *                                  ncclshim.%h.%p.jsonl in the working directory
 *   NCCLSHIM_TRACE_FILE            Chrome trace events (log_trace.c)
 * Templates expand %h (host), %p (pid), %r (rank in the first communicator
 * the process used), %% (%). A template with neither %r nor %p gets
 * ".<rank>" appended, so ranks never share a file. A value without any %
 * that ends in '/' or names an existing directory means files inside it:
 * ncclshim.%h.%p.jsonl (calls), ncclshim.%h.%p.txt (summary tables),
 * ncclshim.%h.%p.trace.json (trace).
 *
 * Files are opened at the first write (by the writer thread, log_writer.c,
 * never during a call) and kept open until exit. Disk use is bounded: once a
 * JSON Lines or trace file holds 16 x NCCLSHIM_LOG_RING records it is renamed
 * to <name>.1 (replacing the previous one) and a new file begins, which
 * starts with what every file needs: the summary lines of the communicators
 * closed so far (JSON Lines), the trace's opening and track names (trace). Each round is formatted in
 * memory and appended with one write() per file: a file holds whole lines
 * unless the process is killed inside that write. A file that cannot be
 * opened or written is reported once and then left alone: logging trouble
 * never stops or slows the job. Must not: run on the hook path. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "names.h"
#include "diag_nvml.h"
#include "diag_policy.h"
#include "log_int.h"
#include "msg.h"
#include "policy.h"
#include "wire.h"

typedef struct {
  const char *env;          /* the variable that named it, for messages */
  char tmpl[NSC_CFG_STR_MAX];
  char path[NSC_CFG_STR_MAX + 64]; /* expanded, once opened */
  int fd, opened;
  int failed;
  int trace;                /* a trace array: opened with its header, closed with "]" */
  uint64_t recs;            /* records in the current file */
  char *sticky;             /* what each new file starts with */
  size_t sticky_len;
} sink;

static uint64_t rotate_at;  /* records per file: 16 x NCCLSHIM_LOG_RING */

static sink table_sink = {.env = "NCCLSHIM_LOG_FILE"};
static sink calls_sink = {.env = "NCCLSHIM_LOG_FILE"};
static sink trace_sink = {.env = "NCCLSHIM_TRACE_FILE", .trace = 1};
static pthread_mutex_t out_lock = PTHREAD_MUTEX_INITIALIZER;
static int finished; /* after exit or a fatal SIGTERM: nothing more is written */
static struct {
  int diag, compress_off;
  const char *compress; /* NCCLSHIM_COMPRESS's name */
  long long accum_steps;
} out_cfg; /* what the diagnosis's lines need from the configuration */

/* Expand a template into out; an unknown escape is kept as written (and
 * reported once). */
static void expand(const sink *s, char *out, size_t len) {
  static int warned;
  int rank = nsc_log_proc_rank(), has_id = 0;
  size_t n = 0;
  out[0] = '\0';
  for (const char *p = s->tmpl; *p && n + 1 < len; p++) {
    int w;
    if (p[0] != '%' || !p[1]) {
      out[n++] = *p;
      out[n] = '\0';
      continue;
    }
    switch (*++p) {
    case 'h': w = snprintf(out + n, len - n, "%s", nsc_log_host()); break;
    case 'p': w = snprintf(out + n, len - n, "%d", (int)getpid()); has_id = 1; break;
    case 'r': w = rank >= 0 ? snprintf(out + n, len - n, "%d", rank) : snprintf(out + n, len - n, "pid%d", (int)getpid());
      has_id = 1;
      break;
    case '%': w = snprintf(out + n, len - n, "%%"); break;
    default:
      nsc_warn_once(&warned, "%s='%s': unknown escape '%%%c' kept as written (known: %%h %%p %%r %%%%)", s->env,
                    s->tmpl, *p);
      w = snprintf(out + n, len - n, "%%%c", *p);
      break;
    }
    if (w > 0) n += (size_t)w < len - n ? (size_t)w : len - n - 1;
  }
  if (!has_id) {
    if (rank >= 0) snprintf(out + n, len - n, ".%d", rank);
    else snprintf(out + n, len - n, ".pid%d", (int)getpid());
  }
}

static void sink_fail(sink *s, const char *path, const char *what) {
  nsc_warn("%s: cannot %s '%s': %s; this rank's %s is not written", s->env, what, path, strerror(errno),
           s->trace ? "trace" : "log");
  s->failed = 1;
  if (s->opened) close(s->fd);
  s->opened = 0;
}

static int put_all(int fd, const char *buf, size_t len) {
  for (size_t off = 0; off < len;) {
    ssize_t w = write(fd, buf + off, len - off);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return -1;
    off += (size_t)w;
  }
  return 0;
}

static void sticky_add(sink *s, const char *buf, size_t len) {
  char *g = len ? realloc(s->sticky, s->sticky_len + len) : NULL;
  if (!g) return;
  memcpy(g + s->sticky_len, buf, len);
  s->sticky = g;
  s->sticky_len += len;
}

/* (Re)open the current file and write its start. */
static int sink_reopen(sink *s) {
  s->fd = open(s->path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
  if (s->fd < 0) {
    sink_fail(s, s->path, "open");
    return 0;
  }
  s->opened = 1;
  s->recs = 0;
  if (s->sticky_len && put_all(s->fd, s->sticky, s->sticky_len)) sink_fail(s, s->path, "write");
  return s->opened;
}

/* Opened at its first write (a trace with its opening and metadata). */
static int sink_open(sink *s) {
  if (s->opened || s->failed || !s->tmpl[0]) return s->opened;
  expand(s, s->path, sizeof s->path);
  if (s->trace && !s->sticky_len) {
    char *b = NULL;
    size_t n = 0;
    FILE *m = open_memstream(&b, &n);
    if (m) nsc_log_trace_begin(m);
    if (m && !fclose(m) && b) sticky_add(s, b, n);
    free(b);
  }
  return sink_reopen(s);
}

/* Appended in one write(); a write error turns the sink off with one message. */
static void sink_put(sink *s, const char *buf, size_t len) {
  if (!len || !sink_open(s)) return;
  if (put_all(s->fd, buf, len)) sink_fail(s, s->path, "write");
}

/* After a round: a full file becomes <path>.1 and a new one begins. */
static void sink_rotate(sink *s) {
  if (!s->opened || !rotate_at || s->recs < rotate_at) return;
  char old[sizeof s->path + 2];
  snprintf(old, sizeof old, "%s.1", s->path);
  if (s->trace) put_all(s->fd, "\n]\n", 3);
  close(s->fd);
  s->opened = 0;
  if (rename(s->path, old)) {
    sink_fail(s, old, "rename the full log file to");
    return;
  }
  sink_reopen(s);
}

/* A memory stream for one round's text of a sink, opened when first needed. */
typedef struct {
  char *buf;
  size_t len;
  FILE *m;
} membuf;

static FILE *mem(membuf *b) {
  if (!b->m) b->m = open_memstream(&b->buf, &b->len);
  return b->m;
}

/* A round's text into the sink (nrec records), then what every later file
 * must start with (sticky), then rotation when the file is full. */
static void mem_put(membuf *b, membuf *sticky, sink *s, uint64_t nrec) {
  if (b->m && !fclose(b->m) && b->buf) sink_put(s, b->buf, b->len);
  if (sticky->m && !fclose(sticky->m) && sticky->buf && s->opened) sticky_add(s, sticky->buf, sticky->len);
  s->recs += nrec;
  sink_rotate(s);
  free(b->buf);
  free(sticky->buf);
  memset(b, 0, sizeof *b);
  memset(sticky, 0, sizeof *sticky);
}

/* A directory we can already tell is unusable is reported at activation. */
static void precheck(sink *s) {
  const char *slash = strrchr(s->tmpl, '/');
  if (!slash || memchr(s->tmpl, '%', (size_t)(slash - s->tmpl))) return;
  char dir[NSC_CFG_STR_MAX];
  snprintf(dir, sizeof dir, "%.*s", (int)(slash - s->tmpl > 0 ? slash - s->tmpl : 1), s->tmpl);
  if (access(dir, W_OK | X_OK)) sink_fail(s, dir, "write into directory");
}

/* A value naming a directory (no %, and a trailing '/' or an existing
 * directory): the file name inside it. */
static void set_tmpl(sink *s, const char *v, const char *in_dir) {
  struct stat st;
  size_t n = strlen(v);
  if (n && !strchr(v, '%') && (v[n - 1] == '/' || (!stat(v, &st) && S_ISDIR(st.st_mode)))) {
    while (n > 1 && v[n - 1] == '/') n--;
    snprintf(s->tmpl, sizeof s->tmpl, "%.*s/%s", (int)n, v, in_dir);
  } else {
    snprintf(s->tmpl, sizeof s->tmpl, "%s", v);
  }
}

/* What the casts lost, as last told (nsc_log_tell_casts). */
static pthread_mutex_t told_lock = PTHREAD_MUTEX_INITIALIZER;
static nsc_log_casts told;

void nsc_log_tell_casts(const nsc_log_casts *t) {
  pthread_mutex_lock(&told_lock);
  told = *t;
  pthread_mutex_unlock(&told_lock);
}

void nsc_log_out_init(const nsc_config *cfg) {
  out_cfg.diag = cfg->diag;
  out_cfg.compress_off = cfg->compress == NSC_COMPRESS_OFF;
  out_cfg.compress = cfg->compress == NSC_COMPRESS_OFF ? "off" : nsc_fmt_name((nsc_fmt_t)(cfg->compress - 1));
  out_cfg.accum_steps = cfg->accum_steps;
  if (cfg->log == NSC_LOG_SUMMARY && cfg->log_file[0]) set_tmpl(&table_sink, cfg->log_file, "ncclshim.%h.%p.txt");
  if (cfg->log == NSC_LOG_CALLS)
    set_tmpl(&calls_sink, cfg->log_file[0] ? cfg->log_file : "ncclshim.%h.%p.jsonl", "ncclshim.%h.%p.jsonl");
  if (cfg->trace_file[0]) set_tmpl(&trace_sink, cfg->trace_file, "ncclshim.%h.%p.trace.json");
  rotate_at = 16 * (uint64_t)cfg->log_ring;
  sink *all[] = {&table_sink, &calls_sink, &trace_sink};
  for (int i = 0; i < 3; i++)
    if (all[i]->tmpl[0]) precheck(all[i]);
}

static const char *action_label(int a) { return nsc_action_name(a); }

/* A percentile from the histogram, clamped to the exact extremes (so one
 * record's p50 is its own time). */
static uint64_t quantile(const nsc_log_totals *t, uint64_t *const *h, int nh, double q) {
  uint64_t v = nsc_hist_quantile(h, nh, q);
  return v < t->min_ns ? t->min_ns : v > t->max_ns ? t->max_ns : v;
}

/* The summary table -------------------------------------------------------- */

/* local: 1 a local answer (no collective, no rates), 2 an observed call
 * (collectives, no all-reduce rates), 0 otherwise. */
static void table_row(FILE *f, const char *pre, const char *name, const nsc_log_totals *t, uint64_t *const *h, int nh,
                      int nranks, int local) {
  fprintf(f, "%s  %-12s %8" PRIu64 " %7" PRIu64 " %15" PRIu64 " %15" PRIu64, pre, name, t->calls,
          local == 1 ? 0 : t->records, t->logical_bytes, t->wire_bytes);
  if (!t->timed) {
    fprintf(f, " %12s %10s %10s %10s %10s %11s %11s\n", "-", "-", "-", "-", "-", "-", "-");
    return;
  }
  double alg = nsc_log_algbw(t->timed_bytes, t->time_ns);
  fprintf(f, " %12.1f %10.2f %10.2f %10.2f %10.1f", t->time_ns / 1e3, t->time_ns / 1e3 / (double)t->timed,
          quantile(t, h, nh, 0.5) / 1e3, quantile(t, h, nh, 0.99) / 1e3, t->cast_ns / 1e3);
  if (local) fprintf(f, " %11s %11s\n", "-", "-");
  else fprintf(f, " %11.3f %11.3f\n", alg, nsc_log_busbw(alg, nranks));
}

/* The diagnosis ------------------------------------------------------------- */

static void json_head(FILE *f, const char *kind, const nsc_log_who *l);

static void diag_judge(const nsc_comm_log *l, nsc_diag_result *o) {
  static const nsc_diag_tot none;
  const nsc_diag *d = l->diag;
  nsc_diag_ctx c = {.compress_off = out_cfg.compress_off, .compress = out_cfg.compress,
                    .grads16 = l->red16_bytes > l->red32_bytes, .accum_steps = out_cfg.accum_steps,
                    .learned = d && d->pass_len > 0, .why_off = d ? d->why_off : "", .acc_calls = d ? d->acc_calls : 0,
                    .busy_why = d && d->tot.gpu ? nsc_nvml_why(d->cudev) : NULL};
  nsc_diag_judge(d ? &d->tot : &none, &c, o);
}

static void diag_lines(FILE *f, const nsc_comm_log *l, const char *pre) {
  if (!out_cfg.diag) return;
  nsc_diag_result o;
  diag_judge(l, &o);
  fprintf(f, "%s# diagnosis: %s: %s\n", pre, o.verdict, o.reason);
  if (o.suggest[0]) fprintf(f, "%s# try: %s\n", pre, o.suggest);
}

static void json_diag(FILE *f, const nsc_comm_log *l) {
  const nsc_diag *d = l->diag;
  nsc_diag_result o;
  diag_judge(l, &o);
  const nsc_diag_tot *t = d ? &d->tot : NULL;
  uint64_t w = t ? t->busy_wall_ns : 0, e = t ? t->busy_exposed_ns : 0, fr = w > e ? w - e : 0;
  uint64_t busy = t && t->busy_ns < fr ? t->busy_ns : fr;
  fprintf(f, ",\"diagnosis\":{\"verdict\":\"%s\"", o.verdict);
  nsc_log_put_share(f, "exposed_comm_share", o.exposed_comm_share);
  nsc_log_put_share(f, "input_share", o.input_share);
  nsc_log_put_share(f, "compute_share", o.compute_share);
  nsc_log_put_share(f, "runqueue_share", o.runqueue_share);
  fprintf(f, ",\"steps\":%" PRIu64 ",\"steps_untimed\":%" PRIu64 ",\"steps_captured\":%" PRIu64 ",\"steps_broken\":%" PRIu64
          ",\"learned\":%s,\"pass_buckets\":%zu,\"pass_bytes\":%" PRIu64 ",\"accumulable_calls\":%" PRIu64
          ",\"relearned\":%d,\"busy_source\":\"%s\"",
          t ? t->steps : 0, t ? t->steps_untimed : 0, t ? t->steps_captured : 0, t ? t->steps_broken : 0, d && d->pass_len ? "true" : "false",
          d ? d->pass_len : 0, d ? d->pass_bytes : 0, d ? d->acc_calls : 0, d ? d->relearns : 0,
          nsc_diag_src_name(t && t->busy_steps ? t->src : NSC_DIAG_SRC_NONE));
  nsc_log_put_us_or_null(f, "wall_us", t ? (int64_t)t->wall_ns : 0);
  nsc_log_put_us_or_null(f, "mean_step_us", t && t->steps ? (int64_t)(t->wall_ns / t->steps) : -1);
  nsc_log_put_us_or_null(f, "inflight_us", t ? (int64_t)t->inflight_ns : 0);
  nsc_log_put_us_or_null(f, "exposed_comm_us", t ? (int64_t)t->exposed_ns : 0);
  nsc_log_put_us_or_null(f, "input_us", t && t->busy_steps ? (int64_t)(fr - busy) : -1);
  nsc_log_put_us_or_null(f, "compute_us", t && t->busy_steps ? (int64_t)busy : -1);
  nsc_log_put_us_or_null(f, "runq_us", t && t->runq_steps ? (int64_t)t->runq_ns : -1);
  nsc_log_put_us_or_null(f, "max_gap_us", t ? (t->gpu ? -1 : (int64_t)t->max_gap_ns) : 0); /* null on a GPU */
  fputs(",\"busy_why\":\"", f); /* why busy_source is "none" ("" otherwise) */
  if (t && t->steps && !t->busy_steps) nsc_log_json_str(f, t->gpu && d ? nsc_nvml_why(d->cudev) : "the CPU time could not be read");
  fputs("\"", f);
  fputs(",\"reason\":\"", f);
  nsc_log_json_str(f, o.reason);
  fputs("\",\"suggest\":\"", f);
  nsc_log_json_str(f, o.suggest);
  fputs("\"}", f);
}

/* One step: shares of its own wall time (input and compute null without a
 * busy time). */
void nsc_log_json_step(FILE *f, const nsc_log_who *who, const nsc_diag_step *s, long long k) {
  json_head(f, "step", who);
  fputc(',', f);
  nsc_log_json_step_body(f, s, k);
  fputs("}\n", f);
}

/* Why the calls passed through were left to NCCL (policy.h's reasons, most
 * first): "COMPRESS=int8, 0 compressed" never goes unexplained. */
static void untouched_line(FILE *f, const nsc_comm_log *l, const char *pre) {
  uint64_t n = 0;
  for (int w = 0; w < NSC_WHY_COUNT; w++) n += l->why[w];
  if (!n) return;
  fprintf(f, "%s# left untouched: %" PRIu64 " call(s):", pre, n);
  uint64_t done[NSC_WHY_COUNT] = {0};
  for (int k = 0, sep = 0; k < NSC_WHY_COUNT; k++) {
    int best = -1;
    for (int w = 0; w < NSC_WHY_COUNT; w++)
      if (l->why[w] && !done[w] && (best < 0 || l->why[w] > l->why[best])) best = w;
    if (best < 0) break;
    done[best] = 1;
    fprintf(f, "%s %" PRIu64 " %s", sep++ ? ";" : "", l->why[best],
            best == NSC_WHY_NONE ? "for no recorded reason" : nsc_why_text((nsc_why)best));
  }
  fputc('\n', f);
}

static void write_table(FILE *f, const nsc_comm_log *l, const char *pre) {
  nsc_log_totals all;
  memset(&all, 0, sizeof all);
  uint64_t *hs[NSC_ACT_COUNT];
  int nh = 0;
  for (int a = 0; a < NSC_ACT_COUNT; a++) {
    const nsc_log_totals *t = &l->by_action[a];
    if (a == NSC_ACT_OBSERVE) continue; /* the total is the reductions' (a broadcast has no busbw of theirs) */
    all.calls += t->calls;
    all.logical_bytes += t->logical_bytes;
    all.wire_bytes += t->wire_bytes;
    if (a == NSC_ACT_SKIP) continue; /* the total's times and rates are those of real collectives */
    all.records += t->records;
    all.timed += t->timed;
    all.timed_bytes += t->timed_bytes;
    all.time_ns += t->time_ns;
    all.cast_ns += t->cast_ns;
    if (t->timed && (all.timed == t->timed || t->min_ns < all.min_ns)) all.min_ns = t->min_ns;
    if (t->max_ns > all.max_ns) all.max_ns = t->max_ns;
    hs[nh++] = t->hist;
  }
  double span = l->end_ns > l->first_ns ? (double)(l->end_ns - l->first_ns) : 0.0;
  fprintf(f, "%s# ncclshim summary: communicator %d (%#" PRIx64 "), rank %d of %d, %s pid %d\n", pre, l->comm_seq,
          l->id, l->rank, l->nranks, nsc_log_host(), (int)getpid());
  if (l->nodes[0]) fprintf(f, "%s# nodes: %s (this rank %d on its node)\n", pre, l->nodes, l->local_rank);
  if (l->failed[0])
    fprintf(f, "%s# failed its settings check: %s; every call on it returned ncclInvalidUsage\n", pre, l->failed);
  fprintf(f, "%s# %-12s %8s %7s %15s %15s %12s %10s %10s %10s %10s %11s %11s\n", pre, "action", "calls", "colls",
          "logical(B)", "wire(B)", "time(us)", "mean(us)", "p50(us)", "p99(us)", "cast(us)", "algbw(GB/s)",
          "busbw(GB/s)");
  for (int a = 0; a < NSC_ACT_COUNT; a++) {
    const nsc_log_totals *t = &l->by_action[a];
    if (!t->calls || a == NSC_ACT_OBSERVE) continue;
    uint64_t *h[1] = {t->hist};
    table_row(f, pre, action_label(a), t, h, 1, l->nranks, a == NSC_ACT_SKIP);
  }
  table_row(f, pre, "total", &all, hs, nh, l->nranks, 0);
  const nsc_log_totals *ob = &l->by_action[NSC_ACT_OBSERVE];
  if (ob->calls) { /* after the total: not part of it */
    uint64_t *h[1] = {ob->hist};
    table_row(f, pre, action_label(NSC_ACT_OBSERVE), ob, h, 1, l->nranks, 2);
  }
  fprintf(f, "%s# in collectives: %.1f%% of %.6f s (first call to last); records: %" PRIu64 " (%zu in detail, %" PRIu64
          " dropped from detail, %" PRIu64 " untimed, %" PRIu64 " timing unknown); accumulation: %" PRIu64
          " synced, %" PRIu64 " skipped\n",
          pre, span > 0 ? 100.0 * (double)all.time_ns / span : 0.0, span / 1e9, l->nrec,
          nsc_log_detail() ? (size_t)(l->nrec - l->dropped) : (size_t)0, l->dropped, l->untimed, l->unknown,
          __atomic_load_n(&l->accum_synced, __ATOMIC_RELAXED), __atomic_load_n(&l->accum_skipped, __ATOMIC_RELAXED));
  untouched_line(f, l, pre);
  if (l->half_tp) /* docs/collectives.md, "16-bit inputs": what fp32 sums on the input's own wire cost */
    fprintf(f, "%s# 16-bit inputs: %" PRIu64 " bf16/fp16 call(s) in two phases with fp32 sums, %" PRIu64
            " on their own wire (plain's bytes; an all-reduce issues one launch more than plain)\n",
            pre, l->half_tp, l->half_own);
  if (l->accum_state[0]) fprintf(f, "%s# accumulation: %s\n", pre, l->accum_state);
  if (l->fabric[0]) fprintf(f, "%s# launch cost: %s\n", pre, l->fabric);
  uint64_t efc = __atomic_load_n(&l->ef_calls, __ATOMIC_RELAXED);
  if (efc)
    fprintf(f, "%s# error feedback: %" PRIu64 " two-phase call(s); %s%" PRIu64 " slot(s) locked onto the buckets, %" PRIu64
            " bytes of residuals; the learned sequence broke %" PRIu64 " time(s)\n", pre, efc,
            __atomic_load_n(&l->ef_slots, __ATOMIC_RELAXED) ? "" : "still learning: ",
            __atomic_load_n(&l->ef_slots, __ATOMIC_RELAXED), __atomic_load_n(&l->ef_bytes, __ATOMIC_RELAXED),
            __atomic_load_n(&l->ef_breaks, __ATOMIC_RELAXED));
  diag_lines(f, l, pre);
  uint64_t sf = __atomic_load_n(&l->staging_failed, __ATOMIC_RELAXED);
  if (l->marks_dropped || sf)
    fprintf(f, "%s# timing marks dropped (event pool exhausted): %" PRIu64 "; staging allocations failed: %" PRIu64 "\n",
            pre, l->marks_dropped, sf);
  /* What the casts lost, counted on the device without synchronising (GPU)
   * or in the host casts; process totals, all communicators together. */
  nsc_log_casts st;
  pthread_mutex_lock(&told_lock);
  st = told;
  pthread_mutex_unlock(&told_lock);
  if (st.casts > 0) {
    fprintf(f, "%s# casts to %s in this process: %" PRIu64 " values overflowed to +-Inf, %" PRIu64
            " non-zero values flushed to zero\n", pre, st.wire, st.overflow, st.underflow);
    /* what to do about it: counts alone leave the user guessing */
    int f16 = !strcmp(st.wire, "fp16");
    if (st.underflow && f16)
      fprintf(f, "%s# advice: fp16 flushes |x| < 2^-24 to zero and keeps fewer bits below 6.1e-5 (DDP divides "
              "gradients by the world size first, so larger jobs see more of it): NCCLSHIM_COMPRESS=fp16s keeps fp16's "
              "11 bits under each block's largest value anywhere in fp32's range (two-phase only), NCCLSHIM_COMPRESS=bf16 "
              "keeps fp32's range with 8 bits, or NCCLSHIM_PRESCALE=F with F a power of two below 1 (the cast multiplies by 1/F, the result "
              "by F) lifts small values into fp16's range\n", pre);
    int fi = nsc_fmt_by_name(st.wire); /* block-scaled: formats.h says how far below its largest a block keeps values */
    if (st.underflow && fi >= 0 && nsc_fmt_row((nsc_fmt_t)fi)->blocked)
      fprintf(f, "%s# advice: %s blocks share one scale, set by their largest value: values about 2^%d and more below it "
              "are flushed to zero; NCCLSHIM_ERROR_FEEDBACK=1 carries what they lose into the next call, a smaller "
              "NCCLSHIM_BLOCK_ELEMS gives outliers fewer neighbours%s\n",
              pre, st.wire, nsc_fmt_row((nsc_fmt_t)fi)->zero,
              fi == NSC_FMT_FP16S ? "" : ", and at 2 bytes per value NCCLSHIM_COMPRESS=fp16s keeps 11 bits over 39 "
              "binades under each block's largest value, bf16 8 bits over fp32's range");
    if (st.overflow && f16)
      fprintf(f, "%s# advice: fp16 overflows beyond 65504 (an Inf: AMP's GradScaler skips that step on every rank, "
              "without it the weights get Inf): NCCLSHIM_COMPRESS=bf16 keeps fp32's range, or NCCLSHIM_PRESCALE=F "
              "with F a power of two above 1 scales values down before the cast\n", pre);
  }
}

/* The table into one buffer, then one write: lines of several ranks sharing
 * stderr do not interleave. */
static void emit_table(const nsc_comm_log *l) {
  int to_file = table_sink.tmpl[0] != '\0';
  if (!to_file && l->rank != 0) return;
  char *buf = NULL, pre[320] = "";
  size_t len = 0;
  FILE *m = open_memstream(&buf, &len);
  if (!m) return;
  if (!to_file) snprintf(pre, sizeof pre, "ncclshim[%s:%d] ", nsc_log_host(), (int)getpid());
  write_table(m, l, pre);
  if (fclose(m) || !buf) { free(buf); return; }
  if (to_file) sink_put(&table_sink, buf, len);
  else put_all(2, buf, len);
  free(buf);
}

/* JSON Lines ----------------------------------------------------------------- */

static void json_head(FILE *f, const char *kind, const nsc_log_who *l) {
  fprintf(f, "{\"kind\":\"%s\",\"rank\":%d,\"nranks\":%d,\"comm\":\"%#" PRIx64 "\",\"comm_seq\":%d,\"host\":\"", kind,
          l->rank, l->nranks, l->id, l->comm_seq);
  nsc_log_json_str(f, nsc_log_host());
  fprintf(f, "\",\"pid\":%d", (int)getpid());
}

static void json_time(FILE *f, const char *key, const nsc_rec *r, int t) {
  fprintf(f, ",\"%s\":", key);
  if (r->have & (1u << t)) nsc_log_put_us(f, r->ns[t]);
  else fputs("null", f);
}

/* A call line; send and receive records are "p2p" lines (their own seq,
 * the peer): every rank's sequence of them differs, so they are never
 * matched across ranks. */
static void json_call(FILE *f, const nsc_log_who *l, const nsc_rec *r) {
  int skip = r->action == NSC_ACT_SKIP;
  int timed = r->state == NSC_REC_DONE && (r->have & (1u << NSC_T_COLL));
  json_head(f, nsc_log_p2p(r) ? "p2p" : "call", l);
  if (r->action == NSC_ACT_OBSERVE && r->root >= 0) fprintf(f, nsc_log_p2p(r) ? ",\"peer\":%d" : ",\"root\":%d", r->root);
  fprintf(f,
          ",\"seq\":%" PRIu64 ",\"call\":%" PRIu64 ",\"op\":\"%s\",\"dtype\":\"%s\",\"wire_dtype\":\"%s\",\"count\":%zu"
          ",\"logical_bytes\":%" PRIu64 ",\"wire_bytes\":%" PRIu64 ",\"action\":\"%s\",\"members\":%d"
          ",\"coll\":\"%s\",\"algo\":\"%s\",\"stream\":\"%#" PRIxPTR "\"",
          r->lseq, r->seq, nsc_op_name((ncclRedOp_t)r->op), nsc_dtype_name((ncclDataType_t)r->dtype),
          nsc_dtype_name((ncclDataType_t)r->wire_dtype), r->count, r->logical_bytes, r->wire_bytes,
          action_label(r->action), r->nmembers, nsc_log_coll(r), nsc_log_algo(r), (uintptr_t)r->stream);
  if (r->action == NSC_ACT_PASS) fprintf(f, ",\"why\":\"%s\"", r->why ? nsc_why_key((nsc_why)r->why) : "none");
  fputs(",\"wall_start_us\":", f);
  nsc_log_put_us(f, r->wall_ns);
  if (skip) {
    fputs(",\"coll_us\":null", f);
    json_time(f, "local_us", r, NSC_T_COLL);
  } else {
    json_time(f, "coll_us", r, NSC_T_COLL);
  }
  json_time(f, "cast_in_us", r, NSC_T_CAST_IN);
  json_time(f, "cast_out_us", r, NSC_T_CAST_OUT);
  const char *why = r->state == NSC_REC_UNKNOWN             ? "unknown"
                    : r->untimed == NSC_UNTIMED_GROUP        ? "grouped"
                    : r->untimed == NSC_UNTIMED_CAPTURE      ? "captured"
                    : timed                                  ? "done"
                                                             : "none";
  if (r->dpass >= 0) fprintf(f, ",\"pass\":%" PRId64, r->dpass); /* the diagnosis's step it falls in */
  fprintf(f, ",\"untimed\":%s,\"timing\":\"%s\",\"result\":%d}\n", timed ? "false" : "true", why, (int)r->result);
}

static void json_summary(FILE *f, const nsc_comm_log *l) {
  nsc_log_who who = nsc_log_who_of(l);
  json_head(f, "summary", &who);
  fprintf(f, ",\"records\":%" PRIu64 ",\"kept\":%zu,\"dropped\":%" PRIu64 ",\"untimed\":%" PRIu64 ",\"unknown\":%" PRIu64
          ",\"marks_dropped\":%" PRIu64 ",\"staging_failed\":%" PRIu64
          ",\"accum_synced\":%" PRIu64 ",\"accum_skipped\":%" PRIu64 ",\"first_wall_us\":",
          l->nrec, (size_t)(l->nrec - l->dropped), l->dropped, l->untimed, l->unknown, l->marks_dropped,
          __atomic_load_n(&l->staging_failed, __ATOMIC_RELAXED),
          __atomic_load_n(&l->accum_synced, __ATOMIC_RELAXED), __atomic_load_n(&l->accum_skipped, __ATOMIC_RELAXED));
  nsc_log_put_us(f, l->first_wall_ns);
  if (l->nnodes > 0) {
    fprintf(f, ",\"nnodes\":%d,\"local_rank\":%d,\"nodes\":\"", l->nnodes, l->local_rank);
    nsc_log_json_str(f, l->nodes);
    fputc('"', f);
  } else {
    fputs(",\"nnodes\":null,\"local_rank\":null,\"nodes\":null", f);
  }
  fputs(",\"accum_state\":", f);
  if (l->accum_state[0]) {
    fputc('"', f);
    nsc_log_json_str(f, l->accum_state);
    fputc('"', f);
  } else {
    fputs("null", f);
  }
  if (l->fabric[0]) {
    fputs(",\"fabric\":{\"learned\":", f);
    fputs(l->fab_learned ? "true" : "false", f);
    fprintf(f, ",\"samples\":%d,\"call\":%" PRIu64, l->fab_samples, l->fab_call);
    if (l->fab_learned)
      fprintf(f, ",\"launch_ns\":%" PRIu64 ",\"ps_per_byte\":%" PRIu64 ",\"launch_bytes\":%" PRIu64, l->fab_launch_ns,
              l->fab_ps_per_byte, l->fab_price);
    fputs(",\"text\":\"", f);
    nsc_log_json_str(f, l->fabric);
    fputs("\"}", f);
  } else {
    fputs(",\"fabric\":null", f);
  }
  fprintf(f, ",\"ef\":{\"calls\":%" PRIu64 ",\"slots\":%" PRIu64 ",\"bytes\":%" PRIu64 ",\"breaks\":%" PRIu64 "}",
          __atomic_load_n(&l->ef_calls, __ATOMIC_RELAXED), __atomic_load_n(&l->ef_slots, __ATOMIC_RELAXED),
          __atomic_load_n(&l->ef_bytes, __ATOMIC_RELAXED), __atomic_load_n(&l->ef_breaks, __ATOMIC_RELAXED));
  if (l->failed[0]) {
    fputs(",\"failed\":\"", f);
    nsc_log_json_str(f, l->failed);
    fputs("\"", f);
  } else {
    fputs(",\"failed\":null", f);
  }
  fputs(",\"span_us\":", f);
  nsc_log_put_us(f, l->end_ns > l->first_ns ? l->end_ns - l->first_ns : 0);
  fputs(",\"untouched\":{", f);
  for (int w = 0, n = 0; w < NSC_WHY_COUNT; w++)
    if (l->why[w]) {
      fprintf(f, "%s\"%s\":{\"calls\":%" PRIu64 ",\"text\":\"", n++ ? "," : "", w ? nsc_why_key((nsc_why)w) : "none",
              l->why[w]);
      nsc_log_json_str(f, w ? nsc_why_text((nsc_why)w) : "no recorded reason");
      fputs("\"}", f);
    }
  fputs("}", f);
  fputs(",\"actions\":{", f);
  for (int a = 0, n = 0; a < NSC_ACT_COUNT; a++) {
    const nsc_log_totals *t = &l->by_action[a];
    uint64_t *h[1] = {t->hist};
    fprintf(f, "%s\"%s\":{\"calls\":%" PRIu64 ",\"records\":%" PRIu64 ",\"logical_bytes\":%" PRIu64
            ",\"wire_bytes\":%" PRIu64 ",\"timed\":%" PRIu64 ",\"time_us\":",
            n++ ? "," : "", action_label(a), t->calls, t->records, t->logical_bytes, t->wire_bytes, t->timed);
    nsc_log_put_us(f, t->time_ns);
    fputs(",\"cast_us\":", f);
    nsc_log_put_us(f, t->cast_ns);
    if (t->timed) {
      double alg = nsc_log_algbw(t->timed_bytes, t->time_ns);
      fputs(",\"p50_us\":", f);
      nsc_log_put_us(f, quantile(t, h, 1, 0.5));
      fputs(",\"p99_us\":", f);
      nsc_log_put_us(f, quantile(t, h, 1, 0.99));
      if (a == NSC_ACT_SKIP || a == NSC_ACT_OBSERVE) fputs(",\"algbw_GBps\":null,\"busbw_GBps\":null}", f);
      else fprintf(f, ",\"algbw_GBps\":%.6g,\"busbw_GBps\":%.6g}", alg, nsc_log_busbw(alg, l->nranks));
    } else {
      fputs(",\"p50_us\":null,\"p99_us\":null,\"algbw_GBps\":null,\"busbw_GBps\":null}", f);
    }
  }
  fputs("}", f);
  if (out_cfg.diag) json_diag(f, l);
  fputs("}\n", f);
}

static void json_recs(FILE *f, const nsc_log_who *who, nsc_log_recs rs) {
  for (size_t i = 0; i < rs.n; i++) json_call(f, who, &rs.ring[(rs.head + i) % rs.alloc]);
}

static void json_steps(FILE *f, const nsc_log_who *who, const nsc_diag_step *s, size_t n) {
  for (size_t i = 0; i < n; i++) nsc_log_json_step(f, who, &s[i], out_cfg.accum_steps);
}

void nsc_log_out_round(const nsc_log_batch *b, size_t nb, const nsc_log_final *fin) {
  pthread_mutex_lock(&out_lock);
  if (finished) {
    pthread_mutex_unlock(&out_lock);
    return;
  }
  int lv = nsc_log_level();
  int calls = lv == NSC_LOG_CALLS && calls_sink.tmpl[0] && !calls_sink.failed;
  int trace = trace_sink.tmpl[0] && !trace_sink.failed;
  membuf cm = {0}, tm = {0}, cs = {0}, ts = {0}; /* text and sticky text of each */
  uint64_t n = 0;
  for (const nsc_log_final *f = fin; f; f = f->next) {
    const nsc_comm_log *l = &f->l;
    nsc_log_who who = nsc_log_who_of(l);
    nsc_log_recs rs = {l->ring, l->ring_head, l->ring_alloc, l->ring_len};
    if (lv != NSC_LOG_OFF) emit_table(l);
    nsc_diag_step *st = NULL;
    size_t nst = l->diag && l->diag->slen && (st = malloc(l->diag->slen * sizeof *st))
                     ? nsc_diag_take(l->diag, st, l->diag->slen) : 0;
    if (calls && mem(&cm) && mem(&cs)) {
      json_recs(cm.m, &who, rs);
      json_steps(cm.m, &who, st, nst);
      json_summary(cm.m, l);
      json_summary(cs.m, l);
    }
    if (trace && mem(&tm) && mem(&ts)) {
      nsc_log_trace_recs(tm.m, ts.m, &who, l->w, rs);
      nsc_log_trace_steps(tm.m, ts.m, &who, l->w, st, nst, out_cfg.accum_steps);
    }
    free(st);
    n += rs.n;
  }
  for (size_t i = 0; i < nb; i++) {
    nsc_log_recs rs = {b[i].recs, 0, b[i].n, b[i].n};
    if (calls && mem(&cm)) {
      json_recs(cm.m, &b[i].who, rs);
      json_steps(cm.m, &b[i].who, b[i].steps, b[i].nsteps);
    }
    if (trace && mem(&tm) && mem(&ts)) {
      nsc_log_trace_recs(tm.m, ts.m, &b[i].who, b[i].w, rs);
      nsc_log_trace_steps(tm.m, ts.m, &b[i].who, b[i].w, b[i].steps, b[i].nsteps, out_cfg.accum_steps);
    }
    n += rs.n;
  }
  mem_put(&cm, &cs, &calls_sink, n);
  mem_put(&tm, &ts, &trace_sink, n);
  pthread_mutex_unlock(&out_lock);
}

void nsc_log_out_finish(void) {
  pthread_mutex_lock(&out_lock);
  sink *all[] = {&table_sink, &calls_sink, &trace_sink};
  for (int i = 0; i < 3; i++) {
    sink *s = all[i];
    if (!s->opened) continue;
    if (s->trace) put_all(s->fd, "\n]\n", 3);
    if (close(s->fd)) nsc_warn("%s: closing its file failed: %s", s->env, strerror(errno));
    s->opened = 0;
    s->failed = 1; /* nothing more after exit */
  }
  finished = 1;
  pthread_mutex_unlock(&out_lock);
}
