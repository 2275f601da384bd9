/* test_log_unit.c — the log's hot path (shim/log/log_rec.c) against a fake device
 * backend whose marks complete when the test says so: what a GPU does, on a
 * machine without one.
 *
 * Checked exactly: a record's marks are never queried in the call that
 * recorded them; completed records are read (and their marks given back)
 * when later records arrive, oldest first, stopping at the first incomplete
 * one; nothing is recorded or queried while a stream is being captured;
 * marks never completed are "unknown" at close, never waited for; every
 * mark taken is given back exactly once (pool balance); ring overflow keeps
 * calls and bytes exact; grouped passthroughs are untimed; the histogram's
 * percentiles are within 1/32 of the exact ones. With --writer (a process of
 * its own: the writer thread starts once per process): the writer thread
 * writes only records already read on the calling thread, within its
 * second, and never touches the device (no mark, query or release off the
 * main thread).
 * Links log.o, log_out.o, log_trace.o, log_nvtx.o with stubs for the few
 * shim functions they call. Must not: need NCCL, MPI or a GPU. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "comm.h"
#include "log.h"
#include "log_int.h"
#include "ncclshim.h"
#include "policy.h"

/* Stubs for what the log calls outside its files ---------------------------- */
const nsc_backend nsc_backend_host = {.name = "host-stub"};
static int group_depth; /* what the caller tells nsc_log_begin */
const char *nsc_dtype_name(ncclDataType_t dt) { return dt == ncclFloat32 ? "float" : "other"; }
const char *nsc_op_name(ncclRedOp_t op) { return op == ncclSum ? "sum" : "other"; }
size_t nsc_dtype_size(ncclDataType_t dt) { return dt == ncclFloat32 || dt == ncclInt32 ? 4 : 1; }
void nsc_msg(const char *level, const char *fmt, ...) { (void)level; (void)fmt; }
int ncclshim_get_stats(ncclshim_stats_t *out) { memset(out, 0, sizeof *out); return 0; }

/* The fake device: events from a pool of 256, completed by the test. ------- */
#define NEV 256
static struct { int taken, complete; uint64_t t; } ev[NEV];
static int capture, outstanding, queries;
static uint64_t clock_ns;
static pthread_t main_thread;
static int off_main; /* device calls from another thread (the writer must make none) */
#define ON_MAIN_ONLY(ret)                                                    \
  do {                                                                       \
    if (!pthread_equal(pthread_self(), main_thread)) {                       \
      __atomic_fetch_add(&off_main, 1, __ATOMIC_RELAXED);                    \
      return ret;                                                            \
    }                                                                        \
  } while (0)

static int f_capturing(nsc_stream s, int *yes) {
  (void)s;
  ON_MAIN_ONLY(-1);
  *yes = capture;
  return 0;
}
static int f_mark(nsc_stream s, nsc_mark *m) {
  (void)s;
  ON_MAIN_ONLY(-1);
  assert_false(capture); /* never recorded on a capturing stream */
  for (int i = 1; i < NEV; i++)
    if (!ev[i].taken) {
      ev[i].taken = 1;
      ev[i].complete = 0;
      ev[i].t = clock_ns += 1000;
      m->ev = (void *)(uintptr_t)i;
      outstanding++;
      return 0;
    }
  return -1;
}
static int f_elapsed(const nsc_mark *a, const nsc_mark *b, uint64_t *ns) {
  ON_MAIN_ONLY(-1);
  assert_false(capture); /* never queried while a stream captures */
  int ia = (int)(uintptr_t)a->ev, ib = (int)(uintptr_t)b->ev;
  assert_true(ev[ia].taken && ev[ib].taken);
  queries++;
  if (!ev[ib].complete) return 0;
  *ns = ev[ib].t - ev[ia].t;
  return 1;
}
static void f_release(nsc_mark *m) {
  ON_MAIN_ONLY();
  int i = (int)(uintptr_t)m->ev;
  assert_true(i > 0 && ev[i].taken); /* given back once */
  ev[i].taken = 0;
  outstanding--;
}
static const nsc_backend fake = {.name = "fake", .capturing = f_capturing, .mark = f_mark,
                                 .elapsed = f_elapsed, .mark_release = f_release};

static void complete_all(void) {
  for (int i = 1; i < NEV; i++)
    if (ev[i].taken) ev[i].complete = 1;
}

static char dir[] = "/tmp/test_log_unit.XXXXXX";

static void setup_log(int level, long long ring) {
  nsc_config cfg;
  memset(&cfg, 0, sizeof cfg);
  cfg.log = level;
  cfg.log_ring = ring;
  snprintf(cfg.log_file, sizeof cfg.log_file, "%s/log.%%p.%%r", dir);
  nsc_log_init(&cfg);
  memset(ev, 0, sizeof ev);
  capture = outstanding = queries = group_depth = 0;
}

static nsc_comm *new_comm(void) {
  nsc_comm *c = calloc(1, sizeof *c);
  assert_non_null(c);
  c->comm = (ncclComm_t)c;
  nsc_log_comm_open(&c->log, (uint64_t)(uintptr_t)c, 1, 4);
  return c;
}

/* One compressed-like record: begin, cast-in, collective, end marks. */
static void call(nsc_comm *c, int action, uint64_t bytes) {
  nsc_rec r;
  memset(&r, 0, sizeof r);
  r.action = action;
  r.nmembers = 1;
  r.dtype = r.wire_dtype = ncclFloat32;
  r.logical_bytes = bytes;
  r.wire_bytes = action == NSC_ACT_COMPRESS ? bytes / 2 : bytes;
  nsc_log_begin(&r, &fake, (nsc_stream)0x10, group_depth > 0);
  nsc_log_mark(&r, NSC_MARK_CAST_IN);
  nsc_log_mark(&r, NSC_MARK_COLL);
  nsc_log_mark(&r, NSC_MARK_END);
  nsc_log_commit(&c->log, &r);
}

static void not_queried_at_commit(void **state) {
  (void)state;
  setup_log(NSC_LOG_SUMMARY, 4096);
  nsc_comm *c = new_comm();
  call(c, NSC_ACT_COMPRESS, 4096);
  assert_int_equal(queries, 0);     /* just recorded: not asked */
  assert_int_equal(outstanding, 4);
  complete_all();
  call(c, NSC_ACT_COMPRESS, 4096);  /* the first is read now, the second not asked */
  assert_int_equal(queries, 4);     /* the last pair, then cast-in, collective, cast-out */
  assert_int_equal(outstanding, 4); /* the first's four marks given back */
  const nsc_log_totals *t = &c->log.by_action[NSC_ACT_COMPRESS];
  assert_int_equal(t->calls, 2);
  assert_int_equal(t->timed, 1);
  assert_int_equal(t->time_ns, 1000); /* CAST_IN -> COLL */
  assert_int_equal(t->cast_ns, 2000); /* BEGIN -> CAST_IN and COLL -> END */
  nsc_log_comm_close(&c->log);        /* the second: not complete, read once, unknown */
  assert_int_equal(c->log.unknown, 1);
  assert_int_equal(outstanding, 0);
  free(c);
}

static void oldest_first_stops_at_incomplete(void **state) {
  (void)state;
  setup_log(NSC_LOG_SUMMARY, 4096);
  nsc_comm *c = new_comm();
  call(c, NSC_ACT_PASS, 8);           /* never completes */
  for (int i = 0; i < 20; i++) {
    call(c, NSC_ACT_PASS, 8);
    for (int e = 5; e < NEV; e++)     /* everything but the first record's marks */
      if (ev[e].taken) ev[e].complete = 1;
  }
  assert_int_equal(c->log.by_action[NSC_ACT_PASS].timed, 0); /* all wait behind the first */
  assert_int_equal(c->log.ring_len, 21);
  nsc_log_comm_close(&c->log);
  assert_int_equal(c->log.unknown, 1);
  assert_int_equal(c->log.by_action[NSC_ACT_PASS].timed, 20);
  assert_int_equal(c->log.by_action[NSC_ACT_PASS].calls, 21);
  assert_int_equal(outstanding, 0);
  free(c);
}

static void nothing_while_capturing(void **state) {
  (void)state;
  setup_log(NSC_LOG_CALLS, 4096);
  nsc_comm *c = new_comm();
  call(c, NSC_ACT_PASS, 8);           /* pending when capture begins */
  complete_all();
  capture = 1;                        /* f_mark/f_elapsed assert if called */
  for (int i = 0; i < 5; i++) call(c, NSC_ACT_PASS, 8);
  assert_int_equal(queries, 0);
  assert_int_equal(c->log.ring_done, 0);
  capture = 0;
  call(c, NSC_ACT_PASS, 8);           /* reads the first, skips the captured five */
  assert_int_equal(c->log.by_action[NSC_ACT_PASS].timed, 1);
  assert_int_equal(c->log.ring_done, 6);
  complete_all();
  nsc_log_comm_close(&c->log);
  assert_int_equal(c->log.untimed, 5);
  assert_int_equal(c->log.by_action[NSC_ACT_PASS].timed, 2);
  assert_int_equal(c->log.by_action[NSC_ACT_PASS].records, 7);
  assert_int_equal(outstanding, 0);
  free(c);
}

static void ring_overflow_exact(void **state) {
  (void)state;
  setup_log(NSC_LOG_CALLS, 16);
  nsc_comm *c = new_comm();
  for (int i = 0; i < 100; i++) {
    call(c, i % 2 ? NSC_ACT_PASS : NSC_ACT_COMPRESS, 1000 + (uint64_t)i);
    complete_all();
  }
  assert_int_equal(c->log.ring_len, 16);
  assert_int_equal(c->log.dropped, 84);
  assert_int_equal(c->log.nrec, 100);
  uint64_t lb = 0;
  for (int i = 0; i < 100; i += 2) lb += 1000 + (uint64_t)i;
  assert_int_equal(c->log.by_action[NSC_ACT_COMPRESS].logical_bytes, lb);
  assert_int_equal(c->log.by_action[NSC_ACT_COMPRESS].wire_bytes, lb / 2);
  assert_int_equal(c->log.by_action[NSC_ACT_COMPRESS].calls, 50);
  assert_int_equal(c->log.by_action[NSC_ACT_PASS].calls, 50);
  nsc_log_comm_close(&c->log);
  assert_int_equal(c->log.by_action[NSC_ACT_COMPRESS].timed + c->log.by_action[NSC_ACT_PASS].timed, 100);
  assert_int_equal(outstanding, 0);
  free(c);
}

/* An exhausted event pool: marks not taken are counted, never silent. */
static void dropped_marks_counted(void **state) {
  (void)state;
  setup_log(NSC_LOG_SUMMARY, 4096);
  nsc_comm *c = new_comm();
  for (int i = 0; i < 100; i++) call(c, NSC_ACT_COMPRESS, 4096); /* nothing completes: marks stay held */
  /* 255 events, 4 marks per record: 400 - 255 marks could not be taken. */
  assert_int_equal(c->log.marks_dropped, 400 - (NEV - 1));
  complete_all();
  nsc_log_comm_close(&c->log);
  assert_int_equal(outstanding, 0);
  free(c);
}

static void grouped_and_discarded(void **state) {
  (void)state;
  setup_log(NSC_LOG_SUMMARY, 4096);
  nsc_comm *c = new_comm();
  group_depth = 1;
  call(c, NSC_ACT_PASS, 8);           /* enqueued at the group end: untimed, no mark */
  call(c, NSC_ACT_COMPRESS, 8);       /* its own casts and the group's span: timed */
  group_depth = 0;
  assert_int_equal(outstanding, 4);
  nsc_rec r;
  memset(&r, 0, sizeof r);
  nsc_log_begin(&r, &fake, NULL, group_depth > 0);
  nsc_log_mark(&r, NSC_MARK_END);
  nsc_log_discard(&r);                /* a failed call: marks back, nothing counted */
  assert_int_equal(outstanding, 4);
  complete_all();
  nsc_log_comm_close(&c->log);
  assert_int_equal(c->log.untimed, 1);
  assert_int_equal(c->log.by_action[NSC_ACT_COMPRESS].timed, 1);
  assert_int_equal(c->log.nrec, 2);
  assert_int_equal(outstanding, 0);
  free(c);
}

static void commit_after_close(void **state) {
  (void)state;
  setup_log(NSC_LOG_SUMMARY, 4096);
  nsc_comm *c = new_comm();
  nsc_log_comm_close(&c->log);
  call(c, NSC_ACT_PASS, 8); /* a late call on another thread at exit */
  assert_int_equal(c->log.nrec, 0);
  assert_int_equal(outstanding, 0);
  free(c);
}

static void histogram_within_1_32(void **state) {
  (void)state;
  uint64_t *h = calloc(NSC_LOG_HIST_BINS, sizeof *h);
  assert_non_null(h);
  for (uint64_t v = 1; v <= 100000; v++) nsc_hist_add(h, v * 37);
  uint64_t *hs[1] = {h};
  double q[] = {0.01, 0.5, 0.9, 0.99, 1.0};
  for (int i = 0; i < 5; i++) {
    double exact = 37.0 * (double)(uint64_t)(q[i] * 100000), got = (double)nsc_hist_quantile(hs, 1, q[i]);
    assert_true(got >= exact * (1 - 1.0 / 32) && got <= exact * (1 + 1.0 / 32));
  }
  memset(h, 0, NSC_LOG_HIST_BINS * sizeof *h);
  for (uint64_t v = 0; v < 16; v++) nsc_hist_add(h, v); /* exact below 16 ns */
  assert_int_equal(nsc_hist_quantile(hs, 1, 0.5), 7);
  nsc_hist_add(h, UINT64_MAX); /* the top bin holds anything */
  assert_true(nsc_hist_quantile(hs, 1, 1.0) > (1ull << 62));
  free(h);
}

static int call_lines(const char *path) {
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  char line[4096];
  int n = 0;
  while (fgets(line, sizeof line, f)) n += strstr(line, "\"kind\":\"call\"") != NULL;
  fclose(f);
  return n;
}

/* The writer thread: ten records whose marks are pending, the first four
 * completed and read by a later call; after its second the file holds those
 * four only (the writer takes resolved records, never asks the device); at
 * close the rest come, read on this thread. */
static void writer_takes_only_read_records(void **state) {
  (void)state;
  setup_log(NSC_LOG_CALLS, 4096);
  nsc_comm *c = new_comm();
  for (int i = 0; i < 10; i++) call(c, NSC_ACT_COMPRESS, 1000);
  for (int i = 1; i <= 16; i++) ev[i].complete = 1; /* the first four records' marks */
  call(c, NSC_ACT_PASS, 8);                         /* reads them, stops at the fifth */
  assert_int_equal(c->log.ring_done, 0 + 4);
  char path[128];
  snprintf(path, sizeof path, "%s/log.%d.1", dir, (int)getpid());
  int n = -1;
  for (int t = 0; t < 100 && n != 4; t++) { /* within the writer's second (10 s of slack on a busy machine) */
    usleep(100000);
    n = call_lines(path);
  }
  assert_int_equal(n, 4);
  usleep(1200000);                                  /* another round: nothing more is ready */
  assert_int_equal(call_lines(path), 4);
  complete_all();
  nsc_log_comm_close(&c->log);                      /* read here, written by the writer */
  nsc_log_writer_stop();
  assert_int_equal(call_lines(path), 11);
  assert_int_equal(off_main, 0);
  assert_int_equal(outstanding, 0);
  free(c);
}

int main(int argc, char **argv) {
  if (!mkdtemp(dir)) return 1;
  main_thread = pthread_self();
  if (argc > 1 && !strcmp(argv[1], "--writer")) {
    const struct CMUnitTest wt[] = {cmocka_unit_test(writer_takes_only_read_records)};
    int rc = cmocka_run_group_tests(wt, NULL, NULL);
    char cmd[64];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd)) rc = rc ? rc : 1;
    return rc;
  }
  /* No writer thread: rings, drops and reads stay exactly as the calls left
   * them, and closed logs are written on this thread (the fallback path). */
  nsc_log_writer_threaded(0);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(not_queried_at_commit),   cmocka_unit_test(oldest_first_stops_at_incomplete),
      cmocka_unit_test(nothing_while_capturing), cmocka_unit_test(ring_overflow_exact),
      cmocka_unit_test(grouped_and_discarded),   cmocka_unit_test(commit_after_close),
      cmocka_unit_test(histogram_within_1_32),   cmocka_unit_test(dropped_marks_counted),
  };
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  char cmd[64];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  if (system(cmd)) rc = rc ? rc : 1;
  return rc;
}
