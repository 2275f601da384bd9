/* accumtest.c — adversarial call sequences for accumulation
 * (NCCLSHIM_ACCUM_STEPS=K) over the host NCCL: DDP-like backward passes on
 * persistent bucket buffers, mixed with the other all-reduces real training
 * loops issue on the same communicator.
 *
 *   accumtest CASE [ARG]
 *     plain          DDP default: one whole-model pass, then rebuilt buckets
 *     nonblocking    the same on a nonblocking communicator (config.blocking=0)
 *     unused         find_unused_parameters=True: buckets from the start and an
 *                    int32 used-map after every pass
 *     static         static_graph=True: a used-map, two whole-model passes, rebuild
 *     foreign        foreign fp32 Sum all-reduces of a bucket's exact size (and
 *                    of another size) on buffers of their own, before the first
 *                    bucket, between buckets, after the last, after a synced
 *                    pass, several times over the run
 *     short POS      passes of three equal buckets; one pass lacks bucket POS
 *                    (0, 1, 2), one later pass has an extra equal-sized bucket
 *     twomodels      two models of equal size on one communicator
 *     lostpass       one accumulable bucket and one below MIN_BYTES; one pass
 *                    lacks the large bucket (seen only through the small one)
 *     rotated        the first rebuilt pass lacks its first bucket and is
 *                    followed by a foreign call as large as the pass
 *     unusedforeign  find_unused with a foreign call of the pass's size before
 *                    the first pass (not a whole-model pass: no used-map)
 *     midcomm        the model re-wrapped on a new communicator at micro-step 5
 *     metriconly     a second communicator that carries only large fp32 metric
 *                    all-reduces on a persistent buffer, every micro-step
 *     inplace [V]    one bucket rebuilt at the freed whole-model bucket's
 *                    address (a caching allocator's reuse), an int64
 *                    broadcast before every forward (BatchNorm's buffers);
 *                    V = ddp (default): DDP's rebuild broadcasts between the
 *                    first pass and the next (learned); none: no rebuild
 *                    broadcasts, late: after the third pass (never skipped)
 *
 * The loop steps its optimizer at micro-steps K-1, 2K-1, ... counted from the
 * job's first backward pass (K from NCCLSHIM_ACCUM_STEPS). Rank r's input is
 * 2^r times a small integer, so the true sum (2^W - 1) f and the local answer
 * of a skipped call W 2^r f are exact and told apart on every rank. Checks:
 * every foreign call returns the true sum; every bucket of a pass followed by
 * an optimizer step returns the true sum; every bucket returns either; all
 * ranks see the same outcome for every call; and where the case says
 * accumulation must happen (or go on), some later pass was answered locally.
 * Exit 0 = pass; failures print one line each. Rank 0 prints the outcome
 * string (per pass: S synced, L local, F foreign synced, '|' between passes). */
#include <mpi.h>
#include <nccl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testmpi.h"
#include "devmirror.h" /* SHIMTEST_DEVICE=1: device buffers on the CUDA driver double */

enum { B = 2048 }; /* floats per bucket: 8 KiB, accumulable with NCCLSHIM_MIN_BYTES=4096 */

static int rank, W, K;
static int failures;
static long ms;             /* the job's micro-step */
static uint64_t hash = 1469598103934665603ull;
static char trace[8192];
static size_t tlen;
static long local_after;    /* buckets answered locally at micro-step >= expect_local_from */
static long expect_local_from = -1;
static int nonblocking;     /* the communicator answers ncclInProgress: poll before reading */

static void fail(const char *fmt, const char *what, long a) {
  if (failures++ < 20) {
    fprintf(stderr, "FAIL rank %d micro-step %ld: ", rank, ms);
    fprintf(stderr, fmt, what, a);
    fputc('\n', stderr);
  }
}

static void mark(char c) {
  hash = (hash ^ (uint64_t)(unsigned char)c) * 1099511628211ull;
  if (tlen + 1 < sizeof trace) trace[tlen++] = c;
}

static float f_of(size_t i, int tag) { return (float)((long)(i * 3 + (size_t)tag * 5 + (size_t)ms) % 11 + 1); }

/* One fp32 Sum all-reduce of n floats in place on buf; returns 1 when synced. */
static int reduce(ncclComm_t c, float *buf, size_t n, int tag, int must_sync, char tc) {
  float mine = (float)(1 << rank);
  for (size_t i = 0; i < n; i++) buf[i] = mine * f_of(i, tag);
  ncclResult_t r = ncclAllReduce(buf, buf, n, ncclFloat32, ncclSum, c, NULL);
  if (nonblocking && r == ncclInProgress) {
    ncclResult_t e = ncclInProgress;
    while (e == ncclInProgress) NCCL_OK(ncclCommGetAsyncError(c, &e));
    r = e;
  }
  NCCL_OK(r);
  int sum = 1, loc = 1;
  for (size_t i = 0; i < n; i++) {
    float f = f_of(i, tag);
    sum &= buf[i] == (float)((1 << W) - 1) * f;
    loc &= buf[i] == (float)W * mine * f;
  }
  if (!sum && !loc) fail("%s: neither the sum nor the local answer (tag %ld)", "all-reduce", tag);
  if (!sum && must_sync) fail("%s answered locally (tag %ld)", tc == 'F' ? "a foreign call" : "a bucket before an optimizer step", tag);
  if (!sum && expect_local_from >= 0 && ms >= expect_local_from) local_after++;
  mark(sum ? tc : 'L');
  return sum;
}

static int final_pass(void) { return ms % K == K - 1; }

typedef struct {
  int nb;
  size_t sizes[8];
  float *b[8];
  float *whole;
  size_t total;
  int tag;
} model;

static void model_init(model *m, int nb, const size_t *sizes, int tag) {
  memset(m, 0, sizeof *m);
  m->nb = nb;
  m->tag = tag;
  for (int i = 0; i < nb; i++) m->total += m->sizes[i] = sizes[i];
  m->whole = malloc(m->total * sizeof(float));
}

/* DDP's rebuild: new bucket storage (allocated while the old one is live, so
 * the addresses change), then the whole-model bucket is freed. */
static void model_rebuild(model *m) {
  for (int i = 0; i < m->nb; i++) m->b[i] = malloc(m->sizes[i] * sizeof(float));
  free(m->whole);
  m->whole = NULL;
}

static void model_free(model *m) {
  free(m->whole);
  for (int i = 0; i < m->nb; i++) free(m->b[i]);
  memset(m, 0, sizeof *m);
}

static void whole_pass(ncclComm_t c, model *m) { reduce(c, m->whole, m->total, m->tag, final_pass(), 'S'); }

/* Buckets of one backward pass; `skip` (or -1) is left out. */
static void bucket_pass(ncclComm_t c, model *m, int skip) {
  for (int i = 0; i < m->nb; i++)
    if (i != skip) reduce(c, m->b[i], m->sizes[i], m->tag + i + 1, final_pass(), 'S');
}

static void used_map(ncclComm_t c, int n) {
  int32_t *u = malloc((size_t)n * sizeof *u);
  for (int i = 0; i < n; i++) u[i] = 1;
  NCCL_OK(ncclAllReduce(u, u, (size_t)n, ncclInt32, ncclSum, c, NULL));
  for (int i = 0; i < n; i++)
    if (u[i] != W) { fail("%s wrong (%ld)", "used-map", u[i]); break; }
  free(u);
}

static void end_pass(void) {
  mark('|');
  ms++;
}

static const size_t EQ3[] = {B, B, B};
static const size_t MIX[] = {B, 3 * B / 2, B, 512}; /* the last one below MIN_BYTES */

/* Micro-steps [ms, upto) of plain DDP passes (already rebuilt). */
static void run_passes(ncclComm_t c, model *m, long upto) {
  while (ms < upto) {
    bucket_pass(c, m, -1);
    end_pass();
  }
}

/* The DDP default start: a whole-model pass, then the rebuild. */
static void ddp_start(ncclComm_t c, model *m) {
  whole_pass(c, m);
  end_pass();
  model_rebuild(m);
}

static int case_plain(ncclComm_t c) {
  model m;
  model_init(&m, 4, MIX, 0);
  ddp_start(c, &m);
  expect_local_from = 8;
  run_passes(c, &m, 24);
  model_free(&m);
  return 0;
}

/* Micro-steps [ms, upto) of find_unused passes: buckets, then the used-map. */
static void unused_passes(ncclComm_t c, model *m, long upto) {
  while (ms < upto) {
    bucket_pass(c, m, -1);
    used_map(c, 40);
    end_pass();
  }
}

static int case_unused(ncclComm_t c) {
  model m;
  model_init(&m, 4, MIX, 0);
  model_rebuild(&m);
  expect_local_from = 8;
  unused_passes(c, &m, 24);
  model_free(&m);
  return 0;
}

static int case_static(ncclComm_t c) {
  model m;
  model_init(&m, 4, MIX, 0);
  used_map(c, 52);
  whole_pass(c, &m);
  end_pass();
  whole_pass(c, &m);
  end_pass();
  model_rebuild(&m);
  expect_local_from = 8;
  run_passes(c, &m, 24);
  model_free(&m);
  return 0;
}

/* A foreign fp32 Sum all-reduce of n floats on a buffer of its own. */
static void foreign(ncclComm_t c, size_t n, int tag) {
  float *f = malloc(n * sizeof *f);
  reduce(c, f, n, 100 + tag, 1, 'F');
  free(f);
}

static int case_foreign(ncclComm_t c) {
  model m;
  model_init(&m, 3, EQ3, 0);
  float *ema = malloc(B * sizeof *ema); /* persistent, a bucket's exact size */
  ddp_start(c, &m);
  run_passes(c, &m, 9);
  /* after pass 8 (the reproduction: one extra call after a pass) */
  foreign(c, B, 1);
  run_passes(c, &m, 10);
  for (int pos = 0; pos <= 3; pos++) { /* before, between, after the buckets */
    for (int i = 0; i < m.nb; i++) {
      if (i == pos) reduce(c, ema, B, 200 + pos, 1, 'F');
      reduce(c, m.b[i], m.sizes[i], m.tag + i + 1, final_pass(), 'S');
    }
    if (pos == 3) reduce(c, ema, B, 203, 1, 'F');
    end_pass();
  }
  /* after the next synced pass, another size between buckets, then several */
  while (!final_pass()) run_passes(c, &m, ms + 1);
  run_passes(c, &m, ms + 1);
  foreign(c, B, 2);
  reduce(c, m.b[0], m.sizes[0], m.tag + 1, final_pass(), 'S');
  foreign(c, 3 * B / 2 + 1, 3);
  bucket_pass(c, &m, 0);
  end_pass();
  for (int k = 0; k < 3; k++) {
    run_passes(c, &m, ms + 1);
    foreign(c, B, 4 + k);
  }
  expect_local_from = ms + 2;
  run_passes(c, &m, ms + 2 + 2 * K);
  free(ema);
  model_free(&m);
  return 0;
}

/* Equal-sized buckets: one pass lacks bucket `pos`, a later one has an extra
 * bucket of the same size (a tensor of its own, reduced between two buckets). */
static int case_short(ncclComm_t c, int pos) {
  model m;
  model_init(&m, 3, EQ3, 0);
  ddp_start(c, &m);
  run_passes(c, &m, 9);
  bucket_pass(c, &m, pos);
  end_pass();
  run_passes(c, &m, 13);
  float *extra = malloc(B * sizeof *extra);
  for (int i = 0; i < m.nb; i++) {
    reduce(c, m.b[i], m.sizes[i], m.tag + i + 1, final_pass(), 'S');
    if (i == 1) reduce(c, extra, B, 300, final_pass(), 'S');
  }
  end_pass();
  free(extra);
  run_passes(c, &m, 26);
  model_free(&m);
  return 0;
}

/* One accumulable bucket and one below MIN_BYTES: a pass without the large
 * bucket is seen only through the small one (fuzz seed 147). */
static const size_t ONE[] = {B, 512};

static int case_lostpass(ncclComm_t c) {
  model m;
  model_init(&m, 2, ONE, 0);
  ddp_start(c, &m);
  run_passes(c, &m, 9);
  bucket_pass(c, &m, 0);
  end_pass();
  run_passes(c, &m, 26);
  model_free(&m);
  return 0;
}

/* find_unused_parameters (no whole-model pass, a used-map after each pass)
 * with a foreign call of the pass's size before the first pass: not
 * micro-step 0 (fuzz seed 133). */
static int case_unusedforeign(ncclComm_t c) {
  model m;
  model_init(&m, 2, ONE, 0);
  model_rebuild(&m);
  foreign(c, B, 1);
  unused_passes(c, &m, 24);
  model_free(&m);
  return 0;
}

/* The first rebuilt pass lacks its first bucket, then a foreign call as large
 * as the pass: learned as a rotated pass unless that call rejects it (fuzz
 * seed 113). */
static int case_rotated(ncclComm_t c) {
  model m;
  model_init(&m, 3, EQ3, 0);
  ddp_start(c, &m);
  bucket_pass(c, &m, 0);
  foreign(c, 3 * B, 1);
  end_pass();
  run_passes(c, &m, 26);
  model_free(&m);
  return 0;
}

/* Two models on one communicator: per micro-step model A's backward, then B's. */
static int case_twomodels(ncclComm_t c) {
  static const size_t TWO[] = {2 * B, 2 * B};
  model a, b;
  model_init(&a, 2, TWO, 0);
  model_init(&b, 2, TWO, 10);
  whole_pass(c, &a);
  whole_pass(c, &b);
  end_pass();
  model_rebuild(&a);
  model_rebuild(&b);
  while (ms < 24) {
    bucket_pass(c, &a, -1);
    bucket_pass(c, &b, -1);
    end_pass();
  }
  model_free(&a);
  model_free(&b);
  return 0;
}

/* The model re-wrapped at micro-step 5 on a new communicator (out of phase
 * with K = 2 and 4). */
static int case_midcomm(ncclComm_t c1) {
  model m;
  model_init(&m, 4, MIX, 0);
  ddp_start(c1, &m);
  run_passes(c1, &m, 5);
  model_free(&m);
  NCCL_OK(ncclCommDestroy(c1));
  ncclComm_t c2 = tm_comm_world();
  model_init(&m, 4, MIX, 0);
  ddp_start(c2, &m);
  run_passes(c2, &m, 24);
  model_free(&m);
  NCCL_OK(ncclCommDestroy(c2));
  return 0;
}

/* A metric-only communicator: every micro-step one large fp32 Sum on a
 * persistent buffer, after every optimizer step another one. */
static int case_metriconly(ncclComm_t c) {
  ncclComm_t mc = tm_comm_world();
  model m;
  model_init(&m, 4, MIX, 0);
  float *met = malloc(2 * B * sizeof *met), *cm = malloc(B * sizeof *cm);
  whole_pass(c, &m);
  reduce(mc, met, 2 * B, 400, 1, 'F');
  end_pass();
  model_rebuild(&m);
  expect_local_from = 8;
  while (ms < 24) {
    int fin = final_pass();
    bucket_pass(c, &m, -1);
    reduce(mc, met, 2 * B, 400, 1, 'F');
    if (fin) reduce(mc, cm, B, 401, 1, 'F');
    end_pass();
  }
  free(met);
  free(cm);
  model_free(&m);
  NCCL_OK(ncclCommDestroy(mc));
  return 0;
}

/* A broadcast from rank 0 of n elements of dt (int32 or int64). */
static void bcast(ncclComm_t c, size_t n, ncclDataType_t dt) {
  int64_t *v = calloc(n, sizeof *v);
  for (size_t i = 0; rank == 0 && i < n; i++) v[i] = (int64_t)i;
  NCCL_OK(ncclBcast(v, n, dt, 0, c, NULL));
  free(v);
}

/* A model of one bucket whose rebuilt bucket gets the whole-model bucket's
 * block (its address, deterministically); DDP's rebuild broadcasts the
 * bucket indices (one per parameter and the bucket count: 7 parameters
 * here) and one size per bucket. Without them (or later than DDP makes
 * them) the calls are a metric's on a fixed buffer: never answered locally. */
static int case_inplace(ncclComm_t c, const char *v) {
  int ddp = !strcmp(v, "ddp"), late = !strcmp(v, "late");
  if (!ddp && !late && strcmp(v, "none")) return 2;
  static const size_t ONE_BUCKET[] = {2 * B};
  model m;
  model_init(&m, 1, ONE_BUCKET, 0);
  if (ddp) expect_local_from = 8;
  while (ms < 24) {
    bcast(c, 3, ncclInt64); /* num_batches_tracked of 3 BatchNorm layers, every forward */
    if ((ddp && ms == 1) || (late && ms == 3)) {
      bcast(c, 8, ncclInt32);
      bcast(c, 1, ncclInt32);
    }
    if (ms == 1) m.b[0] = m.whole, m.whole = NULL; /* freed, and reused by the rebuilt bucket */
    reduce(c, ms == 0 ? m.whole : m.b[0], 2 * B, m.tag + 1, final_pass() || !ddp, 'S');
    end_pass();
  }
  model_free(&m);
  return 0;
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &W);
  const char *k = getenv("NCCLSHIM_ACCUM_STEPS");
  K = k ? atoi(k) : 1;
  if (K < 2) K = 2;
  const char *cmd = argc > 1 ? argv[1] : "plain";
  nonblocking = !strcmp(cmd, "nonblocking");
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 0;
  ncclComm_t c = nonblocking ? tm_comm_over_cfg(MPI_COMM_WORLD, &cfg) : tm_comm_world();
  int rc = 2;
  if (!strcmp(cmd, "plain") || nonblocking) rc = case_plain(c);
  else if (!strcmp(cmd, "unused")) rc = case_unused(c);
  else if (!strcmp(cmd, "static")) rc = case_static(c);
  else if (!strcmp(cmd, "foreign")) rc = case_foreign(c);
  else if (!strcmp(cmd, "short")) rc = case_short(c, argc > 2 ? atoi(argv[2]) : 1);
  else if (!strcmp(cmd, "twomodels")) rc = case_twomodels(c);
  else if (!strcmp(cmd, "lostpass")) rc = case_lostpass(c);
  else if (!strcmp(cmd, "rotated")) rc = case_rotated(c);
  else if (!strcmp(cmd, "unusedforeign")) rc = case_unusedforeign(c);
  else if (!strcmp(cmd, "midcomm")) rc = case_midcomm(c), c = NULL;
  else if (!strcmp(cmd, "metriconly")) rc = case_metriconly(c);
  else if (!strcmp(cmd, "inplace")) rc = case_inplace(c, argc > 2 ? argv[2] : "ddp");
  else fprintf(stderr, "unknown case %s\n", cmd);
  /* ACCUMTEST_FAULTED=1: a fault ends accumulation; only safety is asserted. */
  if (getenv("ACCUMTEST_FAULTED")) expect_local_from = -1;
  if (expect_local_from >= 0 && local_after == 0)
    fail("%s: no bucket was answered locally from micro-step %ld on", "accumulation", expect_local_from);
  /* Every rank must have seen the same outcome for every call. */
  int64_t h[2] = {(int64_t)(hash >> 1), -(int64_t)(hash >> 1)}, hm[2];
  MPI_Allreduce(h, hm, 2, MPI_INT64_T, MPI_MAX, MPI_COMM_WORLD);
  if (hm[0] != -hm[1]) fail("%s: ranks saw different outcomes (%ld)", "consistency", 0);
  trace[tlen] = 0;
  if (rank == 0) printf("%s K=%d W=%d: %s\n", cmd, K, W, trace);
  if (failures) rc = 1;
  int all = 0;
  MPI_Allreduce(&rc, &all, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (c) ncclCommDestroy(c);
  MPI_Finalize();
  return all;
}
