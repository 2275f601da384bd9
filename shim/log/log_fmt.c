/* log_fmt.c — what the log's files share, below all of them (log_int.h):
 * the log's settings as read at activation (NCCLSHIM_LOG's level, whether
 * detail records are kept), the process's rank that names its files and
 * its host, the histogram of times, and the number and JSON formats every
 * writer uses.
 *
 * Must not: call another file of the log (they all call this one), or do
 * anything on a collective's hook path but add to a histogram. */
#include <inttypes.h>
#include <unistd.h>

#include "log_int.h"

static int level;           /* NSC_LOG_* */
static int detail;          /* detail kept: calls mode or a trace file */
static int proc_rank = -1;  /* written by log_rec.c under its open_lock, read atomically */
static char host[256] = "?";

void nsc_log_fmt_init(const nsc_config *cfg) {
  level = cfg->log;
  detail = level == NSC_LOG_CALLS || cfg->trace_file[0];
  if (level != NSC_LOG_OFF || cfg->trace_file[0]) gethostname(host, sizeof host - 1);
}

int nsc_log_detail(void) { return detail; }
int nsc_log_level(void) { return level; }

int nsc_log_proc_rank(void) { return __atomic_load_n(&proc_rank, __ATOMIC_ACQUIRE); }
void nsc_log_set_proc_rank(int rank) { __atomic_store_n(&proc_rank, rank, __ATOMIC_RELEASE); }

const char *nsc_log_host(void) { return host; }

nsc_log_who nsc_log_who_of(const nsc_comm_log *l) {
  nsc_log_who w = {.id = l->id, .rank = l->rank, .nranks = l->nranks, .comm_seq = l->comm_seq};
  return w;
}

/* Histogram ------------------------------------------------------------- */

static unsigned hist_bin(uint64_t v) {
  if (v < 16) return (unsigned)v;
  unsigned e = 63u - (unsigned)__builtin_clzll(v); /* >= 4 */
  unsigned b = 16u + (e - 4u) * 16u + ((unsigned)(v >> (e - 4u)) & 15u);
  return b < NSC_LOG_HIST_BINS ? b : NSC_LOG_HIST_BINS - 1;
}

static uint64_t hist_mid(unsigned b) {
  if (b < 16) return b;
  unsigned e = (b - 16u) / 16u + 4u, sub = (b - 16u) % 16u;
  uint64_t w = 1ull << (e - 4u);
  return (uint64_t)(16u + sub) * w + w / 2;
}

void nsc_hist_add(uint64_t *h, uint64_t ns) { h[hist_bin(ns)]++; }

uint64_t nsc_hist_quantile(uint64_t *const *h, int n, double q) {
  uint64_t total = 0;
  for (int i = 0; i < n; i++)
    for (unsigned b = 0; h[i] && b < NSC_LOG_HIST_BINS; b++) total += h[i][b];
  if (!total) return 0;
  uint64_t k = (uint64_t)(q * (double)total + 0.999999), seen = 0;
  if (k < 1) k = 1;
  for (unsigned b = 0; b < NSC_LOG_HIST_BINS; b++) {
    for (int i = 0; i < n; i++) seen += h[i] ? h[i][b] : 0;
    if (seen >= k) return hist_mid(b);
  }
  return hist_mid(NSC_LOG_HIST_BINS - 1);
}

/* Formatting helpers ------------------------------------------------------ */

double nsc_log_algbw(uint64_t bytes, uint64_t ns) { return ns ? (double)bytes / (double)ns : 0.0; }

double nsc_log_busbw(double algbw, int nranks) {
  return nranks > 1 ? algbw * 2.0 * (double)(nranks - 1) / (double)nranks : algbw;
}

void nsc_log_put_us(FILE *f, uint64_t ns) {
  fprintf(f, "%" PRIu64 ".%03u", ns / 1000, (unsigned)(ns % 1000));
}

void nsc_log_json_str(FILE *f, const char *s) {
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
    else if (c < 0x20) fprintf(f, "\\u%04x", c);
    else fputc(c, f);
  }
}

void nsc_log_put_share(FILE *f, const char *key, double v) {
  if (v < 0) fprintf(f, ",\"%s\":null", key);
  else fprintf(f, ",\"%s\":%.4f", key, v);
}

void nsc_log_put_us_or_null(FILE *f, const char *key, int64_t ns) {
  fprintf(f, ",\"%s\":", key);
  if (ns < 0) fputs("null", f);
  else nsc_log_put_us(f, (uint64_t)ns);
}

/* One step's fields ("pass":...,"captured":N): a JSON Lines step record's
 * body and the trace's args; k: NCCLSHIM_ACCUM_STEPS. */
void nsc_log_json_step_body(FILE *f, const nsc_diag_step *s, long long k) {
  if (k < 1) k = 1;
  fprintf(f, "\"pass\":%" PRId64 ",\"opt_step\":%" PRId64 ",\"micro\":%" PRId64 ",\"accum_steps\":%lld"
          ",\"first_call\":%" PRIu64 ",\"records\":%" PRIu64 ",\"wall_start_us\":",
          s->pass, (int64_t)(s->pass / k), (int64_t)(s->pass % k), k, s->first_call, s->records);
  nsc_log_put_us(f, s->wall_start_ns);
  nsc_log_put_us_or_null(f, "wall_us", (int64_t)s->wall_ns);
  nsc_log_put_us_or_null(f, "inflight_us", (int64_t)s->inflight_ns);
  nsc_log_put_us_or_null(f, "exposed_comm_us", (int64_t)s->exposed_ns);
  nsc_log_put_us_or_null(f, "max_gap_us", s->gpu ? -1 : (int64_t)s->max_gap_ns);
  nsc_log_put_us_or_null(f, "cpu_us", s->cpu_ns);
  nsc_log_put_us_or_null(f, "runq_us", s->runq_ns);
  nsc_log_put_us_or_null(f, "coll_busy_us", s->cpu_ns < 0 ? -1 : (int64_t)s->coll_busy_ns);
  uint64_t fr = s->wall_ns > s->exposed_ns ? s->wall_ns - s->exposed_ns : 0;
  int64_t busy = s->busy_ns < 0 ? -1 : (uint64_t)s->busy_ns < fr ? s->busy_ns : (int64_t)fr;
  nsc_log_put_us_or_null(f, "compute_us", busy);
  nsc_log_put_us_or_null(f, "input_us", busy < 0 ? -1 : (int64_t)(fr - (uint64_t)busy));
  double w = s->wall_ns ? (double)s->wall_ns : 1.0;
  nsc_log_put_share(f, "exposed_comm_share", s->wall_ns ? (double)s->exposed_ns / w : -1);
  nsc_log_put_share(f, "input_share", busy < 0 || !s->wall_ns ? -1 : (double)(fr - (uint64_t)busy) / w);
  nsc_log_put_share(f, "compute_share", busy < 0 || !s->wall_ns ? -1 : (double)busy / w);
  fprintf(f, ",\"busy_source\":\"%s\",\"device\":\"%s\",\"untimed\":%u,\"captured\":%u",
          nsc_diag_src_name(s->src), s->gpu ? "gpu" : "host", s->untimed, s->captured);
}
