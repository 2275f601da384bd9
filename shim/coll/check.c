/* check.c — a communicator's first intercepted call: learn its rank and size,
 * make sure every rank runs with the same settings, and say that the shim is
 * active.
 *
 * The configuration check is one ncclInt64 Max all-reduce of [h, -h] for the
 * hash h of each setting that changes which collectives are issued, plus the
 * staging-block slot, a kernels slot, a status slot and one slot per rank for
 * its node key (topo/topo.h: rank i's key in slot i, 0 in the others, so the
 * maxima are every rank's key and every rank builds the same node map), on
 * a private buffer and stream (never
 * the caller's stream), issued by every rank at the same point (its first
 * intercepted call on the communicator, or right after the group in which it
 * first appeared), followed by a one-value confirmation in which every rank
 * says whether it could read the answer back (a failure on one rank then
 * fails the call on every rank). It cannot be switched off, and it is issued whatever
 * happens locally: a rank whose settings are invalid takes part with status 1
 * (every rank then fails every call on the communicator with
 * ncclInvalidUsage), a rank that cannot build its exchange buffer reduces an
 * all-ones buffer (status -1: every rank fails this call with
 * ncclSystemError and checks again at the next). Every rank sees the same
 * maxima and minima, so all fail the same call, naming the same setting.
 * NCCLSHIM_DISABLE cannot be checked this way: a disabled rank issues nothing.
 *
 * Must not: depend on anything but the configuration and the call sequence
 * to decide whether the exchange is issued. */
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm.h"
#include "group.h"
#include "hier.h"
#include "core.h"
#include "msg.h"
#include "real.h"
#include "coll.h"
#include "tp_plan.h"

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
  char nodes[96];
  nsc_topo_describe(&c->topo, nodes, sizeof nodes);
  nsc_info("ncclshim %s active on communicator %p (%d ranks, %s): NCCL %d.%d.%d via %s; casts: %s%s;%s",
           NCCLSHIM_VERSION_STRING, (void *)c->comm, c->nranks, nodes, v / 10000, (v / 100) % 100, v % 100,
           nsc_real.how ? nsc_real.how : "?", be->name, c->untouched ? " (unusable: calls untouched)" : "",
           settings);
  if (be != &nsc_backend_host) nsc_info("ncclshim CUDA kernels: %s", be->kernels());
}

static long long oob_count; /* exchange buffers taken; NCCLSHIM_FAULT_OOB fails one */

static ncclResult_t exchange_call(nsc_comm *c, void *buf, int n, nsc_stream s) {
  ncclResult_t r = nsc_real.AllReduce(buf, buf, (size_t)n, ncclInt64, ncclMax, c->comm, (cudaStream_t)s);
  NSC_COUNT(real_calls, 1);
  if (r == ncclInProgress) {
    c->nonblocking = 1;
    r = nsc_wait_nonblocking(c->comm);
  }
  return r;
}

/* The peers issue an exchange of n values that this rank cannot take part in
 * properly: issue it too, on an all-ones buffer of the same kind on the
 * caller's stream (nothing is read back), so that every rank sees the poison
 * (-1 in every slot) and fails alike. ncclSystemError, or NCCL's own error. */
static ncclResult_t nsc_exchange_poisoned(nsc_comm *c, const nsc_backend *be, nsc_stream caller, int n) {
  size_t bytes = (size_t)n * sizeof(int64_t);
  void *p = NULL;
  if (be->alloc(caller, bytes, &p)) {
    nsc_warn("exchange between the ranks of communicator %p: no buffer on rank %d (%s), and none for a poisoned "
             "exchange either: its peers will wait for it", (void *)c->comm, c->rank, nsc_backend_error());
    return ncclSystemError;
  }
  be->fill_ones(caller, p, bytes);
  ncclResult_t r = exchange_call(c, p, n, caller);
  be->release(caller, p);
  return NSC_OK(r) ? ncclSystemError : r;
}

ncclResult_t nsc_exchange_begin(nsc_comm *c, const nsc_backend *be, nsc_stream caller, const int64_t *vals, int n,
                                nsc_xchg *x) {
  memset(x, 0, sizeof *x);
  size_t bytes = (size_t)n * sizeof *vals;
  long long k = __atomic_add_fetch(&oob_count, 1, __ATOMIC_RELAXED);
  int rc = nsc_g.cfg.fault_oob && k == nsc_g.cfg.fault_oob ? (nsc_backend_set_error("exchange buffer %lld failed (NCCLSHIM_FAULT_OOB)", k), -1)
                                           : be->oob_begin(caller, vals, bytes, &x->buf, &x->s);
  if (rc) {
    nsc_warn("exchange between the ranks of communicator %p: no buffer on rank %d (%s); it sends poison, so "
             "every rank fails this call", (void *)c->comm, c->rank, nsc_backend_error());
    return nsc_exchange_poisoned(c, be, caller, n);
  }
  x->be = be;
  x->n = n;
  x->live = 1;
  x->r = exchange_call(c, x->buf, n, x->s);
  return x->r;
}

/* Testing (NCCLSHIM_FAULT_OOB_END): the n-th read-back of this process
 * fails (its buffer is given back all the same). */
static int oob_end_fault(int e) {
  static long long k;
  long long f = nsc_g.cfg.fault_oob_end;
  if (e == 0 || !f || __atomic_add_fetch(&k, 1, __ATOMIC_RELAXED) != f) return e;
  nsc_backend_set_error("read-back %lld of an exchange failed (NCCLSHIM_FAULT_OOB_END)", f);
  return -1;
}

ncclResult_t nsc_exchange_end(nsc_xchg *x, int64_t *vals) {
  if (!x->live) return ncclInternalError;
  x->live = 0;
  ncclResult_t r = x->r;
  /* Polls the private stream's event: never a synchronisation. */
  if (oob_end_fault(x->be->oob_end(x->buf, x->s, vals, (size_t)x->n * sizeof *vals, 1)) != 1 && r == ncclSuccess) {
    nsc_warn("an exchange between the ranks could not read its answer back (%s)", nsc_backend_error());
    r = ncclSystemError;
  }
  return r;
}

/* After an exchange whose outcome was `mine` on this rank: one more int64
 * Max exchange in which every rank says whether it got (and could read) the
 * answer, so that a failure on one rank only fails the call on every rank
 * (ncclSystemError) instead of leaving that rank alone behind. A rank that
 * failed knows the answer without reading it (its own 1 is the maximum); a
 * rank that cannot read this confirmation but had the answer assumes the
 * others had it too, so any single failing read-back ends alike on every
 * rank (two failing reads in one check may not). Returns ncclSuccess when
 * every rank had the answer. */
static ncclResult_t confirm(nsc_comm *c, const nsc_backend *be, nsc_stream s, ncclResult_t mine) {
  int64_t v = mine == ncclSuccess ? -2 : 1; /* a poisoned buffer reads -1: a failure too */
  nsc_xchg x;
  ncclResult_t r = nsc_exchange_begin(c, be, s, &v, 1, &x);
  if (x.live) {
    ncclResult_t e = nsc_exchange_end(&x, &v);
    if (r == ncclSuccess && e != ncclSuccess && mine == ncclSuccess) {
      nsc_warn("communicator %p: rank %d could not read the confirmation of its check; it assumes every rank "
               "had the answer, as it had", (void *)c->comm, c->rank);
      v = -2;
    }
  } else if (r == ncclSuccess) r = ncclSystemError;
  if (mine != ncclSuccess) return mine;
  if (r != ncclSuccess && !(r == ncclSystemError && !x.live)) return r; /* NCCL's own error, passed up */
  return v == -2 && r == ncclSuccess ? ncclSuccess : ncclSystemError;
}

ncclResult_t nsc_exchange_max(nsc_comm *c, const nsc_backend *be, nsc_stream caller, int64_t *vals, int n) {
  nsc_xchg x;
  ncclResult_t r = nsc_exchange_begin(c, be, caller, vals, n, &x);
  if (!x.live) return r;
  ncclResult_t e = nsc_exchange_end(&x, vals);
  return r != ncclSuccess ? r : e;
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

/* NCCLSHIM_ALGO=hier: where the agreed node map allows it, every rank splits
 * the two sub-communicators, then one more int64 Max exchange (and its
 * confirmation) says whether every rank has both; only then is hier adopted
 * (algo/hier.h), else every rank makes auto's choice. */
static void hier_agree(nsc_comm *c, const nsc_backend *be, nsc_stream s) {
  const char *why;
  if (!nsc_hier_wanted(c, &why)) {
    if (nsc_g.cfg.algo == NSC_ALGO_HIER && c->rank == 0 && !c->internal)
      nsc_info("NCCLSHIM_ALGO=hier on communicator %p: %s; auto's choice (ring or flat two-phase) applies",
               (void *)c->comm, why);
    return;
  }
  int64_t v = nsc_hier_split(c) ? -2 : 1;
  ncclResult_t r = nsc_exchange_max(c, be, s, &v, 1);
  ncclResult_t cr = confirm(c, be, s, r);
  nsc_hier_adopt(c, r == ncclSuccess && cr == ncclSuccess && v == -2);
  if (c->hier_on && c->rank == 0)
    nsc_info("NCCLSHIM_ALGO=%s on communicator %p: %d nodes x %d ranks, hierarchical%s; fp32 reduce-scatter and "
             "all-gather inside each node, two-phase %s between nodes", nsc_g.cfg.algo == NSC_ALGO_HIER ? "hier" : "auto",
             (void *)c->comm, c->topo.nnodes, c->topo.local_size,
             nsc_g.cfg.algo == NSC_ALGO_HIER || !nsc_g.cfg.hier_min_bytes ? "" : " from NCCLSHIM_HIER_MIN_BYTES per call",
             nsc_fmt_name(nsc_tp_fmt(&nsc_g.cfg)));
}

enum { SLOT_FUSE = 2 * NSC_CFG_COUNT, SLOT_STATUS, SLOT_KERNELS, SLOT_HOSTMEM, NSLOTS };
enum { ST_OK = -2, ST_POISON = -1, ST_BAD_SETTING = 1 }; /* all-ones bytes read as -1 */

/* The check proper, on vals of nslots (NSLOTS, then one node key per rank)
 * with the settings' hashes and this rank's key filled in; *node becomes the
 * agreed map's (and NULL) on success. */
static ncclResult_t check_run(nsc_comm *c, const nsc_backend *be, nsc_stream s, int64_t *vals, int nslots, int **node,
                              size_t stage0, int want_stage) {
  int got = 1;
  if (want_stage) got = nsc_staging_reserve(&c->staging, be, s, stage0); /* allocates: not under c->lock */
  vals[SLOT_FUSE] = got ? 0 : 1;
  int usable = be->usable(s);
  vals[SLOT_KERNELS] = usable ? 0 : 1; /* a rank that cannot run the kernels: all forward untouched */
  vals[SLOT_STATUS] = nsc_g.bad_setting ? ST_BAD_SETTING : ST_OK;
  vals[SLOT_HOSTMEM] = be == &nsc_backend_host; /* any rank's: the host rule (plan/cost.h) */
  if (!nsc_pending_reserve(c) && vals[SLOT_STATUS] == ST_OK) {
    nsc_warn("configuration check on communicator %p: no host memory on rank %d for its list of parked work",
             (void *)c->comm, c->rank);
    vals[SLOT_STATUS] = ST_POISON; /* every rank fails this call and checks again at the next */
  }
  ncclResult_t res = nsc_exchange_max(c, be, s, vals, nslots);
  /* Every rank learns whether every rank has the answer. */
  ncclResult_t cr = confirm(c, be, s, res);
  if (res == ncclSuccess && cr != ncclSuccess) {
    nsc_warn("configuration check on communicator %p: a rank could not read its answer (it said why); this call "
             "fails on every rank and the next one checks again", (void *)c->comm);
    res = cr;
  }
  if (res == ncclSuccess && vals[SLOT_STATUS] == ST_POISON) {
    nsc_warn("configuration check on communicator %p: a rank could not take part properly (it said why); "
             "this call fails on every rank and the next one checks again", (void *)c->comm);
    res = ncclSystemError;
  }
  if (want_stage) {
    int all = res == ncclSuccess && vals[SLOT_FUSE] == 0;
    nsc_staging_agreed(&c->staging, be, s, all);
    if (!got) __atomic_add_fetch(&c->log.staging_failed, 1, __ATOMIC_RELAXED);
    if (res == ncclSuccess && !all && (c->rank == 0 || !got))
      nsc_warn("compression stopped on communicator %p: %s its %zu bytes of staging (%s); every call on it is "
               "forwarded in fp32, on every rank", (void *)c->comm, got ? "a rank could not allocate" :
               "this rank could not allocate", stage0, got ? "that rank said why" : nsc_backend_error());
  }
  if (res != ncclSuccess) return res; /* passed up unchanged; the next call checks again */
  if (nsc_topo_build(&c->topo, vals + NSLOTS, c->nranks, c->rank, *node) == 0) {
    *node = NULL;
    char d[96];
    nsc_topo_describe(&c->topo, d, sizeof d);
    nsc_log_comm_nodes(&c->log, d, c->topo.nnodes, c->topo.local_rank);
  } else {
    /* Every rank read the same maxima, so every rank is here alike: a key
     * that is not positive came from a rank whose status said OK, which the
     * exchange cannot produce; keep going with the nodes unknown. */
    nsc_warn("configuration check on communicator %p: the node keys did not all arrive; nodes unknown",
             (void *)c->comm);
  }
  c->host_rule = vals[SLOT_HOSTMEM] == 1; /* before checked: what a call reads once it sees checked */
  c->checked = 1;
  untouched_if(c, be, usable, vals[SLOT_KERNELS] != 0);
  if (vals[SLOT_STATUS] == ST_BAD_SETTING) {
    if (nsc_g.bad_setting)
      snprintf(c->mismatch_msg, sizeof c->mismatch_msg, "%.200s", nsc_g.fail_msg);
    else
      snprintf(c->mismatch_msg, sizeof c->mismatch_msg,
               "an NCCLSHIM_* setting is invalid on another rank of communicator %p (that rank printed which); "
               "fix it there", (void *)c->comm);
    c->checked = -1;
    nsc_warn("%s", c->mismatch_msg);
    nsc_note_error(c->mismatch_msg);
    nsc_log_comm_failed(&c->log, c->mismatch_msg);
    return ncclInvalidUsage;
  }
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
    nsc_note_error(c->mismatch_msg);
    nsc_log_comm_failed(&c->log, c->mismatch_msg);
    return ncclInvalidUsage;
  }
  hier_agree(c, be, s);
  banner(c, be);
  return ncclSuccess;
}


ncclResult_t nsc_check_comm(nsc_comm *c, const nsc_backend *be, nsc_stream s) {
  if (c->checked) return c->checked > 0 ? ncclSuccess : nsc_mismatch(c);
  int n = 1, r = 0;
  if (nsc_real.CommCount) nsc_real.CommCount(c->comm, &n);
  if (nsc_real.CommUserRank) nsc_real.CommUserRank(c->comm, &r);
  c->nranks = n;
  c->rank = r;
  nsc_log_comm_open(&c->log, (uint64_t)(uintptr_t)c->comm, r, n);
  /* The same exchange agrees on the initial staging block (allocated on
   * this stream): every rank keeps it only if every rank got it. */
  size_t stage0 = (size_t)nsc_g.cfg.staging_bytes;
  if (stage0 > (size_t)nsc_g.cfg.max_staging_bytes) stage0 = (size_t)nsc_g.cfg.max_staging_bytes;
  int want_stage = nsc_g.cfg.compress != NSC_COMPRESS_OFF && stage0 > 0 && !nsc_g.bad_setting;
  /* Then one slot per rank for the node keys: rank i's key in slot
   * NSLOTS + i, 0 elsewhere (keys are positive), so the maxima are the map. */
  enum { STACK_RANKS = 256 };
  int64_t stack_vals[NSLOTS + STACK_RANKS];
  int nslots = NSLOTS + n;
  int64_t *vals = n <= STACK_RANKS ? stack_vals : malloc((size_t)nslots * sizeof *vals);
  int *node = malloc((size_t)n * sizeof *node); /* the map's, kept on success */
  ncclResult_t res;
  if (!vals || !node) {
    nsc_warn("configuration check on communicator %p: no host memory on rank %d for its %d ranks' node map; "
             "this call fails on every rank and the next one checks again", (void *)c->comm, r, n);
    res = nsc_exchange_poisoned(c, be, s, nslots);
    confirm(c, be, s, res);
  } else {
    memset(vals + NSLOTS, 0, (size_t)n * sizeof *vals);
    vals[NSLOTS + r] = nsc_topo_node_key();
    for (int i = 0; i < NSC_CFG_COUNT; i++) {
      vals[i] = nsc_config_row_hash(&nsc_g.cfg, i);
      vals[NSC_CFG_COUNT + i] = -vals[i];
    }
    res = check_run(c, be, s, vals, nslots, &node, stage0, want_stage);
  }
  if (vals != stack_vals) free(vals);
  free(node);
  return res;
}

ncclResult_t nsc_mismatch(nsc_comm *c) {
  static int once;
  nsc_warn_once(&once, "%s (every call on it fails with ncclInvalidUsage)", c->mismatch_msg);
  nsc_note_error(c->mismatch_msg);
  return ncclInvalidUsage;
}

/* Staging block growth: every rank reports whether its allocation succeeded;
 * all see the same maximum of the failures, so all keep or drop alike (a
 * rank without an exchange buffer sends all-ones: v[1] != -2 on every rank).
 * Nothing is waited for after the group that asked: the answer is read at
 * the communicator's next settle (polled only if its exchange has not
 * completed by then), where the confirmation that every rank could read it
 * is issued; that one is read at the settle after (the same way), which
 * applies the outcome. Two settles, so that no settle waits for an exchange
 * it has just issued behind the communicator's work. */
typedef struct {
  nsc_comm *c;
  int ok;
  nsc_xchg x;
  ncclResult_t r;
  int answered;
  int64_t v[2];
  const nsc_backend *be;
  nsc_stream s; /* the caller's stream it was issued from (the confirmation's too) */
  int confirming; /* the confirmation is issued: cx, cv, cr */
  nsc_xchg cx;
  int64_t cv;
  ncclResult_t cr;
  int cread; /* the confirmation's answer is here (or could not be read) */
  int decided; /* whether to confirm is decided (at the first settle that read the answer) */
} agreement;

static void *agree_start(int ok, const nsc_backend *be, nsc_stream s, void *arg) {
  nsc_comm *c = arg;
  _Static_assert(sizeof(agreement) <= sizeof c->agree_mem, "nsc_comm.agree_mem holds the agreement");
  agreement *g = (agreement *)(void *)c->agree_mem; /* one in flight at a time (staging.c): never allocated */
  memset(g, 0, sizeof *g);
  g->c = c;
  g->ok = ok;
  g->be = be;
  g->s = s;
  g->v[0] = ok ? 0 : 1;
  g->v[1] = -2;
  g->r = nsc_exchange_begin(c, be, s, g->v, 2, &g->x);
  if (!g->x.live) { /* no buffer: the poisoned exchange was issued, this rank fails it */
    g->answered = 1;
    if (g->r == ncclSuccess) g->r = ncclSystemError;
    return g;
  }
  /* Enqueue the copy back; the host backend answers at once. */
  int e = oob_end_fault(be->oob_end(g->x.buf, g->x.s, g->v, sizeof g->v, 0));
  if (e != 0) {
    g->x.live = 0;
    g->answered = 1;
    if (e < 0 && g->r == ncclSuccess) g->r = ncclSystemError;
  }
  return g;
}

/* Enqueues the copy back of a live exchange x into v (bytes); 1 answered,
 * 0 not yet, and the exchange is dropped (not live) with *r set on error. */
static int read_back(nsc_xchg *x, int64_t *v, size_t bytes, int wait, ncclResult_t *r) {
  int e = oob_end_fault(x->be->oob_end(x->buf, x->s, v, bytes, wait));
  if (e == 0) return 0;
  if (e < 0 && *r == ncclSuccess) *r = ncclSystemError;
  x->live = 0;
  return 1;
}

static int agree_finish(void *tok, int wait, const nsc_stream *now, void *arg) {
  (void)arg;
  agreement *g = tok;
  /* The stream it started on may be gone since (its group is over): what it
   * issues now goes from the current call's stream, of the same context. */
  if (now) g->s = *now;
  if (wait < 0) { /* its communicator is ending: nobody reads the answers */
    if (!g->answered && g->x.live) g->x.be->oob_abandon(g->x.buf, g->x.s);
    if (g->confirming && g->cx.live) g->cx.be->oob_abandon(g->cx.buf, g->cx.s);
    return 0;
  }
  if (!g->answered) {
    if (g->x.live && !read_back(&g->x, g->v, sizeof g->v, wait, &g->r)) return -1;
    g->answered = 1;
  }
  if (!g->decided) {
    /* Read at a settle (wait), alike on every rank, whether this rank could
     * issue the agreement or not: confirm that every rank read the answer,
     * so that a read-back failing on one rank stops compression on all. Not
     * during a capture (alike on every rank: nothing of ours is issued
     * there). Its answer is read at the next settle. */
    int capturing = 0;
    if (wait > 0 && g->be->capturing(g->s, &capturing)) capturing = 1;
    g->decided = 1;
    if (wait > 0 && !capturing) {
      g->confirming = 1;
      g->cv = g->r == ncclSuccess ? -2 : 1; /* a poisoned buffer reads -1: a failure too */
      g->cr = nsc_exchange_begin(g->c, g->be, g->s, &g->cv, 1, &g->cx);
      if (g->cx.live) {
        int e = oob_end_fault(g->be->oob_end(g->cx.buf, g->cx.s, &g->cv, sizeof g->cv, 0));
        if (e != 0) {
          g->cx.live = 0;
          g->cread = 1;
          if (e < 0 && g->cr == ncclSuccess) g->cr = ncclSystemError;
        }
      } else {
        g->cread = 1;
        if (g->cr == ncclSuccess) g->cr = ncclSystemError;
      }
      return -1;
    }
  }
  if (g->confirming && !g->cread) {
    ncclResult_t rb = ncclSuccess;
    if (g->cx.live && !read_back(&g->cx, &g->cv, sizeof g->cv, wait, &rb)) return -1;
    g->cread = 1;
    /* As confirm(): a rank that had the answer but cannot read the
     * confirmation assumes every rank had it, as it had. */
    if (rb != ncclSuccess && g->r == ncclSuccess && g->cr == ncclSuccess) g->cv = -2;
  }
  int confirmed = !g->confirming || (g->cr == ncclSuccess && g->cv == -2);
  int all = g->r == ncclSuccess && confirmed && g->v[0] == 0 && g->v[1] == -2;
  if (!g->ok) __atomic_add_fetch(&g->c->log.staging_failed, 1, __ATOMIC_RELAXED);
  if (!all && (g->c->rank == 0 || !g->ok))
    nsc_warn("compression stopped on communicator %p: %s; every call on it is forwarded in fp32, on every rank",
             (void *)g->c->comm, g->r != ncclSuccess || !confirmed ? "the agreement on its grown staging failed"
                                 : g->ok ? "a rank could not allocate its grown staging (that rank said why)"
                                         : "this rank could not allocate its grown staging");
  return all;
}

void nsc_staging_settle_comm(nsc_comm *c, cudaStream_t s) {
  if (__atomic_load_n(&c->ended, __ATOMIC_ACQUIRE)) return; /* destroyed or aborted meanwhile: nothing more on it */
  /* Cast-backs still to run read the block (parked, or run by another
   * thread right now). */
  int parked = __atomic_load_n(&c->wire_out, __ATOMIC_ACQUIRE) > 0;
  /* NCCL takes no further call on a nonblocking communicator until the last
   * one is enqueued: this rank waits for that (never for the device) before
   * a settle that may issue an exchange, whether or not it has seen
   * ncclInProgress yet (a call forwarded plain may be its first); on a
   * blocking communicator the poll answers at once. */
  if (nsc_staging_may_issue(&c->staging)) (void)nsc_wait_nonblocking(c->comm);
  /* Not under the communicator's lock: agreeing calls into NCCL. */
  c->staging_agreement = (nsc_staging_agreement){agree_start, agree_finish, c};
  nsc_stream now = (nsc_stream)s;
  nsc_staging_settle(&c->staging, (size_t)nsc_g.cfg.max_staging_bytes, &c->staging_agreement, parked, &now);
}
