/* algo.c — the host NCCL's algorithms, all over point-to-point messages so that
 * the emulated links apply to every byte.
 *
 * All-reduce is a ring: reduce-scatter then all-gather. The count is split in
 * nranks balanced chunks (chunk c starts at c*(count/n) + min(c, count%n); the
 * first count%n chunks hold one element more) and chunk c is owned by rank c.
 * At reduce-scatter step s (0..n-2) rank r sends chunk r-1-s to rank r+1 and
 * reduces chunk r-2-s received from rank r-1 (mod n). So every element of
 * chunk c is reduced in the order x[c+1], x[c+2], ..., x[c+n] (ranks mod n),
 * the partial result rounded to the datatype at every hop; the all-gather
 * then copies the owner's final chunk everywhere, so every rank holds the same
 * bits. Reduce-scatter is the first half on a copy of the input, all-gather
 * the second half. Broadcast and reduce are chains (root -> root+1 -> ...,
 * resp. root+1 -> ... -> root, the same order as chunk `root`), not pipelined.
 * PreMulSum (and ncclAvg of floating types: PreMulSum by 1/nranks, as NCCL
 * does) multiplies each rank's input once before it enters the chain; integer
 * ncclAvg sums and then divides (truncating) where the result is final.
 *
 * Emulated time (HOSTNCCL_LINK_*): a ring step starts a deadline of latency +
 * bytes/rate, exchanges and reduces, then sleeps to the deadline; a chain hop
 * sleeps that long before sending; send/recv sleep to post time + the same.
 *
 * Must not: depend on which rank runs first (results are fixed by the order
 * above), or hold a lock while communicating. */
#include "hostnccl.h"

#include <stdlib.h>
#include <string.h>

const char *hn_kind_name(enum hn_kind k) {
  static const char *const names[] = {"AllReduce", "ReduceScatter", "AllGather", "Broadcast",
                                      "Reduce", "Send", "Recv"};
  return names[k];
}

static int mod(int a, int n) { return ((a % n) + n) % n; }
static size_t min_sz(size_t a, size_t b) { return a < b ? a : b; }

static void chunk(size_t count, int n, int c, size_t *off, size_t *len) {
  size_t base = count / (size_t)n, rem = count % (size_t)n, uc = (size_t)c;
  *off = uc * base + min_sz(uc, rem);
  *len = base + (uc < rem);
}

static size_t slice_elems(size_t esz) {
  size_t e = hn_cfg()->slice_bytes / esz;
  return e ? e : 1;
}

/* dst = input as it enters the reduction (pre-multiplied when asked). */
static void prepare(void *dst, const void *src, size_t n, ncclDataType_t t, const hn_red *red) {
  if (red->premul) {
    unsigned char sc[8];
    memcpy(sc, red->scalar_ptr ? red->scalar_ptr : red->scalar, hn_type_size(t));
    hn_premul(dst, src, n, t, sc);
  } else if (dst != src) {
    memmove(dst, src, n * hn_type_size(t));
  }
}

static void link_start(struct timespec *dl, size_t bytes) {
  struct timespec now;
  hn_now(&now);
  hn_link_deadline(dl, &now, bytes);
}

/* One ring step: send chunk sc of work to rank+1 while receiving chunk rc from
 * rank-1, reduced into work (reduce) or stored. tmp holds one slice. */
static ncclResult_t ring_step(ncclComm_t comm, char *work, size_t count, ncclDataType_t t,
                              int sc, int rc, const hn_red *red, char *tmp) {
  size_t esz = hn_type_size(t), soff, slen, roff, rlen, se = slice_elems(esz);
  int n = comm->nranks, next = mod(comm->rank + 1, n), prev = mod(comm->rank - 1, n);
  chunk(count, n, sc, &soff, &slen);
  chunk(count, n, rc, &roff, &rlen);
  if (slen == 0 && rlen == 0) return ncclSuccess;
  struct timespec dl;
  int link = hn_link_on();
  if (link) link_start(&dl, (slen > rlen ? slen : rlen) * esz);
  for (size_t off = 0; off < slen || off < rlen; off += se) {
    size_t sn = off < slen ? min_sz(se, slen - off) : 0, rn = off < rlen ? min_sz(se, rlen - off) : 0;
    char *rdst = work + (roff + off) * esz;
    HN_CHECK(hn_sendrecv(comm, work + (soff + off) * esz, sn * esz, next, red ? tmp : rdst,
                         rn * esz, prev, HN_TAG_COLL));
    if (red && rn) hn_reduce(rdst, tmp, rn, t, red->op);
  }
  if (link) hn_sleep_until(&dl);
  return ncclSuccess;
}

static ncclResult_t ring_reduce_scatter(ncclComm_t comm, char *work, size_t count, ncclDataType_t t,
                                        const hn_red *red) {
  int n = comm->nranks, r = comm->rank;
  if (n == 1) return ncclSuccess;
  ncclResult_t res = ncclSuccess;
  char *tmp = malloc(min_sz(slice_elems(hn_type_size(t)), count) * hn_type_size(t));
  if (!tmp) return hn_err(ncclSystemError, "hostnccl: out of host memory");
  for (int s = 0; s < n - 1 && res == ncclSuccess; s++)
    res = ring_step(comm, work, count, t, mod(r - 1 - s, n), mod(r - 2 - s, n), red, tmp);
  free(tmp);
  return res;
}

static ncclResult_t ring_all_gather(ncclComm_t comm, char *work, size_t count, ncclDataType_t t) {
  int n = comm->nranks, r = comm->rank;
  for (int s = 0; s < n - 1; s++)
    HN_CHECK(ring_step(comm, work, count, t, mod(r - s, n), mod(r - s - 1, n), NULL, NULL));
  return ncclSuccess;
}

static void postdiv_chunk(ncclComm_t comm, char *buf, size_t count, const hn_op *op) {
  if (!op->red.postdiv) return;
  size_t off, len;
  chunk(count, comm->nranks, comm->rank, &off, &len);
  hn_postdiv(buf + off * hn_type_size(op->type), len, op->type, comm->nranks);
}

static ncclResult_t all_reduce(const hn_op *op) {
  ncclComm_t comm = op->comm;
  char *work = op->recvbuff;
  prepare(work, op->sendbuff, op->count, op->type, &op->red);
  HN_CHECK(ring_reduce_scatter(comm, work, op->count, op->type, &op->red));
  postdiv_chunk(comm, work, op->count, op);
  return ring_all_gather(comm, work, op->count, op->type);
}

static ncclResult_t reduce_scatter(const hn_op *op) {
  ncclComm_t comm = op->comm;
  size_t esz = hn_type_size(op->type), total = op->count * (size_t)comm->nranks;
  char *work = malloc(total * esz);
  if (!work) return hn_err(ncclSystemError, "hostnccl: out of host memory");
  prepare(work, op->sendbuff, total, op->type, &op->red);
  ncclResult_t res = ring_reduce_scatter(comm, work, total, op->type, &op->red);
  if (res == ncclSuccess) {
    postdiv_chunk(comm, work, total, op);
    memcpy(op->recvbuff, work + (size_t)comm->rank * op->count * esz, op->count * esz);
  }
  free(work);
  return res;
}

static ncclResult_t all_gather(const hn_op *op) {
  ncclComm_t comm = op->comm;
  size_t esz = hn_type_size(op->type);
  char *mine = (char *)op->recvbuff + (size_t)comm->rank * op->count * esz;
  if (mine != op->sendbuff) memmove(mine, op->sendbuff, op->count * esz);
  return ring_all_gather(comm, op->recvbuff, op->count * (size_t)comm->nranks, op->type);
}

/* A chain hop: hold the message for the link time, then send it. */
static ncclResult_t chain_send(ncclComm_t comm, const void *buf, size_t bytes, int to) {
  if (hn_link_on()) {
    struct timespec dl;
    link_start(&dl, bytes);
    hn_sleep_until(&dl);
  }
  return hn_sendrecv(comm, buf, bytes, to, NULL, 0, -1, HN_TAG_COLL);
}

static ncclResult_t broadcast(const hn_op *op) {
  ncclComm_t comm = op->comm;
  int n = comm->nranks, pos = mod(comm->rank - op->peer, n);
  size_t bytes = op->count * hn_type_size(op->type);
  if (pos == 0 && op->sendbuff != op->recvbuff) memmove(op->recvbuff, op->sendbuff, bytes);
  if (pos > 0)
    HN_CHECK(hn_sendrecv(comm, NULL, 0, -1, op->recvbuff, bytes, mod(comm->rank - 1, n), HN_TAG_COLL));
  if (pos < n - 1) HN_CHECK(chain_send(comm, op->recvbuff, bytes, mod(comm->rank + 1, n)));
  return ncclSuccess;
}

static ncclResult_t reduce(const hn_op *op) {
  ncclComm_t comm = op->comm;
  int n = comm->nranks, pos = mod(comm->rank - op->peer - 1, n), is_root = pos == n - 1;
  size_t esz = hn_type_size(op->type), se = slice_elems(esz);
  ncclResult_t res = ncclSuccess;
  char *acc = is_root ? op->recvbuff : malloc(op->count * esz);
  char *tmp = pos > 0 ? malloc(min_sz(se, op->count) * esz) : NULL;
  if (!acc || (pos > 0 && !tmp)) {
    res = hn_err(ncclSystemError, "hostnccl: out of host memory");
    goto out;
  }
  prepare(acc, op->sendbuff, op->count, op->type, &op->red);
  for (size_t off = 0; pos > 0 && off < op->count; off += se) {
    size_t len = min_sz(se, op->count - off);
    HN_CHECKGOTO(hn_sendrecv(comm, NULL, 0, -1, tmp, len * esz, mod(comm->rank - 1, n), HN_TAG_COLL),
                 res, out);
    hn_reduce(acc + off * esz, tmp, len, op->type, op->red.op);
  }
  if (!is_root) res = chain_send(comm, acc, op->count * esz, mod(comm->rank + 1, n));
  else if (op->red.postdiv) hn_postdiv(acc, op->count, op->type, n);
out:
  free(tmp);
  if (!is_root) free(acc);
  return res;
}

/* HOSTNCCL_CHECK: before its data moves, every collective compares a hash of
 * what must match across ranks (kind, datatype, count, op, root; not
 * buffers or PreMulSum scalars), by passing (min, max) around the ring on
 * its own tag, unlinked from the emulated clock. Ranks that disagree all
 * return ncclInvalidUsage instead of hanging or mixing data. */
static ncclResult_t check_same(const hn_op *op) {
  ncclComm_t comm = op->comm;
  int n = comm->nranks;
  if (!hn_cfg()->check || n == 1 || op->kind == HN_SEND || op->kind == HN_RECV) return ncclSuccess;
  int rooted = op->kind == HN_BROADCAST || op->kind == HN_REDUCE;
  int reducing = op->kind == HN_ALLREDUCE || op->kind == HN_REDUCESCATTER || op->kind == HN_REDUCE;
  uint64_t sig[5] = {(uint64_t)op->kind, (uint64_t)op->type, (uint64_t)op->count,
                     reducing ? (uint64_t)op->red.user_op : 0, rooted ? (uint64_t)op->peer : 0};
  uint64_t h = 0xcbf29ce484222325ull, mm[2], in[2];
  for (size_t i = 0; i < sizeof sig; i++) h = (h ^ ((const unsigned char *)sig)[i]) * 0x100000001b3ull;
  mm[0] = mm[1] = h;
  for (int s = 0; s < n - 1; s++) {
    HN_CHECK(hn_sendrecv(comm, mm, sizeof mm, mod(comm->rank + 1, n), in, sizeof in,
                         mod(comm->rank - 1, n), HN_TAG_CHECK));
    if (in[0] < mm[0]) mm[0] = in[0];
    if (in[1] > mm[1]) mm[1] = in[1];
  }
  if (mm[0] == mm[1]) return ncclSuccess;
  return hn_err(ncclInvalidUsage,
                "%s: ranks of communicator %p called different collectives (here: %s count %zu op %d root %d); "
                "nothing was exchanged (HOSTNCCL_CHECK=0 skips this check)",
                hn_kind_name(op->kind), (void *)comm, hn_type_name(op->type), op->count,
                reducing ? op->red.user_op : -1, rooted ? op->peer : -1);
}

static ncclResult_t run_collective(const hn_op *op) {
  HN_CHECK(check_same(op));
  if (op->count == 0) return ncclSuccess;
  switch (op->kind) {
  case HN_ALLREDUCE: return all_reduce(op);
  case HN_REDUCESCATTER: return reduce_scatter(op);
  case HN_ALLGATHER: return all_gather(op);
  case HN_BROADCAST: return broadcast(op);
  case HN_REDUCE: return reduce(op);
  default: return ncclSuccess; /* send/recv: posted by hn_run_ops */
  }
}

ncclResult_t hn_run_ops(const hn_op *ops, size_t n) {
  ncclResult_t res = ncclSuccess;
  MPI_Request *reqs = NULL;
  int nreq = 0, capreq = 0, any_p2p = 0;
  int *first = calloc(n ? n : 1, sizeof *first); /* first request of each op */
  struct timespec dl = {0, 0};
  if (!first) return hn_err(ncclSystemError, "hostnccl: out of host memory");
  for (size_t i = 0; i < n; i++) hn_comm_enter(ops[i].comm);

  /* Point-to-point first, so that sends and receives of one group never wait
   * for each other whatever order the ranks listed them in. */
  for (size_t i = 0; i < n && res == ncclSuccess; i++) {
    const hn_op *op = &ops[i];
    first[i] = nreq;
    if (op->kind != HN_SEND && op->kind != HN_RECV) continue;
    size_t bytes = op->count * hn_type_size(op->type);
    void *buf = op->kind == HN_SEND ? (void *)op->sendbuff : op->recvbuff;
    res = hn_post(op->comm, op->kind == HN_SEND, buf, bytes, op->peer, HN_TAG_P2P, &reqs, &nreq, &capreq);
    if (bytes && hn_link_on()) {
      struct timespec d;
      link_start(&d, bytes);
      if (!any_p2p || d.tv_sec > dl.tv_sec || (d.tv_sec == dl.tv_sec && d.tv_nsec > dl.tv_nsec)) dl = d;
      any_p2p = 1;
    }
  }
  for (size_t i = 0; i < n && res == ncclSuccess; i++) res = run_collective(&ops[i]);
  for (size_t i = 0; i < n && res == ncclSuccess; i++) {
    int end = i + 1 < n ? first[i + 1] : nreq;
    if (end > first[i]) res = hn_wait(ops[i].comm, reqs + first[i], end - first[i]);
  }
  if (res != ncclSuccess) {
    hn_cancel_all(reqs, nreq);
    for (size_t i = 0; i < n && res == ncclSystemError; i++) hn_comm_fail(ops[i].comm, res);
  } else if (any_p2p) {
    hn_sleep_until(&dl);
  }

  for (size_t i = 0; i < n; i++) hn_comm_leave(ops[i].comm);
  free(reqs);
  free(first);
  return res;
}

hn_batch *hn_batch_new(const hn_op *ops, size_t n) {
  hn_batch *b = malloc(sizeof *b + n * sizeof(hn_op));
  if (!b) return NULL;
  pthread_mutex_init(&b->lock, NULL);
  b->refs = 1;
  b->state = HN_QUEUED;
  b->result = ncclSuccess;
  b->nops = n;
  memcpy(b->ops, ops, n * sizeof(hn_op));
  return b;
}

void hn_batch_ref(hn_batch *b) {
  pthread_mutex_lock(&b->lock);
  b->refs++;
  pthread_mutex_unlock(&b->lock);
}

void hn_batch_unref(hn_batch *b) {
  pthread_mutex_lock(&b->lock);
  int last = --b->refs == 0;
  pthread_mutex_unlock(&b->lock);
  if (!last) return;
  pthread_mutex_destroy(&b->lock);
  free(b);
}

ncclResult_t hn_batch_run(hn_batch *b) {
  pthread_mutex_lock(&b->lock);
  int state = b->state;
  if (state == HN_QUEUED) b->state = HN_RUNNING;
  ncclResult_t res = state == HN_DONE ? b->result : ncclInProgress;
  pthread_mutex_unlock(&b->lock);
  if (state != HN_QUEUED) return res;
  res = hn_exec_ops(b->ops, b->nops);
  pthread_mutex_lock(&b->lock);
  b->state = HN_DONE;
  b->result = res;
  pthread_mutex_unlock(&b->lock);
  return res;
}
