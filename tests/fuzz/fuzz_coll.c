/* fuzz_coll.c — the differential fuzzer of "every rank issues the same
 * collectives" (tests/fuzz/README.md says what it draws and asserts).
 *
 * A seed draws a program — all-reduces and reduce-scatters of assorted sizes,
 * datatypes and ops, nested groups with per-rank stream handles, several
 * communicators (split or created mid-run, blocking or nonblocking per rank),
 * DDP-like passes for NCCLSHIM_ACCUM_STEPS, and one injected fault — and the
 * shim settings it runs under. One MPI job runs it twice at once: world
 * ranks 0..W-1 without the shim (the reference), W..2W-1 with it; rank r of
 * each half is twins with rank r of the other. Every rank draws the same
 * program from the seed, and every per-rank variation (stream handles, which
 * rank is nonblocking, which rank holds the fault) comes from the seed too.
 * At fixed check points (drawn, never decided by results) the plain twin
 * sends each result to the shim twin, which compares: bit for bit where
 * inputs are exact in the wire type or nothing is transformed, within the
 * docs/collectives.md's bound otherwise; sendbuff untouched; result codes agreed by every
 * rank of a communicator; accumulation equal to the synced reference at
 * every optimizer step. A host NCCL mismatch report fails the run
 * (the driver also greps HOSTNCCL_LOG for it), and an alarm names the step a
 * hung rank is in.
 *
 *   fuzz_coll --seed N --plan       shell assignments the driver launches with
 *   fuzz_coll --seed N --describe   the drawn program, one line per step
 *   mpirun (2W contexts) fuzz_coll --seed N [--timeout S]
 *
 * Must not: let a result decide what is issued or checked (the twins would
 * lose step), depend on the shim's internals, or pass when a rank failed. */
#include <dlfcn.h>
#include <math.h>
#include <mpi.h>
#include <nccl.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ncclshim.h"

#define MAXR 4  /* ranks per half */
#define MAXC 6  /* communicators */
#define MAXS 128 /* steps */
#define MAXG 7  /* calls per group */
#define MAXB 5  /* buckets per model (with the optional extra one) */
#define MAXF 2  /* foreign calls per pass */
#define NEW_SEEDS 1000 /* the first seed that draws the classes of samecoll (two-phase, host-alloc, oob-end) */
#define EF_SEEDS 13000 /* the first seed that draws issue 26's classes (error feedback, stochastic rounding, staging limit,
                        * extreme values, per-rank polls) */
#define MAXM 3  /* error-feedback models */
#define ACC_SEEDS 16400 /* from here, no short or long pass of a model without find_unused while the shim learns */
#define NODE_SEEDS 40000 /* from here, emulated nodes (NCCL_HOSTID per rank) and NCCLSHIM_ALGO=hier (issue 21) */
#define F16S_SEEDS 50000 /* from here, NCCLSHIM_COMPRESS=fp16s (compress 5, issue 21 part 5) */
#define HMIN_SEEDS 100000 /* from here, auto on nodes draws NCCLSHIM_HIER_MIN_BYTES=0 half the time (issue 22) */
#define LOCAL_SEEDS 120000 /* from here, one thread drives a clique of its own process (issue 37) */
#define LAUNCH_SEEDS 130000 /* from here, launch costs, auto pieces and chunks, the all-gather phase (issue 33) */
#define INT4_SEEDS 140000 /* from here, NCCLSHIM_COMPRESS=int4 (compress 6, issue 36) */
#define RED_SEEDS 150000 /* from here, the red team's classes: the cliques' stream handles 0 (legacy) and 0x2
                          * (per-thread), error-feedback buckets sharing a receive buffer, an abort from a
                          * watchdog thread while calls block on a laggard */
#define HALF_SEEDS 160000 /* from here, the program's input datatype: fp32, bf16 or fp16 (issue 47) */
#define MAXL 3   /* ranks of a process's own clique */
#define LRANK 8  /* input index of its rank 0 (distinct from the world's ranks) */
#define SPLIT_SEEDS 32000 /* from here, no pass that begins late right after one that ended early (any model) */

/* ---- the program ---------------------------------------------------------- */
enum { F_NONE, F_FAIL_CALL, F_FAIL_GROUP_END, F_ALLOC_ONE, F_CHECK0_ONE, F_BAD_ONE, F_DIFF_ONE, F_PRESCALE_BAD,
       F_HOST_ALLOC_ONE, F_OOB_END_ONE, F_N };
static const char *fault_name[F_N] = {"none",      "fail-call", "fail-group-end", "alloc-one",     "check0-one",
                                      "bad-one",   "diff-one",  "prescale-bad",   "host-alloc-one", "oob-end-one"};
/* Faults where only the failing rank may fail a call (its peers get NaN). */
static int local_fault(int f) { return f == F_ALLOC_ONE || f == F_HOST_ALLOC_ONE; }
enum { K_AR, K_RS };
enum { ST_CALL, ST_GROUP, ST_NEWCOMM, ST_PASS, ST_NOP, ST_EF, ST_LOCAL };
enum { OP_PREMUL = 5 };

typedef struct {
  int kind, comm, dt, op, inplace, exact, open, close;
  size_t count; /* all-reduce: count; reduce-scatter: recvcount */
  int stream[MAXR];
  uint32_t uid;
  uint32_t vuid;  /* its inputs are those of call vuid (a stochastic-rounding twin), 0: its own */
  double mag;     /* > 0: extreme inputs, |x| in [mag/2, mag] (docs/collectives.md's finite range) */
  double scale;   /* > 0: an error-feedback model's bucket, random inputs times scale */
  int persist;    /* > 0: in place in the persistent buffer of that index (a stable bucket) */
  int precv;      /* > 0: out of place into the receive buffer of that index, shared by a model's buckets */
} call_t;

typedef struct {
  int how;     /* 0 init over the half, 1 ncclCommSplit of comm 0, 2 init over a colour group */
  int colors;  /* 1: every rank together; 2: colour = rank % 2 */
  unsigned nb; /* bit r: nonblocking (config.blocking = 0) on rank r */
} comm_t;

typedef struct {
  int comm, nb, avg, find_unused, stat;
  size_t cnt[MAXB];
  unsigned normal; /* buckets of an ordinary pass */
} model_t;

typedef struct {
  int model, pass, comm, wrap, whole, usedmap, step_after;
  unsigned present;
  int nf, fpos[MAXF];
  call_t foreign[MAXF];
} pass_t;

typedef struct {
  int kind, poll, n;
  call_t c[MAXG];
  int comm; /* ST_NEWCOMM; ST_EF: the model */
  pass_t p; /* ST_PASS */
  unsigned rpoll; /* bit r: rank r polls its queued work right after the step (the others do not) */
  int grouped;    /* ST_EF: the model's buckets in one group */
} step_t;

typedef struct {
  uint64_t seed;
  int W;
  int compress, disable, check_config, K;
  int algo; /* 0 auto, 1 ring, 2 twophase (seeds >= NEW_SEEDS only), 3 hier (seeds >= NODE_SEEDS) */
  int node[MAXR]; /* seeds >= NODE_SEEDS: each rank's node (NCCL_HOSTID=n<k>), -1: none set */
  int nnodes;
  long long min_bytes, fuse_bytes, chunk_bytes, piece_bytes;
  long long hier_min; /* NCCLSHIM_HIER_MIN_BYTES (seeds >= HMIN_SEEDS; else the default 4M) */
  const char *prescale;
  int fault, frank;
  long fn;
  int ncomm;
  comm_t comm[MAXC];
  int nmodel, npass;
  model_t model[2];
  int nstep;
  step_t st[MAXS];
  /* seeds >= EF_SEEDS */
  int ef, sr, noprepoll;
  long long staging;        /* NCCLSHIM_MAX_STAGING_BYTES, 0: default */
  int nef, efcomm, effresh; /* error-feedback models on communicator efcomm (fresh buffers: one model only) */
  int nlocal; /* seeds >= LOCAL_SEEDS: ranks of each process's own clique (ncclCommInitAll), 0: none */
  long long launch_bytes; /* NCCLSHIM_LAUNCH_BYTES, -1: unset (the default, auto); seeds below LAUNCH_SEEDS: 0 */
  int gather;             /* NCCLSHIM_TWOPHASE_GATHER: 0 auto, 1 allgather, 2 sendrecv */
  int launch_us;          /* HOSTNCCL_LAUNCH_US on the shim's half */
  /* seeds >= RED_SEEDS */
  int efshared;           /* the error-feedback models' buckets share one receive buffer per model */
  int abort_comm;         /* > 0: 1 + the communicator a watchdog aborts at the end, 0: none */
  int abort_lag;          /* ... the rank (of the half) that never joins the last calls */
  int abort_kind;         /* ... 0 one all-reduce, 1 a group of two small and a large one, 2 a reduce-scatter */
  size_t abort_count;
  /* seeds >= HALF_SEEDS */
  int idt; /* the datatype most of its calls have (else fp32) */
  char feat[512];
} prog_t;

static uint64_t mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

static uint64_t rng;
static uint64_t rnext(void) { return mix64(rng += 0x9e3779b97f4a7c15ull); }
static int rint_(int n) { return n > 0 ? (int)(rnext() % (uint64_t)n) : 0; }
static int chance(double p) { return (double)(rnext() >> 11) * 0x1.0p-53 < p; }
#define PICK(a) ((a)[rint_((int)(sizeof(a) / sizeof((a)[0])))])

static const int dts[] = {ncclInt8, ncclUint8, ncclInt32, ncclUint32, ncclInt64, ncclUint64,
                          ncclFloat16, ncclFloat64, ncclBfloat16};
static const char *dt_name(int dt) {
  static const char *n[] = {"i8", "u8", "i32", "u32", "i64", "u64", "f16", "f32", "f64", "bf16", "f8e4m3", "f8e5m2"};
  return dt >= 0 && dt < 12 ? n[dt] : "?";
}
static size_t dt_size(int dt) {
  switch (dt) {
  case ncclInt8: case ncclUint8: return 1;
  case ncclFloat16: case ncclBfloat16: return 2;
  case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
  default: return 8;
  }
}
static int dt_float(int dt) { return dt == ncclFloat16 || dt == ncclFloat32 || dt == ncclFloat64 || dt == ncclBfloat16; }
/* The datatypes the shim may transform: fp32, and bf16/fp16 (issue 47: two
 * phases with fp32 sums, one rounding into the input type). */
static int dt_half(int dt) { return dt == ncclFloat16 || dt == ncclBfloat16; }
static int dt_tf(int dt) { return dt == ncclFloat32 || dt_half(dt); }
static const char *op_name(int op) {
  static const char *n[] = {"sum", "prod", "max", "min", "avg", "premulsum"};
  return op >= 0 && op < 6 ? n[op] : "?";
}

static int members(const prog_t *p, int comm, int r, int *rank_in) {
  int n = 0;
  for (int q = 0; q < p->W; q++) {
    int same = p->comm[comm].colors == 1 || q % 2 == r % 2;
    if (same && q == r && rank_in) *rank_in = n;
    n += same;
  }
  return n;
}

static uint32_t next_uid;

static void draw_streams(const prog_t *p, call_t *c, int mixed, int base) {
  for (int r = 0; r < MAXR; r++) c->stream[r] = r < p->W && mixed ? 1 + rint_(3) : base;
}

static void draw_call(const prog_t *p, call_t *c, int comm, int in_group) {
  static const size_t ar_counts[] = {0, 1, 7, 100, 1024, 4095, 4097, 16383, 16384, 16385, 16384, 50000, 65536, 65536,
                                     100003, 262144};
  static const size_t rs_counts[] = {0, 1, 7, 100, 1024, 4097, 16384};
  memset(c, 0, sizeof *c);
  c->uid = ++next_uid;
  c->comm = comm;
  c->kind = chance(0.12) ? K_RS : K_AR;
  c->count = c->kind == K_RS ? PICK(rs_counts) : PICK(ar_counts);
  c->dt = chance(0.6) ? p->idt : PICK(dts);
  int ops[] = {ncclSum, ncclSum, ncclSum, ncclSum, ncclSum, ncclSum, ncclSum, ncclAvg, ncclAvg, ncclMax,
               ncclMin, ncclProd, OP_PREMUL};
  c->op = PICK(ops);
  c->inplace = chance(0.4);
  c->exact = !(c->dt == ncclFloat32 || c->dt == ncclFloat64) || chance(0.8);
  draw_streams(p, c, chance(in_group ? 0.35 : 0.1), 1 + rint_(2));
}

/* DDP's fp32 Sum call of a bucket's size (or another) on a buffer of its own. */
static void draw_foreign(const prog_t *p, const model_t *m, call_t *c) {
  memset(c, 0, sizeof *c);
  c->uid = ++next_uid;
  c->comm = m->comm;
  c->kind = K_AR;
  size_t other[] = {50000, 16384, 1};
  c->count = chance(0.7) ? m->cnt[rint_(m->nb)] : PICK(other);
  c->dt = ncclFloat32;
  c->op = ncclSum;
  c->inplace = chance(0.5);
  c->exact = 1;
  draw_streams(p, c, 0, 1);
}

/* A feature of the program, once (for the report and for --off). */
static void feat(prog_t *p, const char *fmt, ...) {
  char t[64];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(t, sizeof t, fmt, ap);
  va_end(ap);
  size_t n = strlen(p->feat), k = strlen(t);
  for (const char *q = p->feat; (q = strstr(q, t)); q += k)
    if ((q == p->feat || q[-1] == ' ') && (q[k] == ' ' || q[k] == 0)) return;
  if (n + k + 2 >= sizeof p->feat) return;
  if (n) p->feat[n++] = ' ';
  memcpy(p->feat + n, t, k + 1);
}

/* --off LIST: classes the program must not draw (comma-separated feature or
 * fault names); the rest of the program is drawn as without it. */
static int off(const char *list, const char *name) {
  size_t k = strlen(name);
  for (const char *q = list; q && (q = strstr(q, name)); q += k)
    if ((q == list || q[-1] == ',') && (q[k] == ',' || q[k] == 0)) return 1;
  return 0;
}

static unsigned draw_nb(int W, double p_all, double p_mixed) {
  unsigned all = (1u << W) - 1;
  if (chance(p_all)) return all;
  if (W > 1 && chance(p_mixed)) return 1 + (unsigned)rint_((int)all - 1); /* a proper, non-empty subset */
  return 0;
}

static int add_comm(prog_t *p) {
  comm_t *c = &p->comm[p->ncomm];
  int r = rint_(4);
  c->how = r < 2 ? 1 : r == 2 ? 0 : 2;
  c->colors = p->W > 1 && chance(0.35) ? 2 : 1;
  if (c->how == 0) c->colors = 1;
  /* HOSTNCCL_FAIL_CALL and _GROUP_END count a process's calls over all its
   * communicators, which model "the same call fails on every rank" only when
   * every rank has the same communicators' work: an odd rank count split by
   * rank % 2 gives communicators of different sizes (a rank alone issues no
   * two-phase messages), so the N-th call would be different calls. */
  if ((p->fault == F_FAIL_CALL || p->fault == F_FAIL_GROUP_END) && p->W % 2) c->colors = 1;
  c->nb = draw_nb(p->W, 0.15, 0.2);
  return p->ncomm++;
}

static step_t *add_step(prog_t *p, int kind) {
  step_t *s = &p->st[p->nstep++];
  memset(s, 0, sizeof *s);
  s->kind = kind;
  s->poll = chance(0.65);
  return s;
}

/* A step of ordinary collectives: one call, or a (nested) group on
 * communicators that are blocking or nonblocking alike on each rank. */
static void draw_generic(prog_t *p) {
  if (p->ncomm < MAXC - 1 && chance(0.1)) {
    step_t *s = add_step(p, ST_NEWCOMM);
    s->comm = add_comm(p);
    return;
  }
  int comm = rint_(p->ncomm);
  if (chance(0.55)) {
    step_t *s = add_step(p, ST_CALL);
    s->n = 1;
    draw_call(p, &s->c[0], comm, 0);
    return;
  }
  step_t *s = add_step(p, ST_GROUP);
  s->n = 2 + rint_(MAXG - 1);
  int depth = 0;
  for (int i = 0; i < s->n; i++) {
    int cm = comm;
    if (chance(0.3)) { /* another communicator of the same blocking on every rank */
      int o = rint_(p->ncomm);
      if (p->comm[o].nb == p->comm[comm].nb) cm = o;
    }
    draw_call(p, &s->c[i], cm, 1);
    if (chance(0.2)) {
      s->c[i].open = 1 + rint_(2);
      depth += s->c[i].open;
    }
    if (depth && chance(0.4)) {
      s->c[i].close = 1 + rint_(depth);
      depth -= s->c[i].close;
    }
  }
  s->c[s->n - 1].close += depth;
  /* Half of the groups reuse one stream per rank for their fp32 members, as
   * the coalescing manager does; the rest keep their drawn streams. */
  if (chance(0.5))
    for (int i = 1; i < s->n; i++) memcpy(s->c[i].stream, s->c[0].stream, sizeof s->c[0].stream);
}

static void draw_model(prog_t *p, model_t *m) {
  static const size_t sizes[] = {8192, 16384, 50000, 65536, 65536, 100000};
  m->comm = 0;
  m->nb = 1 + rint_(4);
  int equal = chance(0.45);
  size_t e = chance(0.5) ? 16384 : 65536;
  for (int b = 0; b < m->nb; b++) m->cnt[b] = equal ? e : PICK(sizes);
  m->normal = (1u << m->nb) - 1;
  if (m->nb < MAXB && chance(0.15)) { /* a bucket that only some passes have */
    m->cnt[m->nb] = m->cnt[0];
    m->nb++;
  }
  m->avg = chance(0.2);
  m->find_unused = chance(0.2);
  m->stat = !m->find_unused && chance(0.15);
  if (equal && m->nb > 1) feat(p, "ddp-equal-buckets");
}

static void filter(prog_t *p, const char *o);

/* Would NCCLSHIM_ACCUM_STEPS count this call (policy: floating Sum/Avg of at
 * least MIN_BYTES)? */
static int accumulable(const prog_t *p, const call_t *c) {
  return p->K > 1 && c->kind == K_AR && dt_float(c->dt) && (c->op == ncclSum || c->op == ncclAvg) && c->count > 0 &&
         (long long)(c->count * dt_size(c->dt)) >= p->min_bytes;
}

static int ddp_comm(const prog_t *p, int comm) {
  for (int s = 0; s < p->nstep; s++)
    if (p->st[s].kind == ST_PASS && p->st[s].p.comm == comm) return 1;
  return 0;
}

/* The largest per-rank magnitude of an extreme input of call c that
 * docs/collectives.md's finite range covers with a margin: sums of n ranks (Avg: scaled
 * by 1/n first) of the wire format's largest values, fp16 65504, bf16 its
 * largest finite value, fp32 for the 8-bit formats, over 1 + 2^-4 and
 * 1 + 2^-9 besides; or values around 2^111, where 8-bit blocks start to
 * round their top step down. */
static double extreme_mag(const prog_t *p, const call_t *c, int n) {
  double top = p->compress == 1 ? 65504.0 : p->compress == 2 ? 0x1.fep127 : 0x1.fffffep127;
  if (p->compress >= 3 && chance(0.3)) return 0x1p112;
  /* 8-bit (two phases, blocks of values >= 2^111): up to FLT_MAX (1 - 2^-12)
   * in all; fp16/bf16 (the ring may carry them too, rounding at each hop):
   * less by 7 % */
  double m = p->compress >= 3 ? top * (1 - 0x1p-12) : top * (1 - 0x1p-9) / 1.07;
  return c->op == ncclAvg ? m : m / n;
}

/* An error-feedback model's pass: its buckets, in place, inputs times scale. */
static void ef_pass(prog_t *p, int m, const size_t *cnt, int nb, double scale, int op, int mixed) {
  /* shared: every bucket of model m out of place into the model's one receive
   * buffer (the red team's case: hier's middle stage keyed two buckets'
   * residuals alike) */
  step_t *s = add_step(p, ST_EF);
  s->poll = 1;
  s->n = nb;
  s->grouped = chance(0.3);
  if (p->efshared) s->grouped = 0; /* one buffer written twice in a group would be a race in NCCL */
  s->comm = m;
  for (int b = 0; b < nb; b++) {
    call_t *c = &s->c[b];
    memset(c, 0, sizeof *c);
    c->uid = ++next_uid;
    c->comm = p->efcomm;
    c->kind = K_AR;
    c->count = cnt[b];
    c->dt = ncclFloat32;
    c->op = op;
    c->inplace = 1;
    c->scale = scale;
    c->persist = p->effresh ? 0 : 1 + m * MAXB + b;
    if (p->efshared) { /* a bucket fed the other's residual is then far beyond its bound */
      c->inplace = 0, c->precv = 1 + m;
      /* inside fp16's range, as the models' scales; not with fresh send
       * buffers, where buckets of one size share a slot by position alone,
       * nor with 9 or more buckets of one size (the first pass then looks
       * like fresh buffers: seed 150016), docs/collectives.md's limits, a
       * call then off by the other bucket's step */
      if (b % 2 && !p->effresh && p->nef * nb < 9) c->scale = scale >= 1024 ? scale / 32 : scale * 32;
    }
    draw_streams(p, c, mixed, 1);
  }
}

/* Issue 26's classes, for seeds >= EF_SEEDS, from a generator of their own
 * (the rest of the program is what it was). Error feedback with several
 * models whose buckets have equal sizes on a communicator of their own (each
 * bucket a stable buffer, passes interleaved: a residual given to another
 * model's bucket shows as an error far beyond the bound), stochastic
 * rounding (two-phase, with twins in groups: two calls of one input must
 * round independently), a small staging limit beside per-rank streams (a
 * refusal must be the same on every rank), extreme inputs with Sum and Avg
 * (finite where docs/collectives.md says so), polls some ranks make and others do not,
 * and no polls before steps (the host NCCL progresses queued work itself). */
/* Seeds >= NODE_SEEDS (issue 21): the ranks on 1-3 nodes named by
 * NCCL_HOSTID (the shim's node map; the host NCCL has no links here), in
 * blocks, strided or at random, even or not; and NCCLSHIM_ALGO=hier in place
 * of twophase or auto. A generator of its own: the program's other draws
 * stay those of the seed without it. */
static void draw_nodes(prog_t *p, uint64_t seed) {
  uint64_t saved = rng;
  rng = mix64(seed ^ 0x40de5ull);
  for (int r = 0; r < p->W; r++) p->node[r] = -1;
  if (chance(0.7)) {
    int N = p->W < 4 ? 1 + rint_(2) : 1 + rint_(3), how = rint_(3);
    for (int r = 0; r < p->W; r++) p->node[r] = how == 0 ? r * N / p->W : how == 1 ? r % N : rint_(N);
    p->nnodes = N;
  }
  if (p->compress && (p->algo == 2 || p->algo == 0) && chance(0.6)) p->algo = 3;
  /* auto goes hierarchical from HIER_MIN_BYTES per call: at 0, the fuzzer's
   * calls (mostly far below the default 4M) take that path too */
  p->hier_min = seed >= HMIN_SEEDS && p->algo == 0 && p->nnodes && chance(0.5) ? 0 : 4 << 20;
  rng = saved;
}

/* One thread drives several ranks (issue 37): every process makes a clique
 * of its own of 2 or 3 ranks (ncclCommInitAll) and issues, at 1 to 3 points
 * of the program, one group holding the same fp32 calls on each of its ranks
 * (the clique's first calls inside a group). Only in programs without a
 * fault: the host NCCL's fault counters count a process's calls over all its
 * communicators, so the N-th call would be a different call on each rank. */
static void draw_local(prog_t *p, uint64_t seed) {
  static const size_t ar_counts[] = {1024, 4097, 65536, 100003, 262144}, rs_counts[] = {1024, 16384, 65536};
  uint64_t saved = rng;
  rng = mix64(seed ^ 0x10ca137ull);
  if (p->fault == F_NONE && chance(0.5)) {
    p->nlocal = 2 + rint_(MAXL - 1);
    for (int k = 1 + rint_(3); k > 0 && p->nstep < MAXS; k--) {
      int at = rint_(p->nstep + 1);
      memmove(&p->st[at + 1], &p->st[at], (size_t)(p->nstep - at) * sizeof *p->st);
      p->nstep++;
      step_t *st = &p->st[at];
      memset(st, 0, sizeof *st);
      st->kind = ST_LOCAL;
      st->n = 1 + rint_(3);
      for (int i = 0; i < st->n; i++) {
        call_t *c = &st->c[i];
        c->uid = ++next_uid;
        c->kind = chance(0.2) ? K_RS : K_AR;
        c->count = c->kind == K_RS ? PICK(rs_counts) : PICK(ar_counts);
        c->dt = ncclFloat32;
        c->op = chance(0.8) ? ncclSum : ncclAvg;
        c->inplace = chance(0.5);
        c->exact = chance(0.7);
        draw_streams(p, c, 0, 1);
      }
      /* the legacy (0) and per-thread (0x2) handles name a stream relative to
       * the calling thread: the shim's after-group work runs on threads of
       * its own (red team, defect 1: 0x2 hung at the first group end) */
      if (seed >= RED_SEEDS) {
        static const int handles[] = {1, 0, 2};
        int h = PICK(handles);
        for (int i = 0; i < st->n; i++) draw_streams(p, &st->c[i], 0, h);
      }
    }
  }
  rng = saved;
}

/* Seeds >= RED_SEEDS: at the program's end, on a blocking communicator of
 * every rank of the half, one rank (the laggard) does not make the last
 * calls; the others' call blocks on it until a watchdog thread of theirs,
 * which waits until the host NCCL says the process waits on a peer, aborts
 * the communicator, as PyTorch's watchdog does. Their calls must fail; after
 * the abort nothing may be issued on the communicator (the host NCCL reports
 * any call: HOSTNCCL-ENDED). Only in programs without a process-wide fault
 * (a failing N-th call would never block). A generator of its own. */
static void draw_abort(prog_t *p, uint64_t seed) {
  uint64_t saved = rng;
  rng = mix64(seed ^ 0xab0a7ull);
  /* buckets sharing a receive buffer under hier, which keyed their residuals
   * alike (4 ranks: 2 nodes of 2, ALGO=hier), in half of the programs that can */
  if (p->efshared && p->ef && p->W == 4 && p->compress && chance(0.5)) {
    for (int r = 0; r < p->W; r++) p->node[r] = r / 2;
    p->nnodes = 2;
    p->algo = 3;
  }
  if (p->fault == F_NONE && chance(0.6)) {
    int cand[MAXC], nc = 0;
    for (int k = 0; k < p->ncomm; k++)
      if (p->comm[k].colors == 1 && p->comm[k].nb == 0) cand[nc++] = k;
    if (nc) {
      static const size_t counts[] = {65536, 100003, 262144};
      p->abort_comm = 1 + cand[rint_(nc)];
      p->abort_lag = rint_(p->W);
      p->abort_kind = rint_(3);
      p->abort_count = PICK(counts);
    }
  }
  rng = saved;
}

/* Launches (issue 33): what the shim is told a launch costs (unset: the
 * default 4 MiB, at which most of the fuzzer's calls go untouched; 0, 64K,
 * 1M), auto pieces and chunks (the cost rule's counts, here under the host
 * rule), the second phase as an all-gather or as sends and receives, and at
 * times a real launch cost in the host NCCL. Before LAUNCH_SEEDS programs
 * were drawn when launches were free: they run with NCCLSHIM_LAUNCH_BYTES=0. */
static void draw_launch(prog_t *p, uint64_t seed) {
  p->launch_bytes = 0;
  if (seed < LAUNCH_SEEDS) return;
  uint64_t saved = rng;
  rng = mix64(seed ^ 0x1a0c4ull);
  static const long long lbs[] = {-1, 0, 65536, 1 << 20, 1 << 20};
  p->launch_bytes = PICK(lbs);
  if (chance(0.6)) p->piece_bytes = -1;
  if (chance(0.6) && p->fault != F_ALLOC_ONE) p->chunk_bytes = -1;
  p->gather = rint_(3);
  p->launch_us = chance(0.25) ? 100 : 0;
  rng = saved;
}

static void draw_ef_classes(prog_t *p, uint64_t seed, int ddp) {
  uint64_t saved = rng;
  rng = mix64(seed ^ 0xef26ef26ull);
  p->noprepoll = chance(0.5);
  int compressed = p->compress && !p->disable;
  p->ef = compressed && !ddp && chance(0.4);
  p->sr = compressed && !ddp && chance(0.25);
  if (p->sr) p->algo = 2; /* stochastic rounding exists in two phases only */
  if (!ddp && chance(0.2)) {
    static const long long lims[] = {65536, 131072, 262144};
    p->staging = PICK(lims);
    if (p->min_bytes > 4096) p->min_bytes = 4096;
    /* ring members take staging only unfused, and only in fp16/bf16 */
    if (chance(0.6)) p->fuse_bytes = 0;
    if (p->algo == 2 && !p->sr && chance(0.6)) p->algo = 0;
    if (p->compress >= 3 && chance(0.6)) p->compress = 1 + rint_(2);
    /* groups holding a two-phase reduce-scatter and a ring all-reduce that
     * fit the limit alone, on streams that differ between ranks (issue 26) */
    static const size_t rcs[] = {4096, 8192}, ars[] = {16384, 32768};
    for (int s = 0; s < p->nstep; s++) {
      step_t *st = &p->st[s];
      if (st->kind != ST_GROUP || st->n < 2 || !chance(0.5)) continue;
      call_t *x = &st->c[0], *y = &st->c[1];
      x->kind = K_RS, y->kind = K_AR;
      x->dt = y->dt = ncclFloat32;
      x->op = y->op = ncclSum;
      x->count = PICK(rcs), y->count = PICK(ars);
      y->comm = x->comm;
      draw_streams(p, x, 1, 1);
      draw_streams(p, y, 1, 1);
    }
  }
  /* per-rank polls after steps, extreme inputs, twins */
  for (int s = 0; s < p->nstep; s++) {
    step_t *st = &p->st[s];
    if ((st->kind == ST_CALL || st->kind == ST_GROUP) && chance(0.3)) st->rpoll = (unsigned)rint_(1 << p->W);
    for (int i = 0; i < st->n && (st->kind == ST_CALL || st->kind == ST_GROUP); i++) {
      call_t *c = &st->c[i];
      if (compressed && !p->ef && !strcmp(p->prescale, "1") && (c->dt == ncclFloat32 || c->dt == ncclFloat64) &&
          (c->op == ncclSum || c->op == ncclAvg) && chance(0.3)) {
        c->exact = 0;
        if (chance(0.4)) c->op = ncclAvg;
        c->mag = extreme_mag(p, c, p->W);
      }
    }
    if (p->sr && st->kind == ST_GROUP && st->n >= 2 && chance(0.5)) {
      call_t *a = &st->c[0], *b = &st->c[1 + rint_(st->n - 1)];
      a->dt = b->dt = ncclFloat32;
      a->op = b->op = ncclSum;
      a->kind = b->kind = K_AR;
      a->exact = b->exact = 0;
      a->mag = b->mag = 0;
      a->count = b->count = 65536;
      a->inplace = b->inplace = 0;
      b->comm = a->comm;
      b->vuid = a->uid;
    }
  }
  if (p->ef && p->ncomm < MAXC && chance(0.7)) { /* the models */
    int ns = p->nstep;
    step_t *nsx = add_step(p, ST_NEWCOMM);
    nsx->comm = p->efcomm = add_comm(p);
    p->comm[p->efcomm].colors = 1;
    p->nef = chance(0.25) ? 1 : 2 + rint_(2);
    p->effresh = p->nef == 1 && chance(0.5);
    static const size_t sizes[] = {4096, 20000, 30000, 65536};
    size_t cnt[3];
    int nb = 1 + rint_(3);
    for (int b = 0; b < nb; b++) cnt[b] = PICK(sizes);
    if (seed >= RED_SEEDS && chance(0.5)) { /* buckets of one size in their own send buffers, one receive buffer */
      p->efshared = 1;
      nb = 2 + rint_(2);
      for (int b = 1; b < nb; b++) cnt[b] = cnt[0];
    }
    static const double scales[] = {1, 1024, 0x1p-10};
    double sc[MAXM];
    int op[MAXM];
    for (int m = 0; m < p->nef; m++) {
      sc[m] = m == 0 ? 1 : PICK(scales);
      op[m] = chance(0.2) ? ncclAvg : ncclSum;
    }
    int twice = p->nef == 2 && chance(0.3), T = 12 + rint_(10), mixed = chance(0.4);
    for (int t = 0; t < T && p->nstep < MAXS - 4; t++) {
      int order[4] = {0, 1, 2, 3}, k = p->nef;
      if (twice) order[0] = 0, order[1] = 0, order[2] = 1, k = 3;
      for (int q = 0; q < k && p->nstep < MAXS - 4; q++) ef_pass(p, order[q], cnt, nb, sc[order[q]], op[order[q]], mixed);
    }
    /* spread the models' passes among the program's steps (after their communicator) */
    int ne = p->nstep - ns;
    static step_t tmp[MAXS], out[MAXS];
    memcpy(tmp, p->st + ns, (size_t)ne * sizeof *tmp);
    int at = rint_(ns + 1), o = 0, e = 0;
    for (int s = 0; s < ns || e < ne; s++) {
      while (e < ne && (s >= ns || (s >= at && chance(0.6)))) out[o++] = tmp[e++];
      if (s < ns) out[o++] = p->st[s];
    }
    memcpy(p->st, out, (size_t)o * sizeof *out);
    p->nstep = o;
  }
  rng = saved;
}

static void draw_program(prog_t *p, uint64_t seed, const char *o) {
  memset(p, 0, sizeof *p);
  p->hier_min = 4 << 20; /* NCCLSHIM_HIER_MIN_BYTES's default */
  p->seed = seed;
  rng = mix64(seed ^ 0x5eedf00dull);
  next_uid = 0;
  int wr = rint_(10);
  p->W = wr < 6 ? 2 : wr < 9 ? 3 : 4;
  int cr = rint_(10);
  p->compress = cr < 5 ? 1 : cr < 8 ? 2 : 0;
  p->disable = chance(0.04);
  static const long long mins[] = {65536, 65536, 4096, 0, 262144};
  static const long long fuses[] = {64 << 20, 64 << 20, 0, 16384, 262144};
  static const long long chunks[] = {32 << 20, 65536, 262144};
  p->min_bytes = PICK(mins);
  p->fuse_bytes = PICK(fuses);
  p->chunk_bytes = PICK(chunks);
  static const char *pres[] = {"1", "1", "1", "2", "0.25"};
  p->prescale = PICK(pres);
  p->check_config = 1;
  p->K = 1;
  p->idt = ncclFloat32;
  if (seed >= HALF_SEEDS) { /* a generator of its own: the rest of the program is the seed's */
    uint64_t saved = rng;
    rng = mix64(seed ^ 0x16b17ull);
    static const int idts[] = {ncclFloat32, ncclBfloat16, ncclFloat16};
    p->idt = PICK(idts);
    rng = saved;
  }
  /* One fault per program, on the shim's half only. */
  int fr = rint_(100);
  p->fault = fr < 45 ? F_NONE : fr < 55 ? F_FAIL_CALL : fr < 62 ? F_FAIL_GROUP_END : fr < 76 ? F_ALLOC_ONE
             : fr < 83 ? F_CHECK0_ONE : fr < 90 ? F_BAD_ONE : fr < 96 ? F_DIFF_ONE : F_PRESCALE_BAD;
  p->frank = rint_(p->W);
  p->fn = p->fault == F_FAIL_CALL ? 1 + rint_(30) : p->fault == F_FAIL_GROUP_END ? 1 + rint_(4) : 1 + rint_(4);
  if (p->fault == F_PRESCALE_BAD) p->prescale = "1e-40";
  if ((p->fault == F_ALLOC_ONE || p->fault == F_PRESCALE_BAD) && p->compress == 0) p->compress = 1;
  if (p->fault == F_ALLOC_ONE && p->chunk_bytes < (32 << 20)) {
    /* Only calls of >= 64K floats are staged, all pipelined. Staging is
     * allocated only at agreements (the initial block at the check, growth
     * after a call or group, a fresh block while cast-backs are parked): a
     * failure there stops compression on every rank of that communicator,
     * except the fresh block's, which fails the parked calls on that rank. */
    p->min_bytes = 262144;
    p->chunk_bytes = 65536;
    p->fn = 1 + (p->fn - 1) % 2;
  }

  /* Classes added after the short run's seeds were chosen are drawn from a
   * generator of their own, for seeds >= NEW_SEEDS only, so that the seeds
   * below keep their programs: 8-bit wire formats and NCCLSHIM_ALGO
   * (two-phase, also inside groups), and two more faults on one rank, a
   * failing host allocation of the collectives (NCCLSHIM_FAULT_HOST_ALLOC)
   * and a failing read-back of an exchange (NCCLSHIM_FAULT_OOB_END). */
  int want8 = 0;
  p->piece_bytes = 1 << 20; /* the default */
  if (seed >= NEW_SEEDS) {
    uint64_t h = mix64(seed ^ 0x2fa5e11ull), h2 = mix64(h), h3 = mix64(h2);
    /* two-phase pieces (NCCLSHIM_TWOPHASE_PIECE_BYTES): default, many, some, one */
    static const long long pieces[] = {1 << 20, 4096, 65536, 0};
    p->piece_bytes = pieces[h3 % 4];
    want8 = h % 100 < 30 ? 3 + (int)(h >> 8) % 2 : 0; /* int8, fp8: not with DDP (inexact gradients) */
    p->algo = (int)((h >> 16) % 4) == 3 ? 2 : (int)((h >> 16) % 4) == 2 ? 1 : 0;
    if (p->fault == F_NONE && h2 % 100 < 40) {
      p->fault = h2 >> 8 & 1 ? F_HOST_ALLOC_ONE : F_OOB_END_ONE;
      p->frank = (int)((h2 >> 16) % (uint64_t)p->W);
      p->fn = 1 + (long)((h2 >> 24) % (p->fault == F_HOST_ALLOC_ONE ? 24 : 4));
      if (p->compress == 0) p->compress = 1;
    }
  }
  p->comm[0] = (comm_t){0, 1, draw_nb(p->W, 0.15, 0.25)};
  p->ncomm = 1;
  int ddp = (p->W == 2 || p->W == 4) && chance(0.5);
  if (ddp) {
    p->K = chance(0.85) ? 2 + rint_(3) : 1;
    p->nmodel = chance(0.2) ? 2 : 1;
    for (int i = 0; i < p->nmodel; i++) draw_model(p, &p->model[i]);
    if (p->nmodel == 2) {
      feat(p, "ddp-two-models");
      model_t *a = &p->model[0], *b = &p->model[1];
      size_t tot = 0;
      for (int k = 0; k < a->nb; k++) tot += a->normal >> k & 1 ? a->cnt[k] : 0;
      if (tot % 2 == 0 && (a->nb != 2 || a->cnt[0] != tot / 2)) { /* equal sizes, other bucketing */
        b->nb = 2;
        b->cnt[0] = b->cnt[1] = tot / 2;
        b->normal = 3;
      }
    }
  } else if (chance(0.1)) {
    p->K = 2 + rint_(3); /* accumulation on, no DDP: every call must be a true sum */
  }
  /* The first step: often a group (a communicator first seen in a group
   * is checked after it), on a nonblocking communicator at times. */
  int ngen = 6 + rint_(14);
  if (chance(0.4)) {
    step_t *s = add_step(p, ST_GROUP);
    s->n = 2 + rint_(3);
    for (int i = 0; i < s->n; i++) draw_call(p, &s->c[i], 0, 1);
  }
  if (!ddp) {
    for (int i = 0; i < ngen && p->nstep < MAXS - 1; i++) draw_generic(p);
  } else {
    /* Long enough to learn (the shim syncs while it learns) and then skip. */
    int K = p->K, T = K * ((12 + K - 1) / K) + K * rint_(2);
    int rewrap = p->nmodel == 1 && chance(0.25) ? 2 + rint_(T / 2) : -1;
    if (rewrap >= 0) T += 2 * K; /* the new communicator learns, then skips */
    double gen_per_pass = (double)ngen / T;
    int nwhole[2] = {0, 0};
    unsigned prev[2] = {~0u, ~0u}; /* the buckets of each model's previous pass */
    for (int t = 0; t < T && p->nstep < MAXS - 4; t++) {
      if (chance(gen_per_pass)) draw_generic(p);
      for (int mi = 0; mi < p->nmodel; mi++) {
        model_t *m = &p->model[mi];
        int wrap = t == 0;
        if (t == rewrap) {
          step_t *s = add_step(p, ST_NEWCOMM);
          s->comm = add_comm(p);
          p->comm[s->comm].colors = 1; /* the whole model's ranks */
          m->comm = s->comm;
          wrap = 1;
          nwhole[mi] = 0;
          prev[mi] = ~0u;
          feat(p, "ddp-rewrap");
        }
        step_t *s = add_step(p, ST_PASS);
        pass_t *ps = &s->p;
        ps->model = mi;
        ps->pass = t;
        ps->comm = m->comm;
        ps->wrap = wrap;
        ps->whole = !m->find_unused && nwhole[mi] < 1 + m->stat;
        nwhole[mi] += ps->whole;
        ps->usedmap = m->find_unused;
        ps->present = m->normal;
        /* A model without find_unused_parameters reduces every bucket every
         * pass (DDP raises an error otherwise); a pass that lacks its first
         * accumulable bucket, or all of them, while the shim learns (right
         * after the whole-model pass) is indistinguishable from another
         * bucket order (docs/accumulation.md's limit; seeds 16300, 16335): from ACC_SEEDS
         * on such passes come only once it has had time to learn. */
        int early = seed >= ACC_SEEDS && !m->find_unused && t < 8;
        if (!ps->whole && m->nb > 1 && chance(0.12) && !early) {
          ps->present &= ~(1u << rint_(m->nb));
          feat(p, "ddp-short-pass");
        }
        if (m->normal != (1u << m->nb) - 1 && !ps->whole && chance(0.25) && !early) {
          ps->present |= 1u << (m->nb - 1);
          feat(p, "ddp-long-pass");
        }
        /* ... and, once learned, a pass that lacks its last bucket followed by
         * one that lacks its first reads as one whole pass: the count falls
         * one behind and a pass before an optimizer step is skipped (seed
         * 31109; docs/accumulation.md's limit): from SPLIT_SEEDS on, not drawn
         * (no extra draw: earlier seeds replay as before). */
        unsigned first = m->normal & -m->normal, last = m->normal ? 1u << (31 - __builtin_clz(m->normal)) : 0;
        if (seed >= SPLIT_SEEDS && !ps->whole && !(prev[mi] & last)) ps->present |= first;
        if (!ps->present) ps->present = 1;
        prev[mi] = ps->present;
        ps->step_after = mi == p->nmodel - 1 && (t + 1) % K == 0;
        if (chance(0.3)) {
          ps->nf = 1 + rint_(MAXF);
          for (int f = 0; f < ps->nf; f++) {
            ps->fpos[f] = rint_(m->nb + 1);
            draw_foreign(p, m, &ps->foreign[f]);
          }
          feat(p, "ddp-foreign");
        }
        s->poll = 1;
      }
    }
    p->npass = T;
  }
  if (want8 && p->compress && !ddp) p->compress = want8;
  /* fp16s before the classes of issue 26, whose extreme inputs are drawn for
   * the format (fp32's range for it) */
  if (seed >= F16S_SEEDS && p->compress && !ddp) { /* a generator of its own, as draw_nodes */
    uint64_t saved = rng;
    rng = mix64(seed ^ 0xf16df16dull);
    if (chance(0.3)) p->compress = 5;
    rng = saved;
  }
  if (seed >= INT4_SEEDS && p->compress && !ddp) { /* int4 (issue 36), a generator of its own */
    uint64_t saved = rng;
    rng = mix64(seed ^ 0x14141414ull);
    if (chance(0.35)) p->compress = 6;
    rng = saved;
  }
  if (seed >= EF_SEEDS) draw_ef_classes(p, seed, ddp);
  if (seed >= NODE_SEEDS) draw_nodes(p, seed);
  if (seed >= LOCAL_SEEDS) draw_local(p, seed);
  draw_launch(p, seed);
  if (seed >= RED_SEEDS) draw_abort(p, seed);
  /* An accumulation agreement's read-back failing on one rank is a known
   * limit (docs/collectives.md: that rank syncs while its peers may skip): not drawn. */
  if (p->fault == F_OOB_END_ONE && p->K > 1) p->fault = F_NONE;
  filter(p, o);
  /* HOSTNCCL_FAIL_CALL and _GROUP_END count a process's calls over all its
   * threads. After a group whose members span communicators, the shim runs
   * each host communicator's share of the after-work (checks, two-phase
   * calls, agreements) on a thread of its own (issue 37), so the N-th call of
   * the process is a different call on each rank (seed 141929: one rank's
   * check failed on c0, another's on c1; a host NCCL mismatch of the model,
   * not of the shim, whose order on each communicator is the same). As for
   * the cliques (draw_local): such programs run without a process-wide fault.
   * Drawn as before, so every other program is the same. */
  if (p->fault == F_FAIL_CALL || p->fault == F_FAIL_GROUP_END)
    for (int s = 0; s < p->nstep && p->fault != F_NONE; s++)
      for (int i = 1; i < p->st[s].n && p->st[s].kind == ST_GROUP; i++)
        if (p->st[s].c[i].comm != p->st[s].c[0].comm) p->fault = F_NONE;
  /* Features the defects of issues 11 and 12 need, for the report. */
  for (int c = 0; c < p->ncomm; c++) {
    unsigned all = (1u << p->W) - 1;
    if (p->comm[c].nb && p->comm[c].nb != all) feat(p, "nb-mixed");
    else if (p->comm[c].nb) feat(p, "nb");
    int first = 1;
    for (int s = 0; s < p->nstep && first; s++) {
      const step_t *st = &p->st[s];
      if (st->kind == ST_PASS && st->p.comm == c) first = 0;
      for (int i = 0; i < st->n && first; i++)
        if (st->c[i].comm == c) {
          first = 0;
          if (st->kind == ST_GROUP) feat(p, "grouped-first");
        }
    }
  }
  for (int s = 0; s < p->nstep; s++) {
    const step_t *st = &p->st[s];
    for (int i = 0; i < st->n; i++)
      for (int q = 1; q < p->W; q++)
        if (st->c[i].dt == ncclFloat32 && st->c[i].stream[q] != st->c[i].stream[0]) {
          feat(p, "streams-mixed");
          i = st->n;
          break;
        }
  }
  if (p->idt != ncclFloat32) feat(p, "input-%s", dt_name(p->idt));
  for (int s = 0; s < p->nstep; s++)
    for (int i = 0; i < p->st[s].n; i++)
      if (accumulable(p, &p->st[s].c[i])) feat(p, ddp_comm(p, p->st[s].c[i].comm) ? "ddp-foreign" : "accum-other-comm");
  if (p->fault != F_NONE) feat(p, "%s", fault_name[p->fault]);
  if (p->fault == F_ALLOC_ONE && p->chunk_bytes < (32 << 20)) feat(p, "alloc-one+chunk");
  if (p->K > 1) feat(p, "accum");
  if (p->compress >= 3) feat(p, p->compress == 3 ? "int8" : p->compress == 4 ? "fp8" : p->compress == 5 ? "fp16s" : "int4");
  if (p->algo) feat(p, p->algo == 3 ? "algo-hier" : p->algo == 2 ? "algo-twophase" : "algo-ring");
  if (!p->hier_min) feat(p, "hier-min-0");
  if (p->nnodes) {
    int cnt[MAXR] = {0}, lo = p->W, hi = 0, used = 0;
    for (int r = 0; r < p->W; r++) cnt[p->node[r]]++;
    for (int k = 0; k < p->nnodes; k++)
      if (cnt[k]) {
        used++;
        lo = cnt[k] < lo ? cnt[k] : lo;
        hi = cnt[k] > hi ? cnt[k] : hi;
      }
    feat(p, "nodes-%d%s", used, lo != hi ? "-uneven" : "");
  }
  if (p->ef) feat(p, "ef");
  if (p->nef) feat(p, p->nef > 1 ? "ef-models" : p->effresh ? "ef-fresh" : "ef-model");
  if (p->nlocal) feat(p, "onethread-%d", p->nlocal);
  for (int s = 0; s < p->nstep; s++)
    if (p->st[s].kind == ST_LOCAL && p->st[s].c[0].stream[0] != 1) {
      feat(p, "onethread-handles");
      break;
    }
  if (p->efshared) feat(p, "ef-shared-recv");
  if (p->abort_comm) feat(p, "abort");
  if (p->seed >= LAUNCH_SEEDS) {
    feat(p, p->launch_bytes < 0 ? "launch-default" : p->launch_bytes == 0 ? "launch-free" : "launch-%lldK",
         p->launch_bytes / 1024);
    if (p->piece_bytes < 0) feat(p, "pieces-auto");
    if (p->chunk_bytes < 0) feat(p, "chunks-auto");
    if (p->gather) feat(p, p->gather == 1 ? "gather-allgather" : "gather-sendrecv");
    if (p->launch_us) feat(p, "host-launch-us");
  }
  if (p->sr) feat(p, "sr");
  if (p->staging) feat(p, "staging-limit");
  if (p->noprepoll) feat(p, "no-prepoll");
  for (int s = 0; s < p->nstep; s++) {
    if (p->st[s].rpoll) feat(p, "poll-per-rank");
    for (int i = 0; i < p->st[s].n; i++) {
      if (p->st[s].c[i].mag > 0) feat(p, "extreme");
      if (p->st[s].c[i].vuid) feat(p, "sr-twins");
    }
  }
}

static void filter(prog_t *p, const char *o) {
  if (!o || !*o) return;
  char kept[sizeof p->feat] = "", *save = NULL;
  for (char *t = strtok_r(p->feat, " ", &save); t; t = strtok_r(NULL, " ", &save))
    if (!off(o, t)) snprintf(kept + strlen(kept), sizeof kept - strlen(kept), "%s%s", kept[0] ? " " : "", t);
  memcpy(p->feat, kept, sizeof kept);
  for (int f = 1; f < F_N; f++)
    if (p->fault == f && off(o, fault_name[f])) {
      p->fault = F_NONE;
      if (f == F_PRESCALE_BAD) p->prescale = "1";
    }
  if (p->fault == F_ALLOC_ONE && off(o, "alloc-one+chunk")) p->chunk_bytes = 32 << 20;
  if (off(o, "accum")) p->K = 1;
  if (off(o, "ef")) p->ef = 0;
  if (off(o, "sr")) p->sr = 0;
  if (off(o, "staging-limit")) p->staging = 0;
  if (off(o, "no-prepoll")) p->noprepoll = 0;
  if (off(o, "abort")) p->abort_comm = 0;
  if (off(o, "ef") || off(o, "ef-models") || off(o, "ef-model") || off(o, "ef-fresh")) p->nef = 0;
  if (off(o, "ddp-two-models")) p->nmodel = p->nmodel > 1 ? 1 : p->nmodel;
  unsigned all = (1u << p->W) - 1;
  for (int c = 0; c < p->ncomm; c++)
    if ((off(o, "nb-mixed") && p->comm[c].nb != all) || off(o, "nb")) p->comm[c].nb = 0;
  int rewrapped = 0;
  for (int s = 0; s < p->nstep; s++) {
    step_t *st = &p->st[s];
    if (st->kind == ST_PASS && st->p.model == 1 && off(o, "ddp-two-models")) {
      for (int q = s - 1; q >= 0; q--) /* model 0's pass of this micro-step steps instead */
        if (p->st[q].kind == ST_PASS) {
          p->st[q].p.step_after = st->p.step_after;
          break;
        }
      st->kind = ST_NOP;
    }
    if (st->kind == ST_PASS && off(o, "ddp-rewrap")) {
      if (st->p.wrap && st->p.pass > 0) rewrapped = 1;
      if (rewrapped) {
        st->p.comm = 0;
        st->p.wrap = st->p.whole = 0;
      }
    }
    if (st->kind == ST_PASS) {
      if (off(o, "ddp-foreign")) st->p.nf = 0;
      if (off(o, "ddp-short-pass") || off(o, "ddp-long-pass")) st->p.present = p->model[st->p.model].normal;
    }
    if (st->kind == ST_EF && !p->nef) st->kind = ST_NOP;
    if (st->kind == ST_LOCAL && (off(o, "onethread-2") || off(o, "onethread-3") || off(o, "onethread"))) st->kind = ST_NOP;
    if (off(o, "poll-per-rank")) st->rpoll = 0;
    if (st->kind == ST_LOCAL && off(o, "onethread-handles"))
      for (int i = 0; i < st->n; i++) draw_streams(p, &st->c[i], 0, 1);
    for (int i = 0; i < st->n && off(o, "ef-shared-recv"); i++)
      if (st->c[i].precv) st->c[i].precv = 0, st->c[i].inplace = 1;
    for (int i = 0; i < st->n; i++) {
      if (off(o, "extreme")) st->c[i].mag = 0;
      if (off(o, "sr-twins") || off(o, "sr")) st->c[i].vuid = 0;
      for (int q = 1; q < MAXR && off(o, "streams-mixed"); q++) st->c[i].stream[q] = st->c[i].stream[0];
      call_t *c = &st->c[i];
      if (accumulable(p, c) && ((off(o, "ddp-foreign") && ddp_comm(p, c->comm)) || (off(o, "accum-other-comm") && !ddp_comm(p, c->comm))))
        c->op = ncclMax; /* no longer accumulable */
    }
  }
}

/* ---- launching and describing ----------------------------------------------- */
static void size_str(long long v, char *buf, size_t n) {
  if (v < 0) snprintf(buf, n, "auto");
  else snprintf(buf, n, "%lld", v);
}

static void print_plan(const prog_t *p) {
  static const char *cz[] = {"off", "fp16", "bf16", "int8", "fp8", "fp16s", "int4"}, *al[] = {"auto", "ring", "twophase", "hier"};
  char stg[64] = "";
  if (p->staging) snprintf(stg, sizeof stg, " NCCLSHIM_MAX_STAGING_BYTES=%lld", p->staging);
  printf("FZ_NP=%d\n", p->W);
  static const char *ga[] = {"auto", "allgather", "sendrecv"};
  char lb[48] = "", chunk[24], piece[24];
  if (p->launch_bytes >= 0) snprintf(lb, sizeof lb, " NCCLSHIM_LAUNCH_BYTES=%lld", p->launch_bytes);
  size_str(p->chunk_bytes, chunk, sizeof chunk);
  size_str(p->piece_bytes, piece, sizeof piece);
  printf("FZ_SHIM_ENV='NCCLSHIM_COMPRESS=%s NCCLSHIM_MIN_BYTES=%lld NCCLSHIM_FUSE_BYTES=%lld NCCLSHIM_CHUNK_BYTES=%s "
         "NCCLSHIM_ACCUM_STEPS=%d NCCLSHIM_PRESCALE=%s NCCLSHIM_DISABLE=%d NCCLSHIM_ALGO=%s "
         "NCCLSHIM_TWOPHASE_PIECE_BYTES=%s NCCLSHIM_ERROR_FEEDBACK=%d NCCLSHIM_ROUNDING=%s%s "
         "NCCLSHIM_HIER_MIN_BYTES=%lld%s NCCLSHIM_TWOPHASE_GATHER=%s'\n",
         cz[p->compress], p->min_bytes, p->fuse_bytes, chunk, p->K, p->prescale, p->disable, al[p->algo],
         piece, p->ef, p->sr ? "stochastic" : "nearest", stg, p->hier_min, lb, ga[p->gather]);
  printf("FZ_HOST_ENV='%s%s'\n", p->launch_us ? "HOSTNCCL_LAUNCH_US=100 " : "",
         p->fault == F_FAIL_CALL ? "HOSTNCCL_FAIL_CALL=" : p->fault == F_FAIL_GROUP_END ? "HOSTNCCL_FAIL_GROUP_END=" : "");
  if (p->fault == F_FAIL_CALL || p->fault == F_FAIL_GROUP_END) printf("FZ_HOST_ENV=\"${FZ_HOST_ENV}%ld\"\n", p->fn);
  for (int r = 0; r < p->W; r++) {
    const char *v = "";
    char buf[64] = "";
    if (r == p->frank) switch (p->fault) {
      case F_ALLOC_ONE: snprintf(buf, sizeof buf, "NCCLSHIM_FAULT_ALLOC=%ld", p->fn); v = buf; break;
      case F_HOST_ALLOC_ONE: snprintf(buf, sizeof buf, "NCCLSHIM_FAULT_HOST_ALLOC=%ld", p->fn); v = buf; break;
      case F_OOB_END_ONE: snprintf(buf, sizeof buf, "NCCLSHIM_FAULT_OOB_END=%ld", p->fn); v = buf; break;
      case F_CHECK0_ONE: v = "NCCLSHIM_CHECK_CONFIG=0"; break;
      case F_BAD_ONE: v = "NCCLSHIM_COMPRESS=fp61"; break;
      case F_DIFF_ONE: v = "NCCLSHIM_FUSE_BYTES=4096"; break;
      default: break;
      }
    if (p->nnodes) printf("FZ_RANK_ENV_%d='%s%sNCCL_HOSTID=n%d'\n", r, v, *v ? " " : "", p->node[r]);
    else printf("FZ_RANK_ENV_%d='%s'\n", r, v);
  }
  /* Both halves: an abort over the MPI transport could leave a matched MPI
   * transfer reading or writing the caller's buffers after ncclCommAbort
   * returned (Open MPI cannot cancel a send): the socket transport, where
   * an abort closes every connection, keeps NCCL's guarantee. */
  printf("FZ_BOTH_ENV='%s'\n", p->abort_comm ? "HOSTNCCL_TRANSPORT=socket" : "");
  printf("FZ_FEATURES='%s'\n", p->feat);
}

static void describe_call(const prog_t *p, const call_t *c, char *o, size_t n) {
  char cls[48];
  if (c->mag > 0) snprintf(cls, sizeof cls, "extreme(%.3g)", c->mag);
  else if (c->vuid) snprintf(cls, sizeof cls, "random(twin of %u)", c->vuid);
  else snprintf(cls, sizeof cls, "%s", c->exact ? "exact" : "random");
  int k = snprintf(o, n, "%s c%d %s %s n=%zu %s %s streams[", c->kind == K_AR ? "allreduce" : "reducescatter", c->comm,
                   dt_name(c->dt), op_name(c->op), c->count, c->inplace ? "inplace" : "outofplace", cls);
  for (int r = 0; r < p->W && k > 0 && (size_t)k < n; r++) k += snprintf(o + k, n - (size_t)k, r ? ",%d" : "%d", c->stream[r]);
  if (k > 0 && (size_t)k < n) k += snprintf(o + k, n - (size_t)k, "]");
  if (c->open && k > 0 && (size_t)k < n) k += snprintf(o + k, n - (size_t)k, " (opens %d nested)", c->open);
  if (c->close && k > 0 && (size_t)k < n) snprintf(o + k, n - (size_t)k, " (closes %d)", c->close);
}

static void describe(const prog_t *p) {
  static const char *cz[] = {"off", "fp16", "bf16", "int8", "fp8", "fp16s", "int4"}, *al[] = {"auto", "ring", "twophase", "hier"};
  char chunk[24], piece[24];
  size_str(p->chunk_bytes, chunk, sizeof chunk);
  size_str(p->piece_bytes, piece, sizeof piece);
  printf("seed %llu: %d ranks, shim: compress=%s algo=%s min_bytes=%lld fuse_bytes=%lld chunk_bytes=%s "
         "twophase_piece_bytes=%s accum_steps=%d prescale=%s disable=%d; fault: %s",
         (unsigned long long)p->seed, p->W, cz[p->compress], al[p->algo],
         p->min_bytes, p->fuse_bytes, chunk, piece, p->K, p->prescale, p->disable,
         fault_name[p->fault]);
  if (p->fault != F_NONE) printf(" (rank %d, N=%ld)", p->frank, p->fn);
  if (p->seed >= EF_SEEDS)
    printf("; error_feedback=%d rounding=%s max_staging_bytes=%lld%s", p->ef, p->sr ? "stochastic" : "nearest",
           p->staging, p->noprepoll ? " no-prepoll" : "");
  if (p->nnodes) {
    if (p->seed >= HMIN_SEEDS) printf("; hier_min_bytes=%lld", p->hier_min);
    printf("; nodes (NCCL_HOSTID) of ranks 0..%d:", p->W - 1);
    for (int r = 0; r < p->W; r++) printf(" n%d", p->node[r]);
  }
  if (p->seed >= LAUNCH_SEEDS)
    printf("; launch_bytes=%lld (-1: the default) twophase_gather=%d host launch_us=%d", p->launch_bytes, p->gather,
           p->launch_us);
  printf("\nfeatures: %s\nc0: init over all, nonblocking on ranks mask 0x%x\n", p->feat, p->comm[0].nb);
  for (int m = 0; m < p->nmodel; m++) {
    const model_t *md = &p->model[m];
    printf("model %d: buckets", m);
    for (int b = 0; b < md->nb; b++) printf(" %zu%s", md->cnt[b], md->normal >> b & 1 ? "" : "(extra)");
    printf(" floats, op %s%s%s\n", md->avg ? "avg (no pre-division)" : "sum of grad/W", md->find_unused ? ", find_unused (used-map)" : "",
           md->stat ? ", static_graph (two whole-model passes)" : "");
  }
  char line[512];
  for (int s = 0; s < p->nstep; s++) {
    const step_t *st = &p->st[s];
    if (st->kind == ST_NOP) continue;
    printf("step %d%s: ", s, st->poll ? "" : " (no poll after)");
    if (st->rpoll) printf("[ranks mask 0x%x poll after] ", st->rpoll);
    if (st->kind == ST_EF) {
      printf("error-feedback model %d on c%d%s, scale %g, %s, buckets", st->comm, st->c[0].comm,
             st->grouped ? " (one group)" : "", st->c[0].scale, op_name(st->c[0].op));
      for (int i = 0; i < st->n; i++) printf(" %zu%s", st->c[i].count, st->c[i].persist ? "" : " (fresh)");
      printf("\n");
      continue;
    }
    if (st->kind == ST_LOCAL) {
      printf("one thread, every rank of this process's own clique of %d (ncclCommInitAll), one group {", p->nlocal);
      for (int i = 0; i < st->n; i++) {
        describe_call(p, &st->c[i], line, sizeof line);
        printf("%s%s", i ? "; " : " ", line);
      }
      printf(" } on each\n");
      continue;
    }
    if (st->kind == ST_NEWCOMM) {
      const comm_t *c = &p->comm[st->comm];
      printf("new communicator c%d: %s, %s, nonblocking on ranks mask 0x%x\n", st->comm,
             c->how == 0 ? "init over all" : c->how == 1 ? "ncclCommSplit of c0" : "init over colour groups",
             c->colors == 1 ? "all ranks" : "colour rank%2", c->nb);
    } else if (st->kind == ST_PASS) {
      const pass_t *ps = &st->p;
      printf("ddp pass %d model %d on c%d%s%s buckets 0x%x%s%s", ps->pass, ps->model, ps->comm, ps->wrap ? " (wrapped)" : "",
             ps->whole ? " whole-model" : "", ps->present, ps->usedmap ? " +used-map" : "",
             ps->step_after ? " then optimizer step" : "");
      for (int f = 0; f < ps->nf; f++) {
        describe_call(p, &ps->foreign[f], line, sizeof line);
        printf("; foreign before bucket %d: %s", ps->fpos[f], line);
      }
      printf("\n");
    } else {
      printf("%s", st->kind == ST_GROUP ? "group {" : "");
      for (int i = 0; i < st->n; i++) {
        describe_call(p, &st->c[i], line, sizeof line);
        printf("%s%s", i ? "; " : " ", line);
      }
      printf("%s\n", st->kind == ST_GROUP ? " }" : "");
    }
  }
  if (p->abort_comm)
    printf("end: on c%d rank %d does not join %s of %zu floats; a watchdog thread on every other rank aborts c%d "
           "once the host NCCL reports it waiting on a peer\n", p->abort_comm - 1, p->abort_lag,
           p->abort_kind == 0 ? "an all-reduce" : p->abort_kind == 1 ? "a group of two small and one all-reduce"
                                                                     : "a reduce-scatter",
           p->abort_count, p->abort_comm - 1);
}

/* ---- values ----------------------------------------------------------------- */
static uint64_t hv(uint64_t seed, uint32_t uid, int r, size_t i) {
  return mix64(mix64(seed ^ ((uint64_t)uid << 20) ^ ((uint64_t)(unsigned)r << 56)) ^ (i * 0xd6e8feb86659fd93ull));
}

/* Element i of rank r's input of call c, as a double (exact in every type). */
static double in_val(uint64_t seed, const call_t *c, int r, size_t i) {
  uint64_t h = hv(seed, c->vuid ? c->vuid : c->uid, r, i);
  if (c->mag > 0) { /* extreme: |x| in [mag/2, mag], as stored in fp32 */
    double f = 0.5 + 0.5 * (double)((h >> 11) & 0x7fffff) * 0x1.0p-23;
    return (double)(float)((h & 1 ? -f : f) * c->mag);
  }
  if (c->op == ncclProd) {
    static const double pv[] = {1, -1, 2, 0.5};
    double v = pv[h % 4];
    return dt_float(c->dt) ? v : v == 0.5 ? 1 : (c->dt == ncclUint8 || c->dt == ncclUint32 || c->dt == ncclUint64) && v < 0 ? 1 : v;
  }
  if (!dt_float(c->dt)) {
    int s = c->dt == ncclInt8 || c->dt == ncclInt32 || c->dt == ncclInt64;
    return s ? (double)((int)(h % 7) - 3) : (double)(h % 5);
  }
  if (c->exact) return (double)((int)(h % 17) - 8) * 0.25;
  double m = 1.0 + (double)((h >> 11) & 0x7fffff) * 0x1.0p-23;
  return (h & 1 ? -m : m) * ldexp(1, -(int)((h >> 40) % 4)) * (c->scale > 0 ? c->scale : 1);
}

static uint16_t f2h(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000, m = x & 0x7fffff;
  int e = (int)((x >> 23) & 0xff);
  if (e == 0xff) return (uint16_t)(sign | 0x7c00 | (m ? 0x200 : 0));
  e = e - 127 + 15;
  if (e >= 31) return (uint16_t)(sign | 0x7c00);
  if (e <= 0) {
    if (e < -10) return (uint16_t)sign;
    m |= 0x800000;
    int sh = 14 - e;
    uint32_t hm = m >> sh, rem = m & ((1u << sh) - 1), half = 1u << (sh - 1);
    if (rem > half || (rem == half && (hm & 1))) hm++;
    return (uint16_t)(sign | hm);
  }
  uint32_t hm = m >> 13, rem = m & 0x1fff;
  uint32_t h = sign | ((uint32_t)e << 10) | hm;
  if (rem > 0x1000 || (rem == 0x1000 && (hm & 1))) h++;
  return (uint16_t)h;
}

static uint16_t f2bf(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  if ((u & 0x7fffffff) > 0x7f800000) return (uint16_t)((u >> 16) | 0x40);
  u += 0x7fff + ((u >> 16) & 1);
  return (uint16_t)(u >> 16);
}

static void store(int dt, void *p, size_t i, double v) {
  switch (dt) {
  case ncclInt8: ((int8_t *)p)[i] = (int8_t)v; break;
  case ncclUint8: ((uint8_t *)p)[i] = (uint8_t)v; break;
  case ncclInt32: ((int32_t *)p)[i] = (int32_t)v; break;
  case ncclUint32: ((uint32_t *)p)[i] = (uint32_t)v; break;
  case ncclInt64: ((int64_t *)p)[i] = (int64_t)v; break;
  case ncclUint64: ((uint64_t *)p)[i] = (uint64_t)v; break;
  case ncclFloat16: ((uint16_t *)p)[i] = f2h((float)v); break;
  case ncclBfloat16: ((uint16_t *)p)[i] = f2bf((float)v); break;
  case ncclFloat32: ((float *)p)[i] = (float)v; break;
  default: ((double *)p)[i] = v; break;
  }
}

/* ---- the run ------------------------------------------------------------------- */
static prog_t P;
static int wr, W, half, me, twin; /* half 0: plain NCCL, 1: the shim */
static MPI_Comm hm, tw; /* this half; twins (a duplicate of the world) */
static ncclComm_t nc[MAXC];
static int failures;
static char where[256] = "start", doing[160] = "";

#define FAIL(...)                                                                            \
  do {                                                                                       \
    char m_[600];                                                                            \
    snprintf(m_, sizeof m_, __VA_ARGS__);                                                    \
    if (failures++ < 12)                                                                     \
      fprintf(stderr, "FUZZ FAIL seed %llu %s rank %d at %s: %s\n", (unsigned long long)P.seed, \
              half ? "shim" : "plain", me, where, m_);                                       \
  } while (0)

static void on_alarm(int sig) {
  (void)sig;
  char m[400];
  int n = snprintf(m, sizeof m, "FUZZ HANG seed %llu %s rank %d: still at %s, %s\n", (unsigned long long)P.seed,
                   half ? "shim" : "plain", me, where, doing);
  if (n > 0) (void)!write(2, m, (size_t)n);
  _exit(124);
}

static int nb_here(int comm) { return (int)(P.comm[comm].nb >> me & 1); }

static int is_err(ncclResult_t r) { return r != ncclSuccess && r != ncclInProgress; }
static ncclResult_t combine(ncclResult_t a, ncclResult_t b) {
  if (is_err(a)) return a;
  if (is_err(b)) return b;
  return a == ncclInProgress || b == ncclInProgress ? ncclInProgress : ncclSuccess;
}

static ncclResult_t poll_comm(int comm) {
  ncclResult_t e = ncclInProgress;
  long spins = 0;
  snprintf(doing, sizeof doing, "polling c%d (ncclCommGetAsyncError)", comm);
  while (e == ncclInProgress) {
    ncclResult_t r = ncclCommGetAsyncError(nc[comm], &e);
    if (r != ncclSuccess) return r;
    if (++spins % 64 == 0) usleep(100);
  }
  return e;
}

/* A host NCCL mismatch report in this thread's last error. */
static char last_seen[512];
static void host_mismatch_check(int comm, ncclResult_t code) {
  if (code != ncclInvalidUsage) return;
  const char *e = ncclGetLastError(nc[comm]);
  if (e && strstr(e, "called different collectives") && strcmp(e, last_seen)) {
    FAIL("the host NCCL reported a mismatch: %s", e);
    snprintf(last_seen, sizeof last_seen, "%s", e);
  }
}

static void make_comm(int k) {
  const comm_t *c = &P.comm[k];
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = nb_here(k) ? 0 : 1;
  int color = c->colors == 1 ? 0 : me % 2;
  snprintf(where, sizeof where, "creating communicator c%d", k);
  if (c->how == 1) {
    ncclResult_t r = ncclCommSplit(nc[0], color, me, &nc[k], &cfg);
    if (r == ncclInProgress) r = poll_comm(k);
    if (r != ncclSuccess) {
      fprintf(stderr, "fuzz: ncclCommSplit -> %d\n", (int)r);
      MPI_Abort(MPI_COMM_WORLD, 2);
    }
    return;
  }
  MPI_Comm sub;
  MPI_Comm_split(hm, color, me, &sub);
  int r, n;
  MPI_Comm_rank(sub, &r);
  MPI_Comm_size(sub, &n);
  ncclUniqueId id;
  if (r == 0 && ncclGetUniqueId(&id) != ncclSuccess) MPI_Abort(MPI_COMM_WORLD, 2);
  MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, sub);
  ncclResult_t res = ncclCommInitRankConfig(&nc[k], n, id, r, &cfg);
  if (res == ncclInProgress) res = poll_comm(k);
  if (res != ncclSuccess) {
    fprintf(stderr, "fuzz: ncclCommInitRankConfig -> %d\n", (int)res);
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  MPI_Comm_free(&sub);
}

/* Issued, not yet checked. */
typedef struct {
  const call_t *c;  /* NULL: a DDP bucket (codes only; the optimizer step checks values) */
  int comm, model;
  void *send, *recv;
  size_t rbytes;
  ncclResult_t code;
  ncclResult_t own;  /* what the call itself returned (code also holds its group end's answer) */
  int plain_bits;    /* its result equals plain NCCL's bit for bit (checked) */
  ncclRedOp_t op;
  int created;
  char what[80];
} pend_t;
#define MAXPEND 256
static pend_t pend[MAXPEND];
static int npend;
static void **keep; /* buffers are never freed before the end: no address is reused */
static size_t nkeep, capkeep;

static void *persist_buf[1 + MAXM * MAXB];
static size_t persist_bytes[1 + MAXM * MAXB];
static void *precv_buf[1 + MAXM]; /* a model's shared receive buffer */
static size_t precv_bytes[1 + MAXM];

static void *xalloc(size_t bytes) {
  void *p = malloc(bytes ? bytes : 64);
  if (!p) MPI_Abort(MPI_COMM_WORLD, 2);
  if (nkeep == capkeep) {
    capkeep = capkeep ? 2 * capkeep : 256;
    keep = realloc(keep, capkeep * sizeof *keep);
    if (!keep) MPI_Abort(MPI_COMM_WORLD, 2);
  }
  keep[nkeep++] = p;
  return p;
}

static size_t send_count(const call_t *c) {
  int n = members(&P, c->comm, me, NULL);
  return c->kind == K_RS ? c->count * (size_t)n : c->count;
}

static void check_point(int *tainted);
static int tainted[2];

static ncclResult_t issue_call(const call_t *c) {
  pend_t *e = &pend[npend++];
  memset(e, 0, sizeof *e);
  e->c = c;
  e->comm = c->comm;
  int rin = 0;
  members(&P, c->comm, me, &rin);
  size_t es = dt_size(c->dt), sc = send_count(c);
  e->rbytes = c->count * es;
  if (c->persist) { /* a stable bucket: the same buffer every pass (error feedback keys on it) */
    if (!persist_buf[c->persist] || persist_bytes[c->persist] < sc * es) {
      persist_buf[c->persist] = xalloc(sc * es);
      persist_bytes[c->persist] = sc * es;
    }
    e->send = persist_buf[c->persist];
  } else
    e->send = xalloc(sc * es);
  for (size_t i = 0; i < sc; i++) store(c->dt, e->send, i, in_val(P.seed, c, me, i));
  if (c->inplace) e->recv = (char *)e->send + (c->kind == K_RS ? (size_t)rin * e->rbytes : 0);
  else {
    if (c->precv && (!precv_buf[c->precv] || precv_bytes[c->precv] < e->rbytes)) {
      precv_buf[c->precv] = xalloc(e->rbytes);
      precv_bytes[c->precv] = e->rbytes;
    }
    e->recv = c->precv ? precv_buf[c->precv] : xalloc(e->rbytes);
    memset(e->recv, 0xa5, e->rbytes);
  }
  e->op = (ncclRedOp_t)c->op;
  if (c->op == OP_PREMUL) {
    char scalar[8];
    store(c->dt, scalar, 0, 2.0);
    ncclResult_t r = ncclRedOpCreatePreMulSum(&e->op, scalar, (ncclDataType_t)c->dt, ncclScalarHostImmediate, nc[c->comm]);
    if (r != ncclSuccess) {
      e->code = r;
      return r;
    }
    e->created = 1;
  }
  cudaStream_t s = (cudaStream_t)(uintptr_t)c->stream[me];
  snprintf(doing, sizeof doing, "in call %u on c%d", c->uid, c->comm);
  ncclResult_t r = c->kind == K_AR
                       ? ncclAllReduce(e->send, e->recv, c->count, (ncclDataType_t)c->dt, e->op, nc[c->comm], s)
                       : ncclReduceScatter(e->send, e->recv, c->count, (ncclDataType_t)c->dt, e->op, nc[c->comm], s);
  e->code = e->own = r;
  return r;
}

/* Result codes of one check, from every rank of this half. */
static void gather_codes(ncclResult_t code, int *codes) {
  int mine = (int)code;
  MPI_Allgather(&mine, 1, MPI_INT, codes, 1, MPI_INT, hm);
}

/* Codes of this rank's communicator members: all equal? any failed? */
static void code_summary(int comm, const int *codes, int *agree, int *anyfail, char *list, size_t n) {
  *agree = 1;
  *anyfail = 0;
  int first = -1, k = 0;
  list[0] = 0;
  for (int q = 0; q < W; q++) {
    if (P.comm[comm].colors != 1 && q % 2 != me % 2) continue;
    if (first < 0) first = codes[q];
    if (codes[q] != first) *agree = 0;
    if (codes[q] != ncclSuccess) *anyfail = 1;
    if (k >= 0 && (size_t)k < n) k += snprintf(list + k, n - (size_t)k, "%s%d", k ? "," : "", codes[q]);
  }
}

static int all_nan(const float *x, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (!isnan(x[i])) return 0;
  return 1;
}

static float h2f(uint16_t h) { /* IEEE half to fp32, exact */
  int e = (h >> 10) & 0x1f;
  double m = h & 0x3ff, v = e == 0 ? ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexp(1024 + m, e - 25);
  return (float)(h & 0x8000 ? -v : v);
}
static float bf2f(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}
/* n results of a transformable type as fp32 (fp32 itself: p; else a new
 * array, NULL without memory). */
static float *widen(int dt, const void *p, size_t n) {
  if (!dt_half(dt)) return (float *)(uintptr_t)p;
  float *w = malloc(n * 4 + 4);
  for (size_t i = 0; w && i < n; i++) w[i] = dt == ncclBfloat16 ? bf2f(((const uint16_t *)p)[i]) : h2f(((const uint16_t *)p)[i]);
  return w;
}
static int all_nan_dt(int dt, const void *p, size_t n) {
  float *w = widen(dt, p, n);
  int r = w ? all_nan(w, n) : 0;
  if (w != p) free(w);
  return r;
}
/* v as stored in datatype dt (a 16-bit input's rounding) */
static double as_stored(int dt, double v) {
  float w = 0;
  if (!dt_half(dt)) return v;
  uint16_t h = dt == ncclBfloat16 ? f2bf((float)v) : f2h((float)v);
  w = dt == ncclBfloat16 ? bf2f(h) : h2f(h);
  return w;
}

/* The bound of docs/collectives.md: |got - exact| <= (n+1) u sum|x_r| (Sum), (n+2) u sum|x_r| / n (Avg);
 * u = 2^-11 (fp16), 2^-8 (bf16). */
/* The ranks (input indices) of call c's communicator as this rank sees it,
 * and this rank's place among them. */
static int call_ranks(const call_t *c, int *rk, int *rin) {
  int n = 0;
  for (int q = 0; q < W; q++)
    if (P.comm[c->comm].colors == 1 || q % 2 == me % 2) {
      if (q == me) *rin = n;
      rk[n++] = q;
    }
  return n;
}

static size_t out_of_bound_over(const call_t *c, const float *got, size_t *first, double *want, const int *rk, int n,
                                int rin) {
  double u = P.compress == 2 ? 0x1p-8 : 0x1p-11, coef = c->op == ncclAvg ? n + 2 : n + 1;
  /* a 16-bit input: its own type is the wire of fp16/bf16, and every wire's
   * result is rounded once more into it (u16 of the result) */
  double u16 = c->dt == ncclBfloat16 ? 0x1p-8 : c->dt == ncclFloat16 ? 0x1p-11 : 0;
  if (u16 > 0) u = u16;
  /* int8/fp8 (two-phase, block-scaled with a power-of-two scale per block):
   * each input is rounded once and the result once, each by at most q times
   * its block's largest magnitude (int8: half a step of at most 2M/127;
   * fp8 e4m3: 2^-4 relative, and below the block's normal range less), so
   * |got - exact| <= q (sum_r M_r + M_s) (fp16s likewise, q = 2^-10 + 2^-39), M the largest magnitude of the
   * call's input of rank r and of the exact result (bounds of the blocks'). */
  int w8 = P.compress >= 3;
  /* fp16s: 2^-11 relative, amax 2^-39 below fp16's normals; 2^-10 in a top block;
   * int4: amax/7.5, and in a top block (values of 2^111 and more) one step, < amax/4 */
  double q = P.compress == 3   ? 1.0 / 127
             : P.compress == 4 ? 0x1p-4
             : P.compress == 6 ? 0.25
                               : 0x1p-10 + 0x1p-39,
         Msum = 0, Ms = 0;
  size_t lo = c->kind == K_RS ? (size_t)rin * c->count : 0;
  size_t sc = c->kind == K_RS ? c->count * (size_t)n : c->count;
  for (int k = 0; w8 && k < n; k++) {
    double M = 0;
    for (size_t i = 0; i < sc; i++) M = fmax(M, fabs(as_stored(c->dt, in_val(P.seed, c, rk[k], i))));
    Msum += M;
  }
  for (size_t i = 0; w8 && i < c->count; i++) {
    double t = 0;
    for (int k = 0; k < n; k++) t += as_stored(c->dt, in_val(P.seed, c, rk[k], lo + i));
    Ms = fmax(Ms, fabs(c->op == ncclAvg ? t / n : t));
  }
  size_t bad = 0;
  for (size_t i = 0; i < c->count; i++) {
    double s = 0, a = 0;
    size_t j = lo + i;
    for (int k = 0; k < n; k++) {
      double v = as_stored(c->dt, in_val(P.seed, c, rk[k], j));
      s += v;
      a += fabs(v);
    }
    if (c->op == ncclAvg) {
      s /= n;
      a /= n;
    }
    double pf = atof(P.prescale);
    if (pf > 0 && pf != 1) a += 0x1p-24 * pf; /* subnormals of the scaled values */
    double lim = w8 ? q * (Msum + Ms) + 0x1p-20 * (a + Ms) + u16 * fabs(s) : coef * u * a;
    /* error feedback: every rounding also carries the last residual of its
     * bucket (what that call's rounding lost: at most one rounding of a
     * value of the same model, |x| < 2 scale); stochastic rounding: errors up
     * to a whole step. A residual of another model's bucket (1024 times
     * larger, or smaller) is far beyond this. */
    if (P.ef) lim += 2 * (n + 1) * (w8 ? q : u) * 2 * (c->scale > 0 ? c->scale : 1);
    if (P.sr) lim *= 2;
    if (!(fabs((double)got[i] - s) <= lim)) {
      if (!bad) {
        *first = i;
        *want = s;
      }
      bad++;
    }
  }
  return bad;
}

static size_t out_of_bound(const call_t *c, const float *got, size_t *first, double *want) {
  int rk[MAXR], rin = 0, n = call_ranks(c, rk, &rin);
  return out_of_bound_over(c, got, first, want, rk, n, rin);
}

/* c is a member of a group that also holds a call on a colour-split
 * communicator: each rank's group end then also answers for a communicator
 * the other ranks of c's communicator are not in (with 3 ranks, rank 1 alone
 * in its own), so a fault there fails the group on those ranks only, as a
 * real NCCL group end would (fuzzer seeds 7173, 7185: a failed read-back on a
 * one-rank communicator). The codes of such a group need not agree. */
static int split_group(const call_t *c) {
  for (int s = 0; s < P.nstep; s++) {
    const step_t *st = &P.st[s];
    if (st->kind != ST_GROUP || c < st->c || c >= st->c + st->n) continue;
    for (int i = 0; i < st->n; i++)
      if (P.comm[st->c[i].comm].colors == 2) return 1;
    return 0;
  }
  return 0;
}

/* Digest mode (issue 35): an FNV-1a hash over every checked call's result
 * code and receive bytes, in check order, per rank of each half; printed at
 * the end as "FUZZ DIGEST seed S half H rank R HEX". Two builds that issue
 * the same collectives and compute the same bits print the same digests. */
static uint64_t digest = 1469598103934665603ull;
static void digest_add(const void *p, size_t n) {
  const unsigned char *b = p;
  for (size_t i = 0; i < n; i++) digest = (digest ^ b[i]) * 1099511628211ull;
}

static int check_call(pend_t *e, int tag) {
  const call_t *c = e->c;
  if (c) {
    int code = (int)e->code;
    digest_add(&code, sizeof code);
    digest_add(e->recv, e->rbytes);
  }
  int codes[MAXR], agree, anyfail;
  char list[64];
  snprintf(doing, sizeof doing, "checking %s (waiting for the other ranks of this half, or the twin)", e->what);
  gather_codes(e->code, codes);
  code_summary(e->comm, codes, &agree, &anyfail, list, sizeof list);
  if (is_err(e->code)) host_mismatch_check(e->comm, e->code);
  if (e->code == ncclInProgress) FAIL("%s: ncclInProgress on a blocking communicator", e->what);
  if (!c) { /* a DDP bucket: its values are checked at the optimizer step */
    if (half == 0 ? e->code != ncclSuccess : (!agree && !local_fault(P.fault)) || (anyfail && P.fault == F_NONE))
      FAIL("%s: result codes [%s] (ranks of c%d must agree%s)", e->what, list, e->comm,
           P.fault == F_NONE ? ", and nothing may fail without an injected fault" : "");
    return anyfail;
  }
  size_t es = dt_size(c->dt);
  if (!c->inplace) { /* sendbuff untouched */
    size_t sc = send_count(c), bad = 0;
    char *want = malloc(sc * es + 1);
    for (size_t i = 0; i < sc; i++) store(c->dt, want, i, in_val(P.seed, c, me, i));
    for (size_t i = 0; i < sc && want; i++) bad += memcmp(want + i * es, (char *)e->send + i * es, es) != 0;
    free(want);
    if (bad) FAIL("%s: sendbuff changed in %zu of %zu elements", e->what, bad, sc);
  }
  if (half == 0) {
    if (e->code != ncclSuccess) FAIL("%s: the plain run failed with %d (the fuzzer or the host NCCL is wrong)", e->what, (int)e->code);
    MPI_Send(e->recv, (int)e->rbytes, MPI_BYTE, twin, tag, tw);
    return anyfail;
  }
  unsigned char *ref = malloc(e->rbytes + 1);
  MPI_Recv(ref, (int)e->rbytes, MPI_BYTE, twin, tag, tw, MPI_STATUS_IGNORE);
  /* NCCLSHIM_MAX_STAGING_BYTES: a call beyond it is refused with
   * ncclInvalidUsage on every rank of its communicator, nothing changed */
  if (P.staging && P.fault == F_NONE && e->own == ncclInvalidUsage && dt_tf(c->dt)) {
    if (!agree) FAIL("%s: refused on some ranks only (staging limit): codes [%s]", e->what, list);
    size_t bad = 0;
    for (size_t i = 0; i < c->count; i++) {
      float w;
      if (c->inplace) store(c->dt, &w, 0, in_val(P.seed, c, me, (c->kind == K_RS ? (size_t)(((char *)e->recv - (char *)e->send) / es) : 0) + i));
      else memset(&w, 0xa5, es);
      bad += memcmp(&w, (char *)e->recv + es * i, es) != 0;
    }
    if (bad) FAIL("%s: refused (staging limit) but %zu of %zu elements of recvbuff changed", e->what, bad, c->count);
    free(ref);
    return anyfail;
  }
  if (!local_fault(P.fault) && !split_group(c) && !agree)
    FAIL("%s: result codes differ between the ranks of c%d: [%s]", e->what, e->comm, list);
  if (e->code != ncclSuccess) {
    if (P.fault == F_NONE && !(P.staging && e->code == ncclInvalidUsage))
      FAIL("%s: failed with %d (%s) although no fault was injected", e->what, (int)e->code, ncclGetErrorString(e->code));
    free(ref);
    return anyfail;
  }
  /* Bit for bit: everything the shim never transforms, inputs exact in
   * the wire type (Avg only over a power-of-two rank count), and all of it
   * when nothing is transformed. */
  int n = members(&P, c->comm, me, NULL);
  /* Reduce-scatters are compressed too (two-phase: one rounding of each
   * input and of the shard, within the ring's bound below). */
  int bitwise = !dt_tf(c->dt) || (c->op != ncclSum && c->op != ncclAvg) || P.disable ||
                P.compress == 0 ||
                (P.compress < 3 && !P.ef && c->exact && (c->op == ncclSum || (n & (n - 1)) == 0));
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < c->count; i++)
    if (memcmp(ref + i * es, (char *)e->recv + i * es, es)) {
      if (!bad) first = i;
      bad++;
    }
  e->plain_bits = bad == 0;
  void *got = e->recv;
  unsigned char *patched = NULL;
  if (bad && local_fault(P.fault) && dt_tf(c->dt) && anyfail && all_nan_dt(c->dt, e->recv, c->count)) bad = 0; /* poisoned */
  size_t nn = 0;
  if (bad && local_fault(P.fault) && c->dt == ncclFloat32 && anyfail && (P.algo == 3 || (P.algo == 0 && P.nnodes >= 2)))
    for (size_t i = 0; i < c->count; i++) nn += isnan(((float *)e->recv)[i]) != 0;
  if (nn && (patched = malloc(e->rbytes))) {
    /* hier (asked for, or auto's choice on several nodes): NaN only in the
     * elements the failed rank's stage between nodes carried
     * (docs/collectives.md); every other element as without a fault. No NaN
     * at all: hier was not adopted (uneven nodes, one node, a split that
     * failed for want of host memory) or the call did not take it: judged
     * below as any other failure (seed 43022). That a failed stage does
     * leave NaN is 47-hier's to check, where the fault is placed. */
    memcpy(patched, e->recv, e->rbytes);
    for (size_t i = 0; i < c->count; i++)
      if (isnan(((float *)patched)[i])) memcpy(patched + 4 * i, ref + 4 * i, 4);
    got = patched;
    bad = 0;
    for (size_t i = 0; i < c->count; i++)
      if (memcmp(ref + i * es, patched + i * es, es)) {
        if (!bad) first = i;
        bad++;
      }
  }
  if (bad && !bitwise) {
    double want = 0;
    float *wide = widen(c->dt, got, c->count), *wref = widen(c->dt, ref, c->count);
    bad = wide && wref ? out_of_bound(c, wide, &first, &want) : c->count;
    if (bad)
      FAIL("%s: %zu of %zu elements beyond the bound, first [%zu] = %.9g, exact %.9g (plain %.9g)", e->what, bad,
           c->count, first, wide ? wide[first] : NAN, want, wref ? wref[first] : NAN);
    if (wide != got) free(wide);
    if (wref != (void *)ref) free(wref);
  } else if (bad) {
    char g[32] = "", w[32] = "";
    if (c->dt == ncclFloat32) {
      snprintf(g, sizeof g, " = %.9g", ((float *)got)[first]);
      snprintf(w, sizeof w, " %.9g", ((float *)ref)[first]);
    }
    FAIL("%s: %zu of %zu elements differ from plain NCCL, first [%zu]%s, plain%s%s", e->what, bad, c->count, first, g,
         w, anyfail ? " (a rank failed this call: NaN was expected everywhere)" : "");
  }
  free(patched);
  free(ref);
  return anyfail;
}

static int check_tag;

static int step_uses(const step_t *s, int k) {
  for (int i = 0; s && i < (s->kind == ST_CALL ? 1 : s->n); i++)
    if (s->c[i].comm == k) return 1;
  return 0;
}

/* Poll every nonblocking communicator with calls pending, except those the
 * step `except` uses (NULL: none excepted), in the order of their oldest
 * pending call (as the work was queued: a peer blocked on the older work
 * waits for none of the newer). */
static void poll_pending_but(const step_t *except) {
  int used[MAXC] = {0};
  /* An excepted communicator whose queued work is older than work polled
   * here is polled first all the same: NCCL would have run it in the
   * background by then, and a peer blocked in it may be what the younger
   * work waits for (seed 4050: rank 1 polled c0 at step 12 while rank 0
   * sat in its blocking c3 call of step 10, queued on rank 1 under c3, which
   * step 12 uses). */
  int last = -1;
  for (int j = 0; j < npend; j++)
    if (nb_here(pend[j].comm) && !step_uses(except, pend[j].comm)) last = j;
  for (int j = 0; j < npend; j++) {
    int k = pend[j].comm;
    if (used[k] || !nb_here(k) || (step_uses(except, k) && j > last)) continue;
    used[k] = 1;
    ncclResult_t e = poll_comm(k);
    for (int i = 0; i < npend; i++)
      if (pend[i].comm == k && !is_err(pend[i].code)) pend[i].code = e;
  }
}
static void poll_pending(void) { poll_pending_but(NULL); }

/* Real NCCL progresses a nonblocking communicator's queued work in the
 * background; the host NCCL runs it only when polled, and runs a blocking
 * communicator's collective synchronously, waiting for its peers. So before
 * every step, every rank polls its queued work on the other communicators (as
 * NCCL's background progress would run it), else a rank that waits in the
 * step and a peer's queued work wait for each other under the host NCCL only.
 * Every step, not only those on a communicator blocking on some rank: with
 * the shim, a call or group end on a nonblocking communicator waits too
 * whenever the shim issues an exchange of its own there (a first call's
 * check, a fusion-growth or accumulation agreement, chunk or two-phase
 * waits). Seed 588 hung in such a wait (rank 0 in the fusion-growth
 * agreement on c1 at step 14, while rank 2 blocked at step 12 on c2, where
 * rank 0's call was queued and unpolled): a hang of the host NCCL's model
 * only, since real NCCL would have run that queued call. Queued work on the
 * step's own communicators stays queued into the step (calls issued while
 * earlier ones are in progress). Depends on the program only, alike on every
 * rank. */
/* A check point: wait for every nonblocking communicator in use, then check
 * every pending call in issue order. The same points on every rank and in
 * both halves, whatever the calls returned. */
static void check_point(int *tainted) {
  poll_pending();
  for (int i = 0; i < npend; i++) {
    pend_t *e = &pend[i];
    if (e->c) {
      char d[256];
      describe_call(&P, e->c, d, sizeof d);
      snprintf(e->what, sizeof e->what, "call %u (%.60s)", e->c->uid, d);
    }
    if (check_call(e, ++check_tag) && !e->c) tainted[e->model] = 1;
  }
  /* Stochastic rounding: two calls of one input (twins in one group) round
   * independently; their results agree in about 2/3 of the elements (issue
   * 26: grouped calls all took the group's last call number, 100 %). Only
   * where they run in two phases: with launches priced (issue 33) a twin
   * whose two phases gain nothing is fused when fusion is on, and the
   * fused ring rounds to nearest (the same bits for both twins). */
  int fusable = P.fuse_bytes > 0 && P.launch_bytes != 0;
  for (int j = 0; half == 1 && P.sr && !P.disable && !fusable && j < npend; j++) {
    const call_t *b = pend[j].c;
    /* only where both were transformed (a communicator whose check or an
     * exchange failed forwards everything: plain NCCL's bits) */
    if (!b || !b->vuid || pend[j].code != ncclSuccess || pend[j].plain_bits || members(&P, b->comm, me, NULL) < 2)
      continue; /* one rank: a cast, no two-phase encode to round stochastically */
    for (int i = 0; i < j; i++) {
      if (!pend[i].c || pend[i].c->uid != b->vuid || pend[i].code != ncclSuccess || pend[i].plain_bits) continue;
      const float *x = pend[i].recv, *y = pend[j].recv;
      size_t same = 0, fin = 1;
      for (size_t k = 0; k < b->count; k++) {
        same += memcmp(&x[k], &y[k], 4) == 0;
        fin &= isfinite(x[k]) && isfinite(y[k]);
      }
      if (fin && same > b->count * 9 / 10)
        FAIL("%s and its twin: two stochastic roundings of one input agree in %zu of %zu elements", pend[j].what, same,
             b->count);
    }
  }
  for (int i = 0; i < npend; i++)
    if (pend[i].created) ncclRedOpDestroy(pend[i].op, nc[pend[i].comm]);
  npend = 0;
}

/* One step of ordinary collectives. */
static void run_calls(const step_t *s) {
  if (s->kind == ST_CALL) {
    issue_call(&s->c[0]);
    return;
  }
  int first = npend;
  ncclResult_t g = ncclGroupStart();
  for (int i = 0; i < s->n; i++) {
    const call_t *c = &s->c[i];
    for (int o = 0; o < c->open; o++) g = combine(g, ncclGroupStart());
    issue_call(c);
    for (int o = 0; o < c->close; o++) g = combine(g, ncclGroupEnd());
  }
  snprintf(doing, sizeof doing, "in the outermost ncclGroupEnd");
  g = combine(g, ncclGroupEnd());
  for (int i = first; i < npend; i++) pend[i].code = combine(pend[i].code, g);
}

/* A step of this process's own clique (ST_LOCAL): one group holding the
 * step's calls on each of its ranks, issued by this thread, then every
 * result checked against the exact sum over the clique's inputs: bit for bit
 * for exact Sum inputs where the wire format keeps them (plain NCCL, the
 * shim off, fp16 or bf16), within the bound elsewhere. Every code must be
 * ncclSuccess (no fault is drawn with it), or, under a staging limit,
 * ncclInvalidUsage on every rank of the clique with recvbuff untouched (the
 * call's own code; the group's end then reports it for every call). */
static ncclComm_t lc[MAXL];
static void run_local(const step_t *s) {
  int L = P.nlocal, rk[MAXL];
  for (int d = 0; d < L; d++) rk[d] = LRANK + d;
  if (!lc[0]) {
    snprintf(doing, sizeof doing, "creating this process's own clique (ncclCommInitAll of %d)", L);
    ncclResult_t r = ncclCommInitAll(lc, L, NULL);
    if (r != ncclSuccess) {
      FAIL("ncclCommInitAll of %d ranks: %s", L, ncclGetErrorString(r));
      return;
    }
  }
  void *send[MAXL][MAXG], *recv[MAXL][MAXG];
  for (int d = 0; d < L; d++)
    for (int i = 0; i < s->n; i++) {
      const call_t *c = &s->c[i];
      size_t sc = c->kind == K_RS ? c->count * (size_t)L : c->count;
      send[d][i] = xalloc(sc * 4);
      for (size_t j = 0; j < sc; j++) ((float *)send[d][i])[j] = (float)in_val(P.seed, c, rk[d], j);
      recv[d][i] = c->inplace ? (char *)send[d][i] + (c->kind == K_RS ? (size_t)d * c->count * 4 : 0) : xalloc(c->count * 4);
      if (!c->inplace) memset(recv[d][i], 0xa5, c->count * 4);
    }
  ncclResult_t code[MAXL][MAXG], g = ncclGroupStart();
  for (int d = 0; d < L; d++)
    for (int i = 0; i < s->n; i++) {
      const call_t *c = &s->c[i];
      cudaStream_t st = (cudaStream_t)(uintptr_t)c->stream[0];
      snprintf(doing, sizeof doing, "in call %u on this process's clique, its rank %d", c->uid, d);
      code[d][i] = c->kind == K_AR ? ncclAllReduce(send[d][i], recv[d][i], c->count, ncclFloat32, (ncclRedOp_t)c->op, lc[d], st)
                                   : ncclReduceScatter(send[d][i], recv[d][i], c->count, ncclFloat32, (ncclRedOp_t)c->op, lc[d], st);
    }
  snprintf(doing, sizeof doing, "in the outermost ncclGroupEnd of this process's clique");
  g = combine(g, ncclGroupEnd());
  int keeps = half == 0 || P.disable || P.compress <= 2;
  for (int d = 0; d < L; d++)
    for (int i = 0; i < s->n; i++) {
      const call_t *c = &s->c[i];
      ncclResult_t r = combine(code[d][i], g);
      if (code[d][i] == ncclInvalidUsage && P.staging && half == 1) {
        /* refused for the staging limit: on every rank of the clique, nothing changed */
        size_t bad = 0;
        for (int q = 0; q < L; q++) bad += code[q][i] != ncclInvalidUsage;
        if (bad) FAIL("call %u on this process's clique: refused (staging limit) on some of its ranks only", c->uid);
        for (size_t j = 0, bad = 0; j < c->count; j++) {
          float w;
          if (c->inplace) w = (float)in_val(P.seed, c, rk[d], (c->kind == K_RS ? (size_t)d * c->count : 0) + j);
          else memset(&w, 0xa5, 4);
          if (memcmp(&w, (float *)recv[d][i] + j, 4) && !bad++)
            FAIL("call %u on this process's clique, its rank %d: refused (staging limit) but recvbuff[%zu] changed", c->uid, d, j);
        }
        continue;
      }
      if (r == ncclInvalidUsage && P.staging && half == 1) continue; /* another call of the group was refused */
      if (r != ncclSuccess) {
        FAIL("call %u on this process's clique, its rank %d: %s", c->uid, d, ncclGetErrorString(r));
        continue;
      }
      size_t first = 0, bad;
      double want = 0;
      const float *got = recv[d][i];
      digest_add(got, c->count * 4);
      if (c->exact && c->op == ncclSum && keeps) {
        bad = 0;
        for (size_t j = 0; j < c->count; j++) {
          double t = 0;
          for (int q = 0; q < L; q++) t += in_val(P.seed, c, rk[q], (c->kind == K_RS ? (size_t)d * c->count : 0) + j);
          if ((double)got[j] != t && !bad++) first = j, want = t;
        }
      } else
        bad = out_of_bound_over(c, got, &first, &want, rk, L, d);
      if (bad)
        FAIL("call %u on this process's clique, its rank %d: %zu of %zu elements wrong, first [%zu] = %.9g, want %.9g",
             c->uid, d, bad, c->count, first, (double)got[first], want);
    }
}

/* An error-feedback model's pass: its buckets, in one group at times. */
static void run_ef(const step_t *s) {
  int first = npend;
  ncclResult_t g = s->grouped ? ncclGroupStart() : ncclSuccess;
  for (int i = 0; i < s->n; i++) {
    issue_call(&s->c[i]);
    if (s->c[i].precv) check_point(tainted); /* before the next bucket writes the shared buffer */
  }
  if (!s->grouped) return;
  snprintf(doing, sizeof doing, "in the outermost ncclGroupEnd (error-feedback model %d)", s->comm);
  g = combine(g, ncclGroupEnd());
  for (int i = first; i < npend; i++) pend[i].code = combine(pend[i].code, g);
}

/* ---- DDP ------------------------------------------------------------------------- */
typedef struct {
  float *grad[MAXB], *bucket[MAXB], *whole;
  double *ref[MAXB];
  unsigned last_present;
  size_t total;
} ddp_t;
static ddp_t D[2];
static float grad_val(int m, int b, int pass, int r, size_t i) {
  uint64_t h = hv(P.seed, 0x800000u | (uint32_t)(m << 16 | b << 8), r, i + (size_t)pass * 0x100000);
  return (float)((int)(h % 5) - 2) * 0.5f;
}

static void run_pass(const pass_t *ps) {
  model_t *m = &P.model[ps->model];
  ddp_t *d = &D[ps->model];
  int Wc = members(&P, ps->comm, me, NULL);
  if (ps->wrap) { /* DDP (re)built: new persistent buffers */
    d->total = 0;
    for (int b = 0; b < m->nb; b++) {
      if (!d->grad[b]) {
        d->grad[b] = calloc(m->cnt[b], sizeof(float));
        d->ref[b] = calloc(m->cnt[b], sizeof(double));
      }
      d->bucket[b] = xalloc(m->cnt[b] * sizeof(float));
      d->total += m->cnt[b];
    }
    d->whole = xalloc(d->total * sizeof(float));
  }
  cudaStream_t st = (cudaStream_t)(uintptr_t)7;
  ncclRedOp_t op = m->avg ? ncclAvg : ncclSum;
  for (int b = 0; b < m->nb; b++) {
    if (!(ps->present >> b & 1)) continue;
    for (size_t i = 0; i < m->cnt[b]; i++) {
      d->grad[b][i] += grad_val(ps->model, b, ps->pass, me, i);
      if (half == 0) {
        double s = 0;
        for (int q = 0; q < W; q++) s += grad_val(ps->model, b, ps->pass, q, i);
        d->ref[b][i] += s / Wc;
      }
    }
  }
  float div = m->avg ? 1.0f : (float)Wc;
  int ip = 0;
  for (int b = 0; b <= m->nb; b++) {
    for (int f = 0; f < ps->nf; f++)
      if (ps->fpos[f] == b) issue_call(&ps->foreign[f]);
    if (b == m->nb) break;
    if (!(ps->present >> b & 1)) continue;
    float *dst = ps->whole ? d->whole + ip : d->bucket[b];
    for (size_t i = 0; i < m->cnt[b]; i++) dst[i] = d->grad[b][i] / div;
    ip += (int)m->cnt[b];
    if (ps->whole) continue;
    pend_t *e = &pend[npend++];
    memset(e, 0, sizeof *e);
    e->comm = ps->comm;
    e->model = ps->model;
    snprintf(e->what, sizeof e->what, "ddp pass %d model %d bucket %d (%zu floats)", ps->pass, ps->model, b, m->cnt[b]);
    snprintf(doing, sizeof doing, "in %s", e->what);
    e->code = ncclAllReduce(d->bucket[b], d->bucket[b], m->cnt[b], ncclFloat32, op, nc[ps->comm], st);
  }
  if (ps->whole) {
    pend_t *e = &pend[npend++];
    memset(e, 0, sizeof *e);
    e->comm = ps->comm;
    e->model = ps->model;
    snprintf(e->what, sizeof e->what, "ddp pass %d model %d whole-model bucket (%d floats)", ps->pass, ps->model, ip);
    snprintf(doing, sizeof doing, "in %s", e->what);
    e->code = ncclAllReduce(d->whole, d->whole, (size_t)ip, ncclFloat32, op, nc[ps->comm], st);
  }
  if (ps->usedmap) { /* find_unused_parameters: an int32 Sum of the used-map */
    static call_t um[MAXS];
    call_t *c = &um[ps->pass % MAXS];
    memset(c, 0, sizeof *c);
    c->uid = 0x400000u + (uint32_t)ps->pass * 4 + (uint32_t)ps->model;
    c->comm = ps->comm;
    c->count = 54;
    c->dt = ncclInt32;
    c->op = ncclSum;
    c->exact = 1;
    c->stream[me] = 7;
    issue_call(c);
  }
  check_point(tainted);
  ip = 0;
  for (int b = 0; b < m->nb; b++) { /* copied back into param.grad */
    if (!(ps->present >> b & 1)) continue;
    const float *src = ps->whole ? d->whole + ip : d->bucket[b];
    memcpy(d->grad[b], src, m->cnt[b] * sizeof(float));
    ip += (int)m->cnt[b];
  }
  d->last_present = ps->present;
}

/* optimizer.step(): every gradient of a bucket the last pass reduced equals
 * the synced reference (plain twin), which equals the exact sum; then zero_grad. */
static void optimizer_step(int pass) {
  for (int mi = 0; mi < P.nmodel; mi++) {
    model_t *m = &P.model[mi];
    ddp_t *d = &D[mi];
    for (int b = 0; b < m->nb; b++) {
      if (!d->grad[b]) continue;
      size_t n = m->cnt[b];
      if (d->last_present >> b & 1) {
        snprintf(where, sizeof where, "optimizer step after micro-step %d, model %d bucket %d", pass, mi, b);
        if (half == 0) {
          size_t bad = 0;
          for (size_t i = 0; i < n; i++) bad += d->grad[b][i] != (float)d->ref[b][i];
          if (bad) FAIL("the plain run's gradient differs from the exact sum in %zu of %zu elements (fuzzer bug)", bad, n);
          MPI_Send(d->grad[b], (int)(n * 4), MPI_BYTE, twin, ++check_tag, tw);
        } else {
          float *ref = malloc(n * 4);
          MPI_Recv(ref, (int)(n * 4), MPI_BYTE, twin, ++check_tag, tw, MPI_STATUS_IGNORE);
          size_t bad = 0, first = 0;
          for (size_t i = 0; i < n; i++)
            if (memcmp(&ref[i], &d->grad[b][i], 4)) {
              if (!bad) first = i;
              bad++;
            }
          if (bad && !tainted[mi])
            FAIL("gradient differs from the synced (no_sync) reference in %zu of %zu elements, first [%zu] = %.9g, "
                 "reference %.9g: a pass before this optimizer step was answered locally",
                 bad, n, first, d->grad[b][first], ref[first]);
          free(ref);
        }
      }
      memset(d->grad[b], 0, n * sizeof(float));
      memset(d->ref[b], 0, n * sizeof(double));
    }
    tainted[mi] = 0;
  }
}

/* The abort at the end (draw_abort): the laggard waits for the others,
 * then aborts its own communicator, which never saw the last calls; every
 * other rank's calls block on it until the watchdog aborts. */
typedef struct {
  ncclComm_t comm;
  int (*waiting)(void);
  ncclResult_t r;
  int done;    /* the calls returned without blocking (a staging limit refused them): no abort here */
  int aborted;
} watch_t;

static void *watchdog(void *arg) {
  watch_t *w = arg;
  while (w->waiting() == 0)
    if (__atomic_load_n(&w->done, __ATOMIC_ACQUIRE)) return NULL;
    else usleep(1000);
  usleep(20000); /* blocked, as a watchdog's timeout finds it */
  w->r = ncclCommAbort(w->comm);
  w->aborted = 1;
  return NULL;
}

static void run_abort(void) {
  int k = P.abort_comm - 1, n = members(&P, k, me, NULL);
  snprintf(where, sizeof where, "the end: c%d aborted by a watchdog (rank %d the laggard)", k, P.abort_lag);
  if (me == P.abort_lag) {
    MPI_Barrier(hm);
    snprintf(doing, sizeof doing, "the laggard's ncclCommAbort of c%d", k);
    ncclResult_t r = ncclCommAbort(nc[k]);
    if (r != ncclSuccess) FAIL("the laggard's ncclCommAbort of c%d: %s", k, ncclGetErrorString(r));
    nc[k] = NULL;
    return;
  }
  watch_t w = {nc[k], (int (*)(void))dlsym(RTLD_DEFAULT, "hostnccl_waiting"), ncclSuccess, 0, 0};
  if (!w.waiting) {
    FAIL("the abort needs the host NCCL's hostnccl_waiting");
    MPI_Barrier(hm);
    return;
  }
  size_t cnt = P.abort_count, big = P.abort_kind == 2 ? cnt * (size_t)n : cnt;
  float *x = xalloc(big * 4), *y = xalloc(cnt * 4), *a = xalloc(4096 * 4), *b = xalloc(4096 * 4);
  for (size_t i = 0; i < big; i++) x[i] = (float)(i % 7);
  for (size_t i = 0; i < 4096; i++) a[i] = b[i] = 1;
  pthread_t th;
  if (pthread_create(&th, NULL, watchdog, &w)) MPI_Abort(MPI_COMM_WORLD, 2);
  cudaStream_t s = (cudaStream_t)1;
  snprintf(doing, sizeof doing, "the last calls on c%d, blocked until the watchdog aborts", k);
  ncclResult_t r;
  if (P.abort_kind == 2) {
    r = ncclReduceScatter(x, y, cnt, ncclFloat32, ncclSum, nc[k], s);
  } else if (P.abort_kind == 1) {
    r = ncclGroupStart();
    ncclResult_t r1 = ncclAllReduce(a, a, 4096, ncclFloat32, ncclSum, nc[k], s);
    ncclResult_t r2 = ncclAllReduce(b, b, 4096, ncclFloat32, ncclSum, nc[k], s);
    ncclResult_t r3 = ncclAllReduce(x, x, cnt, ncclFloat32, ncclSum, nc[k], s);
    r = combine(combine(combine(r, r1), combine(r2, r3)), ncclGroupEnd());
  } else {
    r = ncclAllReduce(x, x, cnt, ncclFloat32, ncclSum, nc[k], s);
  }
  __atomic_store_n(&w.done, 1, __ATOMIC_RELEASE);
  pthread_join(th, NULL);
  if (!w.aborted) w.r = ncclCommAbort(nc[k]); /* refused before anything was issued (a staging limit) */
  if (r == ncclSuccess) FAIL("the last calls on c%d returned ncclSuccess though the laggard never joined", k);
  if (w.r != ncclSuccess) FAIL("the watchdog's ncclCommAbort of c%d: %s", k, ncclGetErrorString(w.r));
  nc[k] = NULL;
  MPI_Barrier(hm);
}

static int run(double timeout) {
  int ws;
  MPI_Comm_rank(MPI_COMM_WORLD, &wr);
  MPI_Comm_size(MPI_COMM_WORLD, &ws);
  W = ws / 2;
  half = wr >= W;
  me = wr % (W ? W : 1);
  twin = half ? wr - W : wr + W;
  int shim = dlsym(RTLD_DEFAULT, "ncclshim_get_stats") != NULL;
  if (ws != 2 * P.W || shim != half) {
    fprintf(stderr, "fuzz: seed %llu needs %d plain ranks then %d with the shim preloaded (got %d ranks, shim %s on rank %d)\n",
            (unsigned long long)P.seed, P.W, P.W, ws, shim ? "loaded" : "absent", wr);
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  signal(SIGALRM, on_alarm);
  alarm((unsigned)timeout + (half ? 0 : 3)); /* the shim's half reports first */
  MPI_Comm_split(MPI_COMM_WORLD, half, me, &hm);
  MPI_Comm_dup(MPI_COMM_WORLD, &tw);
  make_comm(0);
  for (int s = 0; s < P.nstep; s++) {
    const step_t *st = &P.st[s];
    snprintf(where, sizeof where, "step %d", s);
    if (npend > MAXPEND - 3 * MAXG) check_point(tainted); /* depends on the program only */
    if (st->kind == ST_NEWCOMM) {
      check_point(tainted);
      snprintf(doing, sizeof doing, "creating c%d", st->comm);
      make_comm(st->comm);
    } else if (st->kind == ST_PASS) {
      check_point(tainted);
      snprintf(where, sizeof where, "step %d (ddp pass %d model %d)", s, st->p.pass, st->p.model);
      run_pass(&st->p);
      if (st->p.step_after) optimizer_step(st->p.pass);
    } else if (st->kind == ST_LOCAL) {
      snprintf(where, sizeof where, "step %d (this process's own clique)", s);
      run_local(st);
    } else if (st->kind == ST_EF) {
      snprintf(where, sizeof where, "step %d (error-feedback model %d)", s, st->comm);
      run_ef(st);
      check_point(tainted);
    } else if (st->kind != ST_NOP) {
      /* Before seed EF_SEEDS the host NCCL ran queued work only when polled;
       * it progresses by itself now (seed 12001), and programs drawn from
       * then on poll before a step only when it says so. */
      if (!P.noprepoll) poll_pending_but(st);
      run_calls(st);
      if (st->rpoll >> me & 1) { /* this rank polls now, its peers need not */
        snprintf(doing, sizeof doing, "a poll of this rank's own after step %d", s);
        poll_pending_but(NULL);
      }
      if (st->poll) check_point(tainted);
    }
  }
  snprintf(where, sizeof where, "the end");
  check_point(tainted);
  if (P.abort_comm) run_abort();
  for (int k = 0; k < P.ncomm; k++)
    if (nc[k]) ncclCommDestroy(nc[k]);
  for (int d = 0; d < P.nlocal && lc[0]; d++) ncclCommDestroy(lc[d]);
  alarm(0);
  printf("FUZZ DIGEST seed %llu half %d rank %d %016llx\n", (unsigned long long)P.seed, half, me,
         (unsigned long long)digest);
  if (half == 1) {
    ncclshim_stats_t st;
    memset(&st, 0, sizeof st);
    int (*get)(ncclshim_stats_t *);
    *(void **)&get = dlsym(RTLD_DEFAULT, "ncclshim_get_stats");
    if (get) get(&st);
    if (me == 0)
      printf("seed %llu: rank 0 with the shim: %llu calls, %llu compressed, %llu fused, %llu skipped, %llu passthrough, %llu real\n",
             (unsigned long long)P.seed, (unsigned long long)st.calls, (unsigned long long)st.compressed,
             (unsigned long long)st.fused, (unsigned long long)st.skipped, (unsigned long long)st.passthrough,
             (unsigned long long)st.real_calls);
  }
  for (size_t i = 0; i < nkeep; i++) free(keep[i]);
  int mine = failures, any = 0;
  MPI_Allreduce(&mine, &any, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  return any ? 1 : 0;
}

int main(int argc, char **argv) {
  uint64_t seed = 1;
  int plan = 0, desc = 0;
  const char *offs = "";
  double timeout = 50;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--seed") && i + 1 < argc) seed = strtoull(argv[++i], NULL, 0);
    else if (!strcmp(argv[i], "--plan")) plan = 1;
    else if (!strcmp(argv[i], "--describe")) desc = 1;
    else if (!strcmp(argv[i], "--timeout") && i + 1 < argc) timeout = atof(argv[++i]);
    else if (!strcmp(argv[i], "--off") && i + 1 < argc) offs = argv[++i];
    else {
      fprintf(stderr, "usage: %s --seed N [--off CLASS,...] [--plan | --describe | --timeout S]\n", argv[0]);
      return 2;
    }
  }
  draw_program(&P, seed, offs);
  if (plan) print_plan(&P);
  if (desc) describe(&P);
  if (plan || desc) return 0;
  int provided;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  int rc = run(timeout);
  MPI_Finalize();
  return rc;
}
