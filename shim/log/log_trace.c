/* log_trace.c — Chrome trace-event JSON (Perfetto, chrome://tracing) from a
 * communicator's detail records, appended by the log's writer thread as the
 * records come (within a second) into the process's trace file
 * (NCCLSHIM_TRACE_FILE, opened by log_out.c). The file is a JSON array
 * closed by "]" at exit or SIGTERM; after a SIGKILL it lacks the "]", which
 * the trace-event format allows (Perfetto and chrome://tracing load it;
 * appending "\n]" makes it strict JSON).
 *
 * pid = the process's rank (so files of several ranks can be concatenated
 * into one view), one track (tid) per communicator and stream. Each timed
 * record gives up to three slices: cast-in, the collective, cast-out, with
 * sizes and bandwidth in args; skipped calls (accumulation) and untimed ones
 * are instant markers. Times are wall-clock microseconds. A slice starts at
 * the call's host time or at the end of the previous slice of its track,
 * whichever is later (a stream runs its work in order): on a GPU the work
 * may start later still, so positions are lower bounds and durations are
 * device times. Tracks and their cursors persist across rounds in the
 * writer's state of the communicator. Must not: run on the hook path. */
#include <inttypes.h>
#include <stdlib.h>
#include <unistd.h>

#include "names.h"
#include "log_int.h"
#include "policy.h"

/* The process's pid in the trace: its rank (known since the first
 * communicator opened, before any record), fixed at the first use, which
 * may be a record rendered before the file's header is (else the first
 * round's events would carry pid 0). Writer thread only. */
static int trace_pid, trace_pid_set;
static int pid_now(void) {
  if (!trace_pid_set) {
    int rank = nsc_log_proc_rank();
    trace_pid = rank >= 0 ? rank : (int)getpid();
    trace_pid_set = 1;
  }
  return trace_pid;
}

void nsc_log_trace_begin(FILE *f) {
  int rank = nsc_log_proc_rank();
  fprintf(f, "[\n{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,\"args\":{\"name\":\"ncclshim rank %d (",
          pid_now(), rank);
  nsc_log_json_str(f, nsc_log_host());
  fprintf(f, ":%d)\"}}", (int)getpid());
}


static void event(FILE *f, const char *name, const char *ph, int tid, uint64_t ts_ns) {
  fprintf(f, ",\n{\"name\":\"%s\",\"cat\":\"ncclshim\",\"ph\":\"%s\",\"pid\":%d,\"tid\":%d,\"ts\":", name, ph, pid_now(),
          tid);
  nsc_log_put_us(f, ts_ns);
}

static void args(FILE *f, const nsc_log_who *l, const nsc_rec *r, int with_bw) {
  fprintf(f,
          ",\"args\":{\"seq\":%" PRIu64 ",\"action\":\"%s\",\"count\":%zu,\"dtype\":\"%s\",\"wire_dtype\":\"%s\""
          ",\"logical_bytes\":%" PRIu64 ",\"wire_bytes\":%" PRIu64 ",\"members\":%d,\"result\":%d"
          ",\"coll\":\"%s\",\"algo\":\"%s\"",
          r->lseq, nsc_action_name(r->action), r->count, nsc_dtype_name((ncclDataType_t)r->dtype),
          nsc_dtype_name((ncclDataType_t)r->wire_dtype), r->logical_bytes, r->wire_bytes, r->nmembers, (int)r->result,
          nsc_log_coll(r), nsc_log_algo(r));
  if (with_bw) {
    double alg = nsc_log_algbw(r->logical_bytes, r->ns[NSC_T_COLL]);
    fprintf(f, ",\"algbw_GBps\":%.6g,\"busbw_GBps\":%.6g", alg, nsc_log_busbw(alg, l->nranks));
  }
  fputs("}}", f);
}

static void slice(FILE *f, const char *name, int tid, uint64_t *t, uint64_t dur) {
  event(f, name, "X", tid, *t);
  fputs(",\"dur\":", f);
  nsc_log_put_us(f, dur);
  *t += dur;
}

/* A new track's metadata goes into f and into meta (every later file of the
 * trace starts with it, see log_out.c). */
static nsc_log_track *track_of(FILE *f, FILE *meta, const nsc_log_who *l, nsc_log_wstate *w, nsc_stream s) {
  for (int i = 0; i < w->nt; i++)
    if (w->tr[i].stream == s) return &w->tr[i];
  if (w->nt == w->cap) {
    int c = w->cap ? 2 * w->cap : 4;
    nsc_log_track *g = realloc(w->tr, (size_t)c * sizeof *g);
    if (!g) return NULL;
    w->tr = g;
    w->cap = c;
  }
  nsc_log_track *t = &w->tr[w->nt++];
  t->stream = s;
  t->tid = (l->comm_seq + 1) * 1000 + w->nt;
  t->cursor = 0;
  FILE *to[2] = {f, meta};
  for (int i = 0; i < 2; i++) {
    if (!to[i]) continue;
    fprintf(to[i], ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"args\":{\"name\":\"comm %d (%#" PRIx64
            ", %d ranks) stream %#" PRIxPTR "\"}}",
            pid_now(), t->tid, l->comm_seq, l->id, l->nranks, (uintptr_t)s);
    fprintf(to[i], ",\n{\"name\":\"thread_sort_index\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"args\":{\"sort_index\":%d}}",
            pid_now(), t->tid, t->tid);
  }
  return t;
}

void nsc_log_trace_recs(FILE *f, FILE *meta, const nsc_log_who *l, nsc_log_wstate *ws, nsc_log_recs rs) {
  nsc_log_wstate tmp = {0}, *w = ws ? ws : &tmp; /* a log closed before any round: tracks of this call only */
  char name[64];
  for (size_t i = 0; i < rs.n; i++) {
    const nsc_rec *r = &rs.ring[(rs.head + i) % rs.alloc];
    nsc_log_track *t = track_of(f, meta, l, w, r->stream);
    if (!t) break;
    const char *act = nsc_action_name(r->action);
    /* a compressed record names its algorithm ("allreduce ring compressed",
     * "... hier compressed"); the others' actions say it (passthrough, fused,
     * skipped, observed) */
    const char *alg = r->action == NSC_ACT_COMPRESS ? nsc_log_algo(r) : "", *sp = *alg ? " " : "";
    int timed = r->state == NSC_REC_DONE && (r->have & (1u << NSC_T_COLL));
    if (r->action == NSC_ACT_SKIP || !timed) {
      snprintf(name, sizeof name, "%s%s%s %s%s", nsc_log_coll(r), sp, alg, act,
               r->action == NSC_ACT_SKIP || timed ? "" : " (untimed)");
      event(f, name, "i", t->tid, r->wall_ns);
      fputs(",\"s\":\"t\"", f);
      args(f, l, r, 0);
      continue;
    }
    uint64_t ts = r->wall_ns > t->cursor ? r->wall_ns : t->cursor;
    if (r->have & (1u << NSC_T_CAST_IN)) {
      slice(f, "cast-in", t->tid, &ts, r->ns[NSC_T_CAST_IN]);
      args(f, l, r, 0);
    }
    snprintf(name, sizeof name, "%s%s%s %s", nsc_log_coll(r), sp, alg, act);
    slice(f, name, t->tid, &ts, r->ns[NSC_T_COLL]);
    args(f, l, r, 1);
    if (r->have & (1u << NSC_T_CAST_OUT)) {
      slice(f, "cast-out", t->tid, &ts, r->ns[NSC_T_CAST_OUT]);
      args(f, l, r, 0);
    }
    t->cursor = ts;
  }
  free(tmp.tr);
}

/* The diagnosis's steps: one slice per step on a track of their own per
 * communicator ("comm N steps"), from the call of the pass's first bucket to
 * the next pass's, with the breakdown in args (docs/diagnosis.md). */
void nsc_log_trace_steps(FILE *f, FILE *meta, const nsc_log_who *l, nsc_log_wstate *w, const nsc_diag_step *s,
                         size_t n, long long accum_steps) {
  if (!n) return;
  int tid = (l->comm_seq + 1) * 1000;
  if (!w || !w->step_track) {
    FILE *to[2] = {f, meta};
    for (int i = 0; i < 2; i++) {
      if (!to[i]) continue;
      fprintf(to[i], ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"args\":{\"name\":\"comm %d (%#" PRIx64
              ", %d ranks) steps\"}}",
              pid_now(), tid, l->comm_seq, l->id, l->nranks);
      fprintf(to[i], ",\n{\"name\":\"thread_sort_index\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"args\":{\"sort_index\":%d}}",
              pid_now(), tid, tid);
    }
    if (w) w->step_track = 1;
  }
  char name[48];
  for (size_t i = 0; i < n; i++) {
    snprintf(name, sizeof name, "step (pass %" PRId64 ")", s[i].pass);
    uint64_t t = s[i].wall_start_ns;
    slice(f, name, tid, &t, s[i].wall_ns);
    fputs(",\"args\":{", f);
    nsc_log_json_step_body(f, &s[i], accum_steps);
    fputs("}}", f);
  }
}
