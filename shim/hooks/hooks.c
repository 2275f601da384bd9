/* hooks.c — the exported NCCL entry points. Thin on purpose: re-entry guard,
 * activation, then hand over to the function that holds the behaviour (an
 * all-reduce or reduce-scatter as a call descriptor to the one path,
 * coll/call.c).
 *
 * A hook entered while this thread is already inside the shim (real NCCL
 * calling a public API internally) forwards straight to the real function.
 * Must not: do work of its own, or call anything but nsc_* and nsc_real. */
#include <nccl.h>

#include "comm.h"
#include "core.h"
#include "real.h"
#include "coll.h"

#define NSC_API __attribute__((visibility("default")))

/* Resolve real NCCL (once) and report whether it could be. */
static ncclResult_t ready(void) {
  nsc_activate();
  return nsc_real.AllReduce ? ncclSuccess : ncclSystemError;
}

#define GUARDED(real_call, shim_call)              \
  do {                                             \
    if (nsc_in_shim) return real_call;             \
    if (ready() != ncclSuccess) return nsc_g.fail_code; \
    nsc_in_shim = 1;                               \
    ncclResult_t r_ = shim_call;                   \
    nsc_in_shim = 0;                               \
    return r_;                                     \
  } while (0)

/* A call on a communicator: noted when it joins a group (queue.h). */
#define GUARDED_ON(comm, real_call, shim_call)     \
  do {                                             \
    if (!nsc_in_shim) nsc_group_note(comm);        \
    GUARDED(real_call, shim_call);                 \
  } while (0)

NSC_API ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
                                   ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  GUARDED_ON(comm, nsc_real.AllReduce(sendbuff, recvbuff, count, datatype, op, comm, stream),
             nsc_collective(&(nsc_call){.dt = datatype, .op = op, .arg = count, .send = sendbuff, .recv = recvbuff,
                                        .comm = comm, .stream = stream}));
}

NSC_API ncclResult_t ncclReduceScatter(const void *sendbuff, void *recvbuff, size_t recvcount,
                                       ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                       cudaStream_t stream) {
  GUARDED_ON(comm, nsc_real.ReduceScatter(sendbuff, recvbuff, recvcount, datatype, op, comm, stream),
             nsc_collective(&(nsc_call){.rs = 1, .dt = datatype, .op = op, .arg = recvcount, .send = sendbuff,
                                        .recv = recvbuff, .comm = comm, .stream = stream}));
}

/* Observed: forwarded untouched, timed with logging on (coll/observe.c).
 * The two-phase algorithms call the real send/recv directly. A function the
 * real NCCL lacks answers ncclInvalidUsage. */
#define OBSERVED(comm, stream, coll, count, dt, op, root, buf, fn, args)                    \
  do {                                                                                      \
    if (nsc_in_shim) return nsc_real.fn ? nsc_real.fn args : ncclInvalidUsage;              \
    nsc_group_note(comm);                                                                   \
    if (ready() != ncclSuccess) return nsc_g.fail_code;                                     \
    if (!nsc_real.fn) return ncclInvalidUsage;                                              \
    nsc_in_shim = 1;                                                                        \
    nsc_observed o_;                                                                        \
    int on_ = nsc_observe_begin(comm, coll, count, dt, op, root, buf, stream, &o_);         \
    ncclResult_t r_ = nsc_real.fn args;                                                     \
    if (on_) nsc_observe_end(&o_, r_);                                                      \
    nsc_in_shim = 0;                                                                        \
    return r_;                                                                              \
  } while (0)

NSC_API ncclResult_t ncclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount, ncclDataType_t datatype,
                                   ncclComm_t comm, cudaStream_t stream) {
  OBSERVED(comm, stream, NSC_COLL_ALLGATHER, sendcount, datatype, -1, -1, recvbuff, AllGather,
           (sendbuff, recvbuff, sendcount, datatype, comm, stream));
}

NSC_API ncclResult_t ncclBroadcast(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype, int root,
                                   ncclComm_t comm, cudaStream_t stream) {
  OBSERVED(comm, stream, NSC_COLL_BROADCAST, count, datatype, -1, root, recvbuff, Broadcast,
           (sendbuff, recvbuff, count, datatype, root, comm, stream));
}

NSC_API ncclResult_t ncclBcast(void *buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
                               cudaStream_t stream) {
  OBSERVED(comm, stream, NSC_COLL_BROADCAST, count, datatype, -1, root, buff, Bcast,
           (buff, count, datatype, root, comm, stream));
}

NSC_API ncclResult_t ncclReduce(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
                                ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream) {
  OBSERVED(comm, stream, NSC_COLL_REDUCE, count, datatype, (int)op, root, sendbuff, Reduce,
           (sendbuff, recvbuff, count, datatype, op, root, comm, stream));
}

NSC_API ncclResult_t ncclAlltoAll(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
                                  ncclComm_t comm, cudaStream_t stream) {
  OBSERVED(comm, stream, NSC_COLL_ALLTOALL, count, datatype, -1, -1, recvbuff, AlltoAll,
           (sendbuff, recvbuff, count, datatype, comm, stream));
}

NSC_API ncclResult_t ncclGather(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype, int root,
                                ncclComm_t comm, cudaStream_t stream) {
  OBSERVED(comm, stream, NSC_COLL_GATHER, count, datatype, -1, root, sendbuff, Gather,
           (sendbuff, recvbuff, count, datatype, root, comm, stream));
}

NSC_API ncclResult_t ncclScatter(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype, int root,
                                 ncclComm_t comm, cudaStream_t stream) {
  OBSERVED(comm, stream, NSC_COLL_SCATTER, count, datatype, -1, root, recvbuff, Scatter,
           (sendbuff, recvbuff, count, datatype, root, comm, stream));
}

NSC_API ncclResult_t ncclSend(const void *sendbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                              cudaStream_t stream) {
  OBSERVED(comm, stream, NSC_COLL_SEND, count, datatype, -1, peer, sendbuff, Send,
           (sendbuff, count, datatype, peer, comm, stream));
}

NSC_API ncclResult_t ncclRecv(void *recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                              cudaStream_t stream) {
  OBSERVED(comm, stream, NSC_COLL_RECV, count, datatype, -1, peer, recvbuff, Recv,
           (recvbuff, count, datatype, peer, comm, stream));
}

NSC_API ncclResult_t ncclGroupStart(void) { GUARDED(nsc_real.GroupStart(), nsc_group_start()); }

NSC_API ncclResult_t ncclGroupEnd(void) { GUARDED(nsc_real.GroupEnd(), nsc_group_end()); }

/* Communicator creation: forwarded, then the CUDA context the communicator
 * will use is set up (comm.c), so its collectives never synchronise for it.
 * A function the real NCCL lacks answers ncclInvalidUsage. */
#define REAL(fn, args) (nsc_real.fn ? nsc_real.fn args : ncclInvalidUsage)

NSC_API ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank) {
  GUARDED(REAL(CommInitRank, (comm, nranks, id, rank)),
          nsc_comm_created(REAL(CommInitRank, (comm, nranks, id, rank)), NULL, 0));
}

NSC_API ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank,
                                            ncclConfig_t *config) {
  GUARDED(REAL(CommInitRankConfig, (comm, nranks, id, rank, config)),
          nsc_comm_created(REAL(CommInitRankConfig, (comm, nranks, id, rank, config)), NULL, 0));
}

NSC_API ncclResult_t ncclCommInitRankScalable(ncclComm_t *comm, int nranks, int rank, int nid, ncclUniqueId *ids,
                                              ncclConfig_t *config) {
  GUARDED(REAL(CommInitRankScalable, (comm, nranks, rank, nid, ids, config)),
          nsc_comm_created(REAL(CommInitRankScalable, (comm, nranks, rank, nid, ids, config)), NULL, 0));
}

NSC_API ncclResult_t ncclCommInitAll(ncclComm_t *comms, int ndev, const int *devlist) {
  GUARDED(REAL(CommInitAll, (comms, ndev, devlist)),
          nsc_comm_created(REAL(CommInitAll, (comms, ndev, devlist)), devlist, ndev));
}

NSC_API ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t *newcomm, ncclConfig_t *config) {
  GUARDED(REAL(CommSplit, (comm, color, key, newcomm, config)),
          nsc_comm_created(REAL(CommSplit, (comm, color, key, newcomm, config)), NULL, 0));
}

NSC_API ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  GUARDED(nsc_real.CommDestroy(comm), nsc_comm_end(comm, nsc_real.CommDestroy));
}

NSC_API ncclResult_t ncclCommAbort(ncclComm_t comm) {
  GUARDED(nsc_real.CommAbort(comm), nsc_comm_end(comm, nsc_real.CommAbort));
}

NSC_API ncclResult_t ncclCommFinalize(ncclComm_t comm) {
  GUARDED(nsc_real.CommFinalize(comm), nsc_real.CommFinalize ? nsc_real.CommFinalize(comm) : ncclInvalidUsage);
}

/* The shim's own error of this thread's last collective, if it answered it
 * with one (a refused call, a bad or differing setting: PyTorch appends this
 * string to its exception), else NCCL's. Never activates the shim. */
NSC_API const char *ncclGetLastError(ncclComm_t comm) {
  const char *m = nsc_in_shim ? "" : nsc_noted_error();
  if (m[0]) return m;
  if (!nsc_real.GetLastError) nsc_real_resolve_last_error();
  return nsc_real.GetLastError ? nsc_real.GetLastError(comm) : "";
}

NSC_API ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *asyncError) {
  GUARDED(nsc_real.CommGetAsyncError(comm, asyncError), nsc_async_error(comm, asyncError));
}
