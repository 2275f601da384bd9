/* observe.c — the NCCL calls that move data but are never transformed:
 * broadcast (ncclBcast, what ProcessGroupNCCL's broadcast calls, and
 * ncclBroadcast), reduce, all-gather, all-to-all, gather, scatter, send and
 * receive. Each is forwarded untouched with the caller's arguments; with
 * logging on it is also timed and logged as an "observed" record, so that a
 * rank waiting inside one of them (DDP's buffer broadcast at the start of a
 * forward waiting for a straggler) is seen as communication and
 * not as an idle device.
 *
 * Send and receive are timed only on a communicator whose log a collective
 * has opened already: their sequences differ between ranks, so they must
 * not decide the order in which a process numbers its communicators
 * (comm_seq), by which the report matches ranks.
 *
 * Broadcasts are also handed to accumulation's learner as evidence (DDP's
 * bucket rebuild broadcasts two int32 tensors: accum.c, R1), before the
 * real call; that is all anyone is told of an observed call.
 *
 * Must not: change an argument, issue anything but the real call, decide or
 * check anything, count in ncclshim_get_stats (those count the reductions),
 * or change the reductions' call counter (c->seq: two-phase rounding and the
 * accumulation learner number calls by it; a record of an observed call
 * carries its current value, the reduction it follows). */
#include "comm.h"
#include "core.h"
#include "real.h"
#include "coll.h"

int nsc_observe_begin(ncclComm_t comm, int coll, size_t count, ncclDataType_t dt, int op, int root,
                      const void *buf, cudaStream_t s, nsc_observed *o) {
  o->c = NULL;
  if (nsc_activate() != NSC_ACTIVE || !comm) return 0;
  if (coll == NSC_COLL_BROADCAST) nsc_accum_saw_broadcast(comm, dt, count);
  if (!nsc_log_on()) return 0;
  int p2p = coll == NSC_COLL_SEND || coll == NSC_COLL_RECV;
  nsc_comm *c = p2p ? nsc_comm_find(comm) : nsc_comm_get(comm);
  if (!c) return 0;
  if (p2p && __atomic_load_n(&c->log.open, __ATOMIC_ACQUIRE) != NSC_LOG_OPEN) {
    nsc_comm_put(c);
    return 0;
  }
  if (__atomic_load_n(&c->log.open, __ATOMIC_ACQUIRE) != NSC_LOG_OPEN || c->log.rank < 0) {
    /* Named before the communicator's check (a job's first calls are often
     * DDP's broadcasts): local queries of NCCL, no communication. */
    int rank = -1, n = 0;
    if (nsc_real.CommUserRank && nsc_real.CommCount && nsc_real.CommUserRank(comm, &rank) == ncclSuccess &&
        nsc_real.CommCount(comm, &n) == ncclSuccess)
      nsc_log_comm_open(&c->log, (uint64_t)(uintptr_t)comm, rank, n);
  }
  nsc_rec_observe(&o->rec, coll, c->seq, count, dt, op, nsc_backend_for(buf), (nsc_stream)s, nsc_group_depth() > 0);
  o->rec.root = root; /* rec.seq: the reductions' counter, "after call N" */
  nsc_log_observe(&c->log, o->rec.seq);
  o->c = c;
  return 1;
}

void nsc_observe_end(nsc_observed *o, ncclResult_t r) {
  nsc_log_mark(&o->rec, NSC_MARK_END);
  o->rec.result = r;
  nsc_log_commit(&o->c->log, &o->rec);
  nsc_comm_put(o->c);
  o->c = NULL;
}
