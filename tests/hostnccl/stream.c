/* stream.c — stream order for the host NCCL when it runs on the CUDA driver
 * test double (tests/cudadrv): a collective (or a group, or a nonblocking
 * batch at the poll that would run it) is then enqueued on its stream(s) with
 * cudadrv_enqueue_multi and run by the stream's worker after everything
 * enqueued there before it (casts, copies), as NCCL's kernels are; the call
 * returns at once. Buffers are reached through cudadrv_host_view (device
 * memory is not host-accessible on the double). A failure on the stream is
 * asynchronous, as on a GPU: the communicator fails (later calls and
 * ncclCommGetAsyncError report it) and a "hostnccl: ... failed on its stream"
 * line goes to stderr.
 *
 * A communicator's operations run in the order of their calls, whatever
 * their streams, as NCCL serialises a communicator's work (the shim issues
 * its configuration check on a private stream beside the caller's).
 *
 * Without the double (no libcuda.so.1 loaded, or the real one) nothing
 * changes: operations run on the calling thread at call time.
 *
 * Must not: link or load libcuda (the double is looked up with RTLD_NOLOAD),
 * or let a communicator be freed while its work is queued (the work holds
 * the communicator busy, which destroy and abort wait for). */
#include "hostnccl.h"

#include <dlfcn.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int (*enqueue_fn)(void *const *streams, int n, void (*fn)(void *), void *arg,
                          void (*release)(void *));
typedef int (*view_fn)(const void *p, size_t bytes, void **host);
typedef int (*capturing_fn)(void *stream, int *status);
typedef void *(*handle_fn)(void *stream);
static handle_fn stream_handle;
static enqueue_fn enqueue_multi;
static view_fn host_view;
static capturing_fn is_capturing;
static pthread_mutex_t ticket_lock = PTHREAD_MUTEX_INITIALIZER;

static int first_adds(struct dl_phdr_info *info, size_t size, void *out) {
  (void)size;
  *(unsigned long long *)out = info->dlpi_adds;
  return 1; /* the first object is enough */
}

/* The double's hooks once it is loaded (by the shim or the program). A
 * dlopen(RTLD_NOLOAD) of a library that is not loaded searches the file
 * system (~90 us), so it is retried only when objects were loaded since. */
static int stream_mode(void) {
  static unsigned long long checked_adds = ~0ull;
  if (__atomic_load_n(&enqueue_multi, __ATOMIC_ACQUIRE)) return 1;
  unsigned long long adds = 0;
  dl_iterate_phdr(first_adds, &adds);
  if (adds == __atomic_load_n(&checked_adds, __ATOMIC_RELAXED)) return 0;
  __atomic_store_n(&checked_adds, adds, __ATOMIC_RELAXED);
  void *h = dlopen("libcuda.so.1", RTLD_NOLOAD | RTLD_LAZY);
  if (!h) return 0;
  view_fn v = (view_fn)dlsym(h, "cudadrv_host_view");
  enqueue_fn e = (enqueue_fn)dlsym(h, "cudadrv_enqueue_multi");
  capturing_fn c = (capturing_fn)dlsym(h, "cuStreamIsCapturing");
  handle_fn sh = (handle_fn)dlsym(h, "cudadrv_stream_handle");
  if (!v || !e || !c || !sh) return 0; /* the real driver */
  stream_handle = sh;
  host_view = v;
  is_capturing = c;
  __atomic_store_n(&enqueue_multi, e, __ATOMIC_RELEASE);
  if (hn_cfg()->log) hn_log("running on the CUDA driver test double: collectives in stream order");
  return 1;
}

/* Bytes of op's send and receive buffers on this rank. */
static void op_bytes(const hn_op *op, size_t *send, size_t *recv) {
  size_t b = op->count * hn_type_size(op->type), n = (size_t)op->comm->nranks;
  *send = op->kind == HN_RECV ? 0 : op->kind == HN_REDUCESCATTER ? b * n : b;
  *recv = op->kind == HN_SEND ? 0 : op->kind == HN_ALLGATHER ? b * n : b;
  if (op->kind == HN_BROADCAST && op->comm->rank != op->peer) *send = 0;
  if (op->kind == HN_REDUCE && op->comm->rank != op->peer) *recv = 0;
}

/* The host address of [p, p+bytes); a scratch buffer when the double
 * refuses (it has counted the illegal access, and the process will fail at
 * exit), so that the peers still get their messages instead of hanging. */
static void *view_or_scratch(const void *p, size_t bytes, void **scratch) {
  void *h = NULL;
  if (!p || !bytes) return (void *)p;
  if (host_view(p, bytes, &h) == 0) return h;
  fprintf(stderr, "hostnccl: %zu bytes at %p are not device memory known to the CUDA driver double\n", bytes, p);
  *scratch = calloc(1, bytes);
  return *scratch;
}

/* Operations of one communicator run in the order of their calls, whatever
 * their streams: each op waits for its ticket's turn (taken at call time for
 * all communicators of a batch at once, so the order is the same on all). */
static void take_tickets(hn_op *ops, size_t n) {
  pthread_mutex_lock(&ticket_lock);
  for (size_t i = 0; i < n; i++) {
    size_t j = 0;
    while (j < i && ops[j].comm != ops[i].comm) j++;
    if (j < i) continue; /* one ticket per communicator and batch */
    pthread_mutex_lock(&ops[i].comm->lock);
    ops[i].ticket = ++ops[i].comm->tickets;
    pthread_mutex_unlock(&ops[i].comm->lock);
  }
  pthread_mutex_unlock(&ticket_lock);
}

static void wait_turns(const hn_op *ops, size_t n) {
  for (size_t i = 0; i < n; i++) {
    if (!ops[i].ticket) continue;
    ncclComm_t c = ops[i].comm;
    pthread_mutex_lock(&c->lock);
    while (c->served + 1 < ops[i].ticket) pthread_cond_wait(&c->turn, &c->lock);
    pthread_mutex_unlock(&c->lock);
  }
}

static void end_turns(const hn_op *ops, size_t n) {
  for (size_t i = 0; i < n; i++) {
    if (!ops[i].ticket) continue;
    ncclComm_t c = ops[i].comm;
    pthread_mutex_lock(&c->lock);
    c->served = ops[i].ticket;
    pthread_cond_broadcast(&c->turn);
    pthread_mutex_unlock(&c->lock);
  }
}

static void run_on_stream(void *arg) {
  hn_batch *b = arg;
  size_t n = b->nops;
  wait_turns(b->ops, n);
  hn_op *ops = malloc(n * sizeof *ops);
  void **scratch = calloc(3 * n + 1, sizeof *scratch);
  ncclResult_t res = ops && scratch ? ncclSuccess : ncclSystemError;
  for (size_t i = 0; i < n && res == ncclSuccess; i++) {
    ops[i] = b->ops[i];
    if (__atomic_load_n(&ops[i].comm->aborting, __ATOMIC_ACQUIRE)) res = ncclSystemError;
    size_t sb, rb;
    op_bytes(&ops[i], &sb, &rb);
    ops[i].sendbuff = view_or_scratch(ops[i].sendbuff, sb, &scratch[3 * i]);
    ops[i].recvbuff = view_or_scratch(ops[i].recvbuff, rb, &scratch[3 * i + 1]);
    if (ops[i].red.scalar_ptr)
      ops[i].red.scalar_ptr = view_or_scratch(ops[i].red.scalar_ptr, hn_type_size(ops[i].type), &scratch[3 * i + 2]);
  }
  if (res == ncclSuccess) res = hn_run_ops(ops, n);
  if (res != ncclSuccess) {
    fprintf(stderr, "hostnccl: %s (%zu operation%s) failed on its stream: %s\n", hn_kind_name(b->ops[0].kind), n,
            n == 1 ? "" : "s", hn_last_error());
    for (size_t i = 0; i < n; i++) hn_comm_fail(b->ops[i].comm, res);
  }
  for (size_t i = 0; scratch && i < 3 * n; i++) free(scratch[i]);
  free(scratch);
  free(ops);
  end_turns(b->ops, n);
}

/* The queued work holds each of its communicators busy until released. */
static void release(void *arg) {
  hn_batch *b = arg;
  for (size_t i = 0; i < b->nops; i++) hn_comm_leave(b->ops[i].comm);
  hn_batch_unref(b);
}

ncclResult_t hn_exec_ops(const hn_op *ops, size_t n) {
  if (!n || !stream_mode()) return hn_run_ops(ops, n);
  void *streams[64];
  int ns = 0;
  for (size_t i = 0; i < n; i++) {
    int seen = 0;
    for (int k = 0; k < ns; k++) seen |= streams[k] == (void *)ops[i].stream;
    if (!seen && ns < 64) streams[ns++] = (void *)ops[i].stream;
  }
  hn_batch *b = hn_batch_new(ops, n);
  if (!b) return hn_err(ncclSystemError, "hostnccl: out of host memory");
  /* Captured work runs at each graph launch, any number of times: no turn. */
  int cap = 0;
  for (size_t i = 0; i < b->nops; i++) b->ops[i].ticket = 0;
  if (is_capturing(streams[0], &cap) == 0 && cap == 0) take_tickets(b->ops, b->nops);
  for (size_t i = 0; i < n; i++) hn_comm_enter(ops[i].comm);
  int r = enqueue_multi(streams, ns, run_on_stream, b, release);
  if (r != 0) {
    wait_turns(b->ops, b->nops); /* give the turns back in order */
    end_turns(b->ops, b->nops);
    release(b);
    return hn_err(ncclUnhandledCudaError, "%s: cannot enqueue on stream %p (CUresult %d from the CUDA driver double)",
                  hn_kind_name(ops[0].kind), streams[0], r);
  }
  return ncclSuccess;
}

void hn_stream_resolve(hn_op *op) {
  if (!stream_mode()) return;
  void *h = stream_handle((void *)op->stream);
  if (h) op->stream = (cudaStream_t)h; /* else left: the enqueue reports it */
}
