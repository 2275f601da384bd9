/* check.c — a communicator's first intercepted call: learn its rank and size,
 * make sure every rank runs with the same settings, and say that the shim is
 * active.
 *
 * The configuration check is one ncclInt64 Max all-reduce of [h, -h] for the
 * hash h of each setting that changes which collectives are issued, on a
 * private buffer and stream (never the caller's stream), issued by every rank
 * at the same point (its first intercepted call on the communicator, or right
 * after the group in which it first appeared). Every rank then sees the same
 * maxima and minima, so all fail the same call, naming the same setting.
 * The same exchange agrees on the initial fusion block and on whether every
 * rank can run the kernels (if one cannot, all forward this communicator's
 * calls untouched). The exchange runs on the context of the caller's stream
 * and its result is read by polling an event (backend oob_end), never by
 * synchronising; fusion growth agreements are read one group later.
 * NCCLSHIM_DISABLE cannot be checked this way: a disabled rank issues nothing. */
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm.h"
#include "core.h"
#include "msg.h"
#include "real.h"
#include "shim.h"

static void banner(const nsc_comm *c, const nsc_backend *be) {
  if (!nsc_g.cfg.banner || c->rank != 0) return;
  char settings[512] = "";
  size_t n = 0;
  for (int i = 0; i < NSC_CFG_COUNT && n < sizeof settings; i++) {
    const nsc_config_row *row = nsc_config_row_at(i);
    if (!row->hashed && i != NSC_CFGI_log) continue;
    char v[64];
    nsc_config_value_str(&nsc_g.cfg, i, v, sizeof v);
    n += (size_t)snprintf(settings + n, sizeof settings - n, " %s=%s", row->env + 9, v);
  }
  int v = nsc_g.nccl_version;
  nsc_info("ncclshim %s active on communicator %p (%d ranks): NCCL %d.%d.%d via %s; casts: %s%s;%s",
           NCCLSHIM_VERSION_STRING, (void *)c->comm, c->nranks, v / 10000, (v / 100) % 100, v % 100,
           nsc_real.how ? nsc_real.how : "?", be->name, c->untouched ? " (unusable: calls untouched)" : "",
           settings);
  if (be != &nsc_backend_host) nsc_info("ncclshim CUDA kernels: %s", be->kernels());
}

ncclResult_t nsc_wait_nonblocking(ncclComm_t comm) {
  ncclResult_t e = ncclInProgress;
  while (e == ncclInProgress) {
    ncclResult_t r = nsc_real.CommGetAsyncError ? nsc_real.CommGetAsyncError(comm, &e) : ncclSuccess;
    if (!nsc_real.CommGetAsyncError) e = ncclSuccess;
    if (r != ncclSuccess) return r;
    if (e == ncclInProgress) sched_yield();
  }
  return e;
}

/* On the private stream of the caller's stream's context (the communicator's
 * device, whatever context is current); the result is read by polling, never
 * by synchronising. */
/* The exchange up to its collective: *buf and *s for oob_end (buf NULL when
 * there is nothing to end). */
static ncclResult_t exchange_issue(nsc_comm *c, const nsc_backend *be, nsc_stream caller, int64_t *vals, int n,
                                   void **buf, nsc_stream *s) {
  *buf = NULL;
  if (be->oob_begin(caller, vals, (size_t)n * sizeof *vals, buf, s)) {
    nsc_warn("configuration check on communicator %p: no buffer (%s)", (void *)c->comm, nsc_backend_error());
    *buf = NULL;
    return ncclSystemError;
  }
  ncclResult_t r = nsc_real.AllReduce(*buf, *buf, (size_t)n, ncclInt64, ncclMax, c->comm, (cudaStream_t)*s);
  NSC_COUNT(real_calls, 1);
  if (r == ncclInProgress) {
    c->nonblocking = 1;
    r = nsc_wait_nonblocking(c->comm);
  }
  return r;
}

ncclResult_t nsc_exchange_max(nsc_comm *c, const nsc_backend *be, nsc_stream caller, int64_t *vals, int n) {
  void *buf;
  nsc_stream s;
  ncclResult_t r = exchange_issue(c, be, caller, vals, n, &buf, &s);
  if (buf && be->oob_end(buf, s, vals, (size_t)n * sizeof *vals, 1) != 1 && r == ncclSuccess) r = ncclSystemError;
  return r;
}

/* Kernels that cannot run on some rank (a driver older than the fatbin, no
 * NVRTC, ...): every rank forwards this communicator's calls untouched,
 * agreed in the check so no rank transforms alone. One message per rank
 * that lacks them, one from rank 0 otherwise. */
static void untouched_if(nsc_comm *c, const nsc_backend *be, int usable, int any_unusable) {
  if (!any_unusable) return;
  c->untouched = 1;
  if (!usable)
    nsc_warn("rank %d cannot run the CUDA kernels (%s): communicator %p forwards every call untouched on "
             "every rank", c->rank, nsc_backend_error(), (void *)c->comm);
  else if (c->rank == 0)
    nsc_warn("a rank cannot run the CUDA kernels: communicator %p forwards every call untouched", (void *)c->comm);
  (void)be;
}

ncclResult_t nsc_check_comm(nsc_comm *c, const nsc_backend *be, nsc_stream s) {
  if (c->checked) return c->checked > 0 ? ncclSuccess : nsc_mismatch(c);
  int n = 1, r = 0;
  if (nsc_real.CommCount) nsc_real.CommCount(c->comm, &n);
  if (nsc_real.CommUserRank) nsc_real.CommUserRank(c->comm, &r);
  c->nranks = n;
  c->rank = r;
  nsc_log_comm_open(&c->log, (uint64_t)(uintptr_t)c->comm, r, n);
  if (!nsc_g.cfg.check_config) {
    c->checked = 1;
    int usable = be->usable(s);
    untouched_if(c, be, usable, !usable); /* unchecked: this rank's own view */
    banner(c, be);
    return ncclSuccess;
  }
  /* The same exchange agrees on an initial fusion block for this stream:
   * every rank keeps it only if every rank got it. */
  size_t fuse0 = (size_t)nsc_g.cfg.fuse_bytes / 2;
  if (fuse0 > ((size_t)4 << 20)) fuse0 = (size_t)4 << 20;
  if (fuse0 > (size_t)nsc_g.cfg.max_staging_bytes) fuse0 = (size_t)nsc_g.cfg.max_staging_bytes;
  int want_fuse = nsc_g.cfg.compress != NSC_COMPRESS_OFF && fuse0 > 0;
  /* [hashes][-hashes][fusion block missing][kernels unusable] */
  int64_t vals[2 * NSC_CFG_COUNT + 2];
  for (int i = 0; i < NSC_CFG_COUNT; i++) {
    vals[i] = nsc_config_row_hash(&nsc_g.cfg, i);
    vals[NSC_CFG_COUNT + i] = -vals[i];
  }
  int got = 1;
  if (want_fuse) {
    got = nsc_staging_fuse_reserve(&c->staging, be, s, fuse0); /* allocates: not under c->lock */
  }
  vals[2 * NSC_CFG_COUNT] = got ? 0 : 1;
  int usable = be->usable(s);
  vals[2 * NSC_CFG_COUNT + 1] = usable ? 0 : 1;
  ncclResult_t res = nsc_exchange_max(c, be, s, vals, 2 * NSC_CFG_COUNT + 2);
  if (want_fuse) {
    int all = res == ncclSuccess && vals[2 * NSC_CFG_COUNT] == 0;
    pthread_mutex_lock(&c->lock);
    nsc_staging_fuse_agreed(&c->staging, be, s, all);
    pthread_mutex_unlock(&c->lock);
    if (res == ncclSuccess && !all && (c->rank == 0 || !got))
      nsc_warn("fusion disabled on communicator %p: a rank could not allocate its fusion buffer "
               "(grouped all-reduces are compressed one by one)", (void *)c->comm);
  }
  if (res != ncclSuccess) return res; /* passed up unchanged; the next call checks again */
  c->checked = 1;
  untouched_if(c, be, usable, vals[2 * NSC_CFG_COUNT + 1] != 0);
  for (int i = 0; i < NSC_CFG_COUNT; i++) {
    if (vals[i] == -vals[NSC_CFG_COUNT + i]) continue;
    const nsc_config_row *row = nsc_config_row_at(i);
    char v[96];
    nsc_config_value_str(&nsc_g.cfg, i, v, sizeof v);
    snprintf(c->mismatch_msg, sizeof c->mismatch_msg,
             "%s differs between the ranks of communicator %p (this rank, %d: '%s'); set it alike on every rank",
             row->env, (void *)c->comm, c->rank, v);
    c->checked = -1;
    nsc_warn("%s", c->mismatch_msg);
    return ncclInvalidUsage;
  }
  banner(c, be);
  return ncclSuccess;
}

ncclResult_t nsc_mismatch(nsc_comm *c) {
  static int once;
  nsc_warn_once(&once, "%s (every call on it fails with ncclInvalidUsage)", c->mismatch_msg);
  return ncclInvalidUsage;
}

/* Fusion block growth: every rank reports whether its allocation succeeded;
 * all see the same maximum of the failures, so all keep or drop alike. The
 * answer is read at the communicator's next settle (staging.h), never waited
 * for after the group that asked. */
typedef struct {
  nsc_comm *c;
  const nsc_backend *be;
  int ok;
  ncclResult_t r;
  void *buf;
  nsc_stream s;
  int64_t v;
} agreement;

static void *agree_start(int ok, const nsc_backend *be, nsc_stream s, void *arg) {
  nsc_comm *c = arg;
  agreement *g = calloc(1, sizeof *g);
  if (!g) return NULL;
  *g = (agreement){c, be, ok, ncclSuccess, NULL, NULL, ok ? 0 : 1};
  g->r = exchange_issue(c, be, s, &g->v, 1, &g->buf, &g->s);
  /* Enqueue the copy back; the host backend answers at once. */
  int e = g->buf ? be->oob_end(g->buf, g->s, &g->v, sizeof g->v, 0) : 0;
  if (e != 0) g->buf = NULL; /* answered (or failed): the buffer is given back */
  if (e < 0 && g->r == ncclSuccess) g->r = ncclSystemError;
  return g;
}

static int agree_finish(void *tok, int wait, void *arg) {
  (void)arg;
  agreement *g = tok;
  if (g->buf) {
    int e = g->be->oob_end(g->buf, g->s, &g->v, sizeof g->v, wait);
    if (e == 0) return -1;
    if (e < 0 && g->r == ncclSuccess) g->r = ncclSystemError;
    g->buf = NULL;
  }
  int all = g->r == ncclSuccess && g->v == 0;
  if (!all && (g->c->rank == 0 || !g->ok))
    nsc_warn("fusion disabled on communicator %p: %s", (void *)g->c->comm,
             g->r != ncclSuccess ? "the agreement on its buffer failed"
                                 : "a rank could not allocate the fusion buffer (fused groups are forwarded in fp32)");
  free(g);
  return all;
}

void nsc_fuse_settle(nsc_comm *c, int grow) {
  pthread_mutex_lock(&c->lock);
  c->fuse_grow = 0;
  pthread_mutex_unlock(&c->lock);
  /* Not under the communicator's lock: agreeing calls into NCCL. The arena
   * list is only changed by this thread's calls on this communicator. */
  c->fuse_agreement = (nsc_fuse_agreement){agree_start, agree_finish, c};
  nsc_staging_fuse_settle(&c->staging, grow ? (size_t)nsc_g.cfg.max_staging_bytes : 0, &c->fuse_agreement);
}
