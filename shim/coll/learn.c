/* learn.c — the fabric learner's glue between the pure learner
 * (fabric/fabric.h) and a communicator, at NCCLSHIM_LAUNCH_BYTES=auto: what
 * one launch costs, in link bytes, measured from the communicator's own
 * first plain all-reduces and agreed by every rank before any plan uses it.
 *
 * The schedule, counted in eligible calls (ungrouped, uncaptured all-reduces
 * and reduce-scatters of a nonzero count that accumulation does not answer
 * locally (a sample's link bytes are its ring's: 2(n-1)/n of an all-reduce's
 * buffer, (n-1)/n of a reduce-scatter's whole input), on a
 * communicator with compression on whose ranks can all run the kernels:
 * the same calls on every rank, from arguments and agreed values only;
 * those the policy forwards anyway, below NCCLSHIM_MIN_BYTES or of another
 * datatype, included: they are plain launches too; under an explicit
 * NCCLSHIM_ALGO, only those):
 *   1. the first ones are forwarded as they are (the plan says
 *      "measuring"): NSC_FAB_WARMUP that warm NCCL's connections up, then
 *      at least NSC_FAB_CALLS timed, on until sizes of NSC_FAB_PER_SIZE
 *      calls are 8 times apart (at most NSC_FAB_MAX_CALLS: fabric.h), each
 *      by two marks on the caller's stream (events on a GPU, clock reads on
 *      host memory, where the host NCCL runs a call on the calling thread),
 *      read later without waiting;
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
#include "names.h"
#include "coll.h"

#define LAG_ISSUE 2 /* eligible calls after the last sample: its marks are read by then */
#define LAG_APPLY 2 /* eligible calls after the exchange: its answer is there by then */

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
             "learned from %d plain calls of %d sizes%s: %.1f us per launch, %.3f GB/s per link, a launch priced "
             "at %" PRIu64 " link bytes",
             f->n, used, f->missed ? " (some rank timed no call of a size)" : "", (double)f->launch_ns / 1e3,
             f->ps_per_byte ? 1e3 / (double)f->ps_per_byte : 0.0, f->price);
  else
    snprintf(t, sizeof t, "not learned (%s): launches priced at %llu link bytes", f->why,
             (unsigned long long)NSC_COST_LAUNCH_UNKNOWN);
  nsc_log_fabric(&c->log, f->state == NSC_FAB_LEARNED, f->launch_ns, f->ps_per_byte, f->price, t);
  if (c->rank == 0) nsc_info("launch cost on communicator %p: %s", (void *)c->comm, t);
}

/* A call the schedule counts (the header's "eligible"); forwarded: the
 * policy forwards it anyway. Under an explicit NCCLSHIM_ALGO only those: a
 * call the user asked to transform is never forwarded to measure. */
static int eligible(const nsc_comm *c, const nsc_call *k, int local, int forwarded) {
  return !k->in_group && !k->capturing && !local && k->arg > 0 && k->has_buffers && !c->untouched &&
         nsc_g.cfg.compress != NSC_COMPRESS_OFF && nsc_dtype_size(k->dt) > 0 &&
         (forwarded || nsc_g.cfg.algo == NSC_ALGO_AUTO);
}

void nsc_learn_before(nsc_comm *c, const nsc_call *k, int local, nsc_agreed *ag, int *sample) {
  nsc_learn *l = &c->learn;
  *sample = -1;
  if (ag) {
    ag->learned = l->f.state == NSC_FAB_LEARNED;
    ag->launch = l->f.price;
  }
  if (!learn_on(&nsc_g.cfg) || l->f.state != NSC_FAB_MEASURING) return;
  read_marks(l);
  if (!eligible(c, k, local, !ag)) return;
  if (!nsc_fab_due(&l->f)) { /* measuring: forwarded as it is, timed past the warm-up */
    if (ag) ag->measure = 1;
    uint64_t bytes = (uint64_t)k->arg * nsc_dtype_size(k->dt) * (k->rs ? (uint64_t)c->nranks : 1);
    *sample = nsc_fab_take(&l->f, nsc_fab_ring_bytes(bytes, c->nranks, k->rs));
    return;
  }
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

void nsc_learn_mark(nsc_comm *c, const nsc_backend *be, cudaStream_t s, int *sample, int after) {
  nsc_learn *l = &c->learn;
  if (*sample < 0) return;
  if (!after) { /* *sample: the size index; from here on the pending slot of this call's marks */
    int i = 0;
    while (i < NSC_LEARN_PENDING && l->pend[i].be) i++;
    if (i == NSC_LEARN_PENDING || be->mark((nsc_stream)s, &l->pend[i].m[0]) != 0) {
      *sample = -1; /* not timed: its size may still be by another call, or by a peer */
      return;
    }
    l->pend[i].be = be;
    l->pend[i].size = *sample;
    *sample = i;
    return;
  }
  if (be->mark((nsc_stream)s, &l->pend[*sample].m[1]) != 0) {
    be->mark_release(&l->pend[*sample].m[0]);
    l->pend[*sample].be = NULL;
  }
}

void nsc_learn_after(nsc_comm *c, const nsc_backend *be, const nsc_call *k, int local, int forwarded,
                     ncclResult_t last) {
  nsc_learn *l = &c->learn;
  if (!learn_on(&nsc_g.cfg) || l->f.state != NSC_FAB_MEASURING || l->issued) return;
  if (!eligible(c, k, local, forwarded) || !nsc_fab_due(&l->f) || l->after != LAG_ISSUE) return;
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
