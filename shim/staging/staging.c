/* staging.c — a communicator's use of its staging (staging.h, its second
 * half): the block of its own or its parent's, takes under
 * NCCLSHIM_MAX_STAGING_BYTES, parked work moved off the block before a
 * group's first take. Issues nothing: parked work is polled for on its
 * communicator and run (queue.h); the settles and the growth agreement are
 * settle.c's.
 *
 * Must not: hold the communicator's lock across a backend call that
 * allocates, joins or waits. */
#include "staging.h"

#include <stdio.h>

#include "comm.h"
#include "core.h"
#include "msg.h"
#include "queue.h"

/* ---- a communicator's staging ------------------------------------------------ */

_Static_assert(sizeof(nsc_stage) <= NSC_STAGE_MEM, "comm.h's stage_mem holds the staging room's state");

nsc_stage *nsc_stage_of(nsc_comm *c) { return (nsc_stage *)(void *)c->stage_mem; }

/* The block c's calls take from: its own, or its parent's (hier's). */
static nsc_staging *block_of(nsc_comm *c) { return &nsc_stage_of(c->parent ? c->parent : c)->block; }

static void release_stage(nsc_comm *c) { nsc_staging_release(&nsc_stage_of(c)->block); }

void nsc_stage_arm(nsc_comm *c) {
  static int done;
  if (!__atomic_load_n(&done, __ATOMIC_ACQUIRE)) {
    nsc_staging_fault_at(nsc_g.cfg.fault_alloc, nsc_g.cfg.fault_stage);
    __atomic_store_n(&done, 1, __ATOMIC_RELEASE);
  }
  c = c->parent ? c->parent : c;
  if (!c->drop_stage) c->drop_stage = release_stage; /* the block may hold memory from here on */
}

ncclResult_t nsc_staging_refused(nsc_comm *c, size_t bytes, const char *what) {
  const nsc_stage *g = nsc_stage_of(c);
  size_t limit = (size_t)nsc_g.cfg.max_staging_bytes, need = nsc_plan_round(bytes);
  uint64_t gid = nsc_group_id();
  size_t before = gid && g->gid == gid ? g->gneed : 0;
  if (need > limit || before > limit - need) {
    char m[400];
    if (before)
      snprintf(m, sizeof m, "%s needs %zu bytes of staging, %zu with its group's earlier compressed calls on "
               "communicator %p: beyond NCCLSHIM_MAX_STAGING_BYTES=%lld; it is refused on every rank; raise the limit, "
               "split the group or set NCCLSHIM_COMPRESS=off", what, need, before + need, (void *)c->comm,
               nsc_g.cfg.max_staging_bytes);
    else
      snprintf(m, sizeof m, "%s needs %zu bytes of staging beyond NCCLSHIM_MAX_STAGING_BYTES=%lld on communicator "
               "%p; it is refused on every rank; raise the limit or set NCCLSHIM_COMPRESS=off", what, need,
               nsc_g.cfg.max_staging_bytes, (void *)c->comm);
    nsc_warn("%s", m);
    nsc_note_error(m);
    return ncclInvalidUsage;
  }
  return ncclSuccess;
}

/* Parked work the shim runs itself: NCCL is polled until the
 * communicator's earlier work is enqueued (never the device), and the parked
 * cast-backs are run now, in stream order behind their collectives (each
 * moves the block's release point); an error they return is told at the
 * next poll. Serialised with any other thread running parked work. */
static void flush_parked(nsc_comm *o) {
  uint64_t upto = nsc_pending_mark(o);
  ncclResult_t e = nsc_wait_nonblocking(o, o->comm);
  ncclResult_t r = nsc_pending_finish(o, e == ncclSuccess, upto);
  if (e == ncclSuccess && r != ncclSuccess)
    __atomic_compare_exchange_n(&o->flush_err, &(ncclResult_t){ncclSuccess}, r, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
}

/* Before a group's first take while cast-backs still read the block (parked
 * on a nonblocking communicator until a poll, or being run by another
 * thread): this rank moves to a fresh block (nsc_staging_fresh), at most two
 * deep; beyond that, or when no fresh block can be had, the parked work is
 * run now (flush_parked), so the block is never rewritten under it and its
 * memory stays bounded. */
static void fresh_if_parked(nsc_comm *o, nsc_stream s) {
  if (!__atomic_load_n(&o->wire_out, __ATOMIC_ACQUIRE)) return;
  nsc_staging *b = &nsc_stage_of(o)->block;
  int rc = nsc_staging_fresh(b, s); /* allocates: not under o->lock */
  if (rc == 0) return;
  if (rc < 0) {
    nsc_warn("staging: no fresh block on rank %d (%s); communicator %p's parked cast-backs are run first",
             o->rank, nsc_backend_error(), (void *)o->comm);
    __atomic_add_fetch(&o->log.staging_failed, 1, __ATOMIC_RELAXED);
  }
  flush_parked(o);
  if (!__atomic_load_n(&o->wire_out, __ATOMIC_ACQUIRE)) nsc_staging_free_retired(b);
}

int nsc_staging_take_comm(nsc_comm *c, const nsc_backend *be, nsc_stream s, size_t bytes, void **p) {
  nsc_comm *o = c->parent ? c->parent : c;
  nsc_stage_arm(o);
  fresh_if_parked(o, s);
  /* Not under o->lock: the backend's joins and waits. */
  return nsc_staging_take(&nsc_stage_of(o)->block, be, s, bytes, p);
}

int nsc_get_staging(nsc_comm *c, const nsc_backend *be, nsc_stream s, size_t bytes, const char *what, void **p) {
  nsc_stage *g = nsc_stage_of(c);
  size_t need = nsc_plan_round(bytes);
  uint64_t gid = nsc_group_id();
  size_t before = gid && g->gid == gid ? g->gneed : 0;
  if (nsc_staging_refused(c, bytes, what) != ncclSuccess) return NSC_STAGE_REFUSED;
  if (gid) {
    g->gid = gid;
    g->gneed = before + need;
  }
  int rc = nsc_staging_take_comm(c, be, s, bytes, p);
  if (rc < 0) return NSC_STAGE_PLAIN;
  if (rc > 0) {
    nsc_warn("staging on rank %d cannot wait for its earlier use (%s): %s contributes NaN", c->rank,
             nsc_backend_error(), what);
    return NSC_STAGE_POISON;
  }
  return NSC_STAGE_OK;
}

int nsc_staging_room(nsc_comm *c, const nsc_backend *be, nsc_stream s, size_t bytes) {
  nsc_stage_arm(c);
  return nsc_staging_fits(block_of(c), be, s, bytes);
}

void nsc_staging_done_on(nsc_comm *c, nsc_stream s) { nsc_staging_used(block_of(c), s); }

int nsc_stage_reserve(nsc_comm *c, const nsc_backend *be, nsc_stream s, size_t bytes) {
  nsc_stage_arm(c);
  return nsc_staging_reserve(block_of(c), be, s, bytes);
}

void nsc_stage_agreed(nsc_comm *c, const nsc_backend *be, nsc_stream s, int ok) {
  nsc_staging_agreed(block_of(c), be, s, ok);
}

void nsc_stage_before_capture(nsc_comm *c, nsc_stream s) {
  nsc_staging *b = block_of(c);
  if (nsc_staging_may_issue(b)) (void)nsc_wait_nonblocking(c, c->comm);
  nsc_stream now = s; /* capturing: no confirmation is issued there */
  nsc_staging_resolve(b, &now);
}
