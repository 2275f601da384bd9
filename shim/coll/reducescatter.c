/* reducescatter.c — one intercepted ncclReduceScatter: fp32 Sum/Avg of at
 * least NCCLSHIM_MIN_BYTES (the whole send buffer) with compression on is the
 * first phase of the two-phase algorithm (algo/twophase.c): each rank's shard
 * comes out of the fp32 sum of the n decoded contributions. Everything else
 * is forwarded untouched with the caller's arguments (and logged as a
 * pass-through record, "coll":"reducescatter").
 *
 * Not transformed: calls inside a group (the sum needs the exchange's data
 * before the call returns), calls on a stream being captured, and shards too
 * small for nsc_tp_fits. Never skipped by accumulation: a skipped
 * reduce-scatter would have to answer with this rank's shard of a sum it has
 * not seen (an all-reduce can answer W·x locally; a reduce-scatter's shard
 * of W·x is not what the synced pass needs either, since FSDP keeps only the
 * shard), so reduce-scatters always sync and are not counted as passes.
 *
 * Must not: let anything but arguments and configuration decide what is
 * issued, retry a real call, or hold our lock across one. */
#include "algo.h"
#include "comm.h"
#include "core.h"
#include "group.h"
#include "msg.h"
#include "policy.h"
#include "real.h"
#include "coll.h"
#include "tp_plan.h"

/* The call's plan runs in two phases (flat or hierarchical): from the call,
 * the settings and the communicator's agreed map alone (plan.h). */
static int two_phases(const nsc_comm *c, const nsc_config *cfg, const nsc_call *call, size_t rc, ncclRedOp_t op) {
  if (!nsc_policy_compressible(cfg, call)) return 0; /* plain: no plan to make */
  nsc_plan plan;
  nsc_plan_for(c, 1, rc, op, 1, &plan);
  return plan.alg == NSC_PLAN_TWOPHASE || plan.alg == NSC_PLAN_HIER;
}

ncclResult_t nsc_reduce_scatter(const void *send, void *recv, size_t rc, ncclDataType_t dt, ncclRedOp_t op,
                                ncclComm_t comm, cudaStream_t stream) {
  nsc_comm *c = NULL;
  ncclResult_t r = ncclSuccess;
  int e = nsc_coll_enter(comm, &c, &r);
  if (e == NSC_ENTER_RETURN) return r;
  if (e == NSC_ENTER_FORWARD) return nsc_real.ReduceScatter(send, recv, rc, dt, op, comm, stream);
  const nsc_config *cfg = &nsc_g.cfg;
  nsc_call call = {rc, dt, op, send && recv, nsc_group_depth() > 0, 0};
  const nsc_backend *be = nsc_backend_for(recv);
  if (call.in_group) {
    /* Before the check: forwarded (checked at the communicator's next call
     * outside a group). After it: two-phase as outside a group, issued
     * right after the real group end (group.h). After a failed check: the
     * check's error, as every other call on the communicator, on every rank
     * (fuzzer seeds 3097, 3286: a healthy peer forwarded it). */
    if (c->checked < 0) {
      r = nsc_check_comm(c, be, (nsc_stream)stream);
      goto out;
    }
    call.count = rc * (size_t)c->nranks; /* MIN_BYTES applies to the whole buffer */
    int tp = c->checked > 0 && !c->untouched && two_phases(c, cfg, &call, rc, op);
    if (tp && be->capturing((nsc_stream)stream, &call.capturing)) call.capturing = 1;
    if (tp && !call.capturing) {
      c->seq++;
      nsc_staging_note(c, be, stream); /* it takes staging after the real group end */
      r = nsc_twophase_defer(c, be, send, recv, rc, op, (nsc_stream)stream, 1);
    } else {
      r = nsc_forward_rs(c, send, recv, rc, dt, op, stream);
    }
    goto out;
  }
  if (c->checked <= 0) {
    /* Capture first: a captured first call is forwarded and leaves the check
     * (allocation, module loads, an exchange) to the first uncaptured call;
     * capture is alike on every rank. */
    if (c->checked == 0 && be->capturing((nsc_stream)stream, &call.capturing)) call.capturing = 1;
    if (call.capturing) {
      r = nsc_forward_rs(c, send, recv, rc, dt, op, stream);
      goto out;
    }
    r = nsc_check_comm(c, be, (nsc_stream)stream);
    if (r != ncclSuccess) goto out;
  }
  c->seq++;
  nsc_log_call_rs(&c->log, c->seq, rc * (size_t)c->nranks, dt, op, send, recv); /* the diagnosis: observe-only */
  call.count = rc * (size_t)c->nranks; /* MIN_BYTES applies to the whole buffer */
  int tp = !c->untouched && two_phases(c, cfg, &call, rc, op);
  if (tp && be->capturing((nsc_stream)stream, &call.capturing)) call.capturing = 1;
  if (tp && !call.capturing) {
    r = nsc_twophase(c, be, send, recv, rc, op, stream, 1, c->seq);
    nsc_staging_settle_comm(c, stream); /* whatever it answered: every rank took or tried alike */
    goto out;
  }
  r = nsc_forward_rs(c, send, recv, rc, dt, op, stream);
out:
  nsc_comm_put(c);
  return r;
}
