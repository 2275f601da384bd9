/* log_rec.c — the log's hot path: records, the per-communicator ring, reading
 * marks without waiting, totals, and opening/closing a communicator's log
 * (see log.h; the writers are in log_out.c and log_trace.c).
 *
 * A committed record enters the ring with its marks. Marks are read oldest
 * first when later records arrive (the host backend's at once), stopping at
 * the first whose work is not complete: elapsed() never waits, nothing is
 * synchronised. A read record gives its marks back (CUDA events return to
 * the pool) and its times are folded into the totals. When the ring is full
 * the oldest record leaves it: still unread, its marks are read one last time
 * (timing "unknown" if not complete), and in detail mode it counts as
 * dropped from detail. Calls, records and bytes are counted at commit and
 * stay exact whatever the ring size. Summary mode keeps no detail: only
 * records still waiting for their marks stay in the ring (at most 1024).
 *
 * Detail records leave the ring to the writer thread (log_writer.c), which
 * takes the resolved ones of every open log at least once a second, sooner
 * when a ring is half full (nsc_log_collect); "dropped from detail" counts
 * those that left the ring before it came. A closed log is handed to the
 * writer whole (nsc_log_final): its last records, totals and histograms.
 *
 * Must not: write files, wait for the device, or allocate per call (the ring
 * grows geometrically to its bound, then stays); the writer's side never
 * queries the device (it takes only resolved records; at SIGTERM the unread
 * ones become "unknown"). */
#include "log.h"

#include <fcntl.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cu_ctx.h"
#include "diag.h"
#include "diag_nvml.h"
#include "log_int.h"
#include "names.h"
#include "policy.h"

#define SUMMARY_RING_MAX 1024 /* summary mode: records waiting for their marks */

static int keep;              /* records are kept (NCCLSHIM_LOG != off or a trace file); 0 in a forked child */
static int detail;            /* detail kept (log_fmt.c's nsc_log_detail, read at init) */
static int forgotten;         /* forked child: touch nothing, write nothing */
static int diag_on;           /* NCCLSHIM_DIAG and records kept */
static uint64_t diag_min_bytes;
static long long diag_k;
static size_t ring_cap = 4096;
/* CLOCK_REALTIME - CLOCK_MONOTONIC, read at activation and at each
 * communicator's opening: one clock read per call gives both clocks. */
static int64_t wall_off;
static pthread_mutex_t open_lock = PTHREAD_MUTEX_INITIALIZER;
static int next_comm_seq;
static int proc_rank_seq = INT_MAX; /* the first logged communicator's (open_lock): it names the files */
static nsc_comm_log *open_logs;   /* every open log (open_lock) */

static uint64_t now_ns(clockid_t id) {
  struct timespec ts;
  clock_gettime(id, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void refresh_wall_offset(void) {
  uint64_t m = now_ns(CLOCK_MONOTONIC), w = now_ns(CLOCK_REALTIME);
  __atomic_store_n(&wall_off, (int64_t)(w - m), __ATOMIC_RELAXED);
}

static void at_exit(void);
static const nsc_log_source source; /* what the writer takes from the open logs (below) */

void nsc_log_init(const nsc_config *cfg) {
  nsc_log_fmt_init(cfg);
  keep = cfg->log != NSC_LOG_OFF || cfg->trace_file[0];
  detail = nsc_log_detail();
  ring_cap = (size_t)cfg->log_ring;
  diag_on = keep && cfg->diag;
  diag_min_bytes = (uint64_t)cfg->min_bytes;
  diag_k = cfg->accum_steps;
  refresh_wall_offset();
  if (!keep) return;
  nsc_log_out_init(cfg);
  nsc_log_writer_told(&source);
  nsc_nvtx_init();
  atexit(at_exit);
}

void nsc_log_forget(void) {
  forgotten = 1;
  keep = 0;
}

int nsc_log_on(void) { return keep; }

/* Opening ----------------------------------------------------------------- */

static void open_locked(nsc_comm_log *l, uint64_t id, int rank, int nranks) {
  if (l->open == NSC_LOG_UNOPENED) {
    /* The entry was zeroed at creation; accumulation counters may already run. */
    pthread_mutex_init(&l->lock, NULL);
    l->id = id;
    l->rank = -1;
    l->nranks = 0;
    l->comm_seq = next_comm_seq++;
    l->open_next = open_logs;
    open_logs = l;
    __atomic_store_n(&l->open, NSC_LOG_OPEN, __ATOMIC_RELEASE);
  }
  if (l->open == NSC_LOG_OPEN && l->rank < 0 && rank >= 0) {
    l->rank = rank;
    l->nranks = nranks;
    if (l->comm_seq < proc_rank_seq) {
      __atomic_store_n(&proc_rank_seq, l->comm_seq, __ATOMIC_RELEASE);
      nsc_log_set_proc_rank(rank);
    }
  }
}

void nsc_log_comm_open(nsc_comm_log *l, uint64_t id, int rank, int nranks) {
  refresh_wall_offset();
  pthread_mutex_lock(&open_lock);
  open_locked(l, id, rank, nranks);
  pthread_mutex_unlock(&open_lock);
}

void nsc_log_comm_failed(nsc_comm_log *l, const char *why) {
  pthread_mutex_lock(&l->lock);
  snprintf(l->failed, sizeof l->failed, "%s", why);
  pthread_mutex_unlock(&l->lock);
}

void nsc_log_accum_state(nsc_comm_log *l, const char *text) {
  pthread_mutex_lock(&l->lock);
  snprintf(l->accum_state, sizeof l->accum_state, "%s", text);
  pthread_mutex_unlock(&l->lock);
}

void nsc_log_fabric(nsc_comm_log *l, int learned, uint64_t launch_ns, uint64_t ps_per_byte, uint64_t price,
                    int samples, uint64_t call, const char *text) {
  pthread_mutex_lock(&l->lock);
  l->fab_samples = samples;
  l->fab_call = call;
  l->fab_learned = learned;
  l->fab_launch_ns = launch_ns;
  l->fab_ps_per_byte = ps_per_byte;
  l->fab_price = price;
  snprintf(l->fabric, sizeof l->fabric, "%s", text);
  pthread_mutex_unlock(&l->lock);
}

void nsc_log_comm_nodes(nsc_comm_log *l, const char *text, int nnodes, int local_rank) {
  pthread_mutex_lock(&l->lock);
  snprintf(l->nodes, sizeof l->nodes, "%s", text);
  l->nnodes = nnodes;
  l->local_rank = local_rank;
  pthread_mutex_unlock(&l->lock);
}

void nsc_log_ef_state(nsc_comm_log *l, uint64_t slots, uint64_t bytes, uint64_t breaks) {
  __atomic_store_n(&l->ef_slots, slots, __ATOMIC_RELAXED);
  __atomic_store_n(&l->ef_bytes, bytes, __ATOMIC_RELAXED);
  __atomic_store_n(&l->ef_breaks, breaks, __ATOMIC_RELAXED);
  __atomic_add_fetch(&l->ef_calls, 1, __ATOMIC_RELAXED);
}

void nsc_log_comm_init(nsc_comm_log *l, uint64_t id) { l->id = id; }

/* A record committed before the communicator's check (a call first seen in
 * a group) opens its log, under the id it was told at the entry's creation;
 * its rank comes with nsc_log_comm_open. */
static void open_lazily(nsc_comm_log *l) {
  pthread_mutex_lock(&open_lock);
  open_locked(l, l->id, -1, 0);
  pthread_mutex_unlock(&open_lock);
}

/* Marks ------------------------------------------------------------------- */

static void take(nsc_rec *r, int which) {
  if (r->marked & (1u << which)) r->be->mark_release(&r->m[which]);
  r->marked &= ~(1u << which);
  if (r->be == &nsc_backend_host) { /* inline: the host backend's mark is a clock read */
    r->m[which].host_ns = now_ns(CLOCK_MONOTONIC);
    r->m[which].ev = NULL;
    r->marked |= 1u << which;
  } else if (!r->be->mark(r->stream, &r->m[which])) {
    r->marked |= 1u << which;
  } else {
    r->marks_dropped++; /* counted, never silent: the summary says how many */
  }
}

void nsc_log_begin(nsc_rec *r, const nsc_backend *be, nsc_stream s, int in_group) {
  r->be = be;
  r->stream = s;
  r->host_ns = now_ns(CLOCK_MONOTONIC);
  r->wall_ns = r->host_ns + (uint64_t)__atomic_load_n(&wall_off, __ATOMIC_RELAXED);
  r->state = NSC_REC_PENDING;
  int capturing = 0;
  /* A passthrough inside a group is only queued: its work runs at the group
   * end, after any mark we could take here. A captured stream takes no
   * event, and no event is queried while such a record is committed. */
  if (be != &nsc_backend_host && (be->capturing(s, &capturing) || capturing)) {
    r->untimed = NSC_UNTIMED_CAPTURE;
  } else if ((r->action == NSC_ACT_PASS || r->action == NSC_ACT_OBSERVE) && in_group) {
    r->untimed = NSC_UNTIMED_GROUP;
  } else if (be == &nsc_backend_host) {
    r->m[NSC_MARK_BEGIN].host_ns = r->host_ns;
    r->m[NSC_MARK_BEGIN].ev = NULL;
    r->marked |= 1u << NSC_MARK_BEGIN;
  } else {
    take(r, NSC_MARK_BEGIN);
  }
  nsc_nvtx_start(r);
}

void nsc_log_mark(nsc_rec *r, int which) {
  if (!r->be || r->untimed || !keep) return;
  take(r, which);
}

static void release_marks(nsc_rec *r) {
  if (r->be == &nsc_backend_host) { /* clock reads: nothing to give back */
    r->marked = 0;
    return;
  }
  for (int i = 0; i < NSC_NMARKS; i++)
    if (r->be && (r->marked & (1u << i))) r->be->mark_release(&r->m[i]);
  r->marked = 0;
}

void nsc_log_discard(nsc_rec *r) {
  if (!forgotten) release_marks(r);
  r->marked = 0;
  nsc_nvtx_end(r);
}

/* Reading times ------------------------------------------------------------ */

/* The backend's elapsed(), inline for host clock reads (the common case on
 * the host NCCL, and the one the overhead benchmark measures). */
static int elapsed(const nsc_rec *r, int a, int b, uint64_t *ns) {
  if (r->be == &nsc_backend_host) {
    *ns = r->m[b].host_ns >= r->m[a].host_ns ? r->m[b].host_ns - r->m[a].host_ns : 0;
    return 1;
  }
  return r->be->elapsed(&r->m[a], &r->m[b], ns);
}

static void read_pair(nsc_rec *r, int a, int b, int t) {
  uint64_t ns;
  if (!(r->marked & (1u << a)) || !(r->marked & (1u << b))) return;
  if (elapsed(r, a, b, &ns) != 1) return;
  r->ns[t] = ns;
  r->have |= 1u << t;
}

/* 1: times read (or nothing to read), 0: not complete yet, -1: error. */
static int read_times(nsc_rec *r) {
  if (r->untimed || !r->marked) return 1;
  if (r->marked == (1u << NSC_MARK_BEGIN | 1u << NSC_MARK_END) && r->be == &nsc_backend_host) {
    elapsed(r, NSC_MARK_BEGIN, NSC_MARK_END, &r->ns[NSC_T_COLL]); /* a passthrough on the host */
    r->have = 1u << NSC_T_COLL;
    return 1;
  }
  int first = __builtin_ctz(r->marked), last = 31 - __builtin_clz(r->marked);
  if (first == last) return 1;
  uint64_t ns;
  int rc = elapsed(r, first, last, &ns);
  if (rc != 1) return rc;
  /* The last mark is complete, so are the earlier ones (stream order). */
  int a = (r->marked & (1u << NSC_MARK_CAST_IN)) ? NSC_MARK_CAST_IN : NSC_MARK_BEGIN;
  int b = (r->marked & (1u << NSC_MARK_COLL)) ? NSC_MARK_COLL : NSC_MARK_END;
  read_pair(r, NSC_MARK_BEGIN, NSC_MARK_CAST_IN, NSC_T_CAST_IN);
  read_pair(r, a, b, NSC_T_COLL);
  read_pair(r, NSC_MARK_COLL, NSC_MARK_END, NSC_T_CAST_OUT);
  return 1;
}

/* The CUDA device of a record's timing marks (a record of the CUDA backend
 * only: its marks are pooled events), -1 when it has none. Memory reads only. */
static int rec_dev(const nsc_rec *r) {
  if (!r->marked) return -1;
  const nsc_cuev *e = r->m[__builtin_ctz(r->marked)].ev;
  return e && e->owner && e->owner->dev >= 0 && e->owner->dev < NSC_NVML_MAXDEV ? (int)e->owner->dev : -1;
}

/* The diagnosis's share of a read record: its pass, its work's length. */
static void diag_rec(nsc_comm_log *l, const nsc_rec *r) {
  nsc_diag *d = l->diag;
  if (!d) return;
  int gpu = r->be != &nsc_backend_host;
  if (gpu) d->want_cpu = 0;
  int timed = r->state != NSC_REC_UNKNOWN && (r->have & (1u << NSC_T_COLL));
  uint64_t dur = 0;
  for (int t = 0; t < NSC_NTIMES; t++)
    if (r->have & (1u << t)) dur += r->ns[t];
  nsc_diag_in in = {r->dpass, r->dlast, r->host_ns, dur, timed, gpu, r->untimed == NSC_UNTIMED_CAPTURE,
                    r->action == NSC_ACT_SKIP, r->dbusy};
  nsc_diag_rec(d, &in);
}

static void fold_time(nsc_comm_log *l, const nsc_rec *r) {
  diag_rec(l, r);
  if (r->state == NSC_REC_UNKNOWN) { l->unknown++; return; }
  if (!(r->have & (1u << NSC_T_COLL))) { l->untimed++; return; }
  nsc_log_totals *t = &l->by_action[(unsigned)r->action < NSC_ACT_COUNT ? r->action : NSC_ACT_PASS];
  uint64_t cast = 0;
  if (r->have & (1u << NSC_T_CAST_IN)) cast += r->ns[NSC_T_CAST_IN];
  if (r->have & (1u << NSC_T_CAST_OUT)) cast += r->ns[NSC_T_CAST_OUT];
  if (!t->timed || r->ns[NSC_T_COLL] < t->min_ns) t->min_ns = r->ns[NSC_T_COLL];
  if (r->ns[NSC_T_COLL] > t->max_ns) t->max_ns = r->ns[NSC_T_COLL];
  t->timed++;
  t->timed_bytes += r->logical_bytes;
  t->time_ns += r->ns[NSC_T_COLL];
  t->cast_ns += cast;
  if (!t->hist) t->hist = calloc(NSC_LOG_HIST_BINS, sizeof *t->hist);
  if (t->hist) nsc_hist_add(t->hist, r->ns[NSC_T_COLL]);
  uint64_t end = r->host_ns + r->ns[NSC_T_COLL] + cast;
  if (end > l->end_ns) l->end_ns = end;
}

/* Read a record's marks; force: whatever the answer (not complete = unknown).
 * Returns 1 when the record is resolved (marks given back, totals updated). */
static int resolve(nsc_comm_log *l, nsc_rec *r, int force) {
  int rc = read_times(r);
  if (rc == 0 && !force) return 0;
  r->state = rc == 1 ? NSC_REC_DONE : NSC_REC_UNKNOWN;
  release_marks(r);
  fold_time(l, r);
  return 1;
}

/* Ring ------------------------------------------------------------------- */

static nsc_rec *at(const nsc_comm_log *l, size_t i) { return &l->ring[(l->ring_head + i) % l->ring_alloc]; }

static int grow(nsc_comm_log *l) {
  size_t cap = detail || ring_cap < SUMMARY_RING_MAX ? ring_cap : SUMMARY_RING_MAX;
  if (l->ring_alloc >= cap) return -1;
  size_t n = l->ring_alloc ? 2 * l->ring_alloc : 16;
  if (n > cap) n = cap;
  nsc_rec *g = malloc(n * sizeof *g);
  if (!g) return -1;
  for (size_t i = 0; i < l->ring_len; i++) g[i] = *at(l, i);
  free(l->ring);
  l->ring = g;
  l->ring_alloc = n;
  l->ring_head = 0;
  return 0;
}

/* may_query = 0 while a stream is being captured: an unread record leaving
 * the ring is then "unknown" without asking the device. */
static void evict_oldest(nsc_comm_log *l, int may_query) {
  if (l->ring_done == 0) {
    nsc_rec *o = at(l, 0);
    if (may_query) {
      resolve(l, o, 1);
    } else {
      o->state = NSC_REC_UNKNOWN;
      release_marks(o);
      fold_time(l, o);
    }
  } else {
    l->ring_done--;
  }
  if (detail) l->dropped++;
  l->ring_head = (l->ring_head + 1) % l->ring_alloc;
  l->ring_len--;
}

/* Resolve records oldest first until one is not complete. The record just
 * committed is asked only when its marks are host clock reads: a device
 * event recorded a moment ago is not complete, and asking costs a query. */
static void advance(nsc_comm_log *l, int may_query) {
  while (may_query && l->ring_done < l->ring_len) {
    nsc_rec *r = at(l, l->ring_done);
    if (l->ring_done + 1 == l->ring_len && r->marked && r->be != &nsc_backend_host) break;
    if (!resolve(l, r, 0)) break;
    l->ring_done++;
  }
  if (!detail) { /* nothing to keep once resolved */
    l->ring_head = (l->ring_head + l->ring_done) % (l->ring_alloc ? l->ring_alloc : 1);
    l->ring_len -= l->ring_done;
    l->ring_done = 0;
  }
}

static void push(nsc_comm_log *l, nsc_rec *r) {
  int may_query = r->untimed != NSC_UNTIMED_CAPTURE;
  if (l->ring_len == l->ring_alloc && grow(l)) {
    if (!l->ring_alloc) { /* no memory for a ring at all: read it now, whatever the answer */
      resolve(l, r, 1);  /* (a captured record has no marks: nothing is queried) */
      return;
    }
    evict_oldest(l, may_query);
  }
  *at(l, l->ring_len) = *r;
  l->ring_len++;
  advance(l, may_query);
}

/* The host stand-in for device busy, read once per pass on the thread of
 * the pass's first bucket: its time on a CPU and waiting for one (run
 * queue), from /proc/thread-self/schedstat (kept open per thread, closed at
 * the thread's exit); without it, the thread's CPU clock and no run-queue
 * time. cpu = run = -1 when neither can be read. */
static pthread_key_t ss_key;
static pthread_once_t ss_once = PTHREAD_ONCE_INIT;
static __thread int ss_fd = -1, ss_tried;
static void ss_close(void *p) {
  int fd = (int)(intptr_t)p - 1;
  if (fd >= 0) close(fd);
}
static void ss_init(void) { (void)pthread_key_create(&ss_key, ss_close); }

/* The reading taken before this thread's current accumulable or observed
 * call (obs: which of the two, as their call numbers are apart). */
static __thread struct {
  const nsc_comm_log *l;
  uint64_t seq;
  int64_t cpu, runq;
  int obs;
} tl_call;

static void thread_busy(int64_t *cpu, int64_t *runq) {
  *cpu = *runq = -1;
  if (!ss_tried) {
    ss_tried = 1;
    pthread_once(&ss_once, ss_init);
    ss_fd = open("/proc/thread-self/schedstat", O_RDONLY | O_CLOEXEC);
    if (ss_fd >= 0 && pthread_setspecific(ss_key, (void *)(intptr_t)(ss_fd + 1))) {
      close(ss_fd);
      ss_fd = -1;
    }
  }
  char buf[96];
  ssize_t n = ss_fd >= 0 ? pread(ss_fd, buf, sizeof buf - 1, 0) : -1;
  unsigned long long run = 0, wait = 0;
  if (n > 0) {
    buf[n] = '\0';
    if (sscanf(buf, "%llu %llu", &run, &wait) == 2) {
      *cpu = (int64_t)run;
      *runq = (int64_t)wait;
      return;
    }
  }
  struct timespec ts;
  if (!clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts)) *cpu = (int64_t)ts.tv_sec * 1000000000ll + ts.tv_nsec;
}

void nsc_log_commit(nsc_comm_log *l, nsc_rec *r) {
  if (!keep || !r->be) { nsc_log_discard(r); return; }
  nsc_log_writer_start(); /* once: the first logged call starts the writer */
  if (__atomic_load_n(&l->open, __ATOMIC_ACQUIRE) == NSC_LOG_UNOPENED) open_lazily(l);
  nsc_nvtx_end(r);
  pthread_mutex_lock(&l->lock);
  if (l->open != NSC_LOG_OPEN) { /* closed at exit while this call was running */
    pthread_mutex_unlock(&l->lock);
    nsc_log_discard(r);
    return;
  }
  l->nrec++;
  r->lseq = nsc_log_p2p(r) ? ++l->np2p : ++l->nmatch;
  int obs = r->action == NSC_ACT_OBSERVE;
  int nudge_nvml = 0;
  r->dpass = -1;
  r->dlast = 0;
  r->dbusy = -1;
  if (l->diag) { /* the diagnosis: the pass of this call, and (host) what it spent inside */
    r->dpass = l->diag->cur_pass;
    r->dlast = !obs && l->diag->last_call == r->seq;
    if (tl_call.l == l && tl_call.seq == r->seq && tl_call.obs == obs) { /* read before the call on this thread */
      int64_t cpu, runq;
      thread_busy(&cpu, &runq);
      if (cpu >= tl_call.cpu && runq >= tl_call.runq) r->dbusy = (cpu - tl_call.cpu) + (runq - tl_call.runq);
      tl_call.l = NULL;
    }
    if (l->diag->cudev == -1 && r->marked && r->be != &nsc_backend_host) { /* GPU: its device, for NVML, once */
      int dev = r->be->name && !strcmp(r->be->name, "cuda") ? rec_dev(r) : -1;
      l->diag->cudev = dev >= 0 ? dev : -2; /* -2: none (another backend's marks) */
      nudge_nvml = nsc_nvml_want(dev); /* the writer reads NVML from now on */
    }
  }
  l->marks_dropped += r->marks_dropped;
  nsc_log_totals *t = &l->by_action[(unsigned)r->action < NSC_ACT_COUNT ? r->action : NSC_ACT_PASS];
  t->calls += r->action == NSC_ACT_FUSE ? (uint64_t)r->nmembers : 1;
  t->records++;
  if (r->action == NSC_ACT_PASS) l->why[(unsigned)r->why < NSC_WHY_COUNT ? r->why : NSC_WHY_NONE]++;
  if (!obs && (r->coll == NSC_COLL_ALLREDUCE || r->coll == NSC_COLL_REDUCESCATTER)) {
    if (r->dtype == ncclBfloat16 || r->dtype == ncclFloat16) l->red16_bytes += r->logical_bytes;
    else if (r->dtype == ncclFloat32) l->red32_bytes += r->logical_bytes;
  }
  if (r->action == NSC_ACT_COMPRESS && (r->dtype == ncclBfloat16 || r->dtype == ncclFloat16)) {
    l->half_tp++;
    l->half_own += r->wire_dtype == r->dtype;
  }
  t->logical_bytes += r->logical_bytes;
  t->wire_bytes += r->wire_bytes;
  if (!l->first_ns || r->host_ns < l->first_ns) {
    l->first_ns = r->host_ns;
    l->first_wall_ns = r->wall_ns;
  }
  if (r->host_ns > l->end_ns) l->end_ns = r->host_ns;
  if (!detail && !l->ring_len && (r->be == &nsc_backend_host || !r->marked))
    resolve(l, r, 1); /* summary mode, nothing waiting, readable now: no copy into the ring */
  else
    push(l, r);     /* the ring's copy owns the marks now */
  int nudge = detail && !l->nudged && l->ring_len >= (ring_cap + 1) / 2;
  if (nudge) l->nudged = 1;
  pthread_mutex_unlock(&l->lock);
  r->marked = 0;
  if (nudge || nudge_nvml) nsc_log_writer_nudge();
}

static int is_float(ncclDataType_t dt) {
  return dt == ncclFloat16 || dt == ncclBfloat16 || dt == ncclFloat32 || dt == ncclFloat64;
}

static void log_call(nsc_comm_log *l, int rs, uint64_t seq, size_t count, ncclDataType_t dt, ncclRedOp_t op,
                     const void *send, const void *recv) {
  uint64_t bytes = (uint64_t)count * nsc_dtype_size(dt);
  int fl = is_float(dt) && (op == ncclSum || op == ncclAvg);
  int acc = fl && send && recv && count > 0 && bytes >= diag_min_bytes;
  int in = !rs && op == ncclSum && !is_float(dt) && dt != ncclFloat8e4m3 && dt != ncclFloat8e5m2; /* a used-map */
  /* Nothing to learn from until an accumulable call came (the common small
   * calls of a job without one cost this test only). */
  if (!acc && !__atomic_load_n(&l->diag_acc, __ATOMIC_ACQUIRE)) return;
  if (__atomic_load_n(&l->open, __ATOMIC_ACQUIRE) == NSC_LOG_UNOPENED) open_lazily(l);
  nsc_accum_el el = nsc_diag_el(rs, send, recv, count, (int)dt, (int)op, bytes);
  pthread_mutex_lock(&l->lock);
  if (l->open == NSC_LOG_OPEN) {
    if (!l->diag) l->diag = nsc_diag_new(diag_k, detail);
    if (acc) __atomic_store_n(&l->diag_acc, 1, __ATOMIC_RELEASE);
    if (l->diag && nsc_diag_call(l->diag, seq, &el, acc, in, fl)) {
      uint64_t t = now_ns(CLOCK_MONOTONIC);
      int64_t cpu = -1, runq = -1;
      if (l->diag->want_cpu) thread_busy(&cpu, &runq); /* the host stand-in for device busy: once per pass */
      nsc_diag_boundary(l->diag, t, t + (uint64_t)__atomic_load_n(&wall_off, __ATOMIC_RELAXED), cpu, runq,
                        (uint64_t)pthread_self());
      tl_call.l = NULL;
      if (cpu >= 0 && runq >= 0) tl_call = (__typeof__(tl_call)){l, seq, cpu, runq, 0};
    } else if (acc && l->diag && l->diag->want_cpu && l->diag->cur_pass >= 0) {
      /* host: what this thread spends inside the collective is not compute */
      int64_t cpu, runq;
      thread_busy(&cpu, &runq);
      tl_call.l = NULL;
      if (cpu >= 0 && runq >= 0) tl_call = (__typeof__(tl_call)){l, seq, cpu, runq, 0};
    }
  }
  pthread_mutex_unlock(&l->lock);
}

void nsc_log_observe(nsc_comm_log *l, uint64_t seq) {
  if (!diag_on || !__atomic_load_n(&l->diag_acc, __ATOMIC_ACQUIRE)) return;
  pthread_mutex_lock(&l->lock);
  int want = l->open == NSC_LOG_OPEN && l->diag && l->diag->want_cpu && l->diag->cur_pass >= 0;
  pthread_mutex_unlock(&l->lock);
  tl_call.l = NULL;
  if (!want) return;
  int64_t cpu, runq;
  thread_busy(&cpu, &runq);
  if (cpu >= 0 && runq >= 0) tl_call = (__typeof__(tl_call)){l, seq, cpu, runq, 1};
}

void nsc_log_call(nsc_comm_log *l, uint64_t seq, size_t count, ncclDataType_t dt, ncclRedOp_t op, const void *send,
                  const void *recv) {
  if (diag_on) log_call(l, 0, seq, count, dt, op, send, recv);
}

void nsc_log_call_rs(nsc_comm_log *l, uint64_t seq, size_t count, ncclDataType_t dt, ncclRedOp_t op, const void *send,
                     const void *recv) {
  if (diag_on) log_call(l, 1, seq, count, dt, op, send, recv);
}

void nsc_log_accum(nsc_comm_log *l, int synced) {
  __atomic_fetch_add(synced ? &l->accum_synced : &l->accum_skipped, 1, __ATOMIC_RELAXED);
}

/* Closing ------------------------------------------------------------------ */

/* What a log owns on the heap: its ring, the writer's state, histograms. */
static void free_owned(const nsc_comm_log *l) {
  free(l->ring);
  nsc_diag_free(l->diag);
  if (l->w) free(l->w->tr);
  free(l->w);
  for (int a = 0; a < NSC_ACT_COUNT; a++) free(l->by_action[a].hist);
}

/* With open_lock and l->lock held, l open: close it and move what is left to
 * write into a final (NULL when out of memory: then nothing is written). */
static nsc_log_final *close_locked(nsc_comm_log *l, int may_query) {
  for (nsc_comm_log **p = &open_logs; *p; p = &(*p)->open_next)
    if (*p == l) {
      *p = l->open_next;
      break;
    }
  l->open_next = NULL;
  l->open = NSC_LOG_CLOSED;
  /* Last reading: marks not complete now stay unknown (never waited for).
   * Without querying (the writer at SIGTERM) every unread record is unknown
   * and its marks are left alone: the process is about to die. */
  for (; l->ring_done < l->ring_len; l->ring_done++) {
    nsc_rec *r = at(l, l->ring_done);
    if (may_query) {
      resolve(l, r, 1);
    } else {
      r->state = NSC_REC_UNKNOWN;
      r->marked = 0;
      fold_time(l, r);
    }
  }
  if (!detail) l->ring_len = l->ring_done = 0;
  nsc_log_final *f = keep && (l->nrec || l->failed[0]) ? malloc(sizeof *f) : NULL;
  if (f) {
    f->l = *l; /* the copy owns the ring, the histograms and the writer state */
    f->next = NULL;
  } else {
    free_owned(l);
  }
  l->ring = NULL;
  l->w = NULL;
  l->diag = NULL;
  l->ring_alloc = l->ring_len = l->ring_done = l->ring_head = 0;
  for (int a = 0; a < NSC_ACT_COUNT; a++) l->by_action[a].hist = NULL;
  return f;
}

void nsc_log_comm_close(nsc_comm_log *l) {
  /* A forked child touches no lock: the writer may have held one at fork.
   * A log never opened is on no list: nobody else can hold it. Any other
   * waits for open_lock, even when already closed: the exit handler (or the
   * SIGTERM writer) may be closing it now and still uses it until it lets
   * go of open_lock, and the caller frees it next (comm.c). */
  if (forgotten || __atomic_load_n(&l->open, __ATOMIC_ACQUIRE) == NSC_LOG_UNOPENED) return;
  pthread_mutex_lock(&open_lock);
  pthread_mutex_lock(&l->lock);
  nsc_log_final *f = NULL;
  if (l->open == NSC_LOG_OPEN) f = close_locked(l, 1);
  /* The mutex stays initialised: a late call on another thread at process
   * exit may still lock it, and finds the log closed. */
  pthread_mutex_unlock(&l->lock);
  pthread_mutex_unlock(&open_lock);
  if (f) nsc_log_writer_final(f);
}

static void final_settle(nsc_log_final *f) {
  if (f && f->l.diag) nsc_diag_settle(f->l.diag, 1); /* steps the samples never covered: busy unknown */
}

static void final_free(nsc_log_final *f) {
  if (!f) return;
  free_owned(&f->l);
  free(f);
}

/* The writer's side ---------------------------------------------------------- */

static int lock_by(pthread_mutex_t *m, const struct timespec *deadline) {
  return deadline ? pthread_mutex_timedlock(m, deadline) : pthread_mutex_lock(m);
}

static void collect(nsc_log_batch **out, size_t *n, const struct timespec *deadline) {
  *out = NULL;
  *n = 0;
  int nvml = nsc_nvml_wanted(); /* GPU steps wait for NVML's samples: settled here */
  if ((!detail && !nvml) || forgotten || lock_by(&open_lock, deadline)) return;
  size_t cap = 0;
  /* File names and the trace's pid come from the first communicator's rank. */
  for (nsc_comm_log *l = proc_rank_seq == 0 || !detail ? open_logs : NULL; l; l = l->open_next) {
    if (lock_by(&l->lock, deadline)) continue;
    if (l->diag) nsc_diag_settle(l->diag, 0);
    if (!detail) {
      pthread_mutex_unlock(&l->lock);
      continue;
    }
    l->nudged = 0;
    size_t k = l->ring_done, ks = l->diag ? l->diag->slen : 0;
    if ((k || ks) && l->rank >= 0 && *n == cap) {
      size_t c2 = cap ? 2 * cap : 8;
      nsc_log_batch *g = realloc(*out, c2 * sizeof *g);
      if (g) {
        *out = g;
        cap = c2;
      }
    }
    int room = (k || ks) && l->rank >= 0 && *n < cap;
    nsc_rec *recs = room && k ? malloc(k * sizeof *recs) : NULL;
    nsc_diag_step *steps = room && ks ? malloc(ks * sizeof *steps) : NULL;
    if (room && !l->w) l->w = calloc(1, sizeof *l->w);
    if (room && l->w && (recs || !k) && (steps || !ks)) {
      for (size_t i = 0; i < k; i++) recs[i] = *at(l, i);
      if (k) l->ring_head = (l->ring_head + k) % l->ring_alloc;
      l->ring_len -= k;
      l->ring_done = 0;
      if (ks) ks = nsc_diag_take(l->diag, steps, ks);
      (*out)[(*n)++] = (nsc_log_batch){.who = nsc_log_who_of(l), .w = l->w, .recs = recs, .n = k, .steps = steps,
                                       .nsteps = ks};
    } else {
      free(recs); /* out of memory: the records wait in the ring */
      free(steps);
    }
    pthread_mutex_unlock(&l->lock);
  }
  pthread_mutex_unlock(&open_lock);
}

static void close_all_now(const struct timespec *deadline) {
  if (forgotten || lock_by(&open_lock, deadline)) return;
  for (nsc_comm_log *l = open_logs, *next; l; l = next) {
    next = l->open_next;
    if (lock_by(&l->lock, deadline)) continue; /* held by the interrupted thread: left unwritten */
    nsc_log_final *f = l->open == NSC_LOG_OPEN ? close_locked(l, 0) : NULL;
    pthread_mutex_unlock(&l->lock);
    if (f) nsc_log_writer_final(f);
  }
  pthread_mutex_unlock(&open_lock);
}

static const nsc_log_source source = {collect, close_all_now, final_settle, final_free};

/* At exit every log still open is closed, as its communicator's end would
 * (marks read one last time, the final written). */
static void at_exit(void) {
  if (forgotten) return;
  for (;;) {
    pthread_mutex_lock(&open_lock);
    nsc_comm_log *l = open_logs;
    nsc_log_final *f = NULL;
    if (l) {
      pthread_mutex_lock(&l->lock);
      f = close_locked(l, 1);
      pthread_mutex_unlock(&l->lock);
    }
    pthread_mutex_unlock(&open_lock);
    if (!l) break;
    if (f) nsc_log_writer_final(f);
  }
  nsc_log_writer_stop();
}

/* The summary's group of an algorithm (log.h). */
static int action_of(nsc_alg alg) {
  switch (alg) {
  case NSC_ALG_RING: case NSC_ALG_TWOPHASE: case NSC_ALG_HIER: return NSC_ACT_COMPRESS;
  case NSC_ALG_LOCAL: return NSC_ACT_SKIP;
  case NSC_ALG_FUSE: return NSC_ACT_FUSE;
  default: return NSC_ACT_PASS;
  }
}

static void rec_start(nsc_rec *r, int coll, nsc_alg alg, int action, uint64_t seq, size_t count, ncclDataType_t dt,
                      ncclDataType_t wire_dt, ncclRedOp_t op, const nsc_backend *be, nsc_stream s, int in_group) {
  memset(r, 0, sizeof *r);
  r->coll = coll;
  r->alg = (int)alg;
  r->seq = seq;
  r->action = action;
  r->count = count;
  r->dtype = dt;
  r->wire_dtype = wire_dt;
  r->op = op;
  r->nmembers = 1;
  r->logical_bytes = count * nsc_dtype_size(dt);
  r->wire_bytes = action == NSC_ACT_SKIP ? 0 : count * nsc_dtype_size(wire_dt);
  if (nsc_log_on()) nsc_log_begin(r, be, s, in_group);
}

void nsc_rec_start(nsc_rec *r, int coll, nsc_alg alg, uint64_t seq, size_t count, ncclDataType_t dt,
                   ncclDataType_t wire_dt, ncclRedOp_t op, const nsc_backend *be, nsc_stream s, int in_group) {
  rec_start(r, coll, alg, action_of(alg), seq, count, dt, wire_dt, op, be, s, in_group);
}

void nsc_rec_observe(nsc_rec *r, int coll, uint64_t seq, size_t count, ncclDataType_t dt, int op,
                     const nsc_backend *be, nsc_stream s, int in_group) {
  rec_start(r, coll, NSC_ALG_PLAIN, NSC_ACT_OBSERVE, seq, count, dt, dt, (ncclRedOp_t)op, be, s, in_group);
}
