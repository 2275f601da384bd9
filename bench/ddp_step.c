/* ddp_step.c — bench/ddp_step: DDP's reducer emulated on W MPI ranks, to
 * prove and measure the shim's accumulation over K micro-steps.
 *
 * One micro-step: the backward pass accumulates this rank's gradient into
 * param.grad; if the pass is synchronised (every pass in the naive loop, the
 * K-th only with --nosync) each bucket, in arrival order, is filled DDP's way
 * (copy-and-scale by 1/W, or divided in place when the bucket is the grad
 * storage) and all-reduced with fp32 Sum, with --find-unused the int32
 * used-map is all-reduced (as DDP does only with find_unused_parameters=True),
 * and the buckets are copied back into param.grad. Every micro-step ends with
 * a 1-element fp32 metric all-reduce; every K-th with SGD and zero_grad. The
 * first synchronised pass uses one whole-model bucket, the next forward
 * rebuilds the buckets at new addresses (not with --find-unused).
 *
 * Run naively under the shim with NCCLSHIM_ACCUM_STEPS=K, the final parameters
 * must equal a --nosync run without the shim. Output: a per-optimizer-step
 * table (calls, shim counters, wire bytes, time inside ncclAllReduce), a
 * "summary:" line of medians over the measured steps, and a hash of every
 * rank's final parameters ("params_hash=").
 *
 * Must not: print anything but from rank 0 (errors excepted), or exit without
 * MPI_Abort when ranks may disagree (a failed collective on one rank). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ddp.h"

typedef struct {
  ddp_opts o;
  int rank, W;
  ddp_comm c;
  ddp_model m;
  int32_t *used;
  ddp_counters *at;  /* counters at the start of each optimizer step, and at the end */
  int errors;        /* wrong metric or used-map results on this rank */
} run_t;

#define DIE(...) do { fprintf(stderr, "ddp_step rank %d: ", r->rank); fprintf(stderr, __VA_ARGS__); \
  fputc('\n', stderr); MPI_Abort(MPI_COMM_WORLD, 1); } while (0)
/* A failed NCCL call: its error string (and NCCL's last message), then abort. */
#define NCCL(what, call) do { ncclResult_t res_ = (call); if (res_ != ncclSuccess) { \
  const char *last_ = ncclGetLastError(r->c.comm); \
  DIE("%s failed: %s%s%s", what, ncclGetErrorString(res_), last_ && *last_ ? ": " : "", last_ ? last_ : ""); } } while (0)

static void print_layout(const run_t *r, long i) {
  if (r->rank) return;
  printf("# layout at micro-step %ld: %d bucket(s), floats:", i, r->m.lay.nb);
  for (int b = 0; b < r->m.lay.nb; b++) printf(" %zu", r->m.lay.b[b].count);
  printf("\n");
}

/* The reductions of one synchronised pass; `drop` (or -1) has no gradient. */
static void sync_pass(run_t *r, int drop) {
  ddp_model *m = &r->m;
  const float inv = (float)(1.0 / r->W);
  for (int b = 0; b < m->lay.nb; b++) {
    ddp_bucket *bk = &m->lay.b[b];
    size_t count = bk->count;
    for (int a = bk->first; a <= bk->last; a++) {
      int t = m->nt - 1 - a;
      if (t == drop) { /* the last of its bucket: reduce the prefix */
        count -= m->t[t].n;
        continue;
      }
      float *g = ddp_grad(m, t), *dst = bk->data + m->lay.boff[t];
      if (m->view) for (size_t e = 0; e < m->t[t].n; e++) g[e] /= (float)r->W;
      else for (size_t e = 0; e < m->t[t].n; e++) dst[e] = g[e] * inv;
    }
    NCCL("gradient bucket ncclAllReduce", ddp_reduce_bucket(&r->c, bk->data, count, r->o.quant, r->o.quant_min));
  }
  if (r->o.find_unused) {
    for (int t = 0; t < m->nt; t++) r->used[t] = t != drop;
    NCCL("used-map ncclAllReduce", ddp_allreduce(&r->c, r->used, r->used, m->nt, ncclInt32, ncclSum, 0));
    for (int t = 0; t < m->nt; t++) r->errors += r->used[t] != (t != drop ? r->W : 0);
  }
  if (!m->view)
    for (int t = 0; t < m->nt; t++)
      if (t != drop) memcpy(ddp_grad(m, t), m->lay.b[m->lay.bidx[t]].data + m->lay.boff[t], m->t[t].n * sizeof(float));
}

static void train(run_t *r) {
  const ddp_opts *o = &r->o;
  long total = (long)(o->warmup + o->steps) * o->K;
  int rebuilt = o->find_unused, rebuild_next = 0;
  if (ddp_model_layout(&r->m, o->find_unused ? o->first_cap : 0, o->find_unused ? o->cap : 0))
    DIE("out of memory for buckets");
  print_layout(r, 0);
  ddp_snapshot(&r->c, &r->at[0]);
  for (long i = 0; i < total; i++) {
    int final = i % o->K == o->K - 1, sync = !o->nosync || final;
    if (rebuild_next) { /* DDP rebuilds at the forward after the first synced backward */
      if (ddp_model_layout(&r->m, o->first_cap, o->cap)) DIE("out of memory for buckets");
      print_layout(r, i);
      rebuild_next = 0;
      rebuilt = 1;
    }
    int drop = i == o->drop_at ? ddp_drop_tensor(&r->m) : -1;
    for (int a = 0; a < r->m.nt; a++)
      if (r->m.nt - 1 - a != drop) ddp_accumulate(&r->m, r->m.nt - 1 - a, i, r->rank, r->W);
    if (sync) {
      sync_pass(r, drop);
      rebuild_next = !rebuilt;
    }
    float metric = (float)((r->rank + 1) * (i + 1));
    NCCL("metric ncclAllReduce", ddp_allreduce(&r->c, &metric, &metric, 1, ncclFloat32, ncclSum, 0));
    r->errors += metric != (float)(r->W * (r->W + 1) / 2 * (i + 1));
    if (final) {
      ddp_sgd_step(&r->m);
      ddp_snapshot(&r->c, &r->at[i / o->K + 1]);
    }
  }
}

/* Columns of the per-step table. */
enum { C_CALLS, C_REAL, C_SKIPPED, C_COMPR, C_LOGICAL, C_WIRE, C_MS, C_MSMAX, C_BUCKET_MS, NCOL };
typedef double step_row[NCOL];

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
  qsort(v, n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* One row per optimizer step (rank 0), from rank 0's counters and every
 * rank's times: mean and max over ranks. */
static void fill_rows(const run_t *r, step_row *rows, const double *sum, const double *mx) {
  int n = r->o.warmup + r->o.steps, shim = r->c.shim_stats != NULL;
  for (int s = 0; s < n; s++) {
    const ddp_counters *a = &r->at[s], *b = &r->at[s + 1];
    double *w = rows[s];
    w[C_CALLS] = (double)(b->calls - a->calls);
    w[C_LOGICAL] = (double)(b->logical_bytes - a->logical_bytes);
    /* Without the shim every call reaches NCCL with its logical bytes. */
    w[C_REAL] = shim ? (double)(b->shim.real_calls - a->shim.real_calls) : w[C_CALLS];
    w[C_WIRE] = shim ? (double)(b->shim.wire_bytes - a->shim.wire_bytes) : w[C_LOGICAL];
    w[C_SKIPPED] = (double)(b->shim.skipped - a->shim.skipped);
    w[C_COMPR] = (double)(b->shim.compressed - a->shim.compressed);
    w[C_MS] = sum[2 * s] / r->W;
    w[C_MSMAX] = mx[2 * s];
    w[C_BUCKET_MS] = sum[2 * s + 1] / r->W;
  }
}

/* Per-step table and the summary line of medians over the measured steps. */
static void report(run_t *r) {
  const ddp_opts *o = &r->o;
  int n = o->warmup + o->steps;
  double *ms = malloc(2 * n * sizeof *ms), *sum = malloc(2 * n * sizeof *sum), *mx = malloc(2 * n * sizeof *mx);
  step_row *rows = calloc(n, sizeof *rows);
  double *v = malloc(o->steps * sizeof *v);
  if (!ms || !sum || !mx || !rows || !v) DIE("out of memory");
  for (int s = 0; s < n; s++) {
    ms[2 * s] = (double)(r->at[s + 1].ns - r->at[s].ns) * 1e-6;
    ms[2 * s + 1] = (double)(r->at[s + 1].bucket_ns - r->at[s].bucket_ns) * 1e-6;
  }
  MPI_Reduce(ms, sum, 2 * n, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
  MPI_Reduce(ms, mx, 2 * n, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
  if (r->rank == 0) {
    fill_rows(r, rows, sum, mx);
    if (!o->quiet) {
      printf("# %-4s %-8s %6s %6s %7s %7s %12s %12s %10s %10s %10s\n", "step", "phase", "calls", "real", "skipped",
             "compr", "logical_B", "wire_B", "comm_ms", "comm_max", "bucket_ms");
      for (int s = 0; s < n; s++) {
        const double *w = rows[s];
        printf("  %-4d %-8s %6.0f %6.0f %7.0f %7.0f %12.0f %12.0f %10.3f %10.3f %10.3f\n", s,
               s < o->warmup ? "warmup" : "measured", w[C_CALLS], w[C_REAL], w[C_SKIPPED], w[C_COMPR],
               w[C_LOGICAL], w[C_WIRE], w[C_MS], w[C_MSMAX], w[C_BUCKET_MS]);
      }
    }
    double col[NCOL];
    for (int k = 0; k < NCOL; k++) {
      for (int s = 0; s < o->steps; s++) v[s] = rows[o->warmup + s][k];
      col[k] = median(v, o->steps);
    }
    printf("# per optimizer step: medians over %d measured step(s) after %d warm-up step(s) (the shim learns the pass "
           "in the first 4 passes); comm = wall time inside ncclAllReduce (bucket: the gradient buckets' calls), "
           "mean over ranks\n",
           o->steps, o->warmup);
    printf("summary: calls=%.0f real_calls=%.0f skipped=%.0f compressed=%.0f logical_bytes=%.0f wire_bytes=%.0f "
           "comm_ms=%.3f comm_ms_max=%.3f bucket_comm_ms=%.3f bytes_source=%s\n",
           col[C_CALLS], col[C_REAL], col[C_SKIPPED], col[C_COMPR], col[C_LOGICAL], col[C_WIRE], col[C_MS],
           col[C_MSMAX], col[C_BUCKET_MS], r->c.shim_stats ? "shim" : "logical");
  }
  free(ms);
  free(sum);
  free(mx);
  free(rows);
  free(v);
}

/* Gather every rank's parameters to rank 0: hash, replica check, dump, compare.
 * Returns 0, or 1 when the comparison fails. */
static int finish_params(run_t *r) {
  size_t P = r->m.P;
  float *all = NULL;
  int bad = 0;
  if (r->rank == 0 && !(all = malloc((size_t)r->W * P * sizeof *all))) DIE("out of memory");
  MPI_Gather(r->m.p, (int)P, MPI_FLOAT, all, (int)P, MPI_FLOAT, 0, MPI_COMM_WORLD);
  if (r->rank == 0) {
    int same = 1;
    for (int k = 1; k < r->W; k++) same &= !memcmp(all, all + (size_t)k * P, P * sizeof *all);
    printf("params_hash=%016llx replicas_identical=%d\n", (unsigned long long)ddp_hash(all, (size_t)r->W * P), same);
    if (r->o.dump) {
      FILE *f = fopen(r->o.dump, "wb");
      if (!f || fwrite(all, sizeof *all, (size_t)r->W * P, f) != (size_t)r->W * P || fclose(f))
        DIE("cannot write %s", r->o.dump);
    }
    if (r->o.against) {
      size_t n = (size_t)r->W * P;
      float *ref = malloc(n * sizeof *ref);
      FILE *f = fopen(r->o.against, "rb");
      if (!ref || !f || fread(ref, sizeof *ref, n, f) != n || fgetc(f) != EOF)
        DIE("cannot read %zu floats from %s (same W and --params?)", n, r->o.against);
      fclose(f);
      double maxd = 0;
      size_t ndiff = 0;
      for (size_t j = 0; j < n; j++) {
        double d = (double)all[j] - (double)ref[j];
        if (d < 0) d = -d;
        if (!(d <= maxd)) maxd = d; /* NaN propagates */
        ndiff += memcmp(&all[j], &ref[j], sizeof *ref) != 0;
      }
      int exact = ndiff == 0;
      bad = r->o.tol == 0 ? !exact : !(maxd <= r->o.tol);
      printf("against %s: bit_identical=%d differing=%zu max_abs_diff=%.3e tol=%.3e %s\n", r->o.against, exact,
             ndiff, maxd, r->o.tol, bad ? "FAIL" : "PASS");
      free(ref);
    }
    free(all);
  }
  MPI_Bcast(&bad, 1, MPI_INT, 0, MPI_COMM_WORLD);
  return bad;
}

int main(int argc, char **argv) {
  static run_t run;
  run_t *r = &run;
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &r->rank);
  MPI_Comm_size(MPI_COMM_WORLD, &r->W);
  char err[4096];
  int pr = ddp_parse_args(argc, argv, &r->o, err, sizeof err);
  if (pr) {
    if (r->rank == 0) fprintf(pr > 0 ? stdout : stderr, "%s%s", pr > 0 ? "" : "ddp_step: ", err);
    if (r->rank == 0 && pr < 0) fputc('\n', stderr);
    MPI_Finalize();
    return pr > 0 ? 0 : 2;
  }
  const ddp_opts *o = &r->o;
  if (ddp_comm_init(&r->c, r->rank, r->W, o->align) || ddp_model_init(&r->m, o->nparams, o->view)) DIE("out of memory");
  r->used = malloc(r->m.nt * sizeof *r->used);
  r->at = calloc(o->warmup + o->steps + 1, sizeof *r->at);
  if (!r->used || !r->at) DIE("out of memory");
  ncclUniqueId id;
  if (r->rank == 0) NCCL("ncclGetUniqueId", ncclGetUniqueId(&id));
  MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
  NCCL("ncclCommInitRank", ncclCommInitRank(&r->c.comm, r->W, id, r->rank));
  if (r->rank == 0) {
    ncclshim_stats_t s = {0};
    if (r->c.shim_stats) r->c.shim_stats(&s);
    printf("# ddp_step: W=%d P=%zu floats in %d tensors, K=%d, %s loop, grad %s, find_unused=%d, caps %zu/%zu B, "
           "reference quant=%s, drop_at=%ld, shim %s\n",
           r->W, r->m.P, r->m.nt, o->K, o->nosync ? "no_sync" : "naive", o->view ? "bucket view" : "copy",
           o->find_unused, o->first_cap, o->cap, o->quant == DDP_QUANT_FP16 ? "fp16" : o->quant ? "bf16" : "off",
           o->drop_at, r->c.shim_stats ? "loaded" : "not loaded");
  }
  train(r);
  int bad = 0;
  MPI_Allreduce(MPI_IN_PLACE, &r->errors, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  report(r);
  if (r->rank == 0 && r->errors) fprintf(stderr, "ddp_step: %d wrong metric/used-map results\n", r->errors);
  bad = finish_params(r) || r->errors;
  ddp_comm_free(&r->c);
  ddp_model_free(&r->m);
  free(r->used);
  free(r->at);
  MPI_Finalize();
  return bad;
}
