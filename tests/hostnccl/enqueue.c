/* enqueue.c — the host NCCL's collective and point-to-point entry points and
 * ncclGroupStart/End.
 *
 * Every call is checked like NCCL checks it (NULL comm, datatype, op, root or
 * peer, NULL buffers with count > 0 -> ncclInvalidArgument with a message for
 * ncclGetLastError), counted for HOSTNCCL_FAIL_CALL and the counters, logged
 * with HOSTNCCL_LOG=1, then: inside a group, queued with its arguments until
 * the outermost ncclGroupEnd of this thread; on a nonblocking communicator,
 * queued for ncclCommGetAsyncError (ncclInProgress); else run now on the
 * calling thread (stream order here: cudaStream_t arguments are ignored),
 * or, on the CUDA driver test double, enqueued on the stream (stream.c).
 * A failing call inside a group also fails the group end, which then drops
 * the queued operations, as NCCL does.
 *
 * Must not: communicate before the outermost group end, or keep state across
 * groups (the queue is per thread and emptied at each outermost end). */
#include "hostnccl.h"

#include <stdlib.h>

static __thread struct {
  int depth;
  ncclResult_t error;   /* first failure of a call inside the group */
  hn_op *ops;
  size_t n, cap;
} grp;

static void group_drop(void) {
  free(grp.ops);
  grp.ops = NULL;
  grp.n = grp.cap = 0;
  grp.error = ncclSuccess;
}

static ncclResult_t group_add(const hn_op *op) {
  if (grp.n == grp.cap) {
    size_t cap = grp.cap ? 2 * grp.cap : 16;
    hn_op *p = realloc(grp.ops, cap * sizeof *p);
    if (!p) return hn_err(ncclSystemError, "hostnccl: out of host memory");
    grp.ops = p;
    grp.cap = cap;
  }
  grp.ops[grp.n++] = *op;
  return ncclSuccess;
}

static int reads_send(const hn_op *op, int rank) {
  if (op->kind == HN_RECV) return 0;
  if (op->kind == HN_BROADCAST) return rank == op->peer;
  return 1;
}

static int writes_recv(const hn_op *op, int rank) {
  if (op->kind == HN_SEND) return 0;
  if (op->kind == HN_REDUCE) return rank == op->peer;
  return 1;
}

static int has_op(enum hn_kind k) {
  return k == HN_ALLREDUCE || k == HN_REDUCESCATTER || k == HN_REDUCE;
}

static int has_peer(enum hn_kind k) {
  return k == HN_BROADCAST || k == HN_REDUCE || k == HN_SEND || k == HN_RECV;
}

static ncclResult_t check(hn_op *op, ncclRedOp_t redop) {
  const char *fn = hn_kind_name(op->kind);
  ncclComm_t comm = op->comm;
  int version = hn_cfg()->version;
  if ((int)op->type < 0 || op->type >= ncclNumTypes)
    return hn_err(ncclInvalidArgument, "%s: invalid datatype %d", fn, (int)op->type);
  if (op->type == ncclBfloat16 && version < 21003)
    return hn_err(ncclInvalidArgument, "%s: bfloat16 needs NCCL 2.10.3 (pretending %d)", fn, version);
  if ((op->type == ncclFloat8e4m3 || op->type == ncclFloat8e5m2) && version < 22400)
    return hn_err(ncclInvalidArgument, "%s: fp8 types need NCCL 2.24 (pretending %d)", fn, version);
  if (has_peer(op->kind) && (op->peer < 0 || op->peer >= comm->nranks))
    return hn_err(ncclInvalidArgument, "%s: %s %d out of range for %d ranks", fn,
                  op->kind == HN_SEND || op->kind == HN_RECV ? "peer" : "root", op->peer, comm->nranks);
  if (has_op(op->kind)) HN_CHECK(hn_resolve_op(comm, redop, op->type, &op->red, fn));
  if (op->count > 0 && reads_send(op, comm->rank) && !op->sendbuff)
    return hn_err(ncclInvalidArgument, "%s: sendbuff is NULL with count %zu", fn, op->count);
  if (op->count > 0 && writes_recv(op, comm->rank) && !op->recvbuff)
    return hn_err(ncclInvalidArgument, "%s: recvbuff is NULL with count %zu", fn, op->count);
  pthread_mutex_lock(&comm->lock);
  ncclResult_t failed = comm->async_error;
  pthread_mutex_unlock(&comm->lock);
  if (failed != ncclSuccess)
    return hn_err(failed, "%s: communicator %p has failed earlier", fn, (void *)comm);
  if (hn_fail_this_call())
    return hn_err(ncclSystemError, "%s: failed by HOSTNCCL_FAIL_CALL=%ld", fn, hn_cfg()->fail_call);
  return ncclSuccess;
}

static ncclResult_t submit(hn_op *op) {
  ncclComm_t comm = op->comm;
  if (op->kind == HN_ALLREDUCE) hn_count_allreduce(op->type, op->count * hn_type_size(op->type));
  if (hn_cfg()->log)
    hn_log("comm %p rank %d/%d %s %s count %zu peer/root %d send %p recv %p%s", (void *)comm,
           comm->rank, comm->nranks, hn_kind_name(op->kind), hn_type_name(op->type), op->count,
           op->peer, op->sendbuff, op->recvbuff,
           grp.depth ? " (grouped)" : comm->blocking ? "" : " (queued: nonblocking)");
  if (grp.depth > 0) return group_add(op);
  if (!comm->blocking) {
    hn_batch *b = hn_batch_new(op, 1);
    if (!b) return hn_err(ncclSystemError, "hostnccl: out of host memory");
    ncclResult_t res = hn_comm_queue(comm, b);
    hn_batch_unref(b);
    return res == ncclSuccess ? ncclInProgress : res;
  }
  return hn_exec_ops(op, 1);
}

static ncclResult_t enqueue(hn_op *op, ncclRedOp_t redop) {
  ncclResult_t res = hn_init();
  if (res == ncclSuccess) res = hn_check_comm(op->comm, hn_kind_name(op->kind));
  if (res == ncclSuccess) {
    hn_comm_enter(op->comm); /* an abort from another thread waits for us */
    res = check(op, redop);
    if (res == ncclSuccess) hn_stream_resolve(op);
    if (res == ncclSuccess) res = submit(op);
    hn_comm_leave(op->comm);
  }
  if (res != ncclSuccess && res != ncclInProgress && grp.depth > 0 && grp.error == ncclSuccess)
    grp.error = res;
  return res;
}

#define OP(kind_, comm_, send_, recv_, count_, type_, peer_) \
  (hn_op) { .kind = (kind_), .comm = (comm_), .sendbuff = (send_), .recvbuff = (recv_), \
            .count = (count_), .type = (type_), .peer = (peer_), .stream = stream }

ncclResult_t pncclAllReduce(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
                            ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  hn_op o = OP(HN_ALLREDUCE, comm, sendbuff, recvbuff, count, datatype, 0);
  return enqueue(&o, op);
}
HN_ALIAS(ncclAllReduce);

ncclResult_t pncclReduceScatter(const void *sendbuff, void *recvbuff, size_t recvcount,
                                ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                cudaStream_t stream) {
  hn_op o = OP(HN_REDUCESCATTER, comm, sendbuff, recvbuff, recvcount, datatype, 0);
  return enqueue(&o, op);
}
HN_ALIAS(ncclReduceScatter);

ncclResult_t pncclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount,
                            ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream) {
  hn_op o = OP(HN_ALLGATHER, comm, sendbuff, recvbuff, sendcount, datatype, 0);
  return enqueue(&o, ncclSum);
}
HN_ALIAS(ncclAllGather);

ncclResult_t pncclBroadcast(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
                            int root, ncclComm_t comm, cudaStream_t stream) {
  hn_op o = OP(HN_BROADCAST, comm, sendbuff, recvbuff, count, datatype, root);
  return enqueue(&o, ncclSum);
}
HN_ALIAS(ncclBroadcast);

ncclResult_t pncclBcast(void *buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
                        cudaStream_t stream) {
  return pncclBroadcast(buff, buff, count, datatype, root, comm, stream);
}
HN_ALIAS(ncclBcast);

ncclResult_t pncclReduce(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
                         ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream) {
  hn_op o = OP(HN_REDUCE, comm, sendbuff, recvbuff, count, datatype, root);
  return enqueue(&o, op);
}
HN_ALIAS(ncclReduce);

ncclResult_t pncclSend(const void *sendbuff, size_t count, ncclDataType_t datatype, int peer,
                       ncclComm_t comm, cudaStream_t stream) {
  hn_op o = OP(HN_SEND, comm, sendbuff, NULL, count, datatype, peer);
  return enqueue(&o, ncclSum);
}
HN_ALIAS(ncclSend);

ncclResult_t pncclRecv(void *recvbuff, size_t count, ncclDataType_t datatype, int peer,
                       ncclComm_t comm, cudaStream_t stream) {
  hn_op o = OP(HN_RECV, comm, NULL, recvbuff, count, datatype, peer);
  return enqueue(&o, ncclSum);
}
HN_ALIAS(ncclRecv);

ncclResult_t pncclGroupStart(void) {
  HN_CHECK(hn_init());
  grp.depth++;
  return ncclSuccess;
}
HN_ALIAS(ncclGroupStart);

/* Hand a nonblocking group to each communicator it touches; the first poll
 * of any of them runs it. */
static ncclResult_t queue_group(hn_op *ops, size_t n) {
  hn_batch *b = hn_batch_new(ops, n);
  if (!b) return hn_err(ncclSystemError, "hostnccl: out of host memory");
  ncclResult_t res = ncclSuccess;
  for (size_t i = 0; i < n && res == ncclSuccess; i++) {
    size_t j = 0;
    while (j < i && ops[j].comm != ops[i].comm) j++;
    if (j == i) res = hn_comm_queue(ops[i].comm, b);
  }
  hn_batch_unref(b);
  return res == ncclSuccess ? ncclInProgress : res;
}

ncclResult_t pncclGroupEnd(void) {
  HN_CHECK(hn_init());
  if (grp.depth == 0) return hn_err(ncclInvalidUsage, "ncclGroupEnd: not in a group (no ncclGroupStart)");
  if (--grp.depth > 0) return ncclSuccess;
  ncclResult_t res = grp.error;
  if (hn_fail_this_group_end())
    res = hn_err(ncclSystemError, "ncclGroupEnd: failed by HOSTNCCL_FAIL_GROUP_END=%ld, %zu operations dropped",
                 hn_cfg()->fail_group_end, grp.n);
  for (size_t i = 1; i < grp.n && res == ncclSuccess; i++)
    if (grp.ops[i].comm->blocking != grp.ops[0].comm->blocking)
      res = hn_err(ncclInvalidUsage, "ncclGroupEnd: blocking and nonblocking communicators in one group");
  if (res == ncclSuccess && grp.n > 0)
    res = grp.ops[0].comm->blocking ? hn_exec_ops(grp.ops, grp.n) : queue_group(grp.ops, grp.n);
  group_drop();
  return res;
}
HN_ALIAS(ncclGroupEnd);
