/* config.c — the host NCCL's environment, error messages, log and counters.
 *
 * Every HOSTNCCL_* variable is declared once in the table below, parsed once
 * (first API call) and checked strictly: a malformed value makes every API call
 * fail with ncclInvalidUsage and a message naming the variable, rather than run
 * with settings nobody asked for. The counters behind hostnccl_get_counters()
 * let the shim's tests see what reached "NCCL".
 *
 * Must not: call MPI (this is read before MPI is touched) or allocate per call. */
#include "hostnccl.h"
#include "hostnccl_hooks.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static hn_config cfg;
static char cfg_error[256];
static pthread_once_t cfg_once = PTHREAD_ONCE_INIT;

enum { KIND_INT, KIND_LONG, KIND_DOUBLE, KIND_SIZE };
static const struct {
  const char *name;
  int kind;
  double min, max;
  void *dst;
} vars[] = {
  {"HOSTNCCL_VERSION", KIND_INT, 1, 1e9, &cfg.version},
  {"HOSTNCCL_LINK_GBPS", KIND_DOUBLE, 0, 1e9, &cfg.link_gbps},
  {"HOSTNCCL_LINK_LATENCY_US", KIND_DOUBLE, 0, 1e9, &cfg.link_lat_us},
  {"HOSTNCCL_LAUNCH_US", KIND_DOUBLE, 0, 1e9, &cfg.launch_us},
  {"HOSTNCCL_INTRA_GBPS", KIND_DOUBLE, 0, 1e9, &cfg.intra_gbps},
  {"HOSTNCCL_FAIL_CALL", KIND_LONG, 0, 1e15, &cfg.fail_call},
  {"HOSTNCCL_FAIL_GROUP_END", KIND_LONG, 0, 1e15, &cfg.fail_group_end},
  {"HOSTNCCL_LOG", KIND_INT, 0, 1, &cfg.log},
  {"HOSTNCCL_CHECK", KIND_INT, 0, 1, &cfg.check},
  {"HOSTNCCL_SLICE_BYTES", KIND_SIZE, 8, 1 << 30, &cfg.slice_bytes},
};

static void parse_env(void) {
  cfg.version = NCCL_VERSION_CODE;
  cfg.check = 1;
  cfg.slice_bytes = 4u << 20;
  cfg.intra_gbps = -1; /* unset: the network's rate (below) */
  const char *np = getenv("HOSTNCCL_NIC_PER");
  if (np && *np) {
    if (!strcmp(np, "node")) cfg.nic_per_node = 1;
    else if (strcmp(np, "rank")) {
      snprintf(cfg_error, sizeof cfg_error, "hostnccl: HOSTNCCL_NIC_PER='%s' is not rank or node", np);
      fprintf(stderr, "%s\n", cfg_error);
      return;
    }
  }
  const char *t = getenv("HOSTNCCL_TRANSPORT");
  if (t && *t) {
    if (!strcmp(t, "mpi")) cfg.transport = HN_TRANSPORT_MPI;
    else if (!strcmp(t, "socket")) cfg.transport = HN_TRANSPORT_SOCKET;
    else if (strcmp(t, "auto")) {
      snprintf(cfg_error, sizeof cfg_error, "hostnccl: HOSTNCCL_TRANSPORT='%s' is not auto, mpi or socket", t);
      fprintf(stderr, "%s\n", cfg_error);
      return;
    }
  }
  for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
    const char *s = getenv(vars[i].name);
    if (!s || !*s) continue;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    int integral = vars[i].kind != KIND_DOUBLE;
    if (errno || end == s || *end || !isfinite(v) || v < vars[i].min || v > vars[i].max ||
        (integral && v != floor(v))) {
      snprintf(cfg_error, sizeof cfg_error,
               "hostnccl: %s='%s' is not %s in [%g, %g]", vars[i].name, s,
               integral ? "an integer" : "a number", vars[i].min, vars[i].max);
      fprintf(stderr, "%s\n", cfg_error);
      return;
    }
    switch (vars[i].kind) {
    case KIND_INT: *(int *)vars[i].dst = (int)v; break;
    case KIND_LONG: *(long *)vars[i].dst = (long)v; break;
    case KIND_SIZE: *(size_t *)vars[i].dst = (size_t)v; break;
    default: *(double *)vars[i].dst = v; break;
    }
  }
  if (cfg.intra_gbps < 0) cfg.intra_gbps = cfg.link_gbps;
}

ncclResult_t hn_init(void) {
  pthread_once(&cfg_once, parse_env);
  if (cfg_error[0]) return hn_err(ncclInvalidUsage, "%s", cfg_error);
  return ncclSuccess;
}

const hn_config *hn_cfg(void) { return &cfg; }

static __thread char last_error[512];

const char *hn_last_error(void) { return last_error; }

static void vlog(const char *prefix, const char *fmt, va_list ap) {
  char line[640];
  int n = snprintf(line, sizeof line, "hostnccl[%d] %s", (int)getpid(), prefix);
  if (n < 0 || (size_t)n >= sizeof line) return;
  vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
  fprintf(stderr, "%s\n", line); /* one call: lines of ranks do not interleave */
}

ncclResult_t hn_err(ncclResult_t res, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(last_error, sizeof last_error, fmt, ap);
  va_end(ap);
  if (cfg.log) hn_log("WARN %s (%s)", last_error, pncclGetErrorString(res));
  return res;
}

void hn_log(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vlog("", fmt, ap);
  va_end(ap);
}

void hn_report(const char *line) {
  char buf[768];
  int n = snprintf(buf, sizeof buf, "hostnccl[%d] %s\n", (int)getpid(), line);
  if (n < 0) return;
  if ((size_t)n >= sizeof buf) n = sizeof buf - 1, buf[n - 1] = '\n';
  fputs(buf, stderr); /* one call: lines of ranks do not interleave */
  fflush(stderr);
  const char *path = getenv("HOSTNCCL_REPORT_FILE");
  int fd = path && *path ? open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644) : -1;
  if (fd >= 0) {
    ssize_t w = write(fd, buf, (size_t)n); /* O_APPEND: one line per write, never interleaved */
    (void)w;
    close(fd);
  }
}

/* Fault injection counts per process, over all threads. */
static unsigned long call_count, group_end_count;

int hn_fail_this_call(void) {
  unsigned long n = __atomic_add_fetch(&call_count, 1, __ATOMIC_RELAXED);
  return cfg.fail_call > 0 && n == (unsigned long)cfg.fail_call;
}

int hn_fail_this_group_end(void) {
  unsigned long n = __atomic_add_fetch(&group_end_count, 1, __ATOMIC_RELAXED);
  return cfg.fail_group_end > 0 && n == (unsigned long)cfg.fail_group_end;
}

static uint64_t ar_calls[ncclNumTypes], ar_bytes[ncclNumTypes];

void hn_count_allreduce(ncclDataType_t type, size_t bytes) {
  __atomic_add_fetch(&ar_calls[type], 1, __ATOMIC_RELAXED);
  __atomic_add_fetch(&ar_bytes[type], (uint64_t)bytes, __ATOMIC_RELAXED);
}

HN_EXPORT int hostnccl_get_type_counters(int datatype, uint64_t *allreduce_calls,
                                         uint64_t *allreduce_bytes) {
  if (datatype < 0 || datatype >= ncclNumTypes) return -1;
  if (allreduce_calls) *allreduce_calls = __atomic_load_n(&ar_calls[datatype], __ATOMIC_RELAXED);
  if (allreduce_bytes) *allreduce_bytes = __atomic_load_n(&ar_bytes[datatype], __ATOMIC_RELAXED);
  return 0;
}

static uint64_t launch_total;

void hn_count_launch(ncclComm_t comm) {
  __atomic_add_fetch(&comm->launches, 1, __ATOMIC_RELAXED);
  __atomic_add_fetch(&launch_total, 1, __ATOMIC_RELAXED);
}

HN_EXPORT int hostnccl_get_launches(void *comm, uint64_t *launches) {
  if (!launches) return -1;
  *launches = __atomic_load_n(comm ? &((ncclComm_t)comm)->launches : &launch_total, __ATOMIC_RELAXED);
  return 0;
}

HN_EXPORT int hostnccl_get_counters(uint64_t *allreduce_calls, uint64_t *allreduce_bytes) {
  uint64_t c = 0, b = 0;
  for (int t = 0; t < ncclNumTypes; t++) {
    uint64_t tc, tb;
    hostnccl_get_type_counters(t, &tc, &tb);
    c += tc;
    b += tb;
  }
  if (allreduce_calls) *allreduce_calls = c;
  if (allreduce_bytes) *allreduce_bytes = b;
  return 0;
}
