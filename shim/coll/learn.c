/* learn.c — the fabric learner's glue between the pure learner
 * (fabric/fabric.h) and a communicator, at NCCLSHIM_LAUNCH_BYTES=auto: what
 * one launch costs, in link bytes, measured from the communicator's own
 * first plain all-reduces and agreed by every rank before any plan uses it.
 *
 * The schedule, counted in eligible calls (ungrouped, uncaptured all-reduces
 * that reach the decision and that accumulation does not answer locally:
 * the same calls on every rank, from arguments and agreed values only):
 *   1. the first NSC_FAB_SAMPLES + 2 are forwarded as they are (the plan
 *      says "measuring"); the first two warm NCCL's connections up, the
 *      others are timed by two marks on the caller's stream (events on a
 *      GPU, clock reads on host memory, where the host NCCL runs a call on
 *      the calling thread), read later without waiting;
 *   2. right after the LAG_ISSUE-th eligible call after the last sample, the
 *      agreement's exchange is issued (one int64 Max all-reduce of the
 *      samples' bytes and negated times: every rank gets the latest
 *      arriver's time per sample, fabric.h says why), with what this rank
 *      could read by then;
 *   3. before the decision of the LAG_APPLY-th eligible call after that,
 *      its answer is taken (polled, waited for only if not yet there) and
 *      every rank fits the same samples to the same price, or keeps the
 *      unknown price (plan/cost.h) and says why.
 * Calls before step 3 are planned at the unknown price. The price is
 * measured once per communicator and never again: a plan's numerics
 * (its format, its two phases) then stay what they were for the whole job,
 * and no later mid-job agreement can flap them.
 *
 * Must not: synchronise or wait on the caller's stream, let a time decide
 * anything but the agreed price, or hold the communicator's lock across a
 * real call. */
#include <inttypes.h>
#include <stdio.h>

#include "agree.h"
#include "comm.h"
#include "core.h"
#include "msg.h"
#include "coll.h"

#define LAG_ISSUE 2 /* eligible calls after the last sample: its marks are read by then */
#define LAG_APPLY 2 /* eligible calls after the exchange: its answer is there by then */

int nsc_learn_on(const nsc_config *cfg) { return cfg->launch_bytes == NSC_CFG_AUTO; }

/* Reads every held sample's time that is there (never waits). */
static void read_marks(nsc_learn *l) {
  for (int i = 0; i < NSC_FAB_SAMPLES; i++) {
    if (!l->be[i]) continue;
    uint64_t ns;
    if (!l->be[i]->elapsed(&l->m[i][0], &l->m[i][1], &ns)) continue;
    nsc_fab_timed(&l->f, i, ns > INT64_MAX ? -1 : (int64_t)ns);
    l->be[i]->mark_release(&l->m[i][0]);
    l->be[i]->mark_release(&l->m[i][1]);
    l->be[i] = NULL;
  }
}

/* The summary's and the JSON log's line, on every rank. */
static void say(nsc_comm *c) {
  const nsc_fab *f = &c->learn.f;
  char t[320];
  int used = 0;
  for (int i = 0; i < NSC_FAB_SAMPLES; i++) used += f->ns[i] >= 0;
  if (f->state == NSC_FAB_LEARNED)
    snprintf(t, sizeof t,
             "learned from %d plain calls%s: %.1f us per launch, %.3f GB/s per link, a launch priced at %" PRIu64
             " link bytes",
             used, f->missed ? " (some rank missed a sample)" : "", (double)f->launch_ns / 1e3,
             f->ps_per_byte ? 1e3 / (double)f->ps_per_byte : 0.0, f->price);
  else
    snprintf(t, sizeof t, "not learned (%s): launches priced at %llu link bytes", f->why,
             (unsigned long long)NSC_COST_LAUNCH_UNKNOWN);
  nsc_log_fabric(&c->log, f->state == NSC_FAB_LEARNED, f->launch_ns, f->ps_per_byte, f->price, t);
  if (c->rank == 0) nsc_info("launch cost on communicator %p: %s", (void *)c->comm, t);
}

void nsc_learn_before(nsc_comm *c, const nsc_call *k, int local, nsc_agreed *ag, int *sample) {
  nsc_learn *l = &c->learn;
  *sample = -1;
  ag->learned = l->f.state == NSC_FAB_LEARNED;
  ag->launch = l->f.price;
  if (!nsc_learn_on(&nsc_g.cfg) || l->f.state != NSC_FAB_MEASURING) return;
  read_marks(l);
  if (k->in_group || k->capturing || k->rs || local) return;
  if (!nsc_fab_due(&l->f)) { /* measuring: forwarded as it is, timed past the warm-up */
    ag->measure = 1;
    /* the call's own bytes: a bf16 or fp16 call (issue 47: transformable now) moves 2 an element */
    *sample = nsc_fab_take(&l->f, nsc_fab_ring_bytes((uint64_t)nsc_dtype_size(k->dt) * k->arg, c->nranks, 0));
    return;
  }
  if (++l->after != LAG_ISSUE + LAG_APPLY || !l->issued) return;
  /* 3. the answer, then the fit: the same on every rank */
  l->issued = 0;
  if (l->x.live && !l->got) l->got = l->x.be->oob_end(l->x.buf, l->x.s, l->v, sizeof l->v, 1);
  l->x.live = 0;
  int ok = l->got > 0 && l->x.r == ncclSuccess;
  nsc_fab_agreed(&l->f, l->v, ok);
  for (int i = 0; i < NSC_FAB_SAMPLES; i++) /* marks never read (a GPU that has not run them yet) */
    if (l->be[i]) {
      l->be[i]->mark_release(&l->m[i][0]);
      l->be[i]->mark_release(&l->m[i][1]);
      l->be[i] = NULL;
    }
  if (!ok)
    nsc_warn("launch cost agreement on communicator %p failed on rank %d: launches stay priced at %llu link bytes",
             (void *)c->comm, c->rank, (unsigned long long)NSC_COST_LAUNCH_UNKNOWN);
  say(c);
  ag->learned = l->f.state == NSC_FAB_LEARNED;
  ag->launch = l->f.price;
}

void nsc_learn_mark(nsc_comm *c, const nsc_backend *be, cudaStream_t s, int sample, int after) {
  nsc_learn *l = &c->learn;
  if (sample < 0) return;
  if (!after) {
    l->be[sample] = NULL;
    if (be->mark((nsc_stream)s, &l->m[sample][0]) == 0) l->be[sample] = be;
    return;
  }
  if (!l->be[sample]) return; /* not timed: dropped at the agreement unless a peer timed it */
  if (be->mark((nsc_stream)s, &l->m[sample][1]) != 0) {
    be->mark_release(&l->m[sample][0]);
    l->be[sample] = NULL;
  }
}

void nsc_learn_after(nsc_comm *c, const nsc_backend *be, const nsc_call *k, int local, ncclResult_t last) {
  nsc_learn *l = &c->learn;
  if (!nsc_learn_on(&nsc_g.cfg) || l->f.state != NSC_FAB_MEASURING || l->issued) return;
  if (k->in_group || k->capturing || k->rs || local || !nsc_fab_due(&l->f) || l->after != LAG_ISSUE) return;
  /* 2. the exchange, right after this call (a nonblocking communicator's
   * call first completes: only when, never what, depends on it) */
  if (last == ncclInProgress) (void)nsc_wait_nonblocking(c, c->comm);
  read_marks(l);
  nsc_fab_agree_vals(&l->f, l->v);
  l->issued = 1;
  ncclResult_t r = nsc_exchange_begin(c, be, (nsc_stream)k->stream, l->v, NSC_FAB_VALS, &l->x);
  l->x.r = r;
  l->got = 0;
  if (l->x.live) { /* the copy back, right behind it (1: there already, -1: failed; the buffer is then given back) */
    l->got = l->x.be->oob_end(l->x.buf, l->x.s, l->v, sizeof l->v, 0);
    if (l->got) l->x.live = 0;
  }
}
