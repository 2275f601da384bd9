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
 * When a setting differs, one more exchange (issued by every rank alike: all
 * saw the same maxima) carries every rank's value of it as text, so that the
 * message names each value and the ranks that hold it, not only this rank's.
 * A rank without the shim (not preloaded, or NCCLSHIM_DISABLE=1: it issues
 * nothing of the shim's) pairs its own first collective with the check on
 * real NCCL, which hangs or mixes data; where NCCL completes such a pair, two
 * constant slots (MAGIC, -MAGIC) come back wrong and every rank with the shim
 * fails the call, naming that cause rather than a setting.
 *
 * Must not: depend on anything but the configuration and the call sequence
 * to decide whether the exchange is issued. */
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agree.h"
#include "comm.h"
#include "queue.h"
#include "hier.h"
#include "core.h"
#include "msg.h"
#include "real.h"
#include "coll.h"
#include "staging.h"
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
  /* accumulation without the optimizer's steps (no Python step hook: a C
   * program, or a job started without ncclshim's hook) trusts K as typed */
  const char *acc = !nsc_cfg_accumulating(&nsc_g.cfg) || __atomic_load_n(&nsc_steps_watched, __ATOMIC_ACQUIRE)
                        ? ""
                    : nsc_g.cfg.accum_steps == NSC_CFG_AUTO
                        ? "; ACCUM_STEPS=auto accumulates nothing: no optimizer step signal (the Python step hook)"
                        : "; accumulation runs unchecked: no optimizer step signal (the Python step hook)";
  nsc_info("ncclshim %s active on communicator %p (%d ranks, %s): NCCL %d.%d.%d via %s; casts: %s%s;%s%s",
           NCCLSHIM_VERSION_STRING, (void *)c->comm, c->nranks, nodes, v / 10000, (v / 100) % 100, v % 100,
           nsc_real.how ? nsc_real.how : "?", be->name, c->untouched ? " (unusable: calls untouched)" : "",
           settings, acc);
  if (be != &nsc_backend_host) nsc_info("ncclshim CUDA kernels: %s", be->kernels());
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
 * (exec/hier.h), else every rank makes auto's choice. */
static void hier_agree(nsc_comm *c, const nsc_backend *be, nsc_stream s) {
  const char *why;
  if (!nsc_plan_hier_wanted(&nsc_g.cfg, &c->topo, c->untouched, &why) || !nsc_hier_possible(c, &why)) {
    if (nsc_g.cfg.algo == NSC_ALGO_HIER && c->rank == 0 && !c->internal)
      nsc_info("NCCLSHIM_ALGO=hier on communicator %p: %s; auto's choice (ring or flat two-phase) applies",
               (void *)c->comm, why);
    return;
  }
  int64_t v = nsc_hier_split(c) ? -2 : 1;
  ncclResult_t r = nsc_exchange_max(c, be, s, &v, 1);
  ncclResult_t cr = nsc_exchange_confirm(c, be, s, r);
  nsc_hier_adopt(c, r == ncclSuccess && cr == ncclSuccess && v == -2);
  if (c->hier_on && c->rank == 0)
    nsc_info("NCCLSHIM_ALGO=%s on communicator %p: %d nodes x %d ranks, hierarchical%s; fp32 reduce-scatter and "
             "all-gather inside each node, two-phase %s between nodes", nsc_g.cfg.algo == NSC_ALGO_HIER ? "hier" : "auto",
             (void *)c->comm, c->topo.nnodes, c->topo.local_size,
             nsc_g.cfg.algo == NSC_ALGO_HIER || !nsc_g.cfg.hier_min_bytes ? "" : " from NCCLSHIM_HIER_MIN_BYTES per call",
             nsc_fmt_name(nsc_tp_fmt(&nsc_g.cfg)));
}

enum { SLOT_FUSE = 2 * NSC_CFG_COUNT, SLOT_STATUS, SLOT_KERNELS, SLOT_HOSTMEM, SLOT_MAGIC, SLOT_NOT_MAGIC, NSLOTS };
/* Every rank with the shim puts MAGIC and -MAGIC in the last two slots: any
 * other answer means the exchange was paired with something else, a rank
 * that runs without the shim (no LD_PRELOAD there, or NCCLSHIM_DISABLE=1)
 * whose own collective NCCL happened to complete against it. */
#define MAGIC ((int64_t)0x2e434e4353484d31ll) /* ".CNCSHM1" */

/* One more exchange after a setting differs (every rank is here alike, at the
 * same row): each rank's value of row i as text, VAL_SLOTS int64s of it per
 * rank (INT64_MIN elsewhere), so every rank names every rank's value. */
enum { VAL_SLOTS = 3 };
#define VAL_CHARS (VAL_SLOTS * 8)

/* "0-62", "63", "1,3,5" into buf: the ranks whose value is that of rank r0. */
static void rank_list(const int64_t *v, int n, int r0, char *buf, size_t len) {
  size_t k = 0;
  buf[0] = 0;
  for (int r = 0; r < n && k + 24 < len; r++) {
    if (memcmp(v + (size_t)r * VAL_SLOTS, v + (size_t)r0 * VAL_SLOTS, VAL_CHARS)) continue;
    int e = r;
    while (e + 1 < n && !memcmp(v + (size_t)(e + 1) * VAL_SLOTS, v + (size_t)r0 * VAL_SLOTS, VAL_CHARS)) e++;
    k += (size_t)snprintf(buf + k, len - k, k ? ",%d" : "%d", r);
    if (e > r) k += (size_t)snprintf(buf + k, len - k, e > r + 1 ? "-%d" : ",%d", e);
    r = e;
  }
}

/* The message for setting i that differs: its value on every rank, grouped.
 * Falls back to this rank's own value when the exchange fails. */
static void name_ranks(nsc_comm *c, const nsc_backend *be, nsc_stream s, int i) {
  const nsc_config_row *row = nsc_config_row_at(i);
  char mine[VAL_CHARS + 1] = "";
  nsc_config_value_str(&nsc_g.cfg, i, mine, sizeof mine);
  int n = c->nranks;
  int64_t *v = malloc((size_t)n * VAL_SLOTS * sizeof *v);
  ncclResult_t r = ncclSystemError;
  if (v) {
    for (size_t k = 0; k < (size_t)n * VAL_SLOTS; k++) v[k] = INT64_MIN;
    memset(v + (size_t)c->rank * VAL_SLOTS, 0, VAL_CHARS);
    memcpy(v + (size_t)c->rank * VAL_SLOTS, mine, strlen(mine));
    r = nsc_exchange_max(c, be, s, v, n * VAL_SLOTS);
  } else {
    r = nsc_exchange_poisoned(c, be, s, n * VAL_SLOTS); /* its peers issue it: so does this rank */
  }
  if (nsc_exchange_confirm(c, be, s, r) != ncclSuccess || !v) {
    snprintf(c->mismatch_msg, sizeof c->mismatch_msg,
             "%s differs between the ranks of communicator %p (this rank, %d: '%s'); set it alike on every rank",
             row->env, (void *)c->comm, c->rank, mine);
    free(v);
    return;
  }
  size_t k = (size_t)snprintf(c->mismatch_msg, sizeof c->mismatch_msg, "%s differs between the ranks of communicator %p:",
                              row->env, (void *)c->comm);
  int groups = 0;
  for (int q = 0; q < n && k < sizeof c->mismatch_msg; q++) {
    int first = 1;
    for (int p = 0; p < q && first; p++) first = memcmp(v + (size_t)p * VAL_SLOTS, v + (size_t)q * VAL_SLOTS, VAL_CHARS) != 0;
    if (!first) continue;
    char val[VAL_CHARS + 1] = "", ranks[96];
    memcpy(val, v + (size_t)q * VAL_SLOTS, VAL_CHARS);
    rank_list(v, n, q, ranks, sizeof ranks);
    if (++groups > 4) {
      k += (size_t)snprintf(c->mismatch_msg + k, sizeof c->mismatch_msg - k, ", ...");
      break;
    }
    k += (size_t)snprintf(c->mismatch_msg + k, sizeof c->mismatch_msg - k, "%s '%s' on rank%s %s", groups > 1 ? "," : "",
                          val, strpbrk(ranks, ",-") ? "s" : "", ranks);
  }
  if (k < sizeof c->mismatch_msg)
    snprintf(c->mismatch_msg + k, sizeof c->mismatch_msg - k, " (this rank: %d); set it alike on every rank", c->rank);
  free(v);
}
enum { ST_OK = -2, ST_POISON = -1, ST_BAD_SETTING = 1 }; /* all-ones bytes read as -1 */

/* The check proper, on vals of nslots (NSLOTS, then one node key per rank)
 * with the settings' hashes and this rank's key filled in; *node becomes the
 * agreed map's (and NULL) on success. */
static ncclResult_t check_run(nsc_comm *c, const nsc_backend *be, nsc_stream s, int64_t *vals, int nslots, int **node,
                              size_t stage0, int want_stage) {
  int got = 1;
  if (want_stage) got = nsc_stage_reserve(c, be, s, stage0); /* allocates: not under c->lock */
  vals[SLOT_FUSE] = got ? 0 : 1;
  int usable = be->usable(s);
  vals[SLOT_KERNELS] = usable ? 0 : 1; /* a rank that cannot run the kernels: all forward untouched */
  vals[SLOT_STATUS] = nsc_g.bad_setting ? ST_BAD_SETTING : ST_OK;
  vals[SLOT_HOSTMEM] = be == &nsc_backend_host; /* any rank's: the host rule (plan/cost.h) */
  vals[SLOT_MAGIC] = MAGIC;
  vals[SLOT_NOT_MAGIC] = -MAGIC;
  if (!nsc_pending_reserve(c) && vals[SLOT_STATUS] == ST_OK) {
    nsc_warn("configuration check on communicator %p: no host memory on rank %d for its list of parked work",
             (void *)c->comm, c->rank);
    vals[SLOT_STATUS] = ST_POISON; /* every rank fails this call and checks again at the next */
  }
  ncclResult_t res = nsc_exchange_max(c, be, s, vals, nslots);
  /* Every rank learns whether every rank has the answer. */
  ncclResult_t cr = nsc_exchange_confirm(c, be, s, res);
  /* Paired with a collective of a rank without the shim: nothing in the
   * answer means anything (the confirmation neither). A rank that sent
   * poison (no exchange buffer: all-ones bytes, -1 in every slot) leaves -1
   * in the second constant slot and its status, and is no such pairing:
   * every rank fails the call with ncclSystemError below. */
  int poisoned = vals[SLOT_NOT_MAGIC] == -1 && vals[SLOT_STATUS] == ST_POISON;
  int paired = res == ncclSuccess && (vals[SLOT_MAGIC] != MAGIC || (vals[SLOT_NOT_MAGIC] != -MAGIC && !poisoned));
  if (paired) res = ncclInvalidUsage;
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
    nsc_stage_agreed(c, be, s, all);
    if (!got) __atomic_add_fetch(&c->log.staging_failed, 1, __ATOMIC_RELAXED);
    if (res == ncclSuccess && !all && (c->rank == 0 || !got))
      nsc_warn("compression stopped on communicator %p: %s its %zu bytes of staging (%s); every call on it is "
               "forwarded in fp32, on every rank", (void *)c->comm, got ? "a rank could not allocate" :
               "this rank could not allocate", stage0, got ? "that rank said why" : nsc_backend_error());
  }
  if (paired) {
    snprintf(c->mismatch_msg, sizeof c->mismatch_msg,
             "the settings check of communicator %p was paired with another collective: a rank runs without the "
             "shim (not preloaded there, or NCCLSHIM_DISABLE=1 on some ranks only); preload it the same way on "
             "every rank", (void *)c->comm);
    c->checked = -1;
    nsc_warn("%s", c->mismatch_msg);
    nsc_note_error(c->mismatch_msg);
    nsc_log_comm_failed(&c->log, c->mismatch_msg);
    return ncclInvalidUsage;
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
    name_ranks(c, be, s, i); /* every rank names every rank's value (one more exchange, issued alike) */
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
  if (nsc_comm_ended(c)) return nsc_ended(c); /* a first call deferred to a group end that came after the end */
  int n = 1, r = 0;
  if (nsc_real.CommCount) (void)NSC_ISSUE(c, CommCount(c->comm, &n));
  if (nsc_real.CommUserRank) (void)NSC_ISSUE(c, CommUserRank(c->comm, &r));
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
    nsc_exchange_confirm(c, be, s, res);
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
