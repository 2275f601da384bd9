/* log.h — per-collective records and what is written from them: the summary
 * table, JSON Lines (NCCLSHIM_LOG=calls), the Chrome trace and NVTX ranges.
 *
 * The hook path only fills a record and pushes it into a bounded ring; times
 * are read later from backend marks (CUDA events, never synchronised). All
 * file I/O happens on the log's writer thread (log_writer.c): detail records
 * within a second of their call, tables and summary lines at communicator
 * close, process exit or SIGTERM. */
#ifndef NSC_LOG_H
#define NSC_LOG_H

#include <nccl.h>
#include <pthread.h>
#include <stdint.h>

#include "backend.h"
#include "config.h"
#include "plan.h"
#include "policy.h"

enum { NSC_MARK_BEGIN = 0, NSC_MARK_CAST_IN = 1, NSC_MARK_COLL = 2, NSC_MARK_END = 3, NSC_NMARKS = 4 };
/* Resolved times of a record (ns[]): cast-in, the collective (for a skipped
 * call: its local work), cast-out. */
enum { NSC_T_CAST_IN = 0, NSC_T_COLL = 1, NSC_T_CAST_OUT = 2, NSC_NTIMES = 3 };
/* Why a record is not timed: its work is enqueued by a later group end, or
 * its stream is being captured into a CUDA graph (then no event is recorded
 * or queried at all while it is committed). */
enum { NSC_UNTIMED_GROUP = 1, NSC_UNTIMED_CAPTURE = 2 };
/* A record's timing state. */
enum { NSC_REC_PENDING = 0, NSC_REC_DONE = 1, NSC_REC_UNKNOWN = 2 };
/* The NCCL call a record stands for. The two reductions may be transformed;
 * the others are observed only (forwarded untouched, timed, logged: a wait
 * inside a broadcast is communication too). Send and receive are
 * point-to-point: their records are numbered apart ("p2p" lines), never
 * matched across ranks. */
enum {
  NSC_COLL_ALLREDUCE = 0, NSC_COLL_REDUCESCATTER, NSC_COLL_ALLGATHER, NSC_COLL_BROADCAST, NSC_COLL_REDUCE,
  NSC_COLL_ALLTOALL, NSC_COLL_GATHER, NSC_COLL_SCATTER, NSC_COLL_SEND, NSC_COLL_RECV, NSC_NCOLLS
};
/* How the summary groups records (its "actions", the JSON's "action"): by
 * the class of the plan's algorithm (plan.h's nsc_alg, which the records
 * carry and name as "algo") — passed through (PLAIN), compressed (RING,
 * TWOPHASE, HIER), answered locally (LOCAL), fused (FUSE) — and the
 * observed calls apart. */
enum { NSC_ACT_PASS = 0, NSC_ACT_COMPRESS, NSC_ACT_SKIP, NSC_ACT_FUSE, NSC_ACT_OBSERVE, NSC_ACT_COUNT };
/* "passthrough", "compressed", "skipped", "fused", "observed". */
static inline const char *nsc_action_name(int a) {
  static const char *const n[NSC_ACT_COUNT] = {"passthrough", "compressed", "skipped", "fused", "observed"};
  return (unsigned)a < NSC_ACT_COUNT ? n[a] : "?";
}

typedef struct nsc_rec {
  uint64_t seq;            /* the shim's call counter of the communicator ("call" in JSON; an observed
                              call: the counter's value then, the reduction it follows) */
  int action;              /* NSC_ACT_*: the summary's group (from alg; observed calls apart) */
  int coll;                /* NSC_COLL_* */
  int alg;                 /* the plan's algorithm (plan.h's nsc_alg): the JSON's "algo" */
  int dtype, wire_dtype, op;
  int root;                /* observed calls: the root or peer, -1 none */
  int nmembers;            /* fused: members in this collective */
  int untimed;             /* NSC_UNTIMED_*: counted, not timed */
  int why;                 /* passed through: why (policy.h's nsc_why); 0 otherwise */
  size_t count;
  uint64_t logical_bytes, wire_bytes;
  uint64_t wall_ns;        /* CLOCK_REALTIME at the call (monotonic + offset, see log_rec.c) */
  uint64_t host_ns;        /* CLOCK_MONOTONIC at the call */
  ncclResult_t result;
  const nsc_backend *be;
  nsc_stream stream;
  nsc_mark m[NSC_NMARKS];
  unsigned marked;         /* bit i: m[i] was taken */
  unsigned marks_dropped;  /* marks the backend could not take (CUDA: event pool exhausted) */
  /* Filled by the log. */
  uint64_t lseq;           /* record number in the communicator, 1-based, commit order ("seq"); send and
                              receive records have their own numbers */
  uint64_t ns[NSC_NTIMES]; /* valid where bit k of `have` is set */
  unsigned have;
  int state;               /* NSC_REC_* */
  int nvtx_open;           /* an NVTX range was started for it */
  uint64_t nvtx_id;
  int64_t dpass;           /* diagnosis: the backward pass of its call, -1 unknown (set at commit) */
  int dlast;               /* diagnosis: its call was the pass's last bucket */
  int64_t dbusy;           /* diagnosis, host: the calling thread's CPU + run-queue time inside the call, -1 none */
} nsc_rec;

/* Aggregates for one action. Calls, bytes and records are exact for the whole
 * run; times cover the records whose marks could be read. */
typedef struct {
  uint64_t calls;          /* intercepted calls (a fused record counts its members) */
  uint64_t records;        /* records: real collectives, or local answers when skipped */
  uint64_t logical_bytes, wire_bytes;
  uint64_t timed, timed_bytes;  /* records with a time, and their logical bytes */
  uint64_t time_ns, cast_ns;
  uint64_t min_ns, max_ns;      /* of time_ns's records: percentiles are clamped to them */
  uint64_t *hist;          /* NSC_LOG_HIST_BINS counters of time_ns, allocated at the first timed record */
} nsc_log_totals;

enum { NSC_LOG_UNOPENED = 0, NSC_LOG_OPEN = 1, NSC_LOG_CLOSED = 2 };

typedef struct nsc_comm_log {
  int open;                /* NSC_LOG_UNOPENED / NSC_LOG_OPEN / NSC_LOG_CLOSED */
  uint64_t id;             /* communicator pointer value, for names only */
  int rank, nranks;        /* -1 until the communicator's check */
  int comm_seq;            /* order in which this process first logged the communicator */
  uint64_t nrec;           /* records committed */
  uint64_t nmatch, np2p;   /* the sources of lseq: records matched across ranks, send/receive records */
  uint64_t first_ns, end_ns;  /* CLOCK_MONOTONIC: first call, latest known end of work */
  uint64_t first_wall_ns;
  nsc_log_totals by_action[NSC_ACT_COUNT];
  uint64_t why[NSC_WHY_COUNT]; /* all-reduces and reduce-scatters passed through, by reason (policy.h) */
  uint64_t half_tp, half_own; /* compressed bf16/fp16 calls (two phases, fp32 sums); ... on their own 16-bit wire */
  uint64_t red16_bytes, red32_bytes; /* all-reduces and reduce-scatters of bf16/fp16 and of fp32: logical bytes (the
                                        diagnosis's advice is for the gradients' type) */
  uint64_t accum_synced, accum_skipped;
  uint64_t dropped;        /* records folded into totals without detail */
  uint64_t untimed;        /* records that were counted but never timed */
  uint64_t unknown;        /* records whose marks were not complete when they had to be read */
  uint64_t marks_dropped;  /* timing marks not taken (the records are then untimed or partly timed) */
  uint64_t staging_failed; /* staging allocations that failed on this rank (atomic) */
  nsc_rec *ring;           /* oldest first from ring_head; entries [0, ring_done) resolved */
  size_t ring_alloc, ring_head, ring_len, ring_done;
  int nudged;              /* the writer was woken for this ring and has not taken it yet */
  struct nsc_comm_log *open_next; /* the list of open logs (log_rec.c) */
  struct nsc_log_wstate *w;       /* the writer's own state (trace tracks); only it reads it */
  struct nsc_diag *diag;          /* the diagnosis (shim/diag/), NULL until an accumulable all-reduce was seen */
  int diag_acc;                   /* ... one was seen: later calls are fed too (atomic) */
  char failed[256];               /* why the communicator failed its settings check ("" if it did not) */
  char accum_state[320];          /* accumulation: the learner's last word (learned, off and why) */
  char fabric[320];               /* the launch cost learned at LAUNCH_BYTES=auto (coll/learn.c), its line */
  int fab_learned;                /* ... 1: the values below are the agreed fit */
  uint64_t fab_launch_ns, fab_ps_per_byte, fab_price;
  int fab_samples;                /* ... launches it sampled */
  uint64_t fab_call;              /* ... the call whose decision first read the agreement ("call" in JSON) */
  char nodes[96];                 /* the agreed node map, described ("2 nodes x 4 ranks") */
  int nnodes, local_rank;         /* ... its node count (0: not agreed yet) and this rank's place on its node */
  uint64_t ef_slots, ef_bytes, ef_breaks, ef_calls; /* error feedback: locked slots, residual bytes, breaks, calls */
  pthread_mutex_t lock;
} nsc_comm_log;

/* "allreduce", "reducescatter", "broadcast", ...; algo: the plan's algorithm's name. */
static inline int nsc_log_coll_id(const nsc_rec *r) { return (unsigned)r->coll < NSC_NCOLLS ? r->coll : 0; }
static inline const char *nsc_log_coll(const nsc_rec *r) {
  static const char *const names[NSC_NCOLLS] = {"allreduce", "reducescatter", "allgather", "broadcast", "reduce",
                                                "alltoall", "gather", "scatter", "send", "recv"};
  return names[nsc_log_coll_id(r)];
}
static inline int nsc_log_p2p(const nsc_rec *r) {
  return nsc_log_coll_id(r) == NSC_COLL_SEND || nsc_log_coll_id(r) == NSC_COLL_RECV;
}
static inline const char *nsc_log_algo(const nsc_rec *r) { return nsc_alg_name((nsc_alg)r->alg); }

void nsc_log_init(const nsc_config *cfg);
/* What the casts of the process lost, as the core tells it (at each
 * communicator's end and at exit; the log never asks): the summary's last
 * lines (the counts and the advice) are written from the last one told. */
typedef struct {
  uint64_t casts;              /* compressed and fused calls so far */
  uint64_t overflow, underflow; /* values that became +-Inf, non-zero values that became +-0 */
  char wire[8];                /* the wire format's name */
} nsc_log_casts;
void nsc_log_tell_casts(const nsc_log_casts *t);
/* In a forked child: forget everything, write nothing. */
void nsc_log_forget(void);
/* 1 when records are kept at all (NCCLSHIM_LOG != off or a trace file). */
int nsc_log_on(void);

/* The communicator's id, told when its entry is made (before any record:
 * a log first opened by a record committed before the check is named by it). */
void nsc_log_comm_init(nsc_comm_log *l, uint64_t id);
/* Name the communicator (rank and size known); a log first opened by a record
 * committed before the check gets its rank here. */
void nsc_log_comm_open(nsc_comm_log *l, uint64_t id, int rank, int nranks);
/* The communicator failed its settings check (why: the message its calls
 * answer with): its summary says so, and is written even with no record
 * (a setting differing between ranks must be reported, not leave no log). */
void nsc_log_comm_failed(nsc_comm_log *l, const char *why);
/* Told for the summary (so that rank 0 confirms what accumulation and
 * error feedback did): the accumulation learner's last state message, and
 * error feedback's locked slots, residual bytes and breaks after each of
 * its calls (plain stores: no formatting on the call path). */
void nsc_log_accum_state(nsc_comm_log *l, const char *text);
/* What the communicator's fabric measurement agreed (learned: the fit's
 * values; else text says why not), from how many sampled launches, and the
 * call whose decision first read it, for the summary and the JSON log. */
void nsc_log_fabric(nsc_comm_log *l, int learned, uint64_t launch_ns, uint64_t ps_per_byte, uint64_t price,
                    int samples, uint64_t call, const char *text);
/* Told at the settings check: the communicator's nodes (described), how many,
 * and this rank's index on its node. */
void nsc_log_comm_nodes(nsc_comm_log *l, const char *text, int nnodes, int local_rank);
void nsc_log_ef_state(nsc_comm_log *l, uint64_t slots, uint64_t bytes, uint64_t breaks);
/* Start a record: clocks, first mark (none while the stream is captured;
 * none for a passthrough inside a user group, in_group: its work runs at the
 * group end, after any mark taken here). */
void nsc_log_begin(nsc_rec *r, const nsc_backend *be, nsc_stream s, int in_group);
/* A call's record from what its caller tells: the collective (NSC_COLL_*),
 * the plan's algorithm (its action follows from it), its number on the
 * communicator, count and types (wire bytes 0 for a call answered locally),
 * timed from here when logging is on (in_group: inside a user group, where
 * nothing runs before its end). */
void nsc_rec_start(nsc_rec *r, int coll, nsc_alg alg, uint64_t seq, size_t count, ncclDataType_t dt,
                   ncclDataType_t wire_dt, ncclRedOp_t op, const nsc_backend *be, nsc_stream s, int in_group);
/* The same for an observed call (forwarded untouched: PLAIN, grouped apart
 * as NSC_ACT_OBSERVE; op -1 when it does not reduce). */
void nsc_rec_observe(nsc_rec *r, int coll, uint64_t seq, size_t count, ncclDataType_t dt, int op,
                     const nsc_backend *be, nsc_stream s, int in_group);
void nsc_log_mark(nsc_rec *r, int which);
/* The record is complete from the host's view (its work is enqueued). */
void nsc_log_commit(nsc_comm_log *l, nsc_rec *r);
/* Drop a record's marks without committing it (failed call). */
void nsc_log_discard(nsc_rec *r);
void nsc_log_accum(nsc_comm_log *l, int synced);
/* The diagnosis's view of one intercepted all-reduce, before its real call
 * (seq: the shim's call counter of the communicator, the record's `seq`).
 * Observe-only: nothing is issued, nothing decided; a no-op unless logging
 * and NCCLSHIM_DIAG are on. */
void nsc_log_call(nsc_comm_log *l, uint64_t seq, size_t count, ncclDataType_t dt, ncclRedOp_t op, const void *send,
                  const void *recv);
/* The same for a reduce-scatter outside a group (count: the whole send
 * buffer, recvcount times the ranks): its passes are learned too (FSDP2,
 * ZeRO), as elements of their own. */
void nsc_log_call_rs(nsc_comm_log *l, uint64_t seq, size_t count, ncclDataType_t dt, ncclRedOp_t op, const void *send,
                     const void *recv);
/* Before an observed call's real call (NSC_ACT_OBSERVE), on the calling
 * thread: its CPU and run-queue time inside the call will not count as
 * compute (as for an accumulable call); seq: the record's seq. A no-op
 * without the diagnosis. */
void nsc_log_observe(nsc_comm_log *l, uint64_t seq);
/* Write this communicator's summary (and its JSON lines / trace events). */
void nsc_log_comm_close(nsc_comm_log *l);

#endif
