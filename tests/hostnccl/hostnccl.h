/* hostnccl.h — internal interface of the host NCCL (tests/hostnccl/): the NCCL
 * API implemented on host memory over Open MPI, so that the shim and the
 * benchmarks run unmodified on a machine without a GPU. It is a test and
 * emulation substrate: its timings are never GPU numbers.
 *
 * The pieces: config.c (environment, errors, log, counters), transport.c (MPI,
 * thread safety, requests and waits of both transports, emulated links),
 * socket.c (the TCP transport: unique ids carrying the root's address,
 * bootstrap, mesh, split), unsupported.c (the entry points it does not
 * implement: ncclInvalidUsage), numeric.c (datatypes, reductions),
 * algo.c (ring and chain algorithms, running a list of operations), comm.c
 * (communicators, nonblocking state), redop.c (reduction operators),
 * enqueue.c (the collective entry points and groups), stream.c (stream order
 * on the CUDA driver test double).
 *
 * Must not: include anything from the project's shim/ or compress/ (the
 * substrate is the oracle those are tested against), or export anything but
 * the nccl*, pnccl* and hostnccl_* symbols of hostnccl.map. */
#ifndef HOSTNCCL_H
#define HOSTNCCL_H

/* The API declared by nccl.h is what we export (the rest is hidden). */
#pragma GCC visibility push(default)
#include <nccl.h>
#pragma GCC visibility pop
#include <mpi.h>
#include <pthread.h>
#include <stdint.h>
#include <stddef.h>
#include <time.h>

#define HN_EXPORT __attribute__((visibility("default")))
/* Real libnccl exports ncclX weak and pncclX strong (the profiling layer);
 * do the same so that a wrapper defining ncclX can call pncclX. */
#define HN_ALIAS(name) \
  extern __typeof__(p##name) name __attribute__((weak, alias("p" #name), visibility("default")))

/* Pass an error up: CHECK(call) returns it, CHECKGOTO(call, res, label) jumps. */
#define HN_CHECK(call) do { ncclResult_t hn_r_ = (call); if (hn_r_ != ncclSuccess) return hn_r_; } while (0)
#define HN_CHECKGOTO(call, res, label) do { (res) = (call); if ((res) != ncclSuccess) goto label; } while (0)

/* ---- config.c: environment, errors, log, counters ---- */
typedef struct {
  int version;           /* what ncclGetVersion reports */
  double link_gbps;      /* the network (NICs); 0 = unlimited */
  double intra_gbps;     /* each rank's link inside its node (default link_gbps) */
  int nic_per_node;      /* HOSTNCCL_NIC_PER=node: one NIC per node, shared */
  double link_lat_us;    /* per message */
  double launch_us;      /* per launch (a collective outside a group, a group end): HOSTNCCL_LAUNCH_US */
  long fail_call;        /* 0 = off */
  long fail_group_end;   /* 0 = off */
  int log;
  int check;             /* compare each collective's arguments across ranks */
  size_t slice_bytes;    /* largest single MPI message */
  int transport;         /* HN_TRANSPORT_*: what ncclGetUniqueId picks */
} hn_config;
enum { HN_TRANSPORT_AUTO = 0, HN_TRANSPORT_MPI, HN_TRANSPORT_SOCKET };

/* Reads the environment once; returns ncclInvalidUsage (and sets the last
 * error) on every call if a variable was malformed. */
ncclResult_t hn_init(void);
/* A launch on comm (algo.c): its counter and the process's (hostnccl_get_launches). */
void hn_count_launch(ncclComm_t comm);
/* unsupported.c: ncclInvalidUsage with a message naming fn. */
ncclResult_t hn_unsupported(const char *fn);
const hn_config *hn_cfg(void);
/* Set this thread's last error message and return res (logged with HOSTNCCL_LOG). */
ncclResult_t hn_err(ncclResult_t res, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void hn_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* A line that must fail the test run: to stderr, and appended to the file
 * HOSTNCCL_REPORT_FILE names (tests/lib.sh sets it and fails on any line). */
void hn_report(const char *line);
const char *hn_last_error(void);
/* Fault injection: 1 when this call is the one to fail. */
int hn_fail_this_call(void);
int hn_fail_this_group_end(void);
void hn_count_allreduce(ncclDataType_t type, size_t bytes);

/* ---- numeric.c ---- */
enum hn_redop { HN_SUM = 0, HN_PROD, HN_MAX, HN_MIN };
size_t hn_type_size(ncclDataType_t t);
int hn_type_is_float(ncclDataType_t t);
const char *hn_type_name(ncclDataType_t t);
/* dst[i] = src[i] (op) dst[i], each result rounded to the datatype. */
void hn_reduce(void *dst, const void *src, size_t n, ncclDataType_t t, enum hn_redop op);
/* dst[i] = src[i] * scalar (scalar: one element of type t); dst may equal src. */
void hn_premul(void *dst, const void *src, size_t n, ncclDataType_t t, const void *scalar);
/* buf[i] /= d for integer types (truncating). */
void hn_postdiv(void *buf, size_t n, ncclDataType_t t, int d);
/* The element of type t nearest to v (RNE), for ncclAvg's 1/nranks. */
void hn_scalar_from_double(ncclDataType_t t, double v, void *out);
/* Scalar conversions (also the unit test's subject). */
float hn_f16_to_f32(uint16_t h);
uint16_t hn_f32_to_f16(float f);
float hn_bf16_to_f32(uint16_t h);
uint16_t hn_f32_to_bf16(float f);
float hn_e4m3_to_f32(uint8_t b);
uint8_t hn_f32_to_e4m3(float f);
float hn_e5m2_to_f32(uint8_t b);
uint8_t hn_f32_to_e5m2(float f);

/* ---- comm.c ---- */
/* A reduction resolved at call time (a premulsum op may be destroyed before
 * a grouped or nonblocking operation runs). */
typedef struct {
  enum hn_redop op;
  int premul;                /* multiply each rank's input by scalar first */
  int postdiv;               /* integer avg: divide the result by nranks */
  int user_op;               /* what ranks must agree on: ncclSum..ncclAvg (PreMulSum: ncclSum) */
  const void *scalar_ptr;    /* ncclScalarDevice: read when the operation runs */
  unsigned char scalar[8];   /* otherwise the value, one element of the type */
} hn_red;

struct hn_batch;

typedef struct {
  int live;
  ncclDataType_t type;
  ncclScalarResidence_t residence;
  const void *ptr;
  unsigned char value[8];
} hn_premul_op;

/* Message classes: each has its own MPI tag, or its own socket per peer, so
 * point-to-point, collectives and argument checks never overtake each other. */
enum { HN_TAG_COLL = 1, HN_TAG_P2P = 2, HN_TAG_CHECK = 3, HN_NCLASS = 3 };

struct ncclComm {
  MPI_Comm mpi;              /* MPI transport; MPI_COMM_NULL on sockets */
  int sock;                  /* socket transport (socket.c) */
  int *sfd, *rfd;            /* sockets: [(tag-1)*nranks + peer], send and receive side */
  uint64_t nonce;            /* sockets: identifies the communicator in handshakes */
  unsigned nsplit;           /* sockets: splits so far (same count on every rank) */
  int rank, nranks;
  int *node, nnodes;         /* fabric.c: each rank's node index (all 0 without links) */
  int blocking;
  int aborting;              /* atomic: waits give up, see hn_wait() */
  pthread_mutex_t lock;      /* guards the fields below; never held across MPI */
  pthread_cond_t idle;       /* signalled when busy drops to 0 */
  int busy;                  /* threads running operations on this comm */
  int report_inprogress;     /* the next async-error poll says ncclInProgress */
  struct hn_batch **pending; /* nonblocking work, run by the progress thread (in order) */
  size_t npending, cappending;
  pthread_t progress;        /* nonblocking: runs queued work without polls, as NCCL does */
  int progress_up, progress_stop;
  pthread_cond_t progress_wake;
  ncclResult_t async_error;  /* sticky: a failed operation (MPI error) */
  uint64_t coll_seq;         /* collectives checked so far (HOSTNCCL_CHECK; atomic) */
  uint64_t launches;         /* launches on this communicator (algo.c; atomic): hostnccl_get_launches */
  hn_premul_op *ops;         /* ncclRedOpCreatePreMulSum; op id = ncclNumOps + index */
  int nops;
  /* stream.c: operations enqueued on streams run in call order per
   * communicator (NCCL serialises a communicator's launches) */
  uint64_t tickets, served;  /* under lock */
  pthread_cond_t turn;
};

ncclResult_t hn_check_comm(ncclComm_t comm, const char *fn);
/* Mark a thread as running operations on comm (abort waits for it). */
void hn_comm_enter(ncclComm_t comm);
void hn_comm_leave(ncclComm_t comm);
/* Record a failure: later calls and polls report it (sticky). */
void hn_comm_fail(ncclComm_t comm, ncclResult_t res);
/* Queue a batch on a nonblocking comm (takes a reference). */
ncclResult_t hn_comm_queue(ncclComm_t comm, struct hn_batch *b);

/* ---- redop.c ---- */
/* Resolve op for type on comm into red (ncclInvalidArgument if unknown). */
ncclResult_t hn_resolve_op(ncclComm_t comm, ncclRedOp_t op, ncclDataType_t type, hn_red *red,
                           const char *fn);

/* ---- algo.c ---- */
enum hn_kind { HN_ALLREDUCE, HN_REDUCESCATTER, HN_ALLGATHER, HN_BROADCAST, HN_REDUCE, HN_SEND, HN_RECV };
typedef struct {
  enum hn_kind kind;
  ncclComm_t comm;
  const void *sendbuff;
  void *recvbuff;
  size_t count;              /* per-rank count as NCCL defines it for the call */
  ncclDataType_t type;
  hn_red red;
  int peer;                  /* root, or peer of send/recv */
  cudaStream_t stream;       /* honoured on the CUDA driver test double (stream.c) */
  uint64_t ticket;           /* stream.c: its turn on comm, 0 = none */
} hn_op;

/* A list of operations run together: point-to-point posted first, then the
 * collectives in order, then the point-to-point waited for. Shared by the
 * nonblocking comms it touches; the first poll to claim it runs it. */
typedef struct hn_batch {
  pthread_mutex_t lock;
  int refs;
  int state;                 /* HN_QUEUED, HN_RUNNING, HN_DONE */
  ncclResult_t result;
  size_t nops;
  hn_op ops[];
} hn_batch;
enum { HN_QUEUED = 0, HN_RUNNING, HN_DONE };

const char *hn_kind_name(enum hn_kind k);
ncclResult_t hn_run_ops(const hn_op *ops, size_t n);
/* ---- stream.c ---- */
/* Runs ops now (hn_run_ops), or on the CUDA driver test double enqueues them
 * on their streams and returns (failures then fail the communicators). */
ncclResult_t hn_exec_ops(const hn_op *ops, size_t n);
/* On the double: the call's stream handle made concrete now (the legacy and
 * per-thread handles depend on the calling thread), for work run later. */
void hn_stream_resolve(hn_op *op);
hn_batch *hn_batch_new(const hn_op *ops, size_t n);
void hn_batch_ref(hn_batch *b);
void hn_batch_unref(hn_batch *b);
/* Run b unless another thread is running it; returns ncclInProgress then. */
ncclResult_t hn_batch_run(hn_batch *b);

/* ---- transport.c ---- */
ncclResult_t hn_mpi_init(void);         /* MPI_Init_thread if the program has not */
void hn_mpi_lock(void);                 /* serialise MPI when it gives < THREAD_MULTIPLE */
void hn_mpi_unlock(void);
ncclResult_t hn_mpi_err(int rc, const char *what);
/* A posted message of either transport. comm NULL: an MPI message on
 * MPI_COMM_WORLD (the rendezvous). */
typedef struct {
  ncclComm_t comm;
  MPI_Request mpi;           /* MPI: MPI_REQUEST_NULL once complete */
  int fd;                    /* socket: -1 once complete */
  int is_send;
  char *buf;
  size_t len, done;
} hn_req;
/* Wait for n requests (sockets progress in order per socket and direction);
 * gives up (cancelling them) when a request's comm is being aborted. */
ncclResult_t hn_wait(hn_req *reqs, int n);
/* Cancel and free every pending request (abort paths). */
void hn_cancel_all(hn_req *reqs, int n);
/* Exchange one message each way (either side may be empty: bytes 0 or rank < 0),
 * splitting into slices of at most slice_bytes. */
ncclResult_t hn_sendrecv(ncclComm_t comm, const void *sbuf, size_t sbytes, int dst,
                         void *rbuf, size_t rbytes, int src, int tag);
/* Post a message as nonblocking slices, appending requests to *reqs. */
ncclResult_t hn_post(ncclComm_t comm, int is_send, void *buf, size_t bytes, int peer, int tag,
                     hn_req **reqs, int *nreq, int *capreq);

/* ---- socket.c ---- */
/* Which transport a new unique id uses (HOSTNCCL_TRANSPORT, else MPI when MPI
 * is initialised or mpirun launched us, else sockets). */
int hn_pick_socket(void);
int hn_sock_is_uid(const ncclUniqueId *id);
ncclResult_t hn_sock_unique_id(ncclUniqueId *out);
/* Fill c (rank, nranks, sockets) from the id: the root accepts every member. */
ncclResult_t hn_sock_init(ncclComm_t c, const ncclUniqueId *id, int nranks, int rank);
/* Collective over parent: child (NULL for NCCL_SPLIT_NOCOLOR) gets its sockets. */
ncclResult_t hn_sock_split(ncclComm_t parent, int color, int key, ncclComm_t child);
void hn_sock_close(ncclComm_t c);
/* Progress one socket request without blocking: 1 done, 0 not yet, <0 error. */
int hn_sock_progress(hn_req *r);
/* Wait until one of the n socket heads can move (or timeout_ms). */
void hn_sock_poll(hn_req *const *heads, int n, int timeout_ms);
/* Emulated links (transport.c): on when a rate or a latency is set. */
int hn_link_on(void);
void hn_now(struct timespec *t);
void hn_sleep_until(const struct timespec *dl);

/* ---- fabric.c: nodes and the links a message crosses ---- */
enum { HN_INTRA_OUT, HN_INTRA_IN, HN_NIC_OUT, HN_NIC_IN, HN_LINK_DIRS };
/* The node map of a new communicator (an all-gather when links are on). */
ncclResult_t hn_fabric_comm(ncclComm_t comm);
const char *hn_fabric_host(void);
/* Whether peer is on another node (its messages cross the NICs). */
int hn_link_remote(ncclComm_t comm, int peer);
/* Charge bytes to this rank's link directions from now: *dl = when the last
 * is done, plus the latency. */
void hn_link_charge(struct timespec *dl, const size_t bytes[HN_LINK_DIRS]);
/* One step: out bytes to rank `to`, in bytes from rank `from`. */
void hn_link_step(ncclComm_t comm, struct timespec *dl, int to, size_t out, int from, size_t in);

#endif
