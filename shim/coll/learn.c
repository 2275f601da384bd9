/* learn.c — the fabric learner's glue between the pure learner
 * (fabric/fabric.h) and a communicator, at NCCLSHIM_LAUNCH_BYTES=auto: what
 * one launch costs, in link bytes, measured from real launches the
 * communicator makes anyway and agreed by every rank before any plan uses
 * it. No call is forwarded only to be timed: until the agreement every call
 * is planned at the unknown price (plan/cost.h), as a pinned one would be.
 *
 * The schedule, counted in eligible calls (ungrouped, uncaptured
 * all-reduces and reduce-scatters of a nonzero count that accumulation does
 * not answer locally, on a communicator with compression on whose ranks can
 * all run the kernels: the same calls on every rank, from arguments and
 * agreed values only; those the policy forwards anyway, below
 * NCCLSHIM_MIN_BYTES or of another datatype, included):
 *   1. each one's plan (the decision, at the unknown price) names the launch
 *      that is its sample (sampled()): the call itself where the plan is
 *      plain, the ring's first wire all-reduce, or flat two-phase's first
 *      all-gather; the others have none. The first NSC_FAB_WARMUP samples
 *      warm NCCL's connections up, then at least NSC_FAB_CALLS are timed,
 *      on until sizes of NSC_FAB_PER_SIZE samples are 8 times apart (at most
 *      NSC_FAB_MAX_CALLS: fabric.h), or until SEEN_MAX eligible calls went
 *      by; each by two marks on the caller's stream around that launch
 *      (comm.h's nsc_learn_time: events on a GPU, clock reads on host
 *      memory, where the host NCCL runs a call on the calling thread), read
 *      later without waiting;
 *   2. right after the LAG_ISSUE-th eligible call after that, the
 *      agreement's exchange is issued (one int64 Max all-reduce of the
 *      samples' bytes and negated times: every rank gets the latest
 *      arriver's time per sample, fabric.h says why), with what this rank
 *      could read by then;
 *   3. before the decision of the LAG_APPLY-th eligible call after that,
 *      its answer is taken (polled, waited for only if not yet there) and
 *      every rank fits the same samples to the same price, or keeps the
 *      unknown price and says why.
 * The price is measured once per communicator and never again: a plan's
 * numerics (its format, its two phases) change at most once, at step 3, on
 * every rank at the same call, and no later mid-job agreement can flap them.
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
#include "names.h"
#include "coll.h"

#define LAG_ISSUE 2 /* eligible calls after the last sample: its marks are read by then */
#define LAG_APPLY 2 /* eligible calls after the exchange: its answer is there by then */
/* Eligible calls after which the agreement is due even without enough
 * samples (a job whose plans have no sampled launch): it then fits what it
 * has, or keeps the unknown price and says why. */
#define SEEN_MAX (4 * NSC_FAB_MAX_CALLS)

static int learn_on(const nsc_config *cfg) { return cfg->launch_bytes == NSC_CFG_AUTO; }

static void release(nsc_learn *l, int i) {
  l->pend[i].be->mark_release(&l->pend[i].m[0]);
  l->pend[i].be->mark_release(&l->pend[i].m[1]);
  l->pend[i].be = NULL;
}

/* Reads every timed call's time that is there (never waits). */
static void read_marks(nsc_learn *l) {
  for (int i = 0; i < NSC_LEARN_PENDING; i++) {
    if (!l->pend[i].be) continue;
    uint64_t ns;
    if (!l->pend[i].be->elapsed(&l->pend[i].m[0], &l->pend[i].m[1], &ns)) continue;
    nsc_fab_timed(&l->f, l->pend[i].size, ns > INT64_MAX ? -1 : (int64_t)ns);
    release(l, i);
  }
}

/* The summary's and the JSON log's line, on every rank. */
static void say(nsc_comm *c) {
  const nsc_fab *f = &c->learn.f;
  char t[320];
  int used = 0;
  for (int i = 0; i < f->nsizes; i++) used += f->ns[i] >= 0;
  if (f->state == NSC_FAB_LEARNED)
    snprintf(t, sizeof t,
             "learned from %d sampled launches of %d sizes%s: %.1f us per launch, %.3f GB/s per link, a launch priced "
             "at %" PRIu64 " link bytes",
             f->n, used, f->missed ? " (some rank timed no call of a size)" : "", (double)f->launch_ns / 1e3,
             f->ps_per_byte ? 1e3 / (double)f->ps_per_byte : 0.0, f->price);
  else
    snprintf(t, sizeof t, "not learned (%s): launches priced at %llu link bytes", f->why,
             (unsigned long long)NSC_COST_LAUNCH_UNKNOWN);
  nsc_log_fabric(&c->log, f->state == NSC_FAB_LEARNED, f->launch_ns, f->ps_per_byte, f->price, f->n, c->seq, t);
  if (c->rank == 0) nsc_info("launch cost on communicator %p: %s", (void *)c->comm, t);
}

/* A call the schedule counts (the header's "eligible"). */
static int eligible(const nsc_comm *c, const nsc_call *k, int local) {
  return !k->in_group && !k->capturing && !local && k->arg > 0 && k->has_buffers && !c->untouched &&
         nsc_g.cfg.compress != NSC_COMPRESS_OFF && nsc_dtype_size(k->dt) > 0;
}

/* Sampled enough, or seen enough calls to stop waiting for samples. */
static int due(const nsc_learn *l) { return nsc_fab_due(&l->f) || l->seen >= SEEN_MAX; }

/* The launch of plan p (NULL: the call forwarded as it is) that is a sample,
 * and the bytes one rank's link carries for it: the call itself, the ring's
 * first wire all-reduce (2 bytes an element), or flat two-phase's first
 * all-gather of the owners' encoded slots; none for the other plans (their
 * launches run on sub-communicators or are point-to-point). */
static int sampled(const nsc_comm *c, const nsc_call *k, const nsc_plan *p, uint64_t *link) {
  int n = c->nranks;
  if (!p || p->alg == NSC_ALG_PLAIN) {
    uint64_t bytes = (uint64_t)k->arg * nsc_dtype_size(k->dt) * (k->rs ? (uint64_t)n : 1);
    *link = nsc_fab_ring_bytes(bytes, n, k->rs);
    return NSC_LEARN_AT_CALL;
  }
  if (p->alg == NSC_ALG_RING) {
    size_t e = p->chunk && p->chunk < p->count ? p->chunk : p->count;
    *link = nsc_fab_ring_bytes(2 * (uint64_t)e, n, 0);
    return NSC_LEARN_AT_WIRE;
  }
  if (p->alg == NSC_ALG_TWOPHASE && !p->stages && !p->rs && p->tp.gather && p->tp.n == n) {
    *link = nsc_fab_ring_bytes((uint64_t)n * p->tp.slot, n, 1);
    return NSC_LEARN_AT_GATHER;
  }
  return NSC_LEARN_AT_NONE;
}

void nsc_learn_plan(nsc_comm *c, const nsc_call *k, int local, const nsc_plan *p) {
  nsc_learn *l = &c->learn;
  l->at = NSC_LEARN_AT_NONE;
  l->take = -1;
  if (!learn_on(&nsc_g.cfg) || l->f.state != NSC_FAB_MEASURING || !eligible(c, k, local) || due(l)) return;
  l->seen++;
  uint64_t link = 0;
  int at = sampled(c, k, p, &link);
  if (at == NSC_LEARN_AT_NONE || !link) return;
  l->take = nsc_fab_take(&l->f, link); /* -1: a warm-up launch, or a size past those kept */
  if (l->take >= 0) l->at = at;
}

void nsc_learn_before(nsc_comm *c, const nsc_call *k, int local, nsc_agreed *ag) {
  nsc_learn *l = &c->learn;
  if (ag) {
    ag->learned = l->f.state == NSC_FAB_LEARNED;
    ag->launch = l->f.price;
  }
  if (!learn_on(&nsc_g.cfg) || l->f.state != NSC_FAB_MEASURING) return;
  read_marks(l);
  if (!eligible(c, k, local) || !due(l)) return;
  if (++l->after != LAG_ISSUE + LAG_APPLY || !l->issued) return;
  /* 3. the answer, then the fit: the same on every rank */
  l->issued = 0;
  if (l->x.live && !l->got) l->got = l->x.be->oob_end(l->x.buf, l->x.s, l->v, sizeof l->v, 1);
  l->x.live = 0;
  int ok = l->got > 0 && l->x.r == ncclSuccess;
  nsc_fab_agreed(&l->f, l->v, ok);
  for (int i = 0; i < NSC_LEARN_PENDING; i++) /* marks never read (a GPU that has not run them yet) */
    if (l->pend[i].be) release(l, i);
  if (!ok)
    nsc_warn("launch cost agreement on communicator %p failed on rank %d: launches stay priced at %llu link bytes",
             (void *)c->comm, c->rank, (unsigned long long)NSC_COST_LAUNCH_UNKNOWN);
  say(c);
  if (ag) {
    ag->learned = l->f.state == NSC_FAB_LEARNED;
    ag->launch = l->f.price;
  }
}

void nsc_learn_after(nsc_comm *c, const nsc_backend *be, const nsc_call *k, int local, ncclResult_t last) {
  nsc_learn *l = &c->learn;
  nsc_learn_drop_open(c); /* a sampled launch never issued (a failure before it): not timed */
  if (!learn_on(&nsc_g.cfg) || l->f.state != NSC_FAB_MEASURING || l->issued) return;
  if (!eligible(c, k, local) || !due(l) || l->after != LAG_ISSUE) return;
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
