/* diag.c — see diag.h: the step detector (the learner, observe-only) and the
 * per-step accounting of the records the log reads.
 *
 * Boundaries. A call that the learner, once locked, finds to be the first
 * element of its pass begins pass m (its micro-step); its clocks are kept in
 * a small table indexed by m. Records are tagged with the pass of the call
 * they belong to when they are committed, and read later (GPU: when their
 * events completed, still in commit order); the first record of a later
 * pass closes the open step at that pass's boundary. When the learner
 * stops (an anomaly: a bucket out of order, a moved buffer) the open step is
 * dropped (counted as broken) and learning starts again, at most
 * NSC_DIAG_RELEARN times.
 *
 * Host backend: collectives run on the calling thread, so a record's
 * interval [call, call + its time] is time the program waited for it; the
 * union of those intervals in the step is both the time in flight and the
 * exposed communication. GPU: the records' times are device times without a
 * common origin, so the time in flight is their sum (capped at the step) and
 * the exposed communication is the time of the pass's last bucket's record
 * (docs/diagnosis.md says what that misses).
 *
 * The process around the boundary thread (its cores, threads and child
 * processes) is read from /proc at the first boundary and every
 * NSC_DIAG_HOST_EVERY after: a few small reads per 16 steps, never before
 * the shim is active. */
#include "diag.h"

#include <dirent.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "diag_nvml.h"

const char *nsc_diag_src_name(int src) {
  return src == NSC_DIAG_SRC_CPU ? "cpu-time" : src == NSC_DIAG_SRC_NVML ? "nvml" : "none";
}

nsc_accum_el nsc_diag_el(int rs, const void *send, const void *recv, uint64_t count, int dtype, int op,
                         uint64_t bytes) {
  nsc_accum_el e = {(uintptr_t)recv, (uintptr_t)send, count, dtype, rs ? op + NSC_DIAG_RS_OP : op, bytes};
  return e;
}

nsc_diag *nsc_diag_new(long long accum_steps, int keep_steps) {
  nsc_diag *d = calloc(1, sizeof *d);
  if (!d) return NULL;
  nsc_accum_init_observe(&d->learn);
  d->accum_steps = accum_steps > 0 ? accum_steps : 1;
  d->cur_pass = -1;
  d->last_call = UINT64_MAX;
  d->want_cpu = 1;
  d->cudev = -1;
  for (int i = 0; i < NSC_DIAG_BND; i++) d->bnd[i].pass = -1;
  if (keep_steps) d->steps = malloc(NSC_DIAG_STEPS * sizeof *d->steps); /* NULL: no step detail */
  return d;
}

void nsc_diag_free(nsc_diag *d) {
  if (!d) return;
  nsc_accum_free(&d->learn);
  free(d->steps);
  free(d->pend);
  free(d);
}

/* The learner stopped: drop the step being measured, start again. */
static void restart(nsc_diag *d, const char *why) {
  if (why && why[0]) {
    size_t n = strlen(why) < sizeof d->why_off - 1 ? strlen(why) : sizeof d->why_off - 1;
    memcpy(d->why_off, why, n);
    d->why_off[n] = '\0';
  }
  d->cur_pass = -1;
  d->last_call = UINT64_MAX;
  nsc_accum_free(&d->learn);
  if (d->relearns >= NSC_DIAG_RELEARN) {
    d->learn.mode = NSC_ACC_OFF;
    return;
  }
  d->relearns++;
  nsc_accum_init_observe(&d->learn);
}

int nsc_diag_call(nsc_diag *d, uint64_t call, const nsc_accum_el *e, int acc, int int_sum, int fl) {
  nsc_accum *a = &d->learn;
  if (a->mode == NSC_ACC_OFF) return 0;
  if (!acc) {
    nsc_accum_observe(a, int_sum, fl ? e : NULL);
    return 0;
  }
  d->acc_calls++;
  char why[512];
  (void)nsc_accum_next(a, e, 1, why, sizeof why);
  if (a->mode == NSC_ACC_OFF) { /* NSC_ACC_LEARN_MAX calls without a pass */
    restart(d, why);
    return 0;
  }
  long long m = nsc_accum_pass_no(a);
  long pos = nsc_accum_pass_pos(a);
  int begins = m >= 0 && pos == 0;
  if (begins) d->cur_pass = m;
  if (m >= 0 && pos >= 0 && (size_t)pos + 1 == nsc_accum_pass_len(a)) d->last_call = call;
  if (nsc_accum_take_due(a)) { /* a one-rank agreement: its own values, nothing issued */
    int64_t v[NSC_ACC_AGREE_N];
    int was_locked = a->mode == NSC_ACC_LOCKED;
    nsc_accum_agree_vals(a, v);
    nsc_accum_agreed(a, v, 1, 1, why, sizeof why);
    if (a->mode == NSC_ACC_LOCKED && !was_locked) {
      d->pass_len = nsc_accum_pass_len(a);
      d->pass_bytes = a->pass_bytes;
    }
    if (a->mode == NSC_ACC_OFF) restart(d, why);
  }
  if (begins && d->cur_pass == m) {
    nsc_diag_bnd *b = &d->bnd[m % NSC_DIAG_BND];
    b->pass = m;
    b->call = call;
    b->cpu_ns = b->runq_ns = -1;
    return 1;
  }
  return 0;
}

/* Whitespace-separated numbers in a small /proc file, or -1 when it cannot
 * be read. */
static int count_words(const char *path) {
  char buf[4096];
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n < 0) return -1;
  int words = 0;
  for (ssize_t i = 0; i < n; i++)
    words += buf[i] != ' ' && buf[i] != '\n' && (i + 1 == n || buf[i + 1] == ' ' || buf[i + 1] == '\n');
  return words;
}

void nsc_diag_host_read(nsc_diag_tot *t) {
  cpu_set_t set;
  if (!sched_getaffinity(0, sizeof set, &set)) t->cpus = CPU_COUNT(&set);
  /* /proc/self/stat: the thread count is the 20th field, the 18th after the
   * command's closing parenthesis */
  char buf[1024];
  int fd = open("/proc/self/stat", O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    buf[n > 0 ? n : 0] = '\0';
    char *p = strrchr(buf, ')');
    int field = 2, threads = 0;
    for (; p && *p && field < 20; p++)
      if (*p == ' ') field++;
    if (p && field == 20) threads = atoi(p);
    if (threads > 0) t->threads = threads;
  }
  /* Children of every thread (/proc/self/task/T/children: kernels with
   * CONFIG_PROC_CHILDREN list them there). */
  DIR *dir = opendir("/proc/self/task");
  if (!dir) return;
  int children = 0, listed = 0;
  struct dirent *e;
  while ((e = readdir(dir))) {
    if (e->d_name[0] == '.') continue;
    char path[64];
    snprintf(path, sizeof path, "/proc/self/task/%.20s/children", e->d_name);
    int k = count_words(path);
    if (k >= 0) { children += k; listed = 1; }
  }
  closedir(dir);
  if (!listed) return;
  if (children > t->children) t->children = children;
  t->children_reads++;
}

void nsc_diag_boundary(nsc_diag *d, uint64_t t_ns, uint64_t wall_ns, int64_t cpu_ns, int64_t runq_ns, uint64_t tid) {
  if (d->cur_pass < 0) return;
  if (d->boundaries++ % NSC_DIAG_HOST_EVERY == 0) nsc_diag_host_read(&d->tot);
  nsc_diag_bnd *b = &d->bnd[d->cur_pass % NSC_DIAG_BND];
  if (!d->have_wall_off) { /* one offset for all its steps: they follow each other exactly */
    d->wall_off = wall_ns - t_ns;
    d->have_wall_off = 1;
  }
  b->t_ns = t_ns;
  b->wall_ns = t_ns + d->wall_off;
  b->cpu_ns = cpu_ns;
  b->runq_ns = runq_ns;
  b->tid = tid;
}

static const nsc_diag_bnd *bnd_of(const nsc_diag *d, int64_t pass) {
  const nsc_diag_bnd *b = &d->bnd[pass % NSC_DIAG_BND];
  return b->pass == pass ? b : NULL;
}

int64_t nsc_diag_host_busy(const nsc_diag_step *s) {
  if (s->cpu_ns < 0) return -1;
  uint64_t free_ns = s->wall_ns > s->inflight_ns ? s->wall_ns - s->inflight_ns : 0;
  uint64_t busy = (uint64_t)s->cpu_ns + (s->runq_ns > 0 ? (uint64_t)s->runq_ns : 0);
  busy = busy > s->coll_busy_ns ? busy - s->coll_busy_ns : 0;
  return busy < free_ns ? (int64_t)busy : (int64_t)free_ns;
}

void nsc_diag_tot_add(nsc_diag_tot *t, const nsc_diag_step *s) {
  if (s->captured) { /* nothing of a capture is timed: the step is not measured */
    t->steps_captured++;
    return;
  }
  t->steps++;
  t->steps_untimed += s->untimed > 0; /* grouped calls: their work at the group end is not timed */
  t->gpu |= s->gpu;
  t->wall_ns += s->wall_ns;
  t->inflight_ns += s->inflight_ns;
  t->exposed_ns += s->exposed_ns;
  if (s->max_gap_ns > t->max_gap_ns) t->max_gap_ns = s->max_gap_ns;
  if (s->busy_ns >= 0) {
    t->busy_steps++;
    t->busy_wall_ns += s->wall_ns;
    t->busy_ns += (uint64_t)s->busy_ns;
    t->busy_exposed_ns += s->exposed_ns;
    t->src = s->src;
  }
  if (s->cpu_ns >= 0 && s->runq_ns >= 0) {
    t->runq_steps++;
    t->runq_wall_ns += s->wall_ns;
    t->runq_ns += (uint64_t)s->runq_ns;
  }
}

/* A step is complete: into the totals, and to the writer (detail). */
static void finish(nsc_diag *d, const nsc_diag_step *s) {
  nsc_diag_tot_add(&d->tot, s);
  if (!d->steps) return;
  if (d->slen == NSC_DIAG_STEPS) { /* the writer is behind: the oldest leaves without detail */
    d->shead = (d->shead + 1) % NSC_DIAG_STEPS;
    d->slen--;
    d->steps_dropped++;
  }
  d->steps[(d->shead + d->slen) % NSC_DIAG_STEPS] = *s;
  d->slen++;
}

int64_t nsc_diag_gpu_busy(const nsc_diag_step *s, uint64_t kernel_ns) {
  uint64_t free_ns = s->wall_ns > s->exposed_ns ? s->wall_ns - s->exposed_ns : 0;
  uint64_t busy = kernel_ns > s->exposed_ns ? kernel_ns - s->exposed_ns : 0; /* the exposed part runs NCCL's kernels */
  return (int64_t)(busy < free_ns ? busy : free_ns);
}

/* The oldest waiting step, settled: NVML's busy time if the samples cover
 * it (rc 1), else unknown. */
static void settle_one(nsc_diag *d, int rc, uint64_t kernel_ns) {
  nsc_diag_step *s = &d->pend[d->phead];
  if (rc == 1) {
    s->busy_ns = nsc_diag_gpu_busy(s, kernel_ns);
    s->src = NSC_DIAG_SRC_NVML;
  }
  d->phead = (d->phead + 1) % NSC_DIAG_STEPS;
  d->plen--;
  finish(d, s);
}

/* 1: s waits for NVML; 0: no room (out of memory): finish it now. */
static int wait_nvml(nsc_diag *d, const nsc_diag_step *s) {
  if (!d->pend && !(d->pend = malloc(NSC_DIAG_STEPS * sizeof *d->pend))) return 0;
  if (d->plen == NSC_DIAG_STEPS) settle_one(d, -1, 0); /* the writer is far behind: the oldest without a busy time */
  d->pend[(d->phead + d->plen) % NSC_DIAG_STEPS] = *s;
  d->plen++;
  return 1;
}

void nsc_diag_settle(nsc_diag *d, int force) {
  while (d && d->plen) {
    const nsc_diag_step *s = &d->pend[d->phead];
    uint64_t kernel_ns = 0;
    int rc = nsc_nvml_busy(d->cudev, s->wall_start_ns / 1000, (s->wall_start_ns + s->wall_ns + 999) / 1000, &kernel_ns);
    if (rc == 0 && !force) return;
    settle_one(d, rc, kernel_ns);
  }
}

static void close_step(nsc_diag *d, const nsc_diag_bnd *next) {
  nsc_diag_step *s = &d->open;
  d->have_open = 0;
  if (next->t_ns < s->start_ns) return;
  s->wall_ns = next->t_ns - s->start_ns;
  if (!s->gpu) {
    uint64_t tail = next->t_ns > d->cursor_ns ? next->t_ns - d->cursor_ns : 0;
    if (tail > s->max_gap_ns) s->max_gap_ns = tail;
  }
  if (s->inflight_ns > s->wall_ns) s->inflight_ns = s->wall_ns;
  if (s->exposed_ns > s->wall_ns) s->exposed_ns = s->wall_ns;
  int same = next->tid == d->open_tid;
  s->cpu_ns = same && s->cpu_ns >= 0 && next->cpu_ns >= s->cpu_ns ? next->cpu_ns - s->cpu_ns : -1;
  s->runq_ns = same && s->runq_ns >= 0 && next->runq_ns >= s->runq_ns ? next->runq_ns - s->runq_ns : -1;
  s->busy_ns = -1;
  s->src = NSC_DIAG_SRC_NONE;
  if (!s->gpu && s->cpu_ns >= 0) {
    s->busy_ns = nsc_diag_host_busy(s);
    s->src = NSC_DIAG_SRC_CPU;
  }
  if (s->gpu && d->cudev >= 0 && wait_nvml(d, s)) return; /* its busy time comes from NVML, later */
  finish(d, s);
}

static void open_step(nsc_diag *d, const nsc_diag_bnd *b) {
  memset(&d->open, 0, sizeof d->open);
  d->open.pass = b->pass;
  d->open.first_call = b->call;
  d->open.start_ns = b->t_ns;
  d->open.wall_start_ns = b->wall_ns;
  d->open.cpu_ns = b->cpu_ns; /* the start's readings until the step closes */
  d->open.runq_ns = b->runq_ns;
  d->open_tid = b->tid;
  d->cursor_ns = b->t_ns;
  d->have_open = 1;
}

void nsc_diag_rec(nsc_diag *d, const nsc_diag_in *in) {
  int64_t pass = in->pass;
  uint64_t dur_ns = in->dur_ns;
  int gpu = in->gpu;
  if (pass < 0) {
    if (d->have_open) d->tot.steps_broken++;
    d->have_open = 0;
    return;
  }
  if (!d->have_open || pass != d->open.pass) {
    const nsc_diag_bnd *b = bnd_of(d, pass);
    if (d->have_open && pass > d->open.pass && b) close_step(d, b);
    else if (d->have_open) d->tot.steps_broken++;
    d->have_open = 0;
    if (!b) return;
    open_step(d, b);
  }
  nsc_diag_step *s = &d->open;
  s->records++;
  s->gpu |= gpu;
  if (in->busy_in_ns > 0) s->coll_busy_ns += (uint64_t)in->busy_in_ns;
  if (in->captured) s->captured++;
  if (!in->timed) {
    s->untimed++;
    return;
  }
  if (in->skipped) return; /* answered locally: work, not communication */
  if (gpu) {
    s->inflight_ns += dur_ns;
    if (in->last_bucket) s->exposed_ns += dur_ns;
    return;
  }
  uint64_t b = in->host_ns, e = b + dur_ns;
  if (b > d->cursor_ns && b - d->cursor_ns > s->max_gap_ns) s->max_gap_ns = b - d->cursor_ns;
  uint64_t from = b > d->cursor_ns ? b : d->cursor_ns;
  if (e > from) {
    s->inflight_ns += e - from;
    s->exposed_ns += e - from;
  }
  if (e > d->cursor_ns) d->cursor_ns = e;
}

size_t nsc_diag_take(nsc_diag *d, nsc_diag_step *out, size_t max) {
  size_t n = 0;
  for (; n < max && d->slen; n++) {
    out[n] = d->steps[d->shead];
    d->shead = (d->shead + 1) % NSC_DIAG_STEPS;
    d->slen--;
  }
  return n;
}

void nsc_diag_position(const nsc_diag *d, long long *pass, long *pos) {
  *pass = d ? nsc_accum_pass_no(&d->learn) : -1;
  *pos = d ? nsc_accum_pass_pos(&d->learn) : -1;
}
