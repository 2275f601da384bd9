/* comm.c — the host NCCL's communicators: unique ids, init, split, destroy,
 * abort, finalize, queries, and the nonblocking state machine.
 *
 * Two transports (the id says which, see socket.c for TCP). Over MPI, init
 * with a unique id uses only the members: the id names its creator's
 * MPI_COMM_WORLD rank and a tag derived from the id's random bytes; each member
 * sends (rank, nranks, world rank) to the creator, which answers with the
 * table of world ranks (or an error status), then all members call
 * MPI_Comm_create_group on that group. Hence the creator must be a member,
 * and a process holds at most one rank of a communicator. Each communicator
 * owns its own MPI communicator, so communicators and threads never mix
 * messages.
 *
 * Nonblocking communicators (config.blocking = 0): init, split, finalize,
 * collectives and group ends return ncclInProgress; their work is queued. A
 * poll of ncclCommGetAsyncError answers ncclInProgress once after anything
 * was queued, and the next poll runs the queued work on the polling thread
 * and answers its result (ncclInProgress again while another thread runs it).
 * Destroy and finalize run what is still queued; abort discards it.
 * (PreMulSum operators live in redop.c.)
 *
 * Must not: hold comm->lock across MPI or while running work (the watchdog
 * thread polls and aborts concurrently). */
#include "hostnccl.h"

#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

/* ---------------- versions, strings ---------------- */

ncclResult_t pncclGetVersion(int *version) {
  HN_CHECK(hn_init());
  if (!version) return hn_err(ncclInvalidArgument, "ncclGetVersion: version is NULL");
  *version = hn_cfg()->version;
  return ncclSuccess;
}
HN_ALIAS(ncclGetVersion);

const char *pncclGetErrorString(ncclResult_t r) {
  switch (r) {
  case ncclSuccess: return "success";
  case ncclUnhandledCudaError: return "CUDA error (never raised by the host NCCL)";
  case ncclSystemError: return "system error: MPI, host memory, or injected by HOSTNCCL_FAIL_*";
  case ncclInternalError: return "internal error in the host NCCL";
  case ncclInvalidArgument: return "invalid argument (ncclGetLastError tells which)";
  case ncclInvalidUsage: return "invalid usage (ncclGetLastError tells which)";
  case ncclRemoteError: return "a remote rank failed";
  case ncclInProgress: return "operation in progress: poll ncclCommGetAsyncError";
  default: return "unknown result code";
  }
}
HN_ALIAS(ncclGetErrorString);

const char *pncclGetLastError(ncclComm_t comm) {
  (void)comm; /* like NCCL: the calling thread's last message */
  return hn_last_error();
}
HN_ALIAS(ncclGetLastError);

/* ---------------- unique ids ---------------- */

typedef struct {
  char magic[8];
  int32_t root;       /* creator's rank in MPI_COMM_WORLD */
  uint32_t seq;
  uint64_t pid, nonce, host;
} hn_uid;
_Static_assert(sizeof(hn_uid) <= sizeof(ncclUniqueId), "unique id too large");
static const char uid_magic[8] = "hostncl1";

static uint64_t fnv1a(const void *p, size_t n, uint64_t h) {
  for (size_t i = 0; i < n; i++) h = (h ^ ((const unsigned char *)p)[i]) * 0x100000001b3ull;
  return h;
}

/* Our rank in MPI_COMM_WORLD without initialising MPI: MPI_Init is collective
 * under mpirun, and the other ranks reach their first NCCL call (init) only
 * after this id has reached them. */
static int32_t world_rank(void) {
  int inited = 0, r = 0;
  MPI_Initialized(&inited);
  if (inited) {
    hn_mpi_lock();
    MPI_Comm_rank(MPI_COMM_WORLD, &r);
    hn_mpi_unlock();
  } else {
    static const char *const vars[] = {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
      const char *v = getenv(vars[i]);
      if (v && *v) { r = atoi(v); break; }
    }
  }
  return r;
}

ncclResult_t pncclGetUniqueId(ncclUniqueId *out) {
  static uint32_t seq;
  HN_CHECK(hn_init());
  if (!out) return hn_err(ncclInvalidArgument, "ncclGetUniqueId: uniqueId is NULL");
  if (hn_pick_socket()) return hn_sock_unique_id(out);
  hn_uid id;
  memset(&id, 0, sizeof id);
  memcpy(id.magic, uid_magic, sizeof id.magic);
  id.root = world_rank();
  id.seq = __atomic_add_fetch(&seq, 1, __ATOMIC_RELAXED);
  id.pid = (uint64_t)getpid();
  if (getrandom(&id.nonce, sizeof id.nonce, 0) != (ssize_t)sizeof id.nonce) {
    struct timespec t;
    hn_now(&t);
    id.nonce = (uint64_t)t.tv_nsec * 0x9e3779b97f4a7c15ull ^ (uint64_t)t.tv_sec;
  }
  char host[256] = "";
  gethostname(host, sizeof host - 1);
  id.host = fnv1a(host, strlen(host), 0xcbf29ce484222325ull);
  memset(out, 0, sizeof *out);
  memcpy(out->internal, &id, sizeof id);
  return ncclSuccess;
}
HN_ALIAS(ncclGetUniqueId);

/* The rendezvous tag: in the upper half of the tag space, away from the
 * small tags programs use on MPI_COMM_WORLD. */
static int uid_tag(const hn_uid *id) {
  int *ub = NULL, flag = 0;
  hn_mpi_lock();
  MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &ub, &flag);
  hn_mpi_unlock();
  int tag_ub = flag && ub ? *ub : 32767, base = tag_ub / 2;
  return base + (int)(fnv1a(id, sizeof *id, 0xcbf29ce484222325ull) % (uint64_t)(tag_ub - base));
}

/* ---------------- communicator objects ---------------- */

/* Communicators that ncclCommDestroy or ncclCommAbort freed and whose
 * address no new communicator has taken since. Real NCCL frees the
 * communicator: any later call naming it is a use after free, which may
 * crash, hang or pass unnoticed. Here such a call is reported (a
 * HOSTNCCL-ENDED line, which fails every test script) and answered
 * ncclInvalidUsage without touching the freed memory. */
static pthread_mutex_t ended_lock = PTHREAD_MUTEX_INITIALIZER;
static ncclComm_t *ended;
static size_t nended, ended_cap;

static void ended_note(ncclComm_t c) {
  pthread_mutex_lock(&ended_lock);
  if (nended == ended_cap) {
    size_t cap = ended_cap ? 2 * ended_cap : 64;
    ncclComm_t *n = realloc(ended, cap * sizeof *n);
    if (n) ended = n, ended_cap = cap;
  }
  if (nended < ended_cap) ended[nended++] = c; /* out of memory: not noted, never a false report */
  pthread_mutex_unlock(&ended_lock);
}

/* found != 0: c is an ended communicator's address; take = 1: forget it (a
 * new communicator has it now). */
static int ended_find(ncclComm_t c, int take) {
  int found = 0;
  pthread_mutex_lock(&ended_lock);
  for (size_t i = 0; i < nended && !found; i++)
    if (ended[i] == c) {
      found = 1;
      if (take) ended[i] = ended[--nended];
    }
  pthread_mutex_unlock(&ended_lock);
  return found;
}

static ncclResult_t comm_alloc(int blocking, ncclComm_t *out) {
  ncclComm_t c = calloc(1, sizeof *c);
  if (!c) return hn_err(ncclSystemError, "hostnccl: out of host memory");
  (void)ended_find(c, 1);
  c->mpi = MPI_COMM_NULL;
  c->blocking = blocking;
  pthread_mutex_init(&c->lock, NULL);
  pthread_cond_init(&c->idle, NULL);
  pthread_cond_init(&c->turn, NULL);
  pthread_cond_init(&c->progress_wake, NULL);
  *out = c;
  return ncclSuccess;
}

static void progress_end(ncclComm_t c);

static void comm_free(ncclComm_t c) {
  progress_end(c);
  if (c->sock) {
    hn_sock_close(c);
  } else if (c->mpi != MPI_COMM_NULL) {
    int fin = 0;
    MPI_Finalized(&fin);
    if (!fin) {
      hn_mpi_lock();
      MPI_Comm_free(&c->mpi);
      hn_mpi_unlock();
    }
  }
  for (size_t i = 0; i < c->npending; i++) hn_batch_unref(c->pending[i]);
  free(c->pending);
  free(c->ops);
  free(c->node);
  pthread_cond_destroy(&c->idle);
  pthread_cond_destroy(&c->turn);
  pthread_cond_destroy(&c->progress_wake);
  pthread_mutex_destroy(&c->lock);
  ended_note(c); /* before the memory can be handed out again */
  free(c);
}

/* A communicator whose transport is set up: published to the caller. */
static ncclResult_t comm_ready(ncclComm_t c, ncclResult_t res, ncclComm_t *out) {
  if (res == ncclSuccess) res = hn_fabric_comm(c);
  if (res != ncclSuccess) {
    comm_free(c);
    return res;
  }
  if (!c->blocking) c->report_inprogress = 1; /* init itself "completes" on a poll */
  if (hn_cfg()->log)
    hn_log("comm %p rank %d/%d created (%s, %s)", (void *)c, c->rank, c->nranks,
           c->blocking ? "blocking" : "nonblocking", c->sock ? "sockets" : "MPI");
  *out = c;
  return c->blocking ? ncclSuccess : ncclInProgress;
}

/* An MPI communicator from mpi (freed on failure). */
static ncclResult_t comm_new_mpi(MPI_Comm mpi, int blocking, ncclComm_t *out) {
  ncclComm_t c;
  ncclResult_t res = comm_alloc(blocking, &c);
  if (res != ncclSuccess) {
    hn_mpi_lock();
    MPI_Comm_free(&mpi);
    hn_mpi_unlock();
    return res;
  }
  c->mpi = mpi;
  hn_mpi_lock();
  MPI_Comm_set_errhandler(mpi, MPI_ERRORS_RETURN);
  MPI_Comm_rank(mpi, &c->rank);
  MPI_Comm_size(mpi, &c->nranks);
  hn_mpi_unlock();
  return comm_ready(c, ncclSuccess, out);
}

ncclResult_t hn_check_comm(ncclComm_t comm, const char *fn) {
  if (!comm) return hn_err(ncclInvalidArgument, "%s: comm is NULL", fn);
  if (ended_find(comm, 0)) {
    char line[256];
    snprintf(line, sizeof line,
             "HOSTNCCL-ENDED: %s on communicator %p after ncclCommDestroy or ncclCommAbort returned on it "
             "(real NCCL: a use after free)", fn, (void *)comm);
    hn_report(line);
    return hn_err(ncclInvalidUsage, "%s: communicator %p was destroyed or aborted", fn, (void *)comm);
  }
  return ncclSuccess;
}

void hn_comm_enter(ncclComm_t comm) {
  pthread_mutex_lock(&comm->lock);
  comm->busy++;
  pthread_mutex_unlock(&comm->lock);
}

void hn_comm_leave(ncclComm_t comm) {
  pthread_mutex_lock(&comm->lock);
  if (--comm->busy == 0) pthread_cond_broadcast(&comm->idle);
  pthread_mutex_unlock(&comm->lock);
}

void hn_comm_fail(ncclComm_t comm, ncclResult_t res) {
  pthread_mutex_lock(&comm->lock);
  if (comm->async_error == ncclSuccess) comm->async_error = res;
  pthread_mutex_unlock(&comm->lock);
}

static void *progress_main(void *arg);

/* Under comm->lock: the communicator's progress thread, started at its first
 * queued work. Without one (it could not be created) the polls run the work. */
static void progress_start(ncclComm_t comm) {
  if (comm->progress_up || comm->progress_stop) return;
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old); /* the program's signals stay with its own threads */
  comm->progress_up = pthread_create(&comm->progress, NULL, progress_main, comm) == 0;
  pthread_sigmask(SIG_SETMASK, &old, NULL);
}

ncclResult_t hn_comm_queue(ncclComm_t comm, hn_batch *b) {
  pthread_mutex_lock(&comm->lock);
  progress_start(comm);
  if (comm->npending == comm->cappending) {
    size_t cap = comm->cappending ? 2 * comm->cappending : 8;
    hn_batch **p = realloc(comm->pending, cap * sizeof *p);
    if (!p) {
      pthread_mutex_unlock(&comm->lock);
      return hn_err(ncclSystemError, "hostnccl: out of host memory");
    }
    comm->pending = p;
    comm->cappending = cap;
  }
  hn_batch_ref(b);
  comm->pending[comm->npending++] = b;
  comm->report_inprogress = 1;
  pthread_cond_signal(&comm->progress_wake);
  pthread_mutex_unlock(&comm->lock);
  return ncclSuccess;
}

static int batch_queued(hn_batch *b) {
  pthread_mutex_lock(&b->lock);
  int q = b->state == HN_QUEUED;
  pthread_mutex_unlock(&b->lock);
  return q;
}

static ncclResult_t drain_until(ncclComm_t comm, hn_batch *stop, int wait);

/* A batch touching several communicators (a nonblocking group) runs after
 * the work queued earlier on each of them, as NCCL keeps every
 * communicator's operations in the order they were issued: first the other
 * communicators' batches queued before it. ncclInProgress: one of those is
 * running on another thread (and !wait). */
static ncclResult_t run_earlier(ncclComm_t comm, hn_batch *b, int wait) {
  if (!batch_queued(b)) return ncclSuccess;
  for (size_t i = 0; i < b->nops; i++) {
    ncclComm_t oc = b->ops[i].comm;
    size_t j = 0;
    while (j < i && b->ops[j].comm != oc) j++;
    if (oc == comm || j < i) continue;
    hn_comm_enter(oc);
    ncclResult_t r = drain_until(oc, b, wait);
    hn_comm_leave(oc);
    if (r == ncclInProgress) return r;
  }
  return ncclSuccess;
}

/* Run the queued batches in order, up to `stop` (NULL: all). wait: also wait
 * for batches another thread is running (destroy, finalize, split); else
 * answer ncclInProgress. */
static ncclResult_t drain_until(ncclComm_t comm, hn_batch *stop, int wait) {
  for (;;) {
    pthread_mutex_lock(&comm->lock);
    if (comm->npending == 0 || comm->pending[0] == stop) {
      ncclResult_t r = comm->async_error;
      pthread_mutex_unlock(&comm->lock);
      return stop ? ncclSuccess : r;
    }
    hn_batch *b = comm->pending[0];
    hn_batch_ref(b);
    pthread_mutex_unlock(&comm->lock);

    ncclResult_t res = run_earlier(comm, b, wait);
    if (res == ncclSuccess) res = hn_batch_run(b);
    if (res == ncclInProgress) {
      hn_batch_unref(b);
      if (!wait) return ncclInProgress;
      if (__atomic_load_n(&comm->aborting, __ATOMIC_ACQUIRE)) return ncclSystemError;
      sched_yield();
      continue;
    }
    pthread_mutex_lock(&comm->lock);
    int drop = comm->npending > 0 && comm->pending[0] == b;
    if (drop) memmove(comm->pending, comm->pending + 1, --comm->npending * sizeof *comm->pending);
    if (res != ncclSuccess && comm->async_error == ncclSuccess) comm->async_error = res;
    pthread_mutex_unlock(&comm->lock);
    if (drop) hn_batch_unref(b);
    hn_batch_unref(b);
  }
}

static ncclResult_t drain_run(ncclComm_t comm, int wait) { return drain_until(comm, NULL, wait); }

/* The progress thread of a nonblocking communicator: what NCCL's own
 * progress does for queued work — it runs in the order it was issued
 * (a group spanning communicators after their earlier work), whether or not
 * anybody polls (fuzzer seed 12001: a rank that never polled a queued group
 * kept its blocking peer waiting, which real NCCL would not). Polls only
 * read the state. Stops at destroy (after running what is queued) and at
 * abort (at once: its waits give up). */
static void *progress_main(void *arg) {
  ncclComm_t comm = arg;
  pthread_mutex_lock(&comm->lock);
  for (;;) {
    while (comm->npending == 0 && !comm->progress_stop) pthread_cond_wait(&comm->progress_wake, &comm->lock);
    if (comm->npending == 0 || __atomic_load_n(&comm->aborting, __ATOMIC_ACQUIRE)) break;
    comm->busy++;
    pthread_mutex_unlock(&comm->lock);
    (void)drain_until(comm, NULL, 1); /* a failure is recorded as the communicator's async error */
    pthread_mutex_lock(&comm->lock);
    if (--comm->busy == 0) pthread_cond_broadcast(&comm->idle);
  }
  pthread_mutex_unlock(&comm->lock);
  return NULL;
}

/* Stop and join the progress thread (destroy: it runs what is queued first;
 * abort: it gives up). */
static void progress_end(ncclComm_t c) {
  pthread_mutex_lock(&c->lock);
  int up = c->progress_up;
  c->progress_stop = 1;
  c->progress_up = 0;
  pthread_cond_broadcast(&c->progress_wake);
  pthread_mutex_unlock(&c->lock);
  if (up && !pthread_equal(c->progress, pthread_self())) pthread_join(c->progress, NULL);
}

static ncclResult_t drain(ncclComm_t comm, int wait) {
  hn_comm_enter(comm); /* an abort from another thread waits for us */
  ncclResult_t res = drain_run(comm, wait);
  hn_comm_leave(comm);
  return res;
}

/* config == NULL or blocking unset: inherit (default 1 for init). */
static ncclResult_t config_blocking(const ncclConfig_t *config, int inherit, int *blocking,
                                    const char *fn) {
  *blocking = inherit;
  if (!config) return ncclSuccess;
  if (config->magic != 0xcafebeef)
    return hn_err(ncclInvalidArgument, "%s: config not initialised with NCCL_CONFIG_INITIALIZER", fn);
  if (config->blocking != NCCL_CONFIG_UNDEF_INT) *blocking = config->blocking != 0;
  return ncclSuccess;
}

/* ---------------- init ---------------- */

/* Learn the world rank of every member (table[r] for rank r), see the header. */
static ncclResult_t rendezvous(const hn_uid *id, int nranks, int rank, int *table) {
  int tag = uid_tag(id), wr = 0, status = 0, dup = 0;
  ncclResult_t res = ncclSuccess;
  hn_mpi_lock();
  MPI_Comm_rank(MPI_COMM_WORLD, &wr);
  hn_mpi_unlock();
  int *reply = malloc((size_t)(nranks + 1) * sizeof *reply), *from = calloc((size_t)nranks, sizeof *from);
  if (!reply || !from) { res = hn_err(ncclSystemError, "hostnccl: out of host memory"); goto out; }
  hn_req req[2] = {{.mpi = MPI_REQUEST_NULL, .fd = -1}, {.mpi = MPI_REQUEST_NULL, .fd = -1}};
  if (wr == id->root) {
    for (int i = 0; i < nranks; i++) table[i] = -1;
    table[rank] = wr;
    for (int k = 1; k < nranks; k++) {
      int msg[3];
      hn_mpi_lock();
      MPI_Irecv(msg, 3, MPI_INT, MPI_ANY_SOURCE, tag, MPI_COMM_WORLD, &req[0].mpi);
      hn_mpi_unlock();
      HN_CHECKGOTO(hn_wait(req, 1), res, out);
      from[k] = msg[2];
      if (msg[1] != nranks || msg[0] < 0 || msg[0] >= nranks || table[msg[0]] != -1) status = 1;
      else table[msg[0]] = msg[2];
    }
    for (int i = 0; i < nranks && !status; i++)
      for (int j = 0; j < i; j++) dup |= table[i] == table[j];
    if (dup) status = 2;
    reply[0] = status;
    memcpy(reply + 1, table, (size_t)nranks * sizeof *table);
    for (int k = 1; k < nranks; k++) {
      hn_mpi_lock();
      MPI_Isend(reply, status ? 1 : nranks + 1, MPI_INT, from[k], tag, MPI_COMM_WORLD, &req[0].mpi);
      hn_mpi_unlock();
      HN_CHECKGOTO(hn_wait(req, 1), res, out);
    }
  } else {
    int msg[3] = {rank, nranks, wr};
    hn_mpi_lock();
    MPI_Isend(msg, 3, MPI_INT, id->root, tag, MPI_COMM_WORLD, &req[0].mpi);
    MPI_Irecv(reply, nranks + 1, MPI_INT, id->root, tag, MPI_COMM_WORLD, &req[1].mpi);
    hn_mpi_unlock();
    HN_CHECKGOTO(hn_wait(req, 2), res, out);
    status = reply[0];
    if (!status) memcpy(table, reply + 1, (size_t)nranks * sizeof *table);
  }
  if (status == 1)
    res = hn_err(ncclInvalidArgument, "ncclCommInitRank: members disagree on nranks or hold the same rank");
  else if (status == 2)
    res = hn_err(ncclInvalidUsage, "ncclCommInitRank: two ranks in one process (the host NCCL supports one rank per process)");
out:
  free(reply);
  free(from);
  return res;
}

ncclResult_t pncclCommInitRankConfig(ncclComm_t *newcomm, int nranks, ncclUniqueId commId, int rank,
                                     ncclConfig_t *config) {
  const char *fn = "ncclCommInitRank";
  HN_CHECK(hn_init());
  if (!newcomm) return hn_err(ncclInvalidArgument, "%s: comm is NULL", fn);
  *newcomm = NULL;
  if (nranks < 1 || rank < 0 || rank >= nranks)
    return hn_err(ncclInvalidArgument, "%s: rank %d / nranks %d out of range", fn, rank, nranks);
  int blocking;
  HN_CHECK(config_blocking(config, 1, &blocking, fn));
  if (hn_sock_is_uid(&commId)) {
    ncclComm_t c;
    HN_CHECK(comm_alloc(blocking, &c));
    return comm_ready(c, hn_sock_init(c, &commId, nranks, rank), newcomm);
  }
  hn_uid id;
  memcpy(&id, commId.internal, sizeof id);
  if (memcmp(id.magic, uid_magic, sizeof id.magic) != 0)
    return hn_err(ncclInvalidArgument, "%s: not a unique id from this host NCCL's ncclGetUniqueId", fn);
  HN_CHECK(hn_mpi_init());

  int *table = malloc((size_t)nranks * sizeof *table);
  if (!table) return hn_err(ncclSystemError, "hostnccl: out of host memory");
  ncclResult_t res = rendezvous(&id, nranks, rank, table);
  if (res == ncclSuccess) {
    MPI_Group world, members;
    MPI_Comm mpi = MPI_COMM_NULL;
    int tag = uid_tag(&id);
    hn_mpi_lock();
    MPI_Comm_group(MPI_COMM_WORLD, &world);
    MPI_Group_incl(world, nranks, table, &members);
    int rc = MPI_Comm_create_group(MPI_COMM_WORLD, members, tag, &mpi);
    MPI_Group_free(&members);
    MPI_Group_free(&world);
    hn_mpi_unlock();
    res = rc == MPI_SUCCESS ? comm_new_mpi(mpi, blocking, newcomm) : hn_mpi_err(rc, "MPI_Comm_create_group");
  }
  free(table);
  return res;
}
HN_ALIAS(ncclCommInitRankConfig);

ncclResult_t pncclCommInitRank(ncclComm_t *newcomm, int nranks, ncclUniqueId commId, int rank) {
  return pncclCommInitRankConfig(newcomm, nranks, commId, rank, NULL);
}
HN_ALIAS(ncclCommInitRank);

/* ncclCommInitAll: the ndev ranks of one clique in this process, rank i for
 * devlist[i] (the host NCCL moves host-visible bytes, so the device only
 * names the rank), over the socket transport: one thread per rank runs
 * ncclCommInitRank, since the rendezvous needs every rank at once (as NCCL's
 * own ncclCommInitAll does). Several ranks of a process then share its
 * emulated links (fabric.c models one rank per process: leave
 * HOSTNCCL_LINK_GBPS unset). On failure every communicator made is
 * destroyed and the first error returned. */
typedef struct {
  ncclComm_t *out;
  int n, rank;
  ncclUniqueId id;
  ncclResult_t r;
} initall_arg;

static void *initall_one(void *p) {
  initall_arg *a = p;
  a->r = pncclCommInitRank(a->out, a->n, a->id, a->rank);
  return NULL;
}

ncclResult_t pncclCommInitAll(ncclComm_t *comms, int ndev, const int *devlist) {
  (void)devlist;
  HN_CHECK(hn_init());
  if (!comms || ndev < 1) return hn_err(ncclInvalidArgument, "ncclCommInitAll: comms NULL or ndev %d", ndev);
  for (int i = 0; i < ndev; i++) comms[i] = NULL;
  ncclUniqueId id;
  HN_CHECK(hn_sock_unique_id(&id));
  initall_arg *a = calloc((size_t)ndev, sizeof *a);
  pthread_t *t = calloc((size_t)ndev, sizeof *t);
  int *started = calloc((size_t)ndev, sizeof *started);
  ncclResult_t res = a && t && started ? ncclSuccess : hn_err(ncclSystemError, "hostnccl: out of host memory");
  for (int i = 0; res == ncclSuccess && i < ndev; i++) {
    a[i] = (initall_arg){&comms[i], ndev, i, id, ncclSuccess};
    if (pthread_create(&t[i], NULL, initall_one, &a[i])) res = hn_err(ncclSystemError, "ncclCommInitAll: no thread");
    else started[i] = 1;
  }
  for (int i = 0; i < ndev; i++)
    if (started && started[i]) {
      pthread_join(t[i], NULL);
      if (res == ncclSuccess && a[i].r != ncclSuccess) res = a[i].r;
    }
  if (res != ncclSuccess)
    for (int i = 0; i < ndev; i++)
      if (comms[i]) {
        pncclCommDestroy(comms[i]);
        comms[i] = NULL;
      }
  free(a);
  free(t);
  free(started);
  return res;
}
HN_ALIAS(ncclCommInitAll);

ncclResult_t pncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t *newcomm,
                            ncclConfig_t *config) {
  const char *fn = "ncclCommSplit";
  HN_CHECK(hn_init());
  HN_CHECK(hn_check_comm(comm, fn));
  if (!newcomm) return hn_err(ncclInvalidArgument, "%s: newcomm is NULL", fn);
  *newcomm = NULL;
  if (color < 0 && color != NCCL_SPLIT_NOCOLOR)
    return hn_err(ncclInvalidArgument, "%s: color %d is negative", fn, color);
  int blocking;
  HN_CHECK(config_blocking(config, comm->blocking, &blocking, fn));
  /* Queued work on the parent first: a peer may be running it already. */
  HN_CHECK(drain(comm, 1));
  if (comm->sock) {
    ncclComm_t c = NULL;
    if (color != NCCL_SPLIT_NOCOLOR) HN_CHECK(comm_alloc(blocking, &c));
    hn_comm_enter(comm);
    ncclResult_t res = hn_sock_split(comm, color, key, c);
    hn_comm_leave(comm);
    if (!c) return res;
    return comm_ready(c, res, newcomm);
  }
  MPI_Comm mpi = MPI_COMM_NULL;
  hn_comm_enter(comm);
  hn_mpi_lock();
  int rc = MPI_Comm_split(comm->mpi, color == NCCL_SPLIT_NOCOLOR ? MPI_UNDEFINED : color, key, &mpi);
  hn_mpi_unlock();
  hn_comm_leave(comm);
  if (rc != MPI_SUCCESS) return hn_mpi_err(rc, "MPI_Comm_split");
  if (mpi == MPI_COMM_NULL) return ncclSuccess;
  return comm_new_mpi(mpi, blocking, newcomm);
}
HN_ALIAS(ncclCommSplit);

/* ---------------- teardown ---------------- */

ncclResult_t pncclCommFinalize(ncclComm_t comm) {
  HN_CHECK(hn_check_comm(comm, "ncclCommFinalize"));
  ncclResult_t res = drain(comm, 1);
  if (res != ncclSuccess || comm->blocking) return res;
  pthread_mutex_lock(&comm->lock);
  comm->report_inprogress = 1;
  pthread_mutex_unlock(&comm->lock);
  return ncclInProgress;
}
HN_ALIAS(ncclCommFinalize);

ncclResult_t pncclCommDestroy(ncclComm_t comm) {
  if (!comm) return ncclSuccess;
  HN_CHECK(hn_check_comm(comm, "ncclCommDestroy"));
  ncclResult_t res = drain(comm, 1);
  pthread_mutex_lock(&comm->lock);
  while (comm->busy > 0) pthread_cond_wait(&comm->idle, &comm->lock);
  pthread_mutex_unlock(&comm->lock);
  comm_free(comm);
  (void)res; /* a failed queued operation was reported by the polls; destroy still frees */
  return ncclSuccess;
}
HN_ALIAS(ncclCommDestroy);

ncclResult_t pncclCommAbort(ncclComm_t comm) {
  if (!comm) return ncclSuccess;
  HN_CHECK(hn_check_comm(comm, "ncclCommAbort"));
  __atomic_store_n(&comm->aborting, 1, __ATOMIC_RELEASE);
  pthread_mutex_lock(&comm->lock);
  while (comm->busy > 0) pthread_cond_wait(&comm->idle, &comm->lock);
  pthread_mutex_unlock(&comm->lock);
  if (hn_cfg()->log) hn_log("comm %p aborted", (void *)comm);
  comm_free(comm); /* queued batches are dropped unrun */
  return ncclSuccess;
}
HN_ALIAS(ncclCommAbort);

/* ---------------- queries ---------------- */

ncclResult_t pncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *asyncError) {
  HN_CHECK(hn_check_comm(comm, "ncclCommGetAsyncError"));
  if (!asyncError) return hn_err(ncclInvalidArgument, "ncclCommGetAsyncError: asyncError is NULL");
  pthread_mutex_lock(&comm->lock);
  int report = comm->report_inprogress, threaded = comm->progress_up;
  ncclResult_t state = comm->npending ? ncclInProgress : comm->async_error;
  comm->report_inprogress = 0;
  pthread_mutex_unlock(&comm->lock);
  /* with a progress thread a poll only reads the state; without one (it could
   * not be created) the poll runs the queued work itself */
  *asyncError = report ? ncclInProgress : threaded ? state : drain(comm, 0);
  return ncclSuccess;
}
HN_ALIAS(ncclCommGetAsyncError);

#define QUERY(name, field)                                                          \
  ncclResult_t p##name(const ncclComm_t comm, int *out) {                           \
    HN_CHECK(hn_check_comm(comm, #name));                                           \
    if (!out) return hn_err(ncclInvalidArgument, "%s: output is NULL", #name);      \
    *out = (field);                                                                 \
    return ncclSuccess;                                                             \
  }                                                                                 \
  HN_ALIAS(name)

QUERY(ncclCommCount, comm->nranks);
QUERY(ncclCommUserRank, comm->rank);
QUERY(ncclCommCuDevice, 0);
