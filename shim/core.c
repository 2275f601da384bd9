/* core.c — activation: read the environment once, resolve real NCCL, decide
 * whether the shim is active, disabled or failed; fork handling; totals.
 *
 * Must not: run before the first intercepted call, exit, or hold a lock while
 * calling into NCCL (ncclGetVersion is called after the once-block's work is
 * published, outside any lock of ours). */
#include "core.h"
#include "host_stream.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "comm.h"
#include "log.h"
#include "msg.h"
#include "real.h"
#include "wire.h"

extern char **environ;

nsc_global_t nsc_g;
ncclshim_stats_t nsc_totals;
__thread int nsc_in_shim;

__thread char nsc_noted[512];
void nsc_note_error(const char *msg) { snprintf(nsc_noted, sizeof nsc_noted, "ncclshim: %s", msg); }

const char *nsc_noted_error(void) { return nsc_noted; }

static pthread_once_t once = PTHREAD_ONCE_INIT;
/* The state activation decides, published (release) only when everything it
 * set is in place: nsc_activate's fast path reads nsc_g.state alone. */
static int decided;

/* A child forked after activation is inert: it forwards every call and never
 * writes the parent's logs (it owns no CUDA context and none of the files). */
static void in_child(void) {
  nsc_g.forked_child = 1;
  nsc_g.state = NSC_DISABLED;
  nsc_log_forget();
  nsc_hs_forget();
}

static void fail(ncclResult_t code, const char *msg) {
  decided = NSC_FAILED;
  nsc_g.fail_code = code;
  snprintf(nsc_g.fail_msg, sizeof nsc_g.fail_msg, "%s", msg);
  nsc_warn("%s; every collective will return %s", msg, code == ncclInvalidUsage ? "ncclInvalidUsage" : "ncclSystemError");
}

/* A setting is invalid: say so once, naming it, and keep taking part in the
 * configuration checks (with the defaults, logs and banner off) so that the
 * peers fail with this rank instead of waiting for it. */
static void bad_setting(const char *msg) {
  nsc_config_parse(NULL, &nsc_g.cfg, NULL, 0);
  nsc_g.cfg.log = NSC_LOG_OFF;
  nsc_g.cfg.banner = 0;
  nsc_g.bad_setting = 1;
  nsc_g.fail_code = ncclInvalidUsage;
  snprintf(nsc_g.fail_msg, sizeof nsc_g.fail_msg, "%s", msg);
  nsc_warn("%s; every collective will return ncclInvalidUsage, on every rank of its communicator", msg);
  decided = NSC_ACTIVE;
}

void nsc_tell_log(void) {
  ncclshim_stats_t st;
  if (nsc_g.forked_child || ncclshim_get_stats(&st)) return;
  nsc_log_casts t = {st.compressed + st.fused, st.overflow, st.underflow, ""};
  memcpy(t.wire, st.wire, sizeof t.wire);
  nsc_log_tell_casts(&t);
}

/* At exit, before the log's own handler writes what is left. */
static void tell_log(void) { nsc_tell_log(); }

static void decide(void) {
  char err[768];
  pthread_atfork(NULL, NULL, in_child);
  /* Resolve first: with a bad setting, collectives fail but destroy and
   * abort still reach NCCL so the program can clean up. */
  if (nsc_real_resolve(err, sizeof err)) {
    fail(ncclSystemError, err);
    return;
  }
  if (nsc_config_parse(environ, &nsc_g.cfg, err, sizeof err)) {
    /* The hint of a bad name's message: the dump shows every setting and
     * every problem, bad values and names included. */
    if (nsc_config_flag(environ, NSC_CFGI_dump_config)) nsc_config_dump_env(environ, stderr, "ncclshim config: ");
    /* NCCLSHIM_DISABLE=1 wins: a disabled rank issues nothing of its own, as
     * its peers with DISABLE=1 do, so it must not join their (absent)
     * configuration checks either. */
    if (nsc_config_flag(environ, NSC_CFGI_disable)) {
      nsc_warn("%s; ignored: NCCLSHIM_DISABLE=1 forwards every call untouched", err);
      decided = NSC_DISABLED;
      return;
    }
    bad_setting(err);
    return;
  }
  if (nsc_real.GetVersion) {
    int v = 0;
    if (nsc_real.GetVersion(&v) == ncclSuccess) nsc_g.nccl_version = v;
  }
  if (nsc_g.cfg.dump_config) nsc_config_dump(&nsc_g.cfg, stderr, "ncclshim config: ");
  if (nsc_g.cfg.disable) {
    decided = NSC_DISABLED;
    return;
  }
  /* ncclBfloat16 exists since NCCL 2.10 (version code 21000). */
  if (nsc_g.cfg.compress == NSC_COMPRESS_BF16 && nsc_g.nccl_version && nsc_g.nccl_version < 21000) {
    snprintf(err, sizeof err, "NCCLSHIM_COMPRESS='bf16' needs NCCL >= 2.10 (this NCCL reports %d); use fp16 or off",
             nsc_g.nccl_version);
    bad_setting(err);
    return;
  }
  nsc_cast_set_threads((int)nsc_g.cfg.cast_threads);
  nsc_totals.enabled = 1;
  snprintf(nsc_totals.wire, sizeof nsc_totals.wire, "%s",
           nsc_g.cfg.compress == NSC_COMPRESS_OFF ? "off" : nsc_fmt_name((nsc_fmt_t)(nsc_g.cfg.compress - 1)));
  nsc_log_init(&nsc_g.cfg);
  if (nsc_log_on()) atexit(tell_log); /* after the log's own exit handler is registered: runs before it */
  decided = NSC_ACTIVE;
}

static void activate(void) {
  decide();
  if (!nsc_g.forked_child) __atomic_store_n(&nsc_g.state, decided, __ATOMIC_RELEASE);
}

int nsc_activate_once(void) {
  pthread_once(&once, activate);
  return __atomic_load_n(&nsc_g.state, __ATOMIC_ACQUIRE);
}

/* Per-thread counters ------------------------------------------------------ */
__thread nsc_counts *nsc_my_counts;
static nsc_counts *live;                   /* blocks of running threads */
static uint64_t retired[NSC_NCOUNTERS];    /* totals of threads that exited */
static pthread_mutex_t counts_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_key_t counts_key;
static pthread_once_t counts_once = PTHREAD_ONCE_INIT;

static void retire(void *p) {
  nsc_counts *c = p;
  pthread_mutex_lock(&counts_lock);
  for (int i = 0; i < NSC_NCOUNTERS; i++) retired[i] += c->v[i];
  if (c->prev) c->prev->next = c->next;
  else live = c->next;
  if (c->next) c->next->prev = c->prev;
  pthread_mutex_unlock(&counts_lock);
  free(c);
}

static void make_key(void) { pthread_key_create(&counts_key, retire); }

nsc_counts *nsc_counts_register(void) {
  pthread_once(&counts_once, make_key);
  nsc_counts *c = calloc(1, sizeof *c);
  if (!c) return NULL; /* counting is best effort; never fail a call for it */
  pthread_mutex_lock(&counts_lock);
  c->next = live;
  if (live) live->prev = c;
  live = c;
  pthread_mutex_unlock(&counts_lock);
  pthread_setspecific(counts_key, c);
  nsc_my_counts = c;
  return c;
}

void nsc_counts_sum(uint64_t v[NSC_NCOUNTERS]) {
  pthread_mutex_lock(&counts_lock);
  for (int i = 0; i < NSC_NCOUNTERS; i++) v[i] = retired[i];
  for (nsc_counts *c = live; c; c = c->next)
    for (int i = 0; i < NSC_NCOUNTERS; i++) v[i] += __atomic_load_n(&c->v[i], __ATOMIC_RELAXED);
  pthread_mutex_unlock(&counts_lock);
}

/* Public API ---------------------------------------------------------------- */
#define NSC_API __attribute__((visibility("default")))

NSC_API const char *ncclshim_version(void) { return NCCLSHIM_VERSION_STRING; }

int nsc_steps_watched;
uint64_t nsc_steps;
__thread int nsc_catchup_on;

NSC_API void ncclshim_watch_steps(void) { __atomic_store_n(&nsc_steps_watched, 1, __ATOMIC_RELEASE); }

NSC_API void ncclshim_catchup(int on) { nsc_catchup_on = on != 0; }

NSC_API int ncclshim_setting(const char *name, char *buf, size_t len) {
  extern char **environ;
  if (!name || !buf || !len) return -1;
  nsc_config *cfg = malloc(sizeof *cfg);
  char err[512];
  int rc = -1;
  if (cfg && nsc_config_parse(environ, cfg, err, sizeof err) == 0)
    for (int i = 0; i < NSC_CFG_COUNT; i++)
      if (!strcmp(nsc_config_row_at(i)->env, name)) {
        nsc_config_value_str(cfg, i, buf, len);
        rc = 0;
      }
  free(cfg);
  return rc;
}

NSC_API int ncclshim_get_stats(ncclshim_stats_t *out) {
  if (!out) return -1;
  ncclshim_stats_t s;
  memset(&s, 0, sizeof s);
  uint64_t v[NSC_NCOUNTERS];
  nsc_counts_sum(v);
#define X(f) s.f = v[NSC_C_##f];
  NSC_COUNTERS(X)
#undef X
  nsc_cast_counts c = {0, 0};
  nsc_backend_host.counts(&c);
  const nsc_backend *cu = nsc_g.state == NSC_ACTIVE ? nsc_backend_cuda() : NULL;
  if (cu) {
    nsc_cast_counts d = {0, 0};
    cu->counts(&d);
    c.overflow += d.overflow;
    c.underflow += d.underflow;
  }
  s.overflow = c.overflow;
  s.underflow = c.underflow;
  memcpy(s.wire, nsc_totals.wire, sizeof s.wire);
  if (!s.wire[0]) snprintf(s.wire, sizeof s.wire, "off");
  s.enabled = nsc_g.state == NSC_ACTIVE && !nsc_g.bad_setting;
  *out = s;
  return 0;
}
