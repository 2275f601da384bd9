/* model.c — build/bin/ncclshim_model: the predicted time of one fp32, bf16
 * or fp16 (--dtype) all-reduce or reduce-scatter (or, with --group N, of a
 * user group of N all-reduces) under every plan the shim can run, on a
 * fabric of N nodes of L ranks. Fronted by bench/ncclshim-model
 * (calibration, PNGs).
 *
 * One source of truth: for every rank the model builds the same nsc_topo the
 * shim would agree on and asks the shim's decision (shim/plan/plan.h:
 * nsc_decide; for a group, the group's plan, nsc_decide_group, and its
 * buckets' plans, nsc_plan_bucket) for the call's plans; it then walks their
 * steps and charges each message to the links it crosses:
 *   - a real collective (ALLREDUCE, REDUCESCATTER, ALLGATHER, in fp32 or the
 *     wire type) on its group (ALL, NODE, CROSS): a ring over the group's
 *     ranks in their order, 2(m-1) or m-1 rounds of one chunk per rank
 *     (the host NCCL's algorithm, tests/hostnccl/algo.c);
 *   - a TWOPHASE step: the two-phase layout (nsc_plan_tp, tp_plan.h), piece
 *     by piece, every rank's piece to every peer of its group, one round per
 *     piece and phase;
 *   - CAST_IN / CAST_OUT, and a bucket's segmented ones: codec time only.
 * A 16-bit call (--dtype bfloat16|half) is the same call to the decision
 * (nsc_call.dt, count = bytes / 2): forwarded, its ring moves 2 bytes an
 * element and reduces at the host NCCL's 16-bit rate; in two phases its
 * wire is the layout's (tp_plan.h) and its codec handles as many elements
 * as an fp32 call's (the host encodes from and decodes into the 16-bit
 * bits, wire.c's nsc_fmt_encode_in / nsc_fmt_decode_out), plus on a GPU
 * the backend's widening and narrowing kernels (fmt_encode16 /
 * fmt_decode16) and, for a reduce-scatter, the shard narrowed into the
 * caller's buffer (both fabrics). It is never fused (policy.h).
 * A message between two nodes occupies the sender's NIC out and the
 * receiver's NIC in (a NIC per rank, or one per node shared by its ranks);
 * inside a node the sender's intra link out and the receiver's intra in. A
 * round lasts as long as its busiest link direction needs for its bytes,
 * plus the latency once (as tests/hostnccl/fabric.c charges a step).
 *
 * Two fabrics:
 *   host  the emulator: links as above; CPU work (the host NCCL's reductions
 *         and copies, the shim's codec at rates measured by --calibrate) of
 *         all ranks shares the machine's cores (the emulated nodes are one
 *         machine). A ring round lasts max(link, CPU); a two-phase step
 *         pipelines its codec against its exchange piece by piece.
 *   gpu   NCCL on GPUs: latencies from NCCL's tuning model (tuning.cc,
 *         Simple protocol; see docs/benchmarks.md for the version), ring
 *         and tree for an fp32 all-reduce (the faster is taken, as NCCL's
 *         tuner does), NCCL's rings spread over every NIC of a node; codec
 *         kernels at HBM bandwidth times an assumed efficiency.
 *
 * Launches: the plan says how many NCCL launches the call issues
 * (plan.h; the shim counts them with the same function). Each costs the
 * fabric's alpha (--launch-us): on the host fabric the emulator's
 * HOSTNCCL_LAUNCH_US, paid before the launch's data moves (added); on the
 * gpu fabric a launch's fixed cost overlaps the transfers by
 * --launch-overlap o: time = max(launches * alpha, T) + (1 - o) * min(...),
 * T the time without launches (o = 0.5 fits the shared-GPU rig of
 * 2026-12-04: bench/model/gpu-rig.sh).
 *
 * A group's plans run one after the other: its buckets (fusion by the
 * shim's own rules; costing fusion by the 10 % rule is not the shim's yet),
 * its calls that were not fused.
 *
 * Not modelled (the plan does not say it, or it is not a step):
 * accumulation, staging growth, shim per-call overhead, switch congestion.
 *
 * Must not: run inside the shim (an offline tool; the auto rule stays a rule),
 * or print a modelled number without saying it is modelled. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config.h"
#include "fabric.h"
#include "plan.h"
#include "topo.h"
#include "tp_plan.h"
#include "wire.h"

#define MiB (1024.0 * 1024.0)
#define NFMT NSC_FMT_COUNT

#define fmt_name(i) nsc_fmt_name((nsc_fmt_t)(i)) /* compress/formats.h's rows */

/* ---------------------------------------------------------------- rates */

/* Measured rates, bytes per second of one core (host fabric) or assumed
 * (gpu fabric). Codec rates count fp32 bytes, as wire_perf prints them. */
typedef struct {
  double enc[NFMT], dec[NFMT], dsum4[NFMT]; /* wire_perf: encode, decode, decode_sum of 4 runs (fp32 out) */
  double cast_to[2], cast_from[2];           /* cast_perf: fp16, bf16 (the ring's casts) */
  double memcpy_bps;                         /* one copy */
  double red[3];                             /* host NCCL ring reduce step per chunk byte: fp32, fp16, bf16 */
  double copy_step;                          /* host NCCL ring copy step (all-gather) per chunk byte */
  double fresh_copy;                         /* host NCCL reduce-scatter's copy into a buffer it mallocs */
  double tp_factor;                          /* two-phase CPU: measured / the sum of its parts (calibrated) */
  double tp_factor_fmt[NFMT];                /* the same for one format (0: tp_factor) */
  double cores;                              /* cores the emulated ranks share */
  double hbm, eff;                           /* gpu: HBM bytes/s, kernel efficiency (assumed) */
  char date[256], source[256];
} rates;

static void rates_default(rates *r) {
  memset(r, 0, sizeof *r);
  for (int f = 0; f < NFMT; f++) r->enc[f] = r->dec[f] = 20e9, r->dsum4[f] = 4e9;
  r->cast_to[0] = r->cast_to[1] = r->cast_from[0] = r->cast_from[1] = 25e9;
  r->memcpy_bps = 20e9;
  r->red[0] = r->red[1] = r->red[2] = 3e9;
  r->copy_step = 10e9;
  r->fresh_copy = 1e9;
  r->tp_factor = 1;
  r->cores = 2;
  r->hbm = 4.8e12;
  r->eff = 0.85;
  snprintf(r->date, sizeof r->date, "built-in guesses");
  snprintf(r->source, sizeof r->source, "none (no rates file)");
}

/* A rates file: "key value" lines, '#' comments (bench/model/rates-default.txt). */
static int rates_load(rates *r, const char *path) {
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  char line[512], key[128], val[200];
  while (fgets(line, sizeof line, f)) {
    if (line[0] == '#' || sscanf(line, "%127s %199[^\n]", key, val) != 2) continue;
    double v = atof(val);
    int done = 0;
    for (int i = 0; i < NFMT && !done; i++) {
      char k[64];
      snprintf(k, sizeof k, "enc_%s", fmt_name(i));
      if (!strcmp(key, k)) r->enc[i] = v * 1e9, done = 1;
      snprintf(k, sizeof k, "dec_%s", fmt_name(i));
      if (!strcmp(key, k)) r->dec[i] = v * 1e9, done = 1;
      snprintf(k, sizeof k, "dsum4_%s", fmt_name(i));
      if (!strcmp(key, k)) r->dsum4[i] = v * 1e9, done = 1;
      snprintf(k, sizeof k, "twophase_cpu_factor_%s", fmt_name(i));
      if (!strcmp(key, k)) r->tp_factor_fmt[i] = v, done = 1;
    }
    if (done) continue;
    if (!strcmp(key, "cast_to_fp16")) r->cast_to[0] = v * 1e9;
    else if (!strcmp(key, "cast_to_bf16")) r->cast_to[1] = v * 1e9;
    else if (!strcmp(key, "cast_from_fp16")) r->cast_from[0] = v * 1e9;
    else if (!strcmp(key, "cast_from_bf16")) r->cast_from[1] = v * 1e9;
    else if (!strcmp(key, "memcpy")) r->memcpy_bps = v * 1e9;
    else if (!strcmp(key, "ring_reduce_fp32")) r->red[0] = v * 1e9;
    else if (!strcmp(key, "ring_reduce_fp16")) r->red[1] = v * 1e9;
    else if (!strcmp(key, "ring_reduce_bf16")) r->red[2] = v * 1e9;
    else if (!strcmp(key, "ring_copy")) r->copy_step = v * 1e9;
    else if (!strcmp(key, "fresh_copy")) r->fresh_copy = v * 1e9;
    else if (!strcmp(key, "twophase_cpu_factor")) r->tp_factor = v;
    else if (!strcmp(key, "cores")) r->cores = v;
    else if (!strcmp(key, "gpu_hbm")) r->hbm = v * 1e9;
    else if (!strcmp(key, "gpu_kernel_eff")) r->eff = v;
    else if (!strcmp(key, "date")) snprintf(r->date, sizeof r->date, "%s", val);
  }
  fclose(f);
  snprintf(r->source, sizeof r->source, "%s", path);
  return 0;
}

/* --------------------------------------------------------------- fabric */

typedef struct {
  int N, L;           /* nodes, ranks per node (contiguous rank numbers) */
  double nic, intra;  /* bytes/s per link direction */
  int nic_per_node;   /* one NIC per node shared by its ranks (else one per rank) */
  double lat;         /* seconds per round (host: HOSTNCCL_LINK_LATENCY_US; gpu: added to NCCL's) */
  double launch;      /* seconds per NCCL launch (host: HOSTNCCL_LAUNCH_US; gpu: alpha) */
  double overlap;     /* the part of min(launches, the rest) hidden behind the other (gpu; host 0) */
  int gpu;            /* fabric gpu */
  int ideal_cpu;      /* selftest: no CPU or codec time */
} fabric;

/* NCCL's tuning model (src/graph/tuning.cc of NCCL 2.30.7, its default
 * tuner constants), Simple protocol, microseconds: base latency per
 * algorithm, per-step hardware latency by link (NVLink, network), the tree's
 * bandwidth factor and the ring's "plateau" factor on compute capability
 * >= 8.0 (multi-node all-reduce). Facts only; the arithmetic is ours. */
#define NCCL_RING_BASE_US 8.4
#define NCCL_RING_NVL_US 3.4
#define NCCL_RING_NET_US 14.0
#define NCCL_TREE_BASE_US 8.4
#define NCCL_TREE_NVL_US 4.0
#define NCCL_TREE_NET_US 14.0
#define NCCL_TREE_BW_FACTOR 0.92
#define NCCL_RING_PLATEAU 1.4

#define HOST_MMAP_MAX (32.0 * MiB) /* glibc: DEFAULT_MMAP_THRESHOLD_MAX on 64-bit */

/* ----------------------------------------------------------- accounting */

typedef struct {
  int n, nnic;
  double *nic_out, *nic_in, *in_out, *in_in; /* one round's bytes */
  double *t_nic_out, *t_nic_in, *t_in_out, *t_in_in; /* the call's totals */
  double *cpu;                                /* one round's CPU seconds per rank */
} loads;

typedef struct {
  double time, link, cpu, codec, lat; /* seconds (link: the busiest link per round, summed) */
  double launch;                      /* seconds the launches added */
  double b_nic, b_intra;              /* what the bound attribution saw, seconds */
  double by_nic, by_intra, by_cpu, by_lat; /* seconds attributed to each bound */
} cost;

static void *xcalloc(size_t n, size_t s) {
  void *p = calloc(n ? n : 1, s);
  if (!p) {
    fprintf(stderr, "ncclshim_model: out of memory\n");
    exit(1);
  }
  return p;
}

static void loads_init(loads *l, const fabric *f) {
  l->n = f->N * f->L;
  l->nnic = f->nic_per_node ? f->N : l->n;
  double **a[] = {&l->nic_out, &l->nic_in, &l->t_nic_out, &l->t_nic_in};
  for (int i = 0; i < 4; i++) *a[i] = xcalloc((size_t)l->nnic, sizeof(double));
  double **b[] = {&l->in_out, &l->in_in, &l->t_in_out, &l->t_in_in, &l->cpu};
  for (int i = 0; i < 5; i++) *b[i] = xcalloc((size_t)l->n, sizeof(double));
}

static void loads_free(loads *l) {
  double *a[] = {l->nic_out, l->nic_in, l->t_nic_out, l->t_nic_in, l->in_out, l->in_in, l->t_in_out, l->t_in_in, l->cpu};
  for (int i = 0; i < 9; i++) free(a[i]);
}

static void round_clear(loads *l) {
  memset(l->nic_out, 0, (size_t)l->nnic * sizeof(double));
  memset(l->nic_in, 0, (size_t)l->nnic * sizeof(double));
  memset(l->in_out, 0, (size_t)l->n * sizeof(double));
  memset(l->in_in, 0, (size_t)l->n * sizeof(double));
  memset(l->cpu, 0, (size_t)l->n * sizeof(double));
}

static int node_of(const fabric *f, int r) { return r / f->L; }

/* One message of `bytes` from rank a to rank b. spread: NCCL on GPUs runs a
 * ring per NIC, so a node's crossing bytes are shared by all its NICs. */
static void charge(loads *l, const fabric *f, int a, int b, double bytes, int spread) {
  if (a == b || bytes <= 0) return;
  if (node_of(f, a) == node_of(f, b)) {
    l->in_out[a] += bytes;
    l->in_in[b] += bytes;
    return;
  }
  if (f->nic_per_node) {
    l->nic_out[node_of(f, a)] += bytes;
    l->nic_in[node_of(f, b)] += bytes;
  } else if (spread) {
    for (int k = 0; k < f->L; k++) {
      l->nic_out[node_of(f, a) * f->L + k] += bytes / f->L;
      l->nic_in[node_of(f, b) * f->L + k] += bytes / f->L;
    }
  } else {
    l->nic_out[a] += bytes;
    l->nic_in[b] += bytes;
  }
}

static double vmax(const double *v, int n) {
  double m = 0;
  for (int i = 0; i < n; i++) m = v[i] > m ? v[i] : m;
  return m;
}

static double vsum(const double *v, int n) {
  double s = 0;
  for (int i = 0; i < n; i++) s += v[i];
  return s;
}

/* The round's link time (busiest direction), adding its bytes to the totals
 * `reps` times; which class bounds it in *nic_bound. */
static double round_link(loads *l, const fabric *f, double reps, int *nic_bound) {
  double tn = 0, ti = 0;
  for (int i = 0; i < l->nnic; i++) {
    tn = fmax(tn, fmax(l->nic_out[i], l->nic_in[i]) / f->nic);
    l->t_nic_out[i] += reps * l->nic_out[i];
    l->t_nic_in[i] += reps * l->nic_in[i];
  }
  for (int i = 0; i < l->n; i++) {
    ti = fmax(ti, fmax(l->in_out[i], l->in_in[i]) / f->intra);
    l->t_in_out[i] += reps * l->in_out[i];
    l->t_in_in[i] += reps * l->in_in[i];
  }
  *nic_bound = tn >= ti;
  return fmax(tn, ti);
}

/* CPU time of a round on the host: every rank's work over the shared cores,
 * no faster than the busiest rank alone. */
static double round_cpu(const loads *l, const rates *r, const fabric *f) {
  if (f->ideal_cpu) return 0;
  return fmax(vmax(l->cpu, l->n), vsum(l->cpu, l->n) / (f->gpu ? 1e30 : r->cores));
}

static void attribute(cost *c, double t, double link, int nic_bound, double cpu, double lat) {
  c->time += t;
  c->link += link;
  c->cpu += cpu;
  c->lat += lat;
  if (cpu >= link && cpu >= lat) c->by_cpu += t;
  else if (lat > link) c->by_lat += t;
  else if (nic_bound) c->by_nic += t;
  else c->by_intra += t;
}

/* -------------------------------------------------------- group members */

/* Member k of rank r's group `on` (contiguous nodes of L ranks; the same
 * rule as nsc_plan_group / nsc_plan_node_rank). */
static int member(const fabric *f, nsc_plan_on on, int r, int k) {
  switch (on) {
  case NSC_ON_NODE: return node_of(f, r) * f->L + k;
  case NSC_ON_CROSS: return k * f->L + r % f->L;
  default: return k;
  }
}

/* ------------------------------------------------------------ the steps */

typedef struct {
  const fabric *f;
  const rates *r;
  const nsc_config *cfg;
  nsc_topo *topo; /* one per rank */
  loads l;
  cost c;
  int gpu_tree;   /* the plain all-reduce ran as NCCL's tree (gpu) */
} walk;

/* A real NCCL collective: kind on group `on`, count (per rank for RS/AG),
 * element size esz, repeated reps times (EACH_NODE). */
static void step_coll(walk *w, const nsc_step *s, size_t esz, int reps, int redidx) {
  const fabric *f = w->f;
  int m, idx;
  nsc_plan_group(&w->topo[0], s->on, &m, &idx);
  if (m < 2) return; /* NCCL answers a one-rank collective with a copy: nothing on a link */
  size_t total = s->kind == NSC_STEP_ALLREDUCE ? s->count : s->count * (size_t)m;
  double chunk = (double)((total + (size_t)m - 1) / (size_t)m) * (double)esz;
  int rs_rounds = s->kind == NSC_STEP_ALLGATHER ? 0 : m - 1, ag_rounds = s->kind == NSC_STEP_REDUCESCATTER ? 0 : m - 1;
  int spread = f->gpu;
  round_clear(&w->l);
  for (int r = 0; r < w->l.n; r++) {
    int me;
    nsc_plan_group(&w->topo[r], s->on, &m, &me);
    charge(&w->l, f, r, member(f, s->on, r, (me + 1) % m), chunk, spread);
  }
  int nic_bound;
  double link = round_link(&w->l, f, reps * (double)(rs_rounds + ag_rounds), &nic_bound);
  if (f->gpu) {
    /* NCCL's ring: latency per step by the hop's hardware, bandwidth per
     * link charged above (its rings spread over every NIC); tree for an
     * fp32 all-reduce of the whole communicator when it is faster. */
    int nodes = s->on == NSC_ON_NODE ? 1 : s->on == NSC_ON_CROSS ? f->N : f->N;
    int steps = rs_rounds + ag_rounds, inter = nodes > 1 ? (s->kind == NSC_STEP_ALLREDUCE ? 2 : 1) * (nodes - 1) : 0;
    double lat = NCCL_RING_BASE_US + (steps - inter) * NCCL_RING_NVL_US + inter * NCCL_RING_NET_US;
    if (nodes > 1 && s->kind == NSC_STEP_ALLREDUCE) lat *= NCCL_RING_PLATEAU;
    lat = lat * 1e-6 + f->lat;
    double t = lat + link * steps;
    if (s->kind == NSC_STEP_ALLREDUCE && s->on == NSC_ON_ALL && f->N > 1) { /* fp32 or the wire type */
      /* tree: each node's bytes S up and S down through its NICs at 0.9 of
       * the ring's bus bandwidth; NVLink chain inside the node */
      double S = (double)s->count * (double)esz, nics = f->nic_per_node ? 1 : f->L;
      double bw = NCCL_TREE_BW_FACTOR * fmin(f->nic * nics, f->intra);
      double tl = (NCCL_TREE_BASE_US + 2 * ((f->L - 1) * NCCL_TREE_NVL_US + floor(log2((double)f->N)) * NCCL_TREE_NET_US)) * 1e-6 + f->lat;
      double tt = tl + 2 * S / bw;
      if (tt < t) {
        w->gpu_tree = 1;
        attribute(&w->c, reps * tt, reps * 2 * S / bw, 1, 0, reps * tl);
        return;
      }
    }
    attribute(&w->c, reps * t, reps * link * steps, nic_bound, 0, reps * lat);
    return;
  }
  /* host NCCL: copy the input (prepare), then rounds of max(link + latency, CPU) */
  const rates *rt = w->r;
  /* a reduce-scatter copies its input into a buffer the host NCCL mallocs
   * per call: above glibc's largest mmap threshold (32 MiB) fresh pages
   * every call (page faults), below it reused heap */
  double tb = (double)total * (double)esz;
  double rate = s->kind == NSC_STEP_REDUCESCATTER && tb > HOST_MMAP_MAX ? rt->fresh_copy : rt->memcpy_bps;
  double prep = f->ideal_cpu || s->kind == NSC_STEP_ALLGATHER ? 0 : (double)w->l.n * tb / rate / rt->cores;
  attribute(&w->c, reps * prep, 0, 0, reps * prep, 0);
  for (int r = 0; r < w->l.n; r++) w->l.cpu[r] = chunk / rt->red[redidx];
  double crs = round_cpu(&w->l, rt, f);
  for (int r = 0; r < w->l.n; r++) w->l.cpu[r] = chunk / rt->copy_step;
  double cag = round_cpu(&w->l, rt, f);
  double trs = fmax(link + f->lat, crs), tag = fmax(link + f->lat, cag);
  attribute(&w->c, reps * rs_rounds * trs, reps * rs_rounds * link, nic_bound, reps * rs_rounds * crs, reps * rs_rounds * f->lat);
  attribute(&w->c, reps * ag_rounds * tag, reps * ag_rounds * link, nic_bound, reps * ag_rounds * cag, reps * ag_rounds * f->lat);
}

/* Bytes one element of the wire format costs a GPU kernel to read or write. */
static double wire_elem(nsc_fmt_t fmt, size_t block) { return (double)nsc_fmt_bytes(fmt, block, block) / (double)block; }

/* A two-phase step: per piece and phase one round of point-to-point groups. */
static void step_twophase(walk *w, const nsc_plan *p, const nsc_step *s, int last) {
  const fabric *f = w->f;
  const rates *rt = w->r;
  nsc_tp_plan tp0;
  nsc_plan_tp(p, s, w->cfg, &w->topo[0], &tp0);
  int m = tp0.n, np = tp0.npieces, phases = s->rs ? 1 : 2;
  if (m < 2) return;
  double link = 0, lat = 0, last_nic = 0;
  int nic_rounds = 0, rounds = 0;
  nsc_tp_plan *tps = xcalloc((size_t)w->l.n, sizeof *tps);
  for (int r = 0; r < w->l.n; r++) nsc_plan_tp(p, s, w->cfg, &w->topo[r], &tps[r]);
  for (int ph = 0; ph < phases; ph++)
    for (int k = 0; k < np; k++) {
      if (ph == 1 && tp0.gather) { /* one ncclAllGather of a slot per rank: NCCL's ring, m - 1 rounds */
        round_clear(&w->l);
        for (int r = 0; r < w->l.n; r++) {
          int me, mm;
          nsc_plan_group(&w->topo[r], s->on, &mm, &me);
          charge(&w->l, f, r, member(f, s->on, r, (me + 1) % mm), (double)tps[0].slot, 0);
        }
        int nb;
        double t = round_link(&w->l, f, m - 1, &nb);
        last_nic = nb ? t : 0;
        link += t * (m - 1);
        nic_rounds += nb;
        rounds++;
        lat += (m - 1) * f->lat +
               (f->gpu ? (NCCL_RING_BASE_US + (m - 1) * (f->N > 1 && s->on != NSC_ON_NODE ? NCCL_RING_NET_US : NCCL_RING_NVL_US)) * 1e-6 : 0);
        continue;
      }
      round_clear(&w->l);
      for (int r = 0; r < w->l.n; r++) {
        const nsc_tp_plan *tp = &tps[r];
        for (int j = 0; j < m; j++) {
          if (j == tp->rank) continue;
          size_t b = nsc_tp_piece_bytes(tp, ph == 0 ? j : tp->rank, k);
          charge(&w->l, f, r, member(f, s->on, r, j), (double)b, 0);
        }
      }
      int nb;
      double t = round_link(&w->l, f, 1, &nb);
      last_nic = nb ? t : 0;
      link += t;
      nic_rounds += nb;
      rounds++;
      /* a group of sends and receives: NCCL's per-message latency on a GPU */
      lat += f->lat + (f->gpu ? (NCCL_RING_BASE_US + (f->N > 1 && s->on != NSC_ON_NODE ? NCCL_RING_NET_US : NCCL_RING_NVL_US)) * 1e-6 : 0);
    }
  /* Codec per rank: encode the input, decode-sum its chunk (m runs),
   * encode the sum, decode everything (all-reduce); and on the host the
   * transport's copies of what it sends and receives. The codec's rates
   * count fp32 bytes (4 an element), whatever the input: the host reads and
   * writes a 16-bit input in the same passes (twophase.c). A 16-bit input's
   * casts, each reading one type and writing the other (ie + 4 bytes an
   * element): on a GPU the widening of the input and the narrowing of the
   * decoded result (backend_cuda.c's fmt_encode16 / fmt_decode16), and
   * on both fabrics a reduce-scatter's shard narrowed into recvbuff. */
  int in16 = tps[0].in != NSC_IN_F32, bf = in16 && nsc_in_fmt(tps[0].in) == NSC_FMT_BF16;
  double cast = in16 ? nsc_in_esz(tps[0].in) + 4.0 : 0;
  double cpu_sum = 0, cpu_max = 0, codec_max = 0;
  for (int r = 0; r < w->l.n; r++) {
    const nsc_tp_plan *tp = &tps[r];
    size_t off, len;
    nsc_tp_chunk(tp, tp->rank, &off, &len);
    double all = 4.0 * (double)tp->count, own = 4.0 * (double)len, codec, moved = 0;
    if (f->gpu) {
      double we = wire_elem(tp->fmt, tp->block), bw = rt->hbm * rt->eff;
      double el = (double)tp->count, ol = (double)len;
      codec = (el * (4 + we + cast) + ol * (m * we + 4)) / bw;
      codec += s->rs ? ol * cast / bw : (ol * (4 + we) + el * (we + 4 + cast)) / bw;
    } else {
      codec = all / rt->enc[tp->fmt] + own * (m / 4.0) / rt->dsum4[tp->fmt];
      if (!s->rs) codec += own / rt->enc[tp->fmt] + all / rt->dec[tp->fmt];
      else if (in16) codec += own / rt->cast_to[bf];
      for (int j = 0; j < m; j++)
        if (j != tp->rank) moved += (double)(nsc_tp_chunk_bytes(tp, j) + nsc_tp_chunk_bytes(tp, tp->rank)) * phases;
    }
    /* on the host: the parts above (single-thread rates) times what a
     * one-node two-phase run measured over them (memory shared by the
     * cores, the transport's own overheads, the codec thread's handoffs) */
    double fac = rt->tp_factor_fmt[tp->fmt] > 0 ? rt->tp_factor_fmt[tp->fmt] : rt->tp_factor;
    double c = f->gpu ? codec : fac * (codec + moved / rt->memcpy_bps);
    if (f->ideal_cpu) c = codec = 0;
    cpu_sum += c;
    cpu_max = fmax(cpu_max, c);
    codec_max = fmax(codec_max, codec);
  }
  free(tps);
  double cpu = f->gpu ? cpu_max : fmax(cpu_max, cpu_sum / rt->cores);
  double wire = link + lat;
  /* encode of piece k+1 and decode of piece k-1 beside piece k's exchange */
  double t = fmax(wire, cpu) + fmin(wire, cpu) / np;
  /* The time a benchmark reports is the mean over ranks. On the host the L
   * ranks of a node charge a shared NIC one after the other, so in the last
   * round of the call they finish at 1/L, 2/L, ... of it: on average
   * (L-1)/(2L) of that round earlier (tests/hostnccl/fabric.c). A later
   * step of the plan waits for the last of them instead. */
  if (last && !f->gpu && f->nic_per_node && wire >= cpu) t -= last_nic * (f->L - 1) / (2.0 * f->L);
  w->c.codec += codec_max;
  attribute(&w->c, t, link, nic_rounds * 2 >= rounds, cpu, lat);
}

/* A ring cast (fp32 <-> fp16/bf16), count elements on every rank. */
static void step_cast(walk *w, const nsc_plan *p, const nsc_step *s) {
  const rates *rt = w->r;
  if (w->f->ideal_cpu) return;
  double bytes = 4.0 * (double)s->count, t;
  int bf = p->fmt == NSC_FMT_BF16, in = s->kind == NSC_STEP_CAST_IN || s->kind == NSC_STEP_SEG_CAST_IN;
  if (w->f->gpu) t = (bytes + bytes / 2) / (rt->hbm * rt->eff);
  else t = bytes / (in ? rt->cast_to[bf] : rt->cast_from[bf]) * w->l.n / fmin(rt->cores, w->l.n);
  w->c.codec += t;
  attribute(&w->c, t, 0, 0, t, 0);
}

/* --------------------------------------------------------------- a plan */

typedef struct {
  char algo[16], compress[16];
  long long piece_bytes; /* -1: the default */
} variant;

typedef struct {
  const char *plan_alg, *why;
  const char *wire, *sums; /* the last plan's wire and the type its sums are in (fp32, bf16, fp16, a format) */
  int nsteps;
  cost c;
  double nic_out, nic_in, intra_out, intra_in; /* the busiest one, bytes per call */
  double t_bound;                              /* 2(N-1)/N*S over a node's NIC bandwidth */
  int gpu_tree;
  nsc_fmt_t fmt;
  int npieces;
  int chunks; /* the ring's chunks (NCCLSHIM_CHUNK_BYTES) */
  int launches; /* NCCL launches of the plan (plan.h; a group: of all its plans) */
  int nplans;   /* --group: the plans the group ran (its buckets and its other calls) */
  double staging; /* bytes of staging one call takes on rank 0 (nsc_plan_staging) */
  uint64_t price;  /* the launch price the plans were made at (link bytes) */
  int learned;     /* ... the learner's (LAUNCH_BYTES=auto, simulated), not a pinned one */
  int grows;      /* more than NCCLSHIM_STAGING_BYTES: the block grows, calls go in fp32 meanwhile */
} result;

/* --set NCCLSHIM_X=V: settings for every plan (a preset's), before the variant's own */
#define MAX_SETS 32
static char *sets[MAX_SETS];
static int nsets;

static int make_cfg(nsc_config *cfg, const variant *v) {
  char a[64], c[64], pb[64], err[256];
  int none = !strcmp(v->algo, "none");
  snprintf(a, sizeof a, "NCCLSHIM_ALGO=%s", none ? "auto" : v->algo);
  snprintf(c, sizeof c, "NCCLSHIM_COMPRESS=%s", none ? "off" : v->compress);
  snprintf(pb, sizeof pb, "NCCLSHIM_TWOPHASE_PIECE_BYTES=%lld", v->piece_bytes);
  char *env[MAX_SETS + 4];
  int k = 0;
  for (int i = 0; i < nsets; i++) /* the parser takes the last of a name: the variant's win */
    env[k++] = sets[i];
  env[k++] = a;
  env[k++] = c;
  if (v->piece_bytes >= 0) env[k++] = pb;
  env[k] = NULL;
  if (nsc_config_parse(env, cfg, err, sizeof err)) {
    fprintf(stderr, "ncclshim_model: %s\n", err);
    return -1;
  }
  return 0;
}

/* What hier.c's nsc_hier_wanted decides from the settings and the map
 * (every rank can run the kernels and split: true in a model). */
/* Every rank's map of the same key vector: rank 0's from nsc_topo_build
 * (the shim's own code), the others' the same map seen from rank i (the
 * local fields of contiguous nodes of L ranks; the selftest compares them
 * with nsc_topo_build's). Building each with nsc_topo_build costs O(n^2)
 * per rank, too slow at 1024 ranks. */
static int topo_all(nsc_topo *t, const int64_t *keys, int n, int L) {
  if (nsc_topo_build(&t[0], keys, n, 0, xcalloc((size_t)n, sizeof(int)))) {
    fprintf(stderr, "ncclshim_model: nsc_topo_build failed\n");
    return -1;
  }
  for (int i = 1; i < n; i++) {
    t[i] = t[0];
    t[i].rank = i;
    t[i].local_rank = i % L;
    t[i].local_size = L;
  }
  return 0;
}

static int model(const fabric *f, const rates *rt, const variant *v, size_t bytes, int rs, result *out);

/* The launch price the shim's learner (shim/coll/learn.c) would agree on
 * this fabric at NCCLSHIM_LAUNCH_BYTES=auto: the learner's own fit
 * (nsc_fab_fit) over the plain call's modelled times, two calls each of
 * 64 KiB to 8 MiB (a job whose first calls spread that wide; the shim fits
 * whatever sizes the job's first plain all-reduces have). 0 and *price, or
 * -1 (the shim then keeps the unknown price, cost.h). One fabric's answer is
 * kept: the model asks it for every size and variant. */
static int learned_price(const fabric *f, const rates *rt, uint64_t *price) {
  static fabric last;
  static int have, ok;
  static uint64_t kept;
  if (have && !memcmp(&last, f, sizeof last)) {
    *price = kept;
    return ok ? 0 : -1;
  }
  variant plain = {"none", "off", -1};
  uint64_t x[NSC_FAB_CALLS];
  int64_t t[NSC_FAB_CALLS];
  int n = f->N * f->L;
  for (int i = 0; i < NSC_FAB_CALLS; i++) {
    size_t bytes = (size_t)64 << 10 << (i / 2);
    result r;
    if (model(f, rt, &plain, bytes, 0, &r)) return -1;
    x[i] = nsc_fab_ring_bytes(bytes, n, 0);
    t[i] = (int64_t)llround(r.c.time * 1e9);
  }
  uint64_t a, b;
  const char *why;
  ok = nsc_fab_fit(x, t, NSC_FAB_CALLS, &a, &b, &kept, &why) == 0;
  last = *f;
  have = 1;
  *price = kept;
  return ok ? 0 : -1;
}

/* --group N: N all-reduces of --bytes each in one user group (1: the call
 * alone). */
static int group_n = 1;
#define MAX_GROUP 256

/* --dtype: the call's datatype (every call of a group's too), by the names
 * the shim's log gives it (shim/msg/names.c) or the wire formats' */
static const struct {
  const char *name, *alias;
  ncclDataType_t dt;
} dtypes[] = {{"float", "fp32", ncclFloat32}, {"bfloat16", "bf16", ncclBfloat16}, {"half", "fp16", ncclFloat16}};
static int call_dtype; /* its row */
#define CALL_DT (dtypes[call_dtype].dt)
#define CALL_ESZ ((size_t)nsc_in_esz(nsc_policy_input(CALL_DT)))

/* The plans one call (or, with --group, one group of group_n calls) runs:
 * the shim's own decision (plan.h) for each Sum call of CALL_DT, and for a
 * group the group's plan (nsc_decide_group) and each fused bucket's
 * (nsc_plan_bucket), as the shim makes them at the group end (a 16-bit
 * call is never fused: its own decision, as nsc_policy_ask rules).
 * Returns how many (in plans[]). */
static int make_plans(walk *w, const nsc_config *cfg, size_t count, int rs, nsc_plan *plans) {
  const fabric *f = w->f;
  int n = f->N * f->L;
  if (rs == 2) { /* a plain ncclAllGather whose output is `bytes` (the shim forwards it untouched) */
    nsc_plan *plan = &plans[0];
    memset(plan, 0, sizeof *plan);
    plan->alg = NSC_ALG_PLAIN;
    plan->in = nsc_policy_input(CALL_DT);
    plan->count = count / (size_t)n;
    plan->nsteps = 1;
    plan->step[0] =
        (nsc_step){.kind = NSC_STEP_ALLGATHER, .on = NSC_ON_ALL, .flags = NSC_STEP_CALL, .count = plan->count};
    plan->launches = 1;
    plan->why = NSC_WHY_NONE; /* an all-gather: forwarded (out->why below) */
    return 1;
  }
  const char *why;
  /* hier adopted where the settings and the map want it (every rank can split, in the model) */
  nsc_agreed ag = {.topo = &w->topo[0], .hier = nsc_plan_hier_wanted(cfg, &w->topo[0], 0, &why), .host = !f->gpu};
  /* NCCLSHIM_LAUNCH_BYTES=auto: the price the learner would agree (the calls
   * it forwards while it measures are not modelled: a job's first ones) */
  if (cfg->launch_bytes == NSC_CFG_AUTO && cfg->compress != NSC_COMPRESS_OFF)
    ag.learned = learned_price(f, w->r, &ag.launch) == 0;
  int grouped = group_n > 1 && !rs, np = 0;
  static nsc_member m[MAX_GROUP];
  nsc_member *first = NULL, **tail = &first;
  static int comm, kind; /* one communicator, one memory kind: identities only */
  for (int i = 0; i < (grouped ? group_n : 1); i++) {
    nsc_call k = {.count = rs ? count * (size_t)n : count, .dt = CALL_DT, .op = ncclSum, .has_buffers = 1,
                  .in_group = grouped, .rs = rs, .arg = count};
    nsc_policy_ask(cfg, &k);
    nsc_decide(&plans[np], cfg, &k, &ag, 0);
    if (plans[np].alg != NSC_ALG_FUSE || !grouped) {
      np++;
      continue;
    }
    m[i] = (nsc_member){.comm = &comm, .kind = &kind, .op = ncclSum, .count = count, .stream = 1};
    *tail = &m[i];
    tail = &m[i].next;
  }
  for (nsc_member *b = first ? nsc_decide_group(first, cfg) : NULL; b; b = b->bucket_next)
    nsc_plan_bucket(&plans[np++], cfg, b);
  return np;
}

/* The element size of a real collective step and the host NCCL's reduction
 * rate it runs at (rates.red: fp32, fp16, bf16): the wire type's (the
 * ring, a bucket), the call's own where it is the call forwarded (a 16-bit
 * input: 2 bytes an element), else fp32 (hier's stages). */
static size_t coll_esz(const nsc_plan *p, const nsc_step *s, int *redidx) {
  int wire = s->flags & NSC_STEP_WIRE, in16 = (s->flags & NSC_STEP_CALL) && p->in != NSC_IN_F32;
  if (!wire && !in16) {
    *redidx = 0;
    return 4;
  }
  *redidx = 1 + ((wire ? p->fmt : nsc_in_fmt(p->in)) == NSC_FMT_BF16);
  return 2;
}

/* Charge plan's steps to w's links and clocks (the ring's chunks with the
 * casts of one beside another's wire); *npieces: its two-phase pieces. */
static int charge_plan(walk *w, const nsc_plan *plan, size_t count, int *chunks_out, int *npieces) {
  const fabric *f = w->f;
  const nsc_config *cfg = w->cfg;
  /* the ring's real all-reduce is issued in chunks (plan->chunk), the casts
   * of one beside another's wire */
  size_t ce = plan->chunk;
  int chunks = plan->alg == NSC_ALG_RING && ce && count > ce ? (int)((count + ce - 1) / ce) : 1;
  double t_cast = 0, t_coll = 0, cpu_coll = 0;
  for (int i = 0; i < plan->nsteps; i++) {
    const nsc_step *s = &plan->step[i];
    int reps = s->flags & NSC_STEP_EACH_NODE ? f->N : 1;
    switch (s->kind) {
    case NSC_STEP_ALLREDUCE:
    case NSC_STEP_REDUCESCATTER:
    case NSC_STEP_ALLGATHER: {
      int redidx;
      size_t esz = coll_esz(plan, s, &redidx);
      double t0 = w->c.time, c0 = w->c.cpu;
      if (chunks > 1 && (s->flags & NSC_STEP_WIRE)) {
        nsc_step x = *s;
        x.count = ce;
        step_coll(w, &x, esz, chunks - 1, redidx);
        x.count = count - ce * (size_t)(chunks - 1);
        step_coll(w, &x, esz, 1, redidx);
      } else {
        step_coll(w, s, esz, reps, redidx);
      }
      t_coll += w->c.time - t0;
      cpu_coll += w->c.cpu - c0;
      break;
    }
    case NSC_STEP_TWOPHASE: {
      nsc_tp_plan tp;
      nsc_plan_tp(plan, s, cfg, &w->topo[0], &tp);
      *npieces = tp.npieces;
      for (int k = 0; k < reps; k++) step_twophase(w, plan, s, i == plan->nsteps - 1 && k == reps - 1);
      break;
    }
    case NSC_STEP_CAST_IN:
    case NSC_STEP_CAST_OUT:
    case NSC_STEP_SEG_CAST_IN: /* a fused bucket's: the same bytes as one cast of its total */
    case NSC_STEP_SEG_CAST_OUT: {
      double t0 = w->c.time;
      step_cast(w, plan, s);
      t_cast += w->c.time - t0;
      break;
    }
    default: /* a step kind this model does not know (e.g. ncclReduce on nodes of scattered ranks) */
      fprintf(stderr, "ncclshim_model: step %s is not modelled\n", nsc_plan_step_name(s->kind));
      return -1;
    }
  }
  if (chunks > 1) { /* casts of chunk k+1 and k-1 beside chunk k's all-reduce: on
                     * the host only in the time the collective leaves the cores idle */
    double idle = f->gpu ? t_coll : fmax(0, t_coll - cpu_coll);
    double save = fmin(t_cast, idle) * (1.0 - 1.0 / chunks);
    w->c.time -= save;
  }
  *chunks_out = chunks;
  return 0;
}

static int model(const fabric *f, const rates *rt, const variant *v, size_t bytes, int rs, result *out) {
  nsc_config cfg;
  if (make_cfg(&cfg, v)) return -1;
  int n = f->N * f->L;
  walk w = {.f = f, .r = rt, .cfg = &cfg};
  loads_init(&w.l, f);
  int64_t *keys = xcalloc((size_t)n, sizeof *keys);
  for (int i = 0; i < n; i++) keys[i] = node_of(f, i) + 1;
  w.topo = xcalloc((size_t)n, sizeof *w.topo);
  if (topo_all(w.topo, keys, n, f->L)) return -1;
  size_t count = bytes / CALL_ESZ; /* bytes: the call's buffer, in its own type */
  static nsc_plan plans[MAX_GROUP];
  int np = make_plans(&w, &cfg, count, rs, plans);
  /* Every rank's plan has the same steps (the planner reads only agreed
   * values); the walk charges every rank's messages of each step. A group's
   * plans run one after the other (NCCL runs a communicator's launches in
   * order). */
  memset(out, 0, sizeof *out);
  int chunks = 1, launches = 0;
  double staging = 0;
  for (int i = 0; i < np; i++) {
    if (charge_plan(&w, &plans[i], plans[i].count, &chunks, &out->npieces)) return -1;
    launches += plans[i].launches;
    staging += (double)nsc_plan_staging(&plans[i], nsc_plan_round);
  }
  const nsc_plan *plan = &plans[np - 1]; /* a group's last: its buckets, where there are */
  out->fmt = plan->fmt;
  out->nplans = np;
  out->price = plans[np - 1].rule.launch;
  out->learned = cfg.launch_bytes == NSC_CFG_AUTO;
  out->chunks = chunks;
  out->launches = launches;
  if (f->launch > 0) { /* every launch's fixed cost (see the header) */
    double tl = launches * f->launch, t = w.c.time;
    w.c.time = fmax(tl, t) + (1.0 - f->overlap) * fmin(tl, t);
    w.c.launch = w.c.time - t;
    w.c.by_lat += w.c.launch;
  }
  out->staging = staging;
  out->grows = cfg.staging_bytes > 0 && out->staging > (double)cfg.staging_bytes;
  out->plan_alg = nsc_alg_name(plan->alg);
  /* the call as it is: its own type on the wire, summed in it per hop (NCCL's
   * ring); the ring and a bucket: the wire type; two phases: fp32 sums */
  const char *own = dtypes[call_dtype].alias;
  out->wire = plan->alg == NSC_ALG_PLAIN ? own : nsc_fmt_name(plan->fmt);
  out->sums = rs == 2 ? "none" : plan->alg == NSC_ALG_PLAIN ? own
            : plan->alg == NSC_ALG_TWOPHASE || plan->alg == NSC_ALG_HIER ? "fp32" : out->wire;
  out->why = plan->why == NSC_WHY_NONE ? "an all-gather: forwarded" : nsc_why_text(plan->why);
  out->nsteps = plan->nsteps;
  out->c = w.c;
  out->gpu_tree = w.gpu_tree;
  out->nic_out = vmax(w.l.t_nic_out, w.l.nnic);
  out->nic_in = vmax(w.l.t_nic_in, w.l.nnic);
  out->intra_out = vmax(w.l.t_in_out, w.l.n);
  out->intra_in = vmax(w.l.t_in_in, w.l.n);
  double S = rs == 1 ? (double)bytes * n : (double)bytes, nics = f->nic_per_node ? 1 : f->L;
  out->t_bound = f->N > 1 ? (rs ? 1.0 : 2.0) * (f->N - 1) / f->N * S / (f->nic * nics) : 0;
  nsc_topo_free(&w.topo[0]); /* the node array the others share */
  free(w.topo);
  free(keys);
  loads_free(&w.l);
  return 0;
}

static const char *bound_name(const cost *c, int gpu) {
  double m = fmax(fmax(c->by_nic, c->by_intra), fmax(c->by_cpu, c->by_lat));
  if (m <= 0) return "nothing";
  if (m == c->by_nic) return "nic";
  if (m == c->by_intra) return gpu ? "nvlink" : "intra";
  if (m == c->by_cpu) return gpu ? "codec" : "cpu";
  return "latency";
}

/* --------------------------------------------------------------- output */

typedef struct {
  fabric f;
  size_t bytes;
  int rs, json;
} opts;

static void label(const variant *v, char *buf, size_t n) {
  if (!strcmp(v->algo, "none")) snprintf(buf, n, "none");
  else snprintf(buf, n, "%s/%s%s", v->algo, v->compress, v->piece_bytes == 0 ? "/1piece" : "");
}

static void print_json(FILE *o, const opts *op, const variant *v, const result *r) {
  const fabric *f = &op->f;
  fprintf(o,
          "{\"modelled\": true, \"fabric\": \"%s\", \"nodes\": %d, \"ranks_per_node\": %d, \"coll\": \"%s\", "
          "\"bytes\": %zu, \"dtype\": \"%s\", \"algo\": \"%s\", \"compress\": \"%s\", \"piece_bytes\": %lld, "
          "\"plan\": \"%s\", \"wire\": \"%s\", \"sums\": \"%s\", "
          "\"why\": \"%s\", \"pieces\": %d, \"launches\": %d, \"launch_s\": %.9g, \"nccl_tree\": %s, \"time_s\": %.9g, "
          "\"link_s\": %.9g, \"cpu_s\": %.9g, "
          "\"codec_s\": %.9g, \"latency_s\": %.9g, \"bound\": \"%s\", \"t_bound_s\": %.9g, "
          "\"nic_out_bytes\": %.0f, \"nic_in_bytes\": %.0f, \"nic_per\": \"%s\", \"intra_out_bytes\": %.0f, "
          "\"intra_in_bytes\": %.0f, \"staging_bytes\": %.0f, \"staging_grows\": %s, \"group\": %d, \"plans\": %d, "
          "\"launch_bytes\": %llu, \"launch_learned\": %s}",
          f->gpu ? "gpu" : "host", f->N, f->L, op->rs == 2 ? "allgather" : op->rs ? "reducescatter" : "allreduce", op->bytes,
          dtypes[call_dtype].name, v->algo, strcmp(v->algo, "none") ? v->compress : "off", v->piece_bytes, r->plan_alg,
          r->wire, r->sums, r->why, r->npieces, r->launches,
          r->c.launch, r->gpu_tree ? "true" : "false", r->c.time, r->c.link, r->c.cpu, r->c.codec, r->c.lat, bound_name(&r->c, f->gpu),
          r->t_bound, r->nic_out, r->nic_in, f->nic_per_node ? "node" : "rank", r->intra_out, r->intra_in, r->staging,
          r->grows ? "true" : "false", group_n, r->nplans, (unsigned long long)r->price, r->learned ? "true" : "false");
}

static void print_head(const opts *op, const rates *rt) {
  const fabric *f = &op->f;
  printf("# ncclshim-model: MODELLED times (not measured), fabric %s, %d nodes x %d ranks, NIC %.3g Gb/s per %s, "
         "intra %.3g Gb/s, latency %.3g us, launch %.3g us (overlap %.2g)\n",
         f->gpu ? "gpu (NCCL's tuning model)" : "host (the emulator)", f->N, f->L, f->nic * 8e-9,
         f->nic_per_node ? "node" : "rank", f->intra * 8e-9, f->lat * 1e6, f->launch * 1e6, f->overlap);
  printf("# call: %s of %.6g MiB %s per rank; rates: %s (%s)%s\n",
         op->rs == 2 ? "all-gather (output)" : op->rs ? "reduce-scatter" : "all-reduce",
         (double)op->bytes / MiB, dtypes[call_dtype].name, rt->source, rt->date,
         f->gpu ? "; gpu codec = HBM x efficiency (assumed until make gpu-check runs on a GPU)" : "");
  if (CALL_DT != ncclFloat32)
    printf("# a 16-bit call: plain sums in %s at every hop; a two-phase plan in fp32 (a --compress of fp16 or bf16 "
           "is its own wire), never the ring or a fused bucket\n", dtypes[call_dtype].name);
  printf("# %-22s %-9s %6s %8s %11s %8s %8s %10s %10s %10s %10s %-8s\n", "variant", "plan", "pieces", "launches", "time ms", "/t_bound",
         "/none", "NIC out MiB", "NIC in MiB", "intra MiB", "codec ms", "bound");
}

static void print_row(const opts *op, const variant *v, const result *r, double t_none) {
  char lab[64];
  label(v, lab, sizeof lab);
  char plan[24];
  snprintf(plan, sizeof plan, "%s%s", r->plan_alg, r->grows ? "!" : "");
  printf("  %-22s %-9s %6d %8d %11.3f %8.3f %8.3f %10.2f %10.2f %10.2f %10.3f %-8s\n", lab, plan, r->npieces, r->launches,
         r->c.time * 1e3, r->t_bound > 0 ? r->c.time / r->t_bound : NAN, t_none > 0 ? r->c.time / t_none : NAN,
         r->nic_out / MiB, r->nic_in / MiB, fmax(r->intra_out, r->intra_in) / MiB, r->c.codec * 1e3,
         bound_name(&r->c, op->f.gpu));
}

/* ------------------------------------------------------------- variants */

static int variants(const char *algo, const char *compress, variant *v, int max) {
  static const char *const algos[] = {"none", "ring", "twophase", "hier", "auto"};
  int n = 0;
  for (int a = 0; a < 5; a++) {
    if (algo && strcmp(algo, algos[a])) continue;
    if (!strcmp(algos[a], "none")) { /* plain NCCL: the baseline, whatever --compress says */
      v[n++] = (variant){"none", "off", -1};
      continue;
    }
    for (int c = 0; c < NFMT && n < max - 2; c++) {
      if (compress && strcmp(compress, fmt_name(c))) continue;
      if (!strcmp(algos[a], "ring") && c >= NSC_FMT_INT8 && !algo) continue; /* ring is fp16/bf16 only */
      variant x = {"", "", -1};
      snprintf(x.algo, sizeof x.algo, "%s", algos[a]);
      snprintf(x.compress, sizeof x.compress, "%s", fmt_name(c));
      v[n++] = x;
      if ((!strcmp(algos[a], "twophase") || !strcmp(algos[a], "hier")) && !algo && (c == 0 || c == 2)) {
        x.piece_bytes = 0;
        v[n++] = x;
      }
    }
  }
  return n;
}

/* -------------------------------------------------------------- selftest */

static int check(const char *what, double got, double want, double tol) {
  int ok = fabs(got - want) <= tol * fabs(want);
  printf("%s %-72s got %.6g want %.6g\n", ok ? "ok  " : "FAIL", what, got, want);
  return ok ? 0 : 1;
}

static int selftest(const rates *rt) {
  int bad = 0;
  size_t S = 256u << 20;
  variant none = {"none", "off", -1}, flat = {"twophase", "fp16", -1}, hier = {"hier", "fp16", -1},
          hier8 = {"hier", "int8", -1};
  printf("# ncclshim-model --selftest: the anchors of issue 22 (links only: CPU and codec left out)\n");
  { /* the derived maps equal nsc_topo_build's */
    int N = 3, L = 4, n = N * L, same = 1;
    int64_t keys[12];
    nsc_topo t[12], u;
    for (int i = 0; i < n; i++) keys[i] = i / L + 1;
    if (topo_all(t, keys, n, L)) return 1;
    for (int i = 0; i < n; i++) {
      if (nsc_topo_build(&u, keys, n, i, xcalloc((size_t)n, sizeof(int)))) return 1;
      same &= u.local_rank == t[i].local_rank && u.local_size == t[i].local_size && u.nnodes == t[i].nnodes &&
              u.contiguous == t[i].contiguous && !memcmp(u.node, t[i].node, (size_t)n * sizeof(int));
      nsc_topo_free(&u);
    }
    nsc_topo_free(&t[0]);
    bad += check("every rank's derived map equals nsc_topo_build's (3x4)", same, 1, 0);
  }
  /* 1. ring bus bandwidth = link rate at large messages (host and gpu) */
  int shapes[][2] = {{2, 1}, {4, 1}, {2, 4}, {4, 2}, {8, 8}};
  for (int i = 0; i < 5; i++) {
    for (int g = 0; g < 2; g++) {
      fabric f = {.N = shapes[i][0], .L = shapes[i][1], .nic = 12.5e9, .intra = 225e9, .nic_per_node = 1, .gpu = g, .ideal_cpu = 1};
      result r;
      if (model(&f, rt, &none, S, 0, &r)) return 1;
      int n = f.N * f.L;
      double busbw = 2.0 * (n - 1) / n * (double)S / (r.c.time - r.c.lat);
      char what[128];
      snprintf(what, sizeof what, "%s ring bus bandwidth = NIC rate, %dx%d, NIC per node", g ? "gpu" : "host", f.N, f.L);
      bad += check(what, busbw, f.nic, 1e-3);
    }
  }
  /* 2. flat two-phase, the second phase as sends and receives: L*w*(N-1)/N
   *    * n/(n-1) times the ring's inter-node bytes; as an all-gather (NCCL's
   *    ring, one crossing per node boundary): w * (L(N-1)/N * n/(n-1) + 1) / 2;
   * 3. hier: w times the cut bound 2(N-1)/N*S per node */
  int sh2[][2] = {{2, 4}, {4, 2}, {2, 2}, {8, 8}, {16, 8}};
  for (int i = 0; i < 5; i++) {
    fabric f = {.N = sh2[i][0], .L = sh2[i][1], .nic = 0.0625e9, .intra = 6.25e9, .nic_per_node = 1, .ideal_cpu = 1};
    int N = f.N, L = f.L, n = N * L;
    result rp, rf, rg, rh, r8;
    if (model(&f, rt, &none, S, 0, &rp) || model(&f, rt, &hier, S, 0, &rh) || model(&f, rt, &hier8, S, 0, &r8))
      return 1;
    sets[nsets++] = "NCCLSHIM_TWOPHASE_GATHER=sendrecv";
    int e = model(&f, rt, &flat, S, 0, &rf);
    sets[nsets - 1] = "NCCLSHIM_TWOPHASE_GATHER=allgather";
    e |= model(&f, rt, &flat, S, 0, &rg);
    nsets--;
    if (e) return 1;
    char what[160];
    snprintf(what, sizeof what, "%dx%d ring NIC bytes per node = 2(n-1)/n*S", N, L);
    bad += check(what, rp.nic_out, 2.0 * (n - 1) / n * (double)S, 1e-6);
    snprintf(what, sizeof what, "%dx%d flat fp16 / ring NIC bytes = L*w*(N-1)/N*n/(n-1)", N, L);
    bad += check(what, rf.nic_out / rp.nic_out, L * 0.5 * (N - 1.0) / N * n / (n - 1.0), 1e-3);
    snprintf(what, sizeof what, "%dx%d flat fp16, all-gather phase / ring NIC bytes = w(L(N-1)/N*n/(n-1)+1)/2", N, L);
    bad += check(what, rg.nic_out / rp.nic_out, 0.5 * (L * (N - 1.0) / N * n / (n - 1.0) + 1) / 2, 1e-3);
    snprintf(what, sizeof what, "%dx%d hier fp16 NIC bytes per node = w*2(N-1)/N*S", N, L);
    bad += check(what, rh.nic_out, 0.5 * 2.0 * (N - 1) / N * (double)S, 1e-3);
    double w8 = (1.0 + 2.0 / 256) / 4;
    snprintf(what, sizeof what, "%dx%d hier int8 NIC bytes per node = w*2(N-1)/N*S (w = %.5f)", N, L, w8);
    bad += check(what, r8.nic_out, w8 * 2.0 * (N - 1) / N * (double)S, 1e-3);
  }
  printf("# %s\n", bad ? "FAILED" : "all anchors hold");
  return bad ? 1 : 0;
}

/* ------------------------------------------------------------------ main */

static void usage(FILE *o) {
  fprintf(o,
          "usage: ncclshim_model [--nodes N] [--ranks-per-node L] [--nic-gbps G] [--nic-per node|rank]\n"
          "         [--intra-gbps G] [--latency-us U] [--launch-us U] [--launch-overlap O] [--fabric host|gpu]\n"
          "         [--bytes S] [--dtype float|bfloat16|half] [--coll allreduce|reducescatter|allgather] [--group N]\n"
          "         [--compress " NSC_COMPRESS_CHOICES "] [--algo none|auto|ring|twophase|hier]\n"
          "         [--piece-bytes B] [--set NCCLSHIM_X=V]... [--rates FILE] [--json] [--sweep-nodes 1,2,4,...]\n"
          "         [--tsv FILE] [--selftest]\n"
          "Predicted (modelled) time of one call per plan; see bench/README.md, \"Cost model\".\n"
          "--bytes: the call's buffer (a reduce-scatter's: its output) in --dtype (also fp32, bf16, fp16; default float).\n");
}

static size_t parse_size(const char *s) {
  char *e;
  double v = strtod(s, &e);
  if (*e == 'K' || *e == 'k') v *= 1024;
  else if (*e == 'M' || *e == 'm') v *= MiB;
  else if (*e == 'G' || *e == 'g') v *= MiB * 1024;
  return (size_t)v;
}

int main(int argc, char **argv) {
  opts op = {{.N = 2, .L = 4, .nic = 0.5e9 / 8, .intra = 50e9 / 8, .nic_per_node = 1}, 64u << 20, 0, 0};
  const char *algo = NULL, *compress = NULL, *rates_path = NULL, *sweep = NULL, *tsv = NULL;
  long long piece = -1;
  int self = 0;
  double overlap = -1; /* the fabric's default: gpu 0.5, host 0 */
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
#define ARG(name) (!strcmp(a, name) && v && (i++, 1))
    if (ARG("--nodes")) op.f.N = atoi(v);
    else if (ARG("--ranks-per-node")) op.f.L = atoi(v);
    else if (ARG("--nic-gbps")) op.f.nic = atof(v) * 1e9 / 8;
    else if (ARG("--intra-gbps")) op.f.intra = atof(v) * 1e9 / 8;
    else if (ARG("--nic-per")) op.f.nic_per_node = !strcmp(v, "node");
    else if (ARG("--latency-us")) op.f.lat = atof(v) * 1e-6;
    else if (ARG("--launch-us")) op.f.launch = atof(v) * 1e-6;
    else if (ARG("--launch-overlap")) overlap = atof(v);
    else if (ARG("--fabric")) op.f.gpu = !strcmp(v, "gpu");
    else if (ARG("--bytes")) op.bytes = parse_size(v);
    else if (ARG("--dtype")) {
      int k = -1;
      for (int d = 0; d < (int)(sizeof dtypes / sizeof *dtypes); d++)
        if (!strcmp(v, dtypes[d].name) || !strcmp(v, dtypes[d].alias)) k = d;
      if (k < 0) {
        fprintf(stderr, "ncclshim_model: --dtype takes float, bfloat16 or half (fp32, bf16, fp16), not '%s'\n", v);
        return 2;
      }
      call_dtype = k;
    } else if (ARG("--coll")) op.rs = !strcmp(v, "reducescatter") ? 1 : !strcmp(v, "allgather") ? 2 : 0;
    else if (ARG("--group")) group_n = atoi(v);
    else if (ARG("--compress")) compress = v;
    else if (ARG("--algo")) algo = v;
    else if (ARG("--piece-bytes")) piece = (long long)parse_size(v);
    else if (ARG("--rates")) rates_path = v;
    else if (ARG("--sweep-nodes")) sweep = v;
    else if (ARG("--tsv")) tsv = v;
    else if (ARG("--set")) {
      if (nsets == MAX_SETS || strncmp(v, "NCCLSHIM_", 9) || !strchr(v, '=')) {
        fprintf(stderr, "ncclshim_model: --set takes NCCLSHIM_NAME=value (at most %d)\n", MAX_SETS);
        return 2;
      }
      sets[nsets++] = (char *)v;
    }
    else if (!strcmp(a, "--json")) op.json = 1;
    else if (!strcmp(a, "--selftest")) self = 1;
    else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      usage(stdout);
      return 0;
    } else {
      usage(stderr);
      return 2;
    }
#undef ARG
  }
  op.f.overlap = overlap >= 0 ? overlap : op.f.gpu ? 0.5 : 0;
  if (op.f.N < 1 || op.f.L < 1 || op.f.N * op.f.L > 65536 || op.f.nic <= 0 || op.f.intra <= 0 || op.bytes < 4 ||
      op.f.launch < 0 || op.f.overlap > 1 || group_n < 1 || group_n > MAX_GROUP) {
    fprintf(stderr, "ncclshim_model: need nodes, ranks-per-node >= 1, rates > 0, bytes >= 4, 1 <= group <= %d\n",
            MAX_GROUP);
    return 2;
  }
  rates rt;
  rates_default(&rt);
  if (rates_path && rates_load(&rt, rates_path)) {
    fprintf(stderr, "ncclshim_model: cannot read rates file %s\n", rates_path);
    return 2;
  }
  if (self) return selftest(&rt);
  if (compress && !strcmp(compress, "off")) algo = "none";
  variant vs[64];
  int nv = variants(algo, compress, vs, 64);
  if (nv == 0) {
    fprintf(stderr, "ncclshim_model: no plan for --algo %s --compress %s\n", algo ? algo : "*", compress ? compress : "*");
    return 2;
  }
  for (int i = 0; i < nv; i++)
    if (piece >= 0) vs[i].piece_bytes = piece;

  if (sweep && !algo && !compress) { /* one line per plan family in the plot */
    static const variant compact[] = {{"none", "off", -1},    {"ring", "fp16", -1}, {"twophase", "fp16", -1},
                                      {"twophase", "int8", -1}, {"hier", "fp16", -1}, {"hier", "int8", -1}};
    nv = (int)(sizeof compact / sizeof *compact);
    for (int i = 0; i < nv; i++) {
      vs[i] = compact[i];
      if (piece >= 0) vs[i].piece_bytes = piece;
    }
  }
  if (sweep) { /* predicted time per node count, one column per variant */
    FILE *t = tsv ? fopen(tsv, "w") : NULL;
    if (tsv && !t) {
      fprintf(stderr, "ncclshim_model: cannot write %s\n", tsv);
      return 2;
    }
    printf("# ncclshim-model: MODELLED communication time per call (ms), fabric %s, %d ranks per node, NIC %.3g Gb/s "
           "per %s, intra %.3g Gb/s, %s of %.6g MiB %s\n",
           op.f.gpu ? "gpu" : "host", op.f.L, op.f.nic * 8e-9, op.f.nic_per_node ? "node" : "rank", op.f.intra * 8e-9,
           op.rs ? "reduce-scatter" : "all-reduce", (double)op.bytes / MiB, dtypes[call_dtype].name);
    printf("%6s", "nodes");
    if (t) fprintf(t, "nodes");
    for (int i = 0; i < nv; i++) {
      char lab[64];
      label(&vs[i], lab, sizeof lab);
      printf(" %14s", lab);
      if (t) fprintf(t, "\t%s", lab);
    }
    printf("\n");
    if (t) fprintf(t, "\n");
    for (const char *p = sweep; *p;) {
      op.f.N = atoi(p);
      if (op.f.N < 1) break;
      printf("%6d", op.f.N);
      if (t) fprintf(t, "%d", op.f.N);
      for (int i = 0; i < nv; i++) {
        result r;
        if (model(&op.f, &rt, &vs[i], op.bytes, op.rs, &r)) return 1;
        printf(" %14.3f", r.c.time * 1e3);
        if (t) fprintf(t, "\t%.6g", r.c.time * 1e3);
      }
      printf("\n");
      if (t) fprintf(t, "\n");
      p = strchr(p, ',');
      if (!p) break;
      p++;
    }
    if (t) fclose(t);
    return 0;
  }

  result none;
  variant vnone = {"none", "off", -1};
  if (model(&op.f, &rt, &vnone, op.bytes, op.rs, &none)) return 1;
  if (op.json) {
    if (nv == 1) {
      result r;
      if (model(&op.f, &rt, &vs[0], op.bytes, op.rs, &r)) return 1;
      print_json(stdout, &op, &vs[0], &r);
      printf("\n");
      return 0;
    }
    printf("{\"plans\": [");
    for (int i = 0; i < nv; i++) {
      result r;
      if (model(&op.f, &rt, &vs[i], op.bytes, op.rs, &r)) return 1;
      printf(i ? ",\n  " : "\n  ");
      print_json(stdout, &op, &vs[i], &r);
    }
    printf("\n]}\n");
    return 0;
  }
  print_head(&op, &rt);
  for (int i = 0; i < nv; i++) {
    result r;
    if (model(&op.f, &rt, &vs[i], op.bytes, op.rs, &r)) return 1;
    print_row(&op, &vs[i], &r, none.c.time);
  }
  printf("# t_bound = %.3f ms (2(N-1)/N*S through a node's NICs); bound: the resource that set most of the time\n"
         "# plan!: its staging exceeds NCCLSHIM_STAGING_BYTES: the block grows and the next calls are forwarded as they are (not "
         "modelled: steady state)\n",
         none.t_bound * 1e3);
  return 0;
}
