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
 * Emulated time (HOSTNCCL_LINK_*): each rank has one link, full duplex: the
 * bytes it sends go out one after another, the bytes it receives come in one
 * after another. A ring step starts a deadline of latency + max(bytes sent,
 * bytes received)/rate, exchanges and reduces, then sleeps to the deadline; a
 * chain hop sleeps that long before sending. The point-to-point messages of
 * one batch (a group) share the link the same way: once the batch's
 * collectives are done, its sends and receives (to and from other ranks) take
 * latency + max(sum of bytes sent, sum of bytes received)/rate, so an
 * exchange with n-1 peers can never look faster than the wire allows.
 *
 * Must not: depend on which rank runs first (results are fixed by the order
 * above), or hold a lock while communicating. */
#include "hostnccl.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>
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
  if (link) hn_link_step(comm, &dl, next, slen * esz, prev, rlen * esz);
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
    hn_link_step(comm, &dl, to, bytes, -1, 0);
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

/* HOSTNCCL_CHECK: before its data moves, every collective compares what must
 * match across ranks (kind, datatype, count, op, root; not buffers or
 * PreMulSum scalars), by passing the signatures with the smallest and the
 * largest hash around the ring on its own tag, unlinked from the emulated
 * clock. Real NCCL has no such check: there ranks that disagree hang or mix
 * data. So a mismatch is never an answer a program could pass with: every
 * rank reports it (one HOSTNCCL-MISMATCH line on stderr naming both calls,
 * also appended to HOSTNCCL_REPORT_FILE), waits until every rank has
 * reported, and the whole job is aborted (MPI_Abort, exit code 86; over
 * sockets every rank exits with 86). */
typedef struct {
  uint64_t h, count;
  int32_t rank, kind, type, op, root, pad;
} sig_t;

static void sig_str(const sig_t *g, char *out, size_t len) {
  int rooted = g->kind == HN_BROADCAST || g->kind == HN_REDUCE;
  int reducing = g->kind == HN_ALLREDUCE || g->kind == HN_REDUCESCATTER || g->kind == HN_REDUCE;
  int n = snprintf(out, len, "rank %d: nccl%s(count %llu, %s", (int)g->rank, hn_kind_name(g->kind),
                   (unsigned long long)g->count, hn_type_name(g->type));
  static const char *const ops[] = {"sum", "prod", "max", "min", "avg"};
  if (reducing && n > 0 && (size_t)n < len)
    n += snprintf(out + n, len - (size_t)n, ", %s", g->op >= 0 && g->op < 5 ? ops[g->op] : "op?");
  if (rooted && n > 0 && (size_t)n < len) n += snprintf(out + n, len - (size_t)n, ", root %d", (int)g->root);
  if (n > 0 && (size_t)n < len) snprintf(out + n, len - (size_t)n, ")");
}

static ncclResult_t check_same(const hn_op *op) {
  ncclComm_t comm = op->comm;
  int n = comm->nranks;
  if (!hn_cfg()->check || n == 1 || op->kind == HN_SEND || op->kind == HN_RECV) return ncclSuccess;
  uint64_t seq = __atomic_add_fetch(&comm->coll_seq, 1, __ATOMIC_RELAXED);
  int rooted = op->kind == HN_BROADCAST || op->kind == HN_REDUCE;
  int reducing = op->kind == HN_ALLREDUCE || op->kind == HN_REDUCESCATTER || op->kind == HN_REDUCE;
  sig_t me = {0, (uint64_t)op->count, comm->rank, (int32_t)op->kind, (int32_t)op->type,
              reducing ? op->red.user_op : -1, rooted ? op->peer : -1, 0};
  uint64_t fields[5] = {(uint64_t)me.kind, (uint64_t)me.type, me.count, (uint64_t)(int64_t)me.op,
                        (uint64_t)(int64_t)me.root};
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < sizeof fields; i++) h = (h ^ ((const unsigned char *)fields)[i]) * 0x100000001b3ull;
  me.h = h;
  sig_t mm[2] = {me, me}, in[2]; /* smallest and largest hash seen so far */
  for (int s = 0; s < n - 1; s++) {
    HN_CHECK(hn_sendrecv(comm, mm, sizeof mm, mod(comm->rank + 1, n), in, sizeof in,
                         mod(comm->rank - 1, n), HN_TAG_CHECK));
    if (in[0].h < mm[0].h) mm[0] = in[0];
    if (in[1].h > mm[1].h) mm[1] = in[1];
  }
  if (mm[0].h == mm[1].h) return ncclSuccess;
  char a[160], b[160], line[640];
  /* Name this rank's call and the one furthest from it. */
  const sig_t *other = mm[0].h == me.h ? &mm[1] : &mm[0];
  sig_str(&me, a, sizeof a);
  sig_str(other, b, sizeof b);
  snprintf(line, sizeof line,
           "HOSTNCCL-MISMATCH: the ranks of a communicator issued different collectives as its collective #%llu "
           "(%s; %s; seen by rank %d of %d, communicator %p); real NCCL would hang or mix data: aborting the job",
           (unsigned long long)seq, a, b, comm->rank, n, (void *)comm);
  hn_report(line);
  /* Every rank has reported once every rank passed this ring again. */
  char tok = 0, got = 0;
  for (int s = 0; s < n - 1; s++)
    if (hn_sendrecv(comm, &tok, 1, mod(comm->rank + 1, n), &got, 1, mod(comm->rank - 1, n), HN_TAG_CHECK)) break;
  /* Over sockets there is no MPI job to abort: every rank has reported and
   * leaves alike (the launcher, e.g. torchrun, sees exit code 86). */
  if (comm->mpi == MPI_COMM_NULL) _exit(86);
  MPI_Abort(MPI_COMM_WORLD, 86);
  return ncclInvalidUsage; /* not reached */
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

/* A launch (issue 33): NCCL runs a communicator's launches in order and each
 * pays a fixed cost before its data moves; so does a batch here, once
 * (HOSTNCCL_LAUNCH_US), and every communicator it touches counts one launch
 * (hostnccl_get_launches). A batch of nothing but count-0 collectives
 * launches nothing, as in NCCL; sends and receives launch whatever their
 * size. */
static void launch(const hn_op *ops, size_t n) {
  int any = 0;
  for (size_t i = 0; i < n; i++) {
    if (ops[i].count == 0 && ops[i].kind != HN_SEND && ops[i].kind != HN_RECV) continue;
    size_t j = 0;
    while (j < i && (ops[j].comm != ops[i].comm || (ops[j].count == 0 && ops[j].kind != HN_SEND && ops[j].kind != HN_RECV)))
      j++;
    if (j == i) hn_count_launch(ops[i].comm); /* its first: one per communicator */
    any = 1;
  }
  double us = hn_cfg()->launch_us;
  if (any && us > 0) {
    struct timespec ts = {(time_t)(us / 1e6), (long)(fmod(us, 1e6) * 1e3)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
  }
}

/* One communicator's part of a batch. */
static ncclResult_t run_batch(const hn_op *ops, size_t n) {
  ncclResult_t res = ncclSuccess;
  hn_req *reqs = NULL;
  int nreq = 0, capreq = 0;
  size_t bytes_on[HN_LINK_DIRS] = {0}; /* to and from other ranks, per link direction */
  for (size_t i = 0; i < n; i++) hn_comm_enter(ops[i].comm);
  launch(ops, n);

  /* Point-to-point first, so that sends and receives of one group never wait
   * for each other whatever order the ranks listed them in; all of them are
   * waited for together (a socket moves only while someone waits on it). */
  for (size_t i = 0; i < n && res == ncclSuccess; i++) {
    const hn_op *op = &ops[i];
    if (op->kind != HN_SEND && op->kind != HN_RECV) continue;
    size_t bytes = op->count * hn_type_size(op->type);
    void *buf = op->kind == HN_SEND ? (void *)op->sendbuff : op->recvbuff;
    res = hn_post(op->comm, op->kind == HN_SEND, buf, bytes, op->peer, HN_TAG_P2P, &reqs, &nreq, &capreq);
    if (op->peer != op->comm->rank)
      bytes_on[hn_link_remote(op->comm, op->peer) ? (op->kind == HN_SEND ? HN_NIC_OUT : HN_NIC_IN)
                                                  : (op->kind == HN_SEND ? HN_INTRA_OUT : HN_INTRA_IN)] += bytes;
  }
  for (size_t i = 0; i < n && res == ncclSuccess; i++) res = run_collective(&ops[i]);
  /* The batch's messages on this rank's one link, after its collectives:
   * outgoing bytes one after another, incoming likewise (full duplex). */
  struct timespec dl;
  int p2p_link = hn_link_on() && (bytes_on[0] || bytes_on[1] || bytes_on[2] || bytes_on[3]);
  if (p2p_link) hn_link_charge(&dl, bytes_on);
  if (res == ncclSuccess && nreq) res = hn_wait(reqs, nreq);
  if (res != ncclSuccess) {
    hn_cancel_all(reqs, nreq);
    for (size_t i = 0; i < n && res == ncclSystemError; i++) hn_comm_fail(ops[i].comm, res);
  } else if (p2p_link) {
    hn_sleep_until(&dl);
  }

  for (size_t i = 0; i < n; i++) hn_comm_leave(ops[i].comm);
  free(reqs);
  return res;
}

typedef struct {
  hn_op *ops;
  size_t n;
  ncclResult_t r;
} part;

static void *run_part(void *arg) {
  part *p = arg;
  p->r = run_batch(p->ops, p->n);
  return NULL;
}

/* A batch (a group) holding several ranks of one clique (ncclCommInitAll:
 * socket communicators of one id in this process) runs each communicator's
 * part at once, as NCCL's group does, since one part waits for another's
 * rank; each part keeps its operations' order, one on the calling thread,
 * the others on threads of their own. Any other batch runs in order on the
 * calling thread, as before (one rank per process: nothing to wait for
 * here, and no thread made per group end). */
ncclResult_t hn_run_ops(const hn_op *ops, size_t n) {
  enum { MAXC = 64 };
  ncclComm_t comms[MAXC];
  size_t nc = 0;
  for (size_t i = 0; i < n; i++) {
    size_t k = 0;
    while (k < nc && comms[k] != ops[i].comm) k++;
    if (k == nc) {
      if (nc == MAXC) return run_batch(ops, n); /* more than any test makes: in order */
      comms[nc++] = ops[i].comm;
    }
  }
  int clique = 0; /* two communicators of one clique in this process */
  for (size_t a = 0; a < nc && !clique; a++)
    for (size_t b = a + 1; b < nc && !clique; b++)
      clique = comms[a]->sock && comms[b]->sock && comms[a]->nonce == comms[b]->nonce;
  if (nc <= 1 || !clique) return run_batch(ops, n);
  hn_op *sorted = malloc(n * sizeof *sorted);
  part parts[MAXC];
  pthread_t th[MAXC];
  int started[MAXC] = {0};
  if (!sorted) return hn_err(ncclSystemError, "hostnccl: out of host memory");
  size_t at = 0;
  for (size_t k = 0; k < nc; k++) {
    parts[k].ops = sorted + at;
    parts[k].n = 0;
    parts[k].r = ncclSuccess;
    for (size_t i = 0; i < n; i++)
      if (ops[i].comm == comms[k]) sorted[at + parts[k].n++] = ops[i];
    at += parts[k].n;
  }
  for (size_t k = 1; k < nc; k++) started[k] = pthread_create(&th[k], NULL, run_part, &parts[k]) == 0;
  ncclResult_t res = ncclSuccess;
  for (size_t k = 1; k < nc; k++)
    if (!started[k] && res == ncclSuccess) res = hn_err(ncclSystemError, "hostnccl: no thread for a group's part");
  if (res == ncclSuccess) res = run_batch(parts[0].ops, parts[0].n);
  else for (size_t k = 1; k < nc; k++) if (started[k]) hn_comm_fail(comms[k], res); /* its peers give up too */
  for (size_t k = 1; k < nc; k++)
    if (started[k]) {
      pthread_join(th[k], NULL);
      if (res == ncclSuccess && parts[k].r != ncclSuccess) res = parts[k].r;
    }
  free(sorted);
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
