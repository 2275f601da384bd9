/* test_hostnccl_coll.c — correctness of every host NCCL collective, run with
 * mpirun -np N against build/lib/hostnccl (prints "ok - ..." lines on rank 0).
 *
 * All-reduce: every datatype x (sum, prod, max, min, avg, PreMulSum with a
 * host-immediate and a device scalar, and for floating types a sum of inexact
 * inputs), in place and out of place, counts 0, 1, 2, 3, 7, 1001, 4099. Inputs
 * are small integers times powers of two, generated on every rank for every
 * rank; the expected value of each element is computed here in the documented
 * ring order (chunk c reduced from rank c+1 on, rounded to the type at every
 * hop), so results are compared bit for bit, including the inexact sums.
 * Then reduce-scatter, all-gather, broadcast/bcast and reduce from every root,
 * and send/recv patterns in a group (ring shift, all-to-all with self).
 *
 * Must not: assert anything about time. */
#include <stdlib.h>
#include <string.h>

#include "test_oracle.h"
#include "test_report.h"

static ncclComm_t comm;

/* ---- operations under test ---- */
enum { V_SUM, V_PROD, V_MAX, V_MIN, V_AVG, V_PRE_HOST, V_PRE_DEV, V_INEXACT, NVARIANTS };
static const char *vname[] = {"sum", "prod", "max", "min", "avg", "premulsum-host", "premulsum-device", "sum-inexact"};

/* Input of rank r at element i for variant v: exact in every type. */
static double input(int t, int v, int r, size_t i) {
  int sgn = !o_types[t].is_float && (t == ncclUint8 || t == ncclUint32 || t == ncclUint64) ? 0 : 1;
  long k = (long)(i % 1000003);
  switch (v) {
  case V_PROD: {
    static const double sv[] = {1, 2, -1, 0.5}, uv[] = {1, 2, 3, 1};
    int j = (int)((k * 3 + r) % 4);
    if (!o_types[t].is_float) return sgn ? (j == 3 ? 1 : sv[j]) : uv[j];
    return sv[j];
  }
  case V_MAX: case V_MIN: {
    long x = (k * 5 + r * 11) % 13 - (sgn ? 6 : 0);
    return o_types[t].is_float ? (double)x * 0.25 : (double)x;
  }
  case V_INEXACT: {
    long x = (long)((k * 2654435761u + (unsigned long)r * 40503u) % 20001) - 10000;
    return o_rnd(t, (float)((double)x / 97.0));
  }
  default: {
    long x = (k * 7 + r * 3) % 9 - (sgn ? 4 : 0);
    return o_types[t].is_float ? ldexp((double)x, (int)(k % 3) - 1) : (double)x;
  }
  }
}

/* The scalars of the PreMulSum variants; the device one is changed after the
 * op is created and before the call (read at run time). */
static double pre_scalar(int t, int v) {
  if (v == V_PRE_DEV) return o_types[t].is_float ? 1.5 : 2;
  return o_types[t].is_float ? 0.375 : 3;
}

static double pre(int t, int v, double x) {
  if (v == V_PRE_HOST || v == V_PRE_DEV) return o_op(t, O_PROD, x, pre_scalar(t, v));
  if (v == V_AVG && t == ncclFloat64) return x * (1.0 / t_nranks);
  if (v == V_AVG && o_types[t].is_float) return o_op(t, O_PROD, x, o_rnd(t, (float)(1.0 / t_nranks)));
  return x;
}

static int base_op(int v) {
  return v == V_PROD ? O_PROD : v == V_MAX ? O_MAX : v == V_MIN ? O_MIN : O_SUM;
}

/* Expected result of a reduction of element i whose chain starts after rank c. */
static double reduce_from(int t, int v, int c, size_t i) {
  double acc = pre(t, v, input(t, v, (c + 1) % t_nranks, i));
  for (int k = 2; k <= t_nranks; k++) acc = o_op(t, base_op(v), acc, pre(t, v, input(t, v, (c + k) % t_nranks, i)));
  if (v == V_AVG && !o_types[t].is_float) acc = trunc(acc / t_nranks);
  return acc;
}

/* Chunk owning element i when count is split in nranks balanced chunks. */
static int chunk_of(size_t count, size_t i) {
  size_t base = count / (size_t)t_nranks, rem = count % (size_t)t_nranks;
  if (i < rem * (base + 1)) return (int)(i / (base + 1));
  return (int)(rem + (i - rem * (base + 1)) / base);
}

static int differs(int t, double got, double want) {
  if (isnan(got) || isnan(want)) return !(isnan(got) && isnan(want));
  return got != want || (o_types[t].is_float && signbit(got) != signbit(want));
}

static void fill(int t, int v, int r, void *buf, size_t count) {
  for (size_t i = 0; i < count; i++) o_put(t, buf, i, input(t, v, r, i));
}

static void check_input_intact(int t, int v, const void *buf, size_t count, const char *what) {
  for (size_t i = 0; i < count; i++)
    if (differs(t, o_get(t, buf, i), input(t, v, t_rank, i))) {
      wrong("%s: sendbuff changed at %zu", what, i);
      return;
    }
}

static void *garbage(size_t bytes) {
  void *p = malloc(bytes ? bytes : 1);
  memset(p, 0xa5, bytes);
  return p;
}

/* Make the reduction op for variant v (created ops are destroyed by the caller). */
static ncclRedOp_t make_op(int t, int v, unsigned char *devscalar) {
  static const ncclRedOp_t builtin[] = {ncclSum, ncclProd, ncclMax, ncclMin, ncclAvg};
  if (v < V_PRE_HOST) return builtin[v];
  if (v == V_INEXACT) return ncclSum;
  ncclRedOp_t op;
  o_put(t, devscalar, 0, pre_scalar(t, V_PRE_HOST)); /* value at creation */
  NCCL_OK(ncclRedOpCreatePreMulSum(&op, devscalar, (ncclDataType_t)t,
                                   v == V_PRE_DEV ? ncclScalarDevice : ncclScalarHostImmediate, comm));
  o_put(t, devscalar, 0, pre_scalar(t, V_PRE_DEV)); /* seen by device residence only */
  return op;
}

static void test_allreduce(int t) {
  static const size_t counts[] = {0, 1, 2, 3, 7, 1001, 4099};
  for (int v = 0; v < NVARIANTS; v++) {
    if (v == V_INEXACT && !o_types[t].is_float) continue;
    for (size_t ci = 0; ci < sizeof counts / sizeof counts[0]; ci++) {
      size_t count = counts[ci], bytes = count * o_types[t].size;
      for (int inplace = 0; inplace < 2; inplace++) {
        unsigned char scalar[8];
        ncclRedOp_t op = make_op(t, v, scalar);
        void *send = garbage(bytes), *recv = inplace ? send : garbage(bytes);
        fill(t, v, t_rank, send, count);
        NCCL_OK(ncclAllReduce(send, recv, count, (ncclDataType_t)t, op, comm, NULL));
        for (size_t i = 0; i < count; i++) {
          double want = reduce_from(t, v, chunk_of(count, i), i), got = o_get(t, recv, i);
          if (differs(t, got, want)) {
            wrong("%s %s count %zu %s: [%zu] = %.17g, want %.17g", o_types[t].name, vname[v], count,
                  inplace ? "in-place" : "out-of-place", i, got, want);
            break;
          }
        }
        if (!inplace) check_input_intact(t, v, send, count, "allreduce");
        if (op >= ncclNumOps) NCCL_OK(ncclRedOpDestroy(op, comm));
        if (!inplace) free(recv);
        free(send);
      }
    }
  }
}

static void test_reduce_scatter(int t) {
  static const size_t counts[] = {0, 1, 7, 1001};
  static const int variants[] = {V_SUM, V_MAX, V_AVG, V_PRE_HOST};
  for (size_t vi = 0; vi < 4; vi++) {
    int v = variants[vi];
    for (size_t ci = 0; ci < 4; ci++) {
      size_t rc = counts[ci], total = rc * (size_t)t_nranks, esz = o_types[t].size;
      for (int inplace = 0; inplace < 2; inplace++) {
        unsigned char scalar[8];
        ncclRedOp_t op = make_op(t, v, scalar);
        void *send = garbage(total * esz);
        void *recv = inplace ? (char *)send + (size_t)t_rank * rc * esz : garbage(rc * esz);
        fill(t, v, t_rank, send, total);
        NCCL_OK(ncclReduceScatter(send, recv, rc, (ncclDataType_t)t, op, comm, NULL));
        for (size_t j = 0; j < rc; j++) {
          size_t g = (size_t)t_rank * rc + j;
          double want = reduce_from(t, v, t_rank, g), got = o_get(t, recv, j);
          if (differs(t, got, want)) {
            wrong("reducescatter %s %s rc %zu: [%zu] = %g, want %g", o_types[t].name, vname[v], rc, j, got, want);
            break;
          }
        }
        if (!inplace) { check_input_intact(t, v, send, total, "reducescatter"); free(recv); }
        if (op >= ncclNumOps) NCCL_OK(ncclRedOpDestroy(op, comm));
        free(send);
      }
    }
  }
}

static void test_all_gather(int t) {
  static const size_t counts[] = {0, 1, 7, 1001};
  size_t esz = o_types[t].size;
  for (size_t ci = 0; ci < 4; ci++) {
    size_t c = counts[ci];
    for (int inplace = 0; inplace < 2; inplace++) {
      void *recv = garbage(c * (size_t)t_nranks * esz);
      void *send = inplace ? (char *)recv + (size_t)t_rank * c * esz : garbage(c * esz);
      fill(t, V_SUM, t_rank, send, c);
      NCCL_OK(ncclAllGather(send, recv, c, (ncclDataType_t)t, comm, NULL));
      for (int r = 0; r < t_nranks; r++)
        for (size_t j = 0; j < c; j++)
          if (differs(t, o_get(t, recv, (size_t)r * c + j), input(t, V_SUM, r, j))) {
            wrong("allgather %s count %zu: block %d [%zu]", o_types[t].name, c, r, j);
            r = t_nranks;
            break;
          }
      if (!inplace) free(send);
      free(recv);
    }
  }
}

static void test_broadcast(int t) {
  static const size_t counts[] = {0, 1, 1001};
  size_t esz = o_types[t].size;
  for (int root = 0; root < t_nranks; root++)
    for (size_t ci = 0; ci < 3; ci++)
      for (int mode = 0; mode < 3; mode++) { /* out-of-place, in-place, ncclBcast */
        size_t c = counts[ci];
        void *send = garbage(c * esz), *recv = mode ? send : garbage(c * esz);
        if (t_rank == root) fill(t, V_SUM, root, send, c);
        if (mode == 2) NCCL_OK(ncclBcast(send, c, (ncclDataType_t)t, root, comm, NULL));
        else NCCL_OK(ncclBroadcast(send, recv, c, (ncclDataType_t)t, root, comm, NULL));
        for (size_t j = 0; j < c; j++)
          if (differs(t, o_get(t, recv, j), input(t, V_SUM, root, j))) {
            wrong("broadcast %s root %d count %zu mode %d: [%zu]", o_types[t].name, root, c, mode, j);
            break;
          }
        if (!mode) free(recv);
        free(send);
      }
}

static void test_reduce(int t) {
  static const size_t counts[] = {0, 1, 1001};
  static const int variants[] = {V_SUM, V_PROD, V_MAX, V_AVG, V_PRE_DEV};
  size_t esz = o_types[t].size;
  for (int root = 0; root < t_nranks; root++)
    for (size_t vi = 0; vi < 5; vi++)
      for (size_t ci = 0; ci < 3; ci++)
        for (int inplace = 0; inplace < 2; inplace++) {
          int v = variants[vi];
          size_t c = counts[ci];
          unsigned char scalar[8];
          ncclRedOp_t op = make_op(t, v, scalar);
          void *send = garbage(c * esz), *recv = inplace ? send : garbage(c * esz);
          fill(t, v, t_rank, send, c);
          NCCL_OK(ncclReduce(send, recv, c, (ncclDataType_t)t, op, root, comm, NULL));
          for (size_t j = 0; t_rank == root && j < c; j++) {
            double want = reduce_from(t, v, root, j), got = o_get(t, recv, j);
            if (differs(t, got, want)) {
              wrong("reduce %s %s root %d count %zu: [%zu] = %g, want %g", o_types[t].name, vname[v], root, c, j, got, want);
              break;
            }
          }
          if (!inplace) { check_input_intact(t, v, send, c, "reduce"); free(recv); }
          if (op >= ncclNumOps) NCCL_OK(ncclRedOpDestroy(op, comm));
          free(send);
        }
}

/* Send/recv in groups: a ring shift both ways (each rank lists its receive
 * first, which would deadlock if posted blocking), then all-to-all with self. */
static void test_sendrecv(void) {
  const size_t c = 100003;
  int t = ncclInt32, next = (t_rank + 1) % t_nranks, prev = (t_rank + t_nranks - 1) % t_nranks;
  int32_t *out = garbage(c * 4), *in_prev = garbage(c * 4), *in_next = garbage(c * 4);
  fill(t, V_SUM, t_rank, out, c);
  NCCL_OK(ncclGroupStart());
  NCCL_OK(ncclRecv(in_prev, c, ncclInt32, prev, comm, NULL));
  NCCL_OK(ncclRecv(in_next, c, ncclInt32, next, comm, NULL));
  NCCL_OK(ncclSend(out, c, ncclInt32, next, comm, NULL));
  NCCL_OK(ncclSend(out, c, ncclInt32, prev, comm, NULL));
  NCCL_OK(ncclGroupEnd());
  for (size_t j = 0; j < c; j++)
    if (in_prev[j] != (int32_t)input(t, V_SUM, prev, j) || in_next[j] != (int32_t)input(t, V_SUM, next, j)) {
      wrong("sendrecv ring: element %zu", j);
      break;
    }
  report("send/recv ring shift both ways in a group");

  const size_t a = 513;
  double *sb = garbage(a * 8 * (size_t)t_nranks), *rb = garbage(a * 8 * (size_t)t_nranks);
  for (int p = 0; p < t_nranks; p++)
    for (size_t j = 0; j < a; j++) sb[(size_t)p * a + j] = t_rank * 1000.0 + p + (double)j / 1024;
  NCCL_OK(ncclGroupStart());
  for (int p = 0; p < t_nranks; p++) {
    NCCL_OK(ncclSend(sb + (size_t)p * a, a, ncclFloat64, p, comm, NULL));
    NCCL_OK(ncclRecv(rb + (size_t)p * a, a, ncclFloat64, p, comm, NULL));
  }
  NCCL_OK(ncclGroupEnd());
  for (int p = 0; p < t_nranks; p++)
    for (size_t j = 0; j < a; j++)
      if (rb[(size_t)p * a + j] != p * 1000.0 + t_rank + (double)j / 1024) {
        wrong("alltoall: from %d element %zu", p, j);
        p = t_nranks;
        break;
      }
  report("send/recv all-to-all including self in a group");
  free(out); free(in_prev); free(in_next); free(sb); free(rb);
}

int main(int argc, char **argv) {
  t_init(&argc, &argv);
  comm = t_comm(t_rank, NULL);

  char what[128];
  for (int t = 0; t < ncclNumTypes; t++) {
    test_allreduce(t);
    snprintf(what, sizeof what, "allreduce %s: all ops, in/out of place, counts 0..4099", o_types[t].name);
    report(what);
  }
  for (int t = 0; t < ncclNumTypes; t++) {
    test_reduce_scatter(t);
    test_all_gather(t);
    test_broadcast(t);
    test_reduce(t);
    snprintf(what, sizeof what, "reducescatter, allgather, broadcast, reduce %s (every root)", o_types[t].name);
    report(what);
  }
  test_sendrecv();

  NCCL_OK(ncclCommDestroy(comm));
  MPI_Finalize();
  return t_failures ? 1 : 0;
}
