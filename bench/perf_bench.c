/* perf_bench.c — the harness of the nccl-tests-style benchmarks
 * (allreduce_perf, reduce_scatter_perf: one perf_coll_t each, perf_bench.h):
 * one rank per MPI process, the same flags and the same output as nccl-tests'
 * all_reduce_perf / reduce_scatter_perf, plus correctness columns when
 * libncclshim is preloaded.
 *
 * Per (datatype, op) it warms up at the largest and smallest size, then per
 * size times out-of-place and in-place runs: host wall clock around `iters`
 * iterations of `agg` collectives (one group when agg > 1) and a stream sync,
 * divided by iters*agg (and by the graph launches with -G), aggregated across
 * ranks as -a says; then it checks fresh inputs (perf_data.h) in one more
 * launch — with -m N, a group of up to N collectives on disjoint slices, so a
 * shim that fuses grouped calls is checked too. #wrong = result elements
 * failing the check plus, out of place, send-buffer elements that changed,
 * summed over ranks; "Out of bounds values" counts (rank, result) pairs with
 * any, as nccl-tests does. Shim counters read before and after each half-row
 * tell whether its calls were compressed (wire column) and which rounding
 * bound applies.
 *
 * Must not: link the shim (it is found with dlsym, NULL = not loaded), or
 * assume where buffers live (perf_mem.h decides). */
#include <dlfcn.h>
#include <mpi.h>
#include <nccl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ncclshim.h"
#include "perf_args.h"
#include "perf_bench.h"
#include "perf_data.h"
#include "perf_mem.h"
#include "perf_out.h"

static int g_rank;

static const perf_coll_t *g_coll;

#define FAIL(...) do { fprintf(stderr, "%s rank %d: ", g_coll->name, g_rank); \
  fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); return -1; } while (0)
#define CHECK(call) do { if ((call) != 0) FAIL("%s:%d: %s failed", __FILE__, __LINE__, #call); } while (0)
#define NCCLCHECK(call) do { ncclResult_t r_ = (call); if (r_ != ncclSuccess) \
  FAIL("%s:%d: %s: %s", __FILE__, __LINE__, #call, ncclGetErrorString(r_)); } while (0)

typedef int (*shim_stats_fn)(ncclshim_stats_t *);
typedef const char *(*shim_version_fn)(void);

typedef struct {
  perf_opts_t o;
  int rank, nranks;
  ncclComm_t comm;
  perf_mem_t mem;
  void *send, *recv;      /* collective buffers, bufbytes each */
  void *hstage, *hout;    /* host copies for preparing and checking */
  size_t bufbytes;
  int graphs;             /* -G given and the buffers support graphs */
  int corrupt;            /* ALLREDUCE_PERF_CORRUPT=1 */
  uint64_t checks;        /* seeds: one per checked launch */
  uint64_t chk_overflow, chk_underflow; /* the shim's cast counts of the checked launches only */
  shim_stats_fn shim_stats;
  perf_out_t out;
  int errors;             /* results with wrong elements on this rank (summed over ranks at the end, as nccl-tests) */
  double bw_sum;
  int bw_count;
} bench_t;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* NCCLSHIM_BLOCK_ELEMS as the shim reads it (default 256). */
static size_t perf_block_elems(void) {
  const char *v = getenv("NCCLSHIM_BLOCK_ELEMS");
  long b = v && *v ? atol(v) : 256;
  return b > 0 ? (size_t)b : 256;
}

static void shim_snap(const bench_t *b, ncclshim_stats_t *s) {
  memset(s, 0, sizeof *s);
  if (b->shim_stats) b->shim_stats(s);
}

/* What the shim did between two snapshots: "skip", the wire type (with
 * "-2p" when it went two-phase), or "-". */
static void shim_wire(const ncclshim_stats_t *s0, const ncclshim_stats_t *s1, char wire[12]) {
  if (s1->skipped > s0->skipped) snprintf(wire, 12, "skip");
  else if (s1->twophase > s0->twophase) snprintf(wire, 12, "%.5s-2p", s1->wire);
  else if (s1->compressed > s0->compressed || s1->fused > s0->fused) snprintf(wire, 12, "%.8s", s1->wire);
  else snprintf(wire, 12, "-");
}

/* One collective of the timed loop; nccl-tests' sliding offset spreads the
 * iterations over the buffer when the size is below the maximum. */
/* The send and receive pointers of slot `slot` of `bytes` (in place: the
 * receive buffer inside the send buffer where the collective wants it). */
static void slot_ptrs(const bench_t *b, const perf_type_t *t, size_t count, int inplace, size_t slot,
                      const char **send, char **recv) {
  size_t bytes = count * t->size;
  char *base = (char *)(inplace ? b->recv : b->send) + bytes * slot;
  *send = base;
  *recv = inplace ? base + g_coll->inplace_offset(count, b->rank, b->nranks) * t->size
                  : (char *)b->recv + bytes * slot;
}

static int start_coll(bench_t *b, const perf_type_t *t, const perf_op_t *op, size_t count,
                      int inplace, int iter) {
  size_t bytes = count * t->size, steps = bytes ? b->bufbytes / bytes : 1;
  const char *send;
  char *recv;
  slot_ptrs(b, t, count, inplace, (size_t)iter % steps, &send, &recv);
  NCCLCHECK(g_coll->run(send, recv, count, t->nccl, op->nccl, b->comm, (cudaStream_t)b->mem.stream));
  if (b->o.blocking) {
    CHECK(b->mem.sync());
    MPI_Barrier(MPI_COMM_WORLD);
  }
  return 0;
}

static double aggregate_time(const bench_t *b, double t) {
  static const MPI_Op ops[] = {MPI_OP_NULL, MPI_SUM, MPI_MIN, MPI_MAX};
  if (b->o.average == 0) {
    MPI_Bcast(&t, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    return t;
  }
  MPI_Allreduce(MPI_IN_PLACE, &t, 1, MPI_DOUBLE, ops[b->o.average], MPI_COMM_WORLD);
  return b->o.average == 1 ? t / b->nranks : t;
}

/* Fresh inputs in up to agg disjoint slices, one launch (a group when more
 * than one slice, captured in a graph with -G), then every slice checked on
 * every rank; *wrong and *relerr are totals over ranks, *bad_here says
 * whether this rank saw a wrong element. */
static int check_once(bench_t *b, const perf_type_t *t, const perf_op_t *op, size_t count,
                      int inplace, uint64_t *wrong, double *relerr, int *bad_here) {
  const size_t bytes = count * t->size;
  size_t nslices = (b->o.agg > 1 && bytes) ? b->bufbytes / bytes : 1;
  if (nslices > (size_t)b->o.agg) nslices = (size_t)b->o.agg;
  const uint64_t seed = ++b->checks << 10; /* + slice */
  const size_t rcount = g_coll->recv_count(count, b->nranks), first = g_coll->result_first(count, b->rank, b->nranks);
  const size_t rskip = inplace ? g_coll->inplace_offset(count, b->rank, b->nranks) * t->size : 0;
  perf_gen_t g;
  for (size_t j = 0; j < nslices; j++) {
    perf_gen_init(&g, t, op, b->nranks, seed + j, b->o.random);
    g.first = first;
    perf_fill_input(&g, b->rank, (char *)b->hstage + j * bytes, count);
    if (!inplace) perf_fill_sentinel(&g, (char *)b->hout + j * bytes, rcount);
  }
  CHECK(b->mem.upload(inplace ? b->recv : b->send, b->hstage, nslices * bytes));
  if (!inplace) CHECK(b->mem.upload(b->recv, b->hout, nslices * bytes));

  ncclshim_stats_t s0, s1;
  shim_snap(b, &s0);
  if (b->graphs) CHECK(b->mem.capture_begin());
  if (nslices > 1) NCCLCHECK(ncclGroupStart());
  for (size_t j = 0; j < nslices; j++) {
    const char *send;
    char *recv;
    slot_ptrs(b, t, count, inplace, j, &send, &recv);
    NCCLCHECK(g_coll->run(send, recv, count, t->nccl, op->nccl, b->comm, (cudaStream_t)b->mem.stream));
  }
  if (nslices > 1) NCCLCHECK(ncclGroupEnd());
  if (b->graphs) {
    CHECK(b->mem.capture_end());
    CHECK(b->mem.graph_launch(1));
  }
  CHECK(b->mem.sync());
  if (b->graphs) b->mem.graph_release();
  shim_snap(b, &s1);
  /* What the casts lost on freshly filled inputs (the timed launches re-reduce
   * their own in-place results, whose growing sums overflow by construction:
   * issue 24, 227005 "overflowed" next to #wrong 0). */
  b->chk_overflow += s1.overflow - s0.overflow;
  b->chk_underflow += s1.underflow - s0.underflow;

  /* Compressed calls are held to the wire type's rounding (bounded checks only). */
  double unit = t->unit;
  if ((s1.compressed > s0.compressed || s1.fused > s0.fused) && perf_wire_unit(s1.wire) > unit) unit = perf_wire_unit(s1.wire);
  perf_check_t res = {0, 0};
  CHECK(b->mem.download(b->hout, b->recv, nslices * bytes));
  if (b->corrupt && b->rank == 0) perf_corrupt_one(t, b->hout, count);
  if (!inplace) CHECK(b->mem.download(b->hstage, b->send, nslices * bytes));
  /* The block-scaled formats (int8, fp8) against their block bound. */
  double bcoef = s1.compressed > s0.compressed ? perf_wire_block_coef(s1.wire) : 0;
  for (size_t j = 0; j < nslices; j++) {
    perf_gen_init(&g, t, op, b->nranks, seed + j, b->o.random);
    g.first = first;
    const char *got = (char *)b->hout + j * bytes + rskip;
    if (bcoef > 0) perf_check_block(&g, got, rcount, bcoef, perf_block_elems(), &res);
    else perf_check_result(&g, got, rcount, unit, &res);
    if (!inplace) res.wrong += perf_count_changed(&g, b->rank, (char *)b->hstage + j * bytes, count);
  }
  *bad_here = res.wrong != 0;
  MPI_Allreduce(MPI_IN_PLACE, &res.wrong, 1, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
  MPI_Allreduce(MPI_IN_PLACE, &res.max_relerr, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  *wrong = res.wrong;
  *relerr = res.max_relerr;
  return 0;
}

/* One half-row: time, then check. */
static int bench_time(bench_t *b, const perf_type_t *t, const perf_op_t *op, size_t count,
                      int inplace, perf_result_t *r, char wire[12]) {
  const perf_opts_t *o = &b->o;
  ncclshim_stats_t s0, s1;
  shim_snap(b, &s0);
  if (o->check) { /* time on real data, as nccl-tests does */
    perf_gen_t g;
    perf_gen_init(&g, t, op, b->nranks, 99, o->random);
    perf_fill_input(&g, b->rank, b->hstage, count);
    CHECK(b->mem.upload(inplace ? b->recv : b->send, b->hstage, count * t->size));
  }
  CHECK(start_coll(b, t, op, count, inplace, 0));
  CHECK(b->mem.sync());
  MPI_Barrier(MPI_COMM_WORLD);

  if (b->graphs) CHECK(b->mem.capture_begin());
  double t0 = now_s();
  for (int it = 0; it < o->iters; it++) {
    if (o->agg > 1) NCCLCHECK(ncclGroupStart());
    for (int a = 0; a < o->agg; a++) CHECK(start_coll(b, t, op, count, inplace, it * o->agg + a));
    if (o->agg > 1) NCCLCHECK(ncclGroupEnd());
  }
  if (b->graphs) {
    CHECK(b->mem.capture_end());
    MPI_Barrier(MPI_COMM_WORLD);
    t0 = now_s();
    CHECK(b->mem.graph_launch(o->graph_launches));
  }
  CHECK(b->mem.sync());
  double sec = (now_s() - t0) / ((double)o->iters * o->agg);
  if (b->graphs) {
    sec /= o->graph_launches;
    b->mem.graph_release();
  }
  sec = aggregate_time(b, sec);

  r->time_us = sec * 1e6;
  r->algbw = sec > 0 ? (double)(count * t->size) / 1e9 / sec : 0;
  r->busbw = r->algbw * g_coll->bus_factor(b->nranks);
  MPI_Barrier(MPI_COMM_WORLD);

  r->wrong = -1;
  r->max_relerr = 0;
  for (int c = 0; c < o->check; c++) {
    uint64_t wrong;
    int bad_here;
    CHECK(check_once(b, t, op, count, inplace, &wrong, &r->max_relerr, &bad_here));
    r->wrong = (long long)wrong;
    b->errors += bad_here;
    if (wrong) break;
  }
  b->bw_sum += r->busbw;
  b->bw_count++;
  shim_snap(b, &s1);
  shim_wire(&s0, &s1, wire);
  r->wire = wire;
  return 0;
}

static int warmup(bench_t *b, const perf_type_t *t, const perf_op_t *op, size_t bytes) {
  for (int it = 0; it < b->o.warmup; it++) CHECK(start_coll(b, t, op, bytes / t->size, 0, it));
  CHECK(b->mem.sync());
  return 0;
}

static int time_test(bench_t *b, const perf_type_t *t, const perf_op_t *op) {
  const perf_opts_t *o = &b->o;
  MPI_Barrier(MPI_COMM_WORLD);
  CHECK(warmup(b, t, op, o->max_bytes));
  CHECK(warmup(b, t, op, o->min_bytes));
  for (size_t size = o->min_bytes; size <= o->max_bytes;) {
    size_t count = g_coll->round_count(size / t->size, b->nranks);
    perf_result_t r[2];
    char wire[2][12];
    CHECK(bench_time(b, t, op, count, 0, &r[0], wire[0]));
    CHECK(bench_time(b, t, op, count, 1, &r[1], wire[1]));
    perf_out_row(&b->out, count * t->size, g_coll->recv_count(count, b->nranks), t->name, op->name, r);
    size_t next = o->step_factor > 1 ? size * (size_t)o->step_factor : size + o->step_bytes;
    if (next <= size) break; /* size 0 with a factor, or overflow */
    size = next;
  }
  return 0;
}

static int devices(bench_t *b) {
  perf_device_t me = {.rank = b->rank, .pid = getpid()};
  gethostname(me.host, sizeof me.host - 1);
  me.host[strcspn(me.host, ".")] = '\0'; /* short name, as nccl-tests */
  b->mem.describe(me.desc, sizeof me.desc, &me.device);
  perf_device_t *all = b->rank == 0 ? calloc((size_t)b->nranks, sizeof *all) : NULL;
  if (b->rank == 0 && !all) FAIL("out of memory");
  MPI_Gather(&me, sizeof me, MPI_BYTE, all, sizeof me, MPI_BYTE, 0, MPI_COMM_WORLD);
  perf_out_devices(&b->out, all, b->nranks);
  free(all);
  return 0;
}

/* 1 when the ranks' shim counters of calls and decisions disagree: every rank
 * must issue the same collectives. */
static int shim_ranks_differ(const ncclshim_stats_t *s) {
  uint64_t v[6] = {s->calls, s->passthrough, s->compressed, s->skipped, s->fused, s->real_calls};
  uint64_t lo[6], hi[6];
  MPI_Allreduce(v, lo, 6, MPI_UINT64_T, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(v, hi, 6, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD);
  return memcmp(lo, hi, sizeof lo) != 0;
}

/* Buffers of -e bytes that cannot fit in a node's host memory: refused on
 * every rank alike before anything is allocated (the OOM killer would stop
 * the ranks otherwise). Per rank: send and receive buffers (host memory
 * only) and the two host copies for preparing and checking, plus as much
 * again for the shim's staging when it is preloaded. Returns 0, or
 * PERF_STOP when every rank must stop (rank 0 says why). */
#define PERF_STOP (-2)
#define CHECK_STOP(call) do { int s_ = (call); if (s_ == PERF_STOP) return PERF_STOP; if (s_) return -1; } while (0)
static int fits_in_memory(const bench_t *b, const char *name, int local_n) {
  double per_rank = (double)b->o.max_bytes * (strcmp(b->mem.name, "host") == 0 ? 4 : 2);
  if (dlsym(RTLD_DEFAULT, "ncclshim_get_stats")) per_rank += (double)b->o.max_bytes;
  double need = per_rank * local_n, avail = (double)perf_mem_host_available();
  int fits = avail <= 0 || need <= avail;
  MPI_Allreduce(MPI_IN_PLACE, &fits, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (!fits && b->rank == 0) {
    fprintf(stderr, "%s: -e %zu: the buffers need about %.1f GiB of host memory per rank (%.1f GiB for the %d "
            "ranks on this node), more than the %.1f GiB available%s; use a smaller -e\n",
            name, b->o.max_bytes, per_rank / 1073741824.0, need / 1073741824.0, local_n, avail / 1073741824.0,
            avail > 0 ? "" : " (unknown)");
  }
  return fits ? 0 : PERF_STOP;
}

static int setup(bench_t *b, int argc, char **argv) {
  char err[256];
  MPI_Comm local;
  int local_rank, local_n;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, b->rank, MPI_INFO_NULL, &local);
  MPI_Comm_rank(local, &local_rank);
  MPI_Comm_size(local, &local_n);
  MPI_Comm_free(&local);
  if (perf_mem_open(&b->mem, local_rank, err, sizeof err)) FAIL("%s", err);
  CHECK_STOP(fits_in_memory(b, g_coll->name, local_n));
  b->graphs = b->o.graph_launches > 0 && b->mem.capture_begin != NULL;

  const char *c = getenv("ALLREDUCE_PERF_CORRUPT");
  if (c && *c && strcmp(c, "0") != 0 && strcmp(c, "1") != 0) FAIL("ALLREDUCE_PERF_CORRUPT=%s: expected 0 or 1", c);
  b->corrupt = c && strcmp(c, "1") == 0;

  /* The shim's entry points, if it is preloaded (never linked). */
  shim_version_fn version = NULL;
  *(void **)&b->shim_stats = dlsym(RTLD_DEFAULT, "ncclshim_get_stats");
  *(void **)&version = dlsym(RTLD_DEFAULT, "ncclshim_version");
  ncclshim_stats_t s;
  shim_snap(b, &s);

  int extra = b->shim_stats != NULL || b->o.random;
  if (perf_out_open(&b->out, b->rank == 0, extra, b->o.json_path, argc, argv, err, sizeof err)) FAIL("%s", err);
  perf_out_config(&b->out, &b->o, b->nranks, b->mem.name, b->graphs,
                  b->shim_stats ? (version ? version() : "?") : NULL, &s);
  CHECK(devices(b));

  ncclUniqueId id;
  if (b->rank == 0) NCCLCHECK(ncclGetUniqueId(&id));
  MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
  NCCLCHECK(ncclCommInitRank(&b->comm, b->nranks, id, b->rank));

  b->bufbytes = b->o.max_bytes;
  CHECK(b->mem.alloc(&b->send, b->bufbytes));
  CHECK(b->mem.alloc(&b->recv, b->bufbytes));
  if (!(b->hstage = calloc(1, b->bufbytes + 1)) || !(b->hout = calloc(1, b->bufbytes + 1))) FAIL("out of memory");
  /* Defined contents everywhere: the timed loop also reads slices it never checks. */
  CHECK(b->mem.upload(b->send, b->hstage, b->bufbytes));
  CHECK(b->mem.upload(b->recv, b->hstage, b->bufbytes));
  return 0;
}

static void teardown(bench_t *b) {
  if (b->comm) ncclCommDestroy(b->comm);
  if (b->send) b->mem.release(b->send);
  if (b->recv) b->mem.release(b->recv);
  free(b->hstage);
  free(b->hout);
  if (b->mem.close) b->mem.close();
}

/* Returns the exit status: 0 all good, 1 wrong results / disagreeing ranks /
 * bandwidth below NCCL_TESTS_MIN_BW; -1 on an error. */
static int run(bench_t *b, int argc, char **argv) {
  CHECK_STOP(setup(b, argc, argv));
  perf_out_table_header(&b->out);
  for (int i = 0; i < b->o.ntypes; i++)
    for (int j = 0; j < b->o.nops; j++)
      CHECK(time_test(b, &perf_types[b->o.types[i]], &perf_ops[b->o.ops[j]]));
  perf_out_table_end(&b->out);

  int differ = 0;
  if (b->shim_stats) {
    ncclshim_stats_t s;
    shim_snap(b, &s);
    differ = shim_ranks_differ(&s);
    perf_out_shim(&b->out, &s, differ, b->chk_overflow, b->chk_underflow);
  }
  const char *min_env = getenv("NCCL_TESTS_MIN_BW");
  double min_bw = min_env ? atof(min_env) : -1;
  double avg_bw = b->bw_count ? b->bw_sum / b->bw_count : 0;
  int errors = b->errors;
  MPI_Allreduce(MPI_IN_PLACE, &errors, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  perf_out_footer(&b->out, errors, avg_bw, min_bw);
  return (errors || differ || (min_bw >= 0 && avg_bw < min_bw * 0.9)) ? 1 : 0;
}

int perf_bench_main(int argc, char **argv, const perf_coll_t *coll) {
  g_coll = coll;
  setlinebuf(stdout);
  MPI_Init(&argc, &argv);
  bench_t b = {0};
  MPI_Comm_rank(MPI_COMM_WORLD, &b.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &b.nranks);
  g_rank = b.rank;

  char err[2048];
  int rc = perf_parse_args(argc, argv, &b.o, err, sizeof err);
  if (rc != 0) { /* every rank parsed the same argv: all stop alike */
    if (b.rank == 0) {
      if (rc == 1) fputs(err, stdout);
      else fprintf(stderr, "%s: %s\n(-h for usage)\n", coll->name, err);
    }
    MPI_Finalize();
    return rc == 1 ? 0 : 2;
  }
  rc = run(&b, argc, argv);
  if (rc == PERF_STOP) { /* every rank stopped alike, the reason printed */
    teardown(&b);
    MPI_Finalize();
    return 2;
  }
  if (rc < 0) MPI_Abort(MPI_COMM_WORLD, 2); /* the other ranks may be waiting in a collective */
  teardown(&b);
  MPI_Finalize();
  return rc;
}
