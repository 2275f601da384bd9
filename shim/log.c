/* log.c — records and the per-communicator summary (see log.h).
 *
 * The hook path fills a record and pushes it into a bounded ring; a record's
 * times are resolved from its backend marks only when they are complete
 * (elapsed() never waits). The summary is written when the communicator ends
 * or at process exit. Logging trouble (an unwritable file) is reported once
 * and never stops or slows the job. */
#include "log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "comm.h"
#include "core.h"
#include "msg.h"
#include "policy.h"

static int log_level;      /* NSC_LOG_* */
static int forgotten;      /* forked child: write nothing */
static size_t ring_cap = 4096;

static uint64_t now_ns(clockid_t id) {
  struct timespec ts;
  clock_gettime(id, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void close_all_at_exit(void);

void nsc_log_init(const nsc_config *cfg) {
  log_level = cfg->log;
  ring_cap = (size_t)cfg->log_ring;
  if (log_level != NSC_LOG_OFF) atexit(close_all_at_exit);
}

void nsc_log_forget(void) { forgotten = 1; }

int nsc_log_on(void) { return log_level != NSC_LOG_OFF && !forgotten; }

void nsc_log_comm_open(nsc_comm_log *l, uint64_t id, int rank, int nranks) {
  if (l->open) return;
  memset(l, 0, sizeof *l);
  pthread_mutex_init(&l->lock, NULL);
  l->id = id;
  l->rank = rank;
  l->nranks = nranks;
  l->open = 1;
}

void nsc_log_begin(nsc_rec *r, const nsc_backend *be, nsc_stream s) {
  r->be = be;
  r->stream = s;
  r->wall_ns = now_ns(CLOCK_REALTIME);
  r->host_ns = now_ns(CLOCK_MONOTONIC);
  if (!be->mark(s, &r->m[NSC_MARK_BEGIN])) r->marked |= 1u << NSC_MARK_BEGIN;
}

void nsc_log_mark(nsc_rec *r, int which) {
  if (!r->be || !nsc_log_on()) return;
  if (!r->be->mark(r->stream, &r->m[which])) r->marked |= 1u << which;
}

void nsc_log_discard(nsc_rec *r) {
  for (int i = 0; i < NSC_NMARKS; i++)
    if (r->be && (r->marked & (1u << i))) r->be->mark_release(&r->m[i]);
  r->marked = 0;
}

/* Collective time of a record, from the last mark before the collective to
 * the mark after it; 1 when known. */
static int coll_time(const nsc_rec *r, uint64_t *ns) {
  int a = (r->marked & (1u << NSC_MARK_CAST_IN)) ? NSC_MARK_CAST_IN : NSC_MARK_BEGIN;
  int b = (r->marked & (1u << NSC_MARK_COLL)) ? NSC_MARK_COLL : NSC_MARK_END;
  if (!(r->marked & (1u << a)) || !(r->marked & (1u << b))) return 0;
  return r->be->elapsed(&r->m[a], &r->m[b], ns) == 1;
}

static void fold(nsc_comm_log *l, const nsc_rec *r) {
  nsc_log_totals *t = &l->by_action[r->action & 3];
  uint64_t ns;
  if (!r->untimed && coll_time(r, &ns)) {
    t->timed++;
    t->time_ns += ns;
    if (l->ntimes == l->times_cap) {
      size_t cap = l->times_cap ? 2 * l->times_cap : 256;
      if (cap > ring_cap * 4) cap = ring_cap * 4;
      uint64_t *g = cap > l->times_cap ? realloc(l->times, cap * sizeof *g) : NULL;
      if (g) { l->times = g; l->times_cap = cap; }
    }
    if (l->ntimes < l->times_cap) l->times[l->ntimes++] = ns;
  }
}

void nsc_log_commit(nsc_comm_log *l, nsc_rec *r) {
  if (!nsc_log_on() || !l->open) { nsc_log_discard(r); return; }
  pthread_mutex_lock(&l->lock);
  if (!l->first_wall_ns) l->first_wall_ns = r->wall_ns;
  l->last_wall_ns = now_ns(CLOCK_REALTIME);
  nsc_log_totals *t = &l->by_action[r->action & 3];
  t->calls += r->action == NSC_ACT_FUSE ? (uint64_t)r->nmembers : 1;
  t->logical_bytes += r->logical_bytes;
  t->wire_bytes += r->wire_bytes;
  fold(l, r);
  nsc_log_discard(r);
  pthread_mutex_unlock(&l->lock);
}

void nsc_log_accum(nsc_comm_log *l, int synced) {
  if (synced) l->accum_synced++;
  else l->accum_skipped++;
}

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

static void write_summary(nsc_comm_log *l, FILE *out) {
  uint64_t calls = 0, lb = 0, wb = 0, tns = 0, timed = 0;
  for (int a = 0; a < 4; a++) {
    calls += l->by_action[a].calls;
    lb += l->by_action[a].logical_bytes;
    wb += l->by_action[a].wire_bytes;
    tns += l->by_action[a].time_ns;
    timed += l->by_action[a].timed;
  }
  if (!calls) return;
  qsort(l->times, l->ntimes, sizeof *l->times, cmp_u64);
  double p50 = l->ntimes ? l->times[l->ntimes / 2] / 1e3 : 0, p99 = l->ntimes ? l->times[(l->ntimes * 99) / 100] / 1e3 : 0;
  double span = l->last_wall_ns > l->first_wall_ns ? (double)(l->last_wall_ns - l->first_wall_ns) : 0;
  fprintf(out, "# ncclshim summary: communicator %#llx rank %d of %d\n", (unsigned long long)l->id, l->rank, l->nranks);
  fprintf(out, "# %-12s %10s %14s %14s %12s %10s %10s %10s\n", "action", "calls", "logical(B)", "wire(B)", "time(us)",
          "mean(us)", "algbw", "busbw");
  for (int a = 0; a < 4; a++) {
    const nsc_log_totals *t = &l->by_action[a];
    if (!t->calls) continue;
    double us = t->time_ns / 1e3, mean = t->timed ? us / (double)t->timed : 0;
    double alg = t->time_ns ? (double)t->logical_bytes / (double)t->time_ns : 0; /* B/ns = GB/s */
    double bus = l->nranks > 1 ? alg * 2.0 * (l->nranks - 1) / l->nranks : alg;
    fprintf(out, "  %-12s %10llu %14llu %14llu %12.1f %10.2f %10.3f %10.3f\n", nsc_action_name(a),
            (unsigned long long)t->calls, (unsigned long long)t->logical_bytes, (unsigned long long)t->wire_bytes, us,
            mean, alg, bus);
  }
  fprintf(out, "  %-12s %10llu %14llu %14llu %12.1f   p50 %.2f us  p99 %.2f us  in collectives %.1f%% of %.3f s\n",
          "total", (unsigned long long)calls, (unsigned long long)lb, (unsigned long long)wb, tns / 1e3, p50, p99,
          span > 0 ? 100.0 * (double)tns / span : 0.0, span / 1e9);
  if (l->accum_synced || l->accum_skipped)
    fprintf(out, "  accumulation: %llu synced, %llu skipped\n", (unsigned long long)l->accum_synced,
            (unsigned long long)l->accum_skipped);
  (void)timed;
}

void nsc_log_comm_close(nsc_comm_log *l) {
  if (!l->open) return;
  pthread_mutex_lock(&l->lock);
  if (nsc_log_on() && l->rank == 0) write_summary(l, stderr);
  free(l->times);
  free(l->ring);
  l->times = NULL;
  l->ring = NULL;
  l->open = 0;
  pthread_mutex_unlock(&l->lock);
  pthread_mutex_destroy(&l->lock);
}

static void close_one(nsc_comm *c, void *arg) {
  (void)arg;
  nsc_log_comm_close(&c->log);
}

static void close_all_at_exit(void) {
  if (forgotten) return;
  nsc_comm_foreach(close_one, NULL);
}
