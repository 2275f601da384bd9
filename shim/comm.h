/* comm.h — per-communicator state, keyed by the ncclComm_t pointer.
 *
 * A communicator's entry is created at its first intercepted call and removed
 * at ncclCommDestroy/ncclCommAbort, so a new communicator that reuses a
 * destroyed one's address starts fresh. Entries are reference counted: an
 * abort from PyTorch's watchdog thread while another thread is inside a call
 * on the same communicator frees the entry only when that call leaves.
 * The table lock is never held across a call into NCCL. */
#ifndef NSC_COMM_H
#define NSC_COMM_H

#include <nccl.h>
#include <pthread.h>
#include <stdint.h>

#include "accum.h"
#include "backend.h"
#include "ef.h"
#include "fabric.h"
#include "log.h"
#include "real.h"
#include "topo.h"

struct nsc_pending; /* queue.h: work waiting for a nonblocking communicator */

/* Bytes of a communicator's staging-room state (staging.c asserts it fits). */
#define NSC_STAGE_MEM 1024

/* One of the shim's own small all-reduces, issued and not yet collected. */
typedef struct nsc_xchg {
  const nsc_backend *be;
  void *buf;
  nsc_stream s;
  int n;
  int live;           /* buf is held */
  ncclResult_t r;     /* the collective's result at issue */
} nsc_xchg;

/* An accumulation agreement in flight (accumulate.c): its copy back is
 * enqueued right behind its collective, and its result read by a
 * non-blocking query, waited for only before decision apply_at. */
typedef struct {
  nsc_xchg x;         /* x.live while its buffer is held */
  int answered;       /* v holds the result (or r says why not) */
  uint64_t apply_at;  /* nsc_accum_apply_at() when issued */
  int64_t v[NSC_ACC_AGREE_N];
} nsc_agree;

/* What a communicator learns of its fabric (coll/learn.c; fabric/fabric.h the
 * pure learner): its samples' marks, taken on the caller's stream around one
 * real launch of a call (where: NSC_LEARN_AT_*) and read without waiting,
 * and the agreement. */
#define NSC_LEARN_PENDING 16 /* timed calls whose marks are not read yet (more: not timed) */
enum {
  NSC_LEARN_AT_NONE = 0, /* no launch of this call is a sample */
  NSC_LEARN_AT_CALL,     /* the call as it is (a plain plan, or one the policy forwards) */
  NSC_LEARN_AT_WIRE,     /* the ring's wire all-reduce (its first chunk) */
  NSC_LEARN_AT_GATHER    /* flat two-phase's all-gather of encoded sums (its first piece) */
};
typedef struct {
  nsc_fab f;
  int at, take;               /* the current call's sampled launch (NSC_LEARN_AT_*) and its size index */
  nsc_mark m0;                /* its first mark, while the launch is issued */
  const nsc_backend *m0_be;   /* m0's backend while held */
  int seen;                   /* eligible calls while measuring (learn.c's cap) */
  struct {
    int size;                   /* the learner's size index */
    nsc_mark m[2];              /* before and after the call */
    const nsc_backend *be;      /* their backend while held (NULL: a free slot) */
  } pend[NSC_LEARN_PENDING];
  int after;            /* eligible calls since the last sample was taken */
  int issued;           /* the agreement is in flight (x) */
  int got;              /* ... its answer: 0 not yet read, 1 in v, -1 failed */
  nsc_xchg x;
  int64_t v[NSC_FAB_VALS];
} nsc_learn;

typedef struct nsc_comm {
  ncclComm_t comm;
  int refs;
  int rank, nranks;
  /* 0 = not yet checked, 1 = checked and usable, -1 = configuration mismatch */
  int checked;
  int nonblocking;         /* a real call answered ncclInProgress: no pipelining */
  int check_queued;        /* a check waits for the end of the current group */
  int untouched;           /* some rank cannot run the kernels: forward every call */
  int host_rule;           /* agreed at the check: some rank's first call had host buffers (plan/cost.h's host
                            * rule: the codec's time counts when plans weigh pieces against launches) */
  char mismatch_msg[480];
  nsc_topo topo;           /* its nodes, agreed at the check (topo/topo.h) */
  int hier_on;             /* NCCLSHIM_ALGO=hier adopted (exec/hier.h): its calls of hier's size run in stages */
  ncclComm_t hier_intra, hier_cross; /* ... its sub-communicators: this node's ranks, one rank per node */
  struct nsc_comm *hier_xc;          /* ... the shim's entry for hier_cross (internal) */
  int internal;            /* a sub-communicator of the shim's own: no log records, no counters */
  struct nsc_comm *parent; /* ... the user's communicator it serves: its staging is the parent's */
  int key_rank;            /* ... its rank in the parent (stochastic rounding's key) */
  uint64_t seq;            /* intercepted all-reduces on this communicator */
  nsc_accum accum;
  nsc_agree agree[NSC_ACC_INFLIGHT]; /* accumulation: agreements in flight, oldest first */
  int nagree;
  int agree_queued;        /* ... one is queued for the current group's end */
  nsc_ef ef;               /* error feedback: the buckets' residuals (ef/ef.h) */
  nsc_learn learn;         /* its fabric measurement (NCCLSHIM_LAUNCH_BYTES=auto) */
  /* The staging room's state (staging/staging.h: its agreed block, the
   * user group's needs, the settle list, the growth agreement), opaque
   * here: the core knows its size only. A sub-communicator of the shim's
   * own uses its parent's block. */
  _Alignas(16) unsigned char stage_mem[NSC_STAGE_MEM];
  void (*drop_stage)(struct nsc_comm *); /* set by the staging room once it holds memory: frees it */
  int wire_out;            /* cast-backs holding a wire buffer of the block, not yet run or dropped
                            * (atomic; parked ones, and those another thread is running) */
  ncclResult_t flush_err;  /* parked work the shim ran itself failed: told at the next poll (atomic) */
  int ended;               /* destroyed or aborted: nothing more is issued on it */
  int accum_skip;          /* accumulation answered its last accumulable call locally (atomic) */
  nsc_comm_log log;
  pthread_mutex_t lock;    /* guards pending, staging, log, accum and agree of this entry */
  pthread_mutex_t finish_lock; /* serialises running parked work (queue.c) */
  struct nsc_pending *pending;    /* nonblocking: work to run once NCCL reports completion */
  void (*drop)(struct nsc_comm *); /* set by the room that allocated pending (queue/queue.c): it
                                    * frees that when the entry is freed */
  struct nsc_comm *next;
} nsc_comm;

/* The table: a small chained hash under one mutex (comm.c); lookups are on
 * every call's path, inline here, creation is comm.c's. */
#define NSC_COMM_BUCKETS 256
extern nsc_comm *nsc_comm_table[NSC_COMM_BUCKETS];
extern pthread_mutex_t nsc_comm_table_lock;
static inline unsigned nsc_comm_bucket(ncclComm_t c) {
  uintptr_t p = (uintptr_t)c;
  return (unsigned)((p >> 4) ^ (p >> 12)) % NSC_COMM_BUCKETS;
}
static inline nsc_comm *nsc_comm_lookup_locked(ncclComm_t comm) {
  for (nsc_comm *c = nsc_comm_table[nsc_comm_bucket(comm)]; c; c = c->next)
    if (c->comm == comm) return c;
  return NULL;
}
/* Look up without creating (refs + 1), NULL if unknown. */
static inline nsc_comm *nsc_comm_find(ncclComm_t comm) {
  pthread_mutex_lock(&nsc_comm_table_lock);
  nsc_comm *c = nsc_comm_lookup_locked(comm);
  if (c) __atomic_add_fetch(&c->refs, 1, __ATOMIC_RELAXED);
  pthread_mutex_unlock(&nsc_comm_table_lock);
  return c;
}
/* Create the entry (refs + 1; another thread's, when it was first). NULL
 * only when out of memory. */
nsc_comm *nsc_comm_create(ncclComm_t comm);
/* Find or create the entry (refs + 1). NULL only when out of memory. */
static inline nsc_comm *nsc_comm_get(ncclComm_t comm) {
  nsc_comm *c = nsc_comm_find(comm);
  return c ? c : nsc_comm_create(comm);
}
/* Take one more reference on an entry the caller already holds (a count
 * that cannot rise from 0: an atomic of its own, no lock). */
static inline void nsc_comm_ref(nsc_comm *c) { __atomic_add_fetch(&c->refs, 1, __ATOMIC_RELAXED); }
/* Drop a reference; frees a detached entry when the last one goes. */
void nsc_comm_put(nsc_comm *c);
/* Remove the entry from the table (refs + 1 for the caller, or NULL if none):
 * the caller releases its resources, then nsc_comm_put(). */
nsc_comm *nsc_comm_detach(ncclComm_t comm);
/* A destroyed or aborted communicator's pending agreement: its exchange
 * abandoned (the slot comes back once the collective completed), no wait. */
void nsc_accum_release(nsc_comm *c);
/* The same for its fabric measurement: the sample marks released, its
 * agreement's exchange abandoned. */
void nsc_learn_release(nsc_comm *c);
/* Around the real launch `at` of the current call (begin just before it is
 * issued on s; end just after, with what it answered): its marks, where the
 * learner chose that launch as the call's sample (coll/learn.c); nothing
 * otherwise, and nothing for a later launch of the same call (a chunk, a
 * piece). A launch that failed, or that a nonblocking communicator had not
 * enqueued yet (ncclInProgress: its work may follow the end mark), is not
 * timed. */
/* The current call's sample ends untimed: its first mark released (a launch
 * never issued after a failure), nothing chosen any more. */
void nsc_learn_drop_open(nsc_comm *c);
void nsc_learn_time_begin(nsc_comm *c, const nsc_backend *be, nsc_stream s, int at);
void nsc_learn_time_end(nsc_comm *c, const nsc_backend *be, nsc_stream s, int at, ncclResult_t r);
/* After the real ncclCommInit* / ncclCommSplit returned r (passed back
 * unchanged): when the shim is active and r is ncclSuccess or
 * ncclInProgress, set up the CUDA context the new communicator(s) will use
 * (nsc_backend_prepare(devs, ndev)). No lock is held, nothing is issued. */
ncclResult_t nsc_comm_created(ncclResult_t r, const int *devs, int ndev);

/* Ended: ncclCommDestroy or ncclCommAbort was called on the communicator
 * (its entry's flag, set before the real call; an internal sub-communicator
 * ends with its parent). From then on the shim issues nothing on it or on its
 * sub-communicators: PyTorch's watchdog aborts from another thread while the
 * caller is blocked inside a real call, and the loops that issue "the rest
 * anyway" after a failure (rule 1) would otherwise go on issuing on a freed
 * communicator. A call already inside NCCL when the end lands is NCCL's. */
static inline int nsc_comm_ended(const nsc_comm *c) {
  return __atomic_load_n(&c->ended, __ATOMIC_ACQUIRE) ||
         (c->parent && __atomic_load_n(&c->parent->ended, __ATOMIC_ACQUIRE));
}
/* What a call the shim did not issue on an ended communicator answers
 * (ncclInvalidUsage; noted for ncclGetLastError). */
ncclResult_t nsc_ended(const nsc_comm *c);
/* Every real NCCL call the shim makes on a communicator of its own accord
 * (its exchanges, the steps of a plan, the queries of its check, the polls
 * of a nonblocking communicator): `call` (e.g. AllReduce(buf, ...)) on
 * nsc_real unless c has ended. tests/layers/issue.py checks that no other
 * real call on a communicator is made outside the hooks' own forwarding. */
#define NSC_ISSUE(c, call) (nsc_comm_ended(c) ? nsc_ended(c) : nsc_real.call)

/* Poll nonblocking communicator `on` (c's own or one of its
 * sub-communicators) until its operations are enqueued (the shim's own, or
 * a group's; never the caller's stream, never the device); gives up with
 * nsc_ended() once c has ended. */
ncclResult_t nsc_wait_nonblocking(const nsc_comm *c, ncclComm_t on);
/* A real call's answer r on c, made on `on` (c's own communicator or one
 * of its sub-communicators): ncclInProgress marks c nonblocking and is
 * waited for; any other answer is returned as it is. */
static inline ncclResult_t nsc_enqueued(nsc_comm *c, ncclComm_t on, ncclResult_t r) {
  if (r != ncclInProgress) return r;
  c->nonblocking = 1;
  return nsc_wait_nonblocking(c, on);
}

#endif
