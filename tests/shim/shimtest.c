/* shimtest.c — multi-rank checks of the shim over the host NCCL.
 *
 *   shimtest hash                every datatype x op x size; prints one hash of
 *                                the results per case (rank 0), so a script can
 *                                diff runs with and without the shim
 *   shimtest exact               fp32 Sum/Avg with inputs exact in the wire type:
 *                                results must equal the exact sums bit for bit
 *   shimtest quantized           random fp32 inputs: results must equal a
 *                                reference that quantizes the same way (own
 *                                fp32->wire rounding, the substrate's wire-type
 *                                ring, widening) — bit for bit
 *   shimtest group               grouped calls (fused or not), mixed members,
 *                                two communicators, nested groups
 *   shimtest special             Inf, NaN, -0 and subnormals: same on every rank
 *   shimtest once EXPECT         one fp32 all-reduce; exit 0 iff it returns EXPECT
 *   shimtest pairs N             (a rank without the shim) an int64 Max all-reduce
 *                                of N, then of 1: what the settings check and
 *                                its confirmation issue on the ranks with it
 *   shimtest accumgroup K        fused groups as backward passes with
 *                                NCCLSHIM_ACCUM_STEPS=K: synced or local, exactly
 *   shimtest observed            the calls the shim only forwards (observed) on a
 *                                second communicator: a ring send/recv before
 *                                any collective, all-gather, broadcast (root 1),
 *                                bcast (root 0), reduce (root 0), the ring again,
 *                                all-to-all, gather, scatter (unsupported by the
 *                                host NCCL: their error comes back unchanged),
 *                                then one fp32 all-reduce; results exact
 *
 * Inputs are built from the rank and the element index, so every rank can
 * compute every expected value without communicating. Exit status 0 = pass;
 * failures print one line each (rank, case, first bad element). */
#include <math.h>
#include <mpi.h>
#include <nccl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testmpi.h"
#include "devmirror.h" /* SHIMTEST_DEVICE=1: device buffers on the CUDA driver double */

static int rank, nranks;
static ncclComm_t comm, comm2;
static int failures;


static void fail(const char *what, size_t i, double got, double want) {
  if (failures++ < 20)
    fprintf(stderr, "FAIL rank %d: %s: element %zu = %.9g, expected %.9g\n", rank, what, i, got, want);
}


/* Our own fp32 -> fp16/bf16 round-to-nearest-even (independent of compress/). */
static uint16_t to_half(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000u, ax = x & 0x7fffffffu;
  if (ax > 0x7f800000u) return (uint16_t)(sign | 0x7e00u);
  if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* rounds to >= 65520: Inf */
  if (ax < 0x38800000u) {                                   /* fp16 subnormal or zero */
    float a;
    memcpy(&a, &ax, 4);
    return (uint16_t)(sign | (uint16_t)lrintf(a * 16777216.0f)); /* units of 2^-24, RNE */
  }
  uint32_t m = ax + 0xfffu + ((ax >> 13) & 1u);
  return (uint16_t)(sign | ((m - 0x38000000u) >> 13));
}
static float from_half(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ff, x;
  if (e == 0) {
    float v = (float)m / 16777216.0f;
    return sign ? -v : v;
  }
  x = e == 31 ? sign | 0x7f800000u | (m << 13) : sign | ((e + 112) << 23) | (m << 13);
  float f;
  memcpy(&f, &x, 4);
  return f;
}
static uint16_t to_bf16(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40u);
  return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}
static float from_bf16(uint16_t h) {
  uint32_t x = (uint32_t)h << 16;
  float f;
  memcpy(&f, &x, 4);
  return f;
}

static int wire_bf16(void) {
  const char *w = getenv("NCCLSHIM_COMPRESS");
  return w && !strcmp(w, "bf16");
}

/* ---- hash: bit-identical pass-through ---------------------------------- */
static size_t esize(ncclDataType_t t) {
  switch (t) {
  case ncclInt8: case ncclUint8: case ncclFloat8e4m3: case ncclFloat8e5m2: return 1;
  case ncclFloat16: case ncclBfloat16: return 2;
  case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
  default: return 8;
  }
}

static void fill_bytes(unsigned char *p, size_t n, ncclDataType_t t, unsigned seed) {
  uint32_t s = seed * 2654435761u + 12345u;
  size_t es = esize(t);
  for (size_t i = 0; i < n / es; i++) {
    s = s * 1664525u + 1013904223u;
    unsigned v = (s >> 16) & 0x3f; /* small values: no overflow anywhere */
    switch (t) {
    case ncclFloat32: { float f = (float)v * 0.125f - 3.0f; memcpy(p + 4 * i, &f, 4); break; }
    case ncclFloat64: { double d = (double)v * 0.125 - 3.0; memcpy(p + 8 * i, &d, 8); break; }
    case ncclFloat16: { uint16_t h = to_half((float)v * 0.125f - 3.0f); memcpy(p + 2 * i, &h, 2); break; }
    case ncclBfloat16: { uint16_t h = to_bf16((float)v * 0.125f - 3.0f); memcpy(p + 2 * i, &h, 2); break; }
    case ncclFloat8e4m3: p[i] = (unsigned char)(0x30 + (v & 0x0f)); break;
    case ncclFloat8e5m2: p[i] = (unsigned char)(0x38 + (v & 0x03)); break;
    default: for (size_t b = 0; b < es; b++) p[es * i + b] = b == 0 ? (unsigned char)(v & 7) : 0; break;
    }
  }
}

static uint64_t fnv(const unsigned char *p, size_t n) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

static int cmd_hash(void) {
  static const size_t counts[] = {0, 1, 7, 1024, 16383, 16384, 16385, 40000};
  for (int t = 0; t < ncclNumTypes; t++)
    for (int op = 0; op < ncclNumOps; op++)
      for (size_t k = 0; k < sizeof counts / sizeof counts[0]; k++)
        for (int inplace = 0; inplace < 2; inplace++) {
          size_t n = counts[k], bytes = n * esize((ncclDataType_t)t) + 8;
          unsigned char *s = calloc(bytes, 1), *r = malloc(bytes);
          fill_bytes(s, bytes - 8, (ncclDataType_t)t, (unsigned)(rank * 977 + t * 31 + op * 7 + k));
          memset(r, 0xa5, bytes);
          if (inplace) memcpy(r, s, bytes);
          NCCL_OK(ncclAllReduce(inplace ? r : s, r, n, (ncclDataType_t)t, (ncclRedOp_t)op, comm, NULL));
          uint64_t h = fnv(r, bytes);
          if (rank == 0) printf("type %d op %d count %zu inplace %d hash %016llx\n", t, op, n, inplace, (unsigned long long)h);
          free(s);
          free(r);
        }
  return 0;
}

/* ---- exact: inputs exact in the wire type ------------------------------ */
static float exact_val(int r, size_t i) { return (float)((int)((r * 7 + i * 3) % 17) - 8) * 0.25f; }

static void check_exact(size_t n, ncclRedOp_t op, int inplace, size_t offset) {
  float *sb = calloc(n + offset + 1, 4), *rb = calloc(n + offset + 1, 4);
  float *s = sb + offset, *r = inplace ? s : rb + offset;
  for (size_t i = 0; i < n; i++) s[i] = exact_val(rank, i);
  if (!inplace) for (size_t i = 0; i < n; i++) r[i] = -12345.0f;
  NCCL_OK(ncclAllReduce(s, r, n, ncclFloat32, op, comm, NULL));
  char what[96];
  snprintf(what, sizeof what, "exact n=%zu op=%d inplace=%d offset=%zu", n, (int)op, inplace, offset);
  for (size_t i = 0; i < n; i++) {
    double want = 0;
    for (int q = 0; q < nranks; q++) want += exact_val(q, i);
    if (op == ncclAvg) want /= nranks;
    if (r[i] != (float)want) { fail(what, i, r[i], want); break; }
    if (!inplace && s[i] != exact_val(rank, i)) { fail("sendbuff modified", i, s[i], exact_val(rank, i)); break; }
  }
  free(sb);
  free(rb);
}

static int cmd_exact(void) {
  static const size_t counts[] = {0, 1, 7, 16383, 16384, 16385, 65536 + 3, 300001};
  for (size_t k = 0; k < sizeof counts / sizeof counts[0]; k++)
    for (int inplace = 0; inplace < 2; inplace++)
      for (size_t off = 0; off < 3; off += 1) {
        check_exact(counts[k], ncclSum, inplace, off);
        if ((nranks & (nranks - 1)) == 0) check_exact(counts[k], ncclAvg, inplace, off); /* /n exact */
      }
  return failures != 0;
}

/* ---- quantized: random inputs vs the same quantization -------------------- */
static int cmd_quantized(void) {
  int bf = wire_bf16();
  const char *ps = getenv("NCCLSHIM_PRESCALE");
  float F = ps ? strtof(ps, NULL) : 1.0f;
  static const size_t counts[] = {16384, 50001, 1 << 20};
  for (size_t k = 0; k < sizeof counts / sizeof counts[0]; k++)
    for (int op = 0; op < 2; op++) {
      ncclRedOp_t rop = op ? ncclAvg : ncclSum;
      size_t n = counts[k];
      float *x = malloc(n * 4), *got = malloc(n * 4);
      uint16_t *w = malloc(n * 2);
      srand((unsigned)(rank * 1000 + k * 10 + op));
      for (size_t i = 0; i < n; i++) x[i] = ((float)rand() / RAND_MAX - 0.5f) * (i % 97 == 0 ? 3e4f : 1.0f);
      for (size_t i = 0; i < n; i++) w[i] = bf ? to_bf16(x[i] * (1.0f / F)) : to_half(x[i] * (1.0f / F));
      NCCL_OK(ncclAllReduce(x, got, n, ncclFloat32, rop, comm, NULL));
      /* The reference: a wire-type all-reduce (never transformed by the shim). */
      NCCL_OK(ncclAllReduce(w, w, n, bf ? ncclBfloat16 : ncclFloat16, rop, comm, NULL));
      char what[64];
      snprintf(what, sizeof what, "quantized n=%zu op=%d", n, op);
      double maxrel = 0;
      for (size_t i = 0; i < n; i++) {
        float want = (bf ? from_bf16(w[i]) : from_half(w[i])) * F;
        if (memcmp(&got[i], &want, 4) != 0 && !(isnan(got[i]) && isnan(want))) { fail(what, i, got[i], want); break; }
      }
      (void)maxrel;
      free(x);
      free(got);
      free(w);
    }
  return failures != 0;
}

/* ---- group: cast-backs after group end, fusion, mixed members ----------- */
/* Three rounds: the first group is where the communicators are first seen
 * (passed through, checked after the group, which also agrees on a fusion
 * block); the second and third are fused. */
static int cmd_group(void) {
  for (int round = 0; round < 3; round++) {
  enum { M = 12 };
  size_t sizes[M] = {1, 5, 100, 1000, 4096, 16384, 3, 70000, 2, 9999, 17, 300000};
  float *s[M], *r[M];
  int32_t is[64], ir[64];
  float mx[64], mxr[64];
  for (int m = 0; m < M; m++) {
    s[m] = malloc(sizes[m] * 4);
    r[m] = malloc(sizes[m] * 4);
    for (size_t i = 0; i < sizes[m]; i++) s[m][i] = exact_val(rank + m, i);
  }
  for (int i = 0; i < 64; i++) { is[i] = rank + i; mx[i] = (float)(rank * 64 + i); }
  NCCL_OK(ncclGroupStart());
  for (int m = 0; m < M; m++) {
    if (m == 4) { /* nested group with non-compressible members */
      NCCL_OK(ncclGroupStart());
      NCCL_OK(ncclAllReduce(is, ir, 64, ncclInt32, ncclSum, comm, NULL));
      NCCL_OK(ncclAllReduce(mx, mxr, 64, ncclFloat32, ncclMax, comm2, NULL));
      NCCL_OK(ncclGroupEnd());
    }
    ncclComm_t c = m % 3 == 2 ? comm2 : comm;
    NCCL_OK(ncclAllReduce(s[m], m % 2 ? s[m] : r[m], sizes[m], ncclFloat32, ncclSum, c, NULL));
  }
  NCCL_OK(ncclGroupEnd());
  for (int m = 0; m < M; m++) {
    float *out = m % 2 ? s[m] : r[m];
    char what[64];
    snprintf(what, sizeof what, "group member %d (n=%zu)", m, sizes[m]);
    for (size_t i = 0; i < sizes[m]; i++) {
      double want = 0;
      for (int q = 0; q < nranks; q++) want += exact_val(q + m, i);
      if (out[i] != (float)want) { fail(what, i, out[i], want); break; }
    }
    free(s[m]);
    free(r[m]);
  }
  for (int i = 0; i < 64; i++) {
    int32_t want = 0;
    for (int q = 0; q < nranks; q++) want += q + i;
    if (ir[i] != want) { fail("group int32 member", (size_t)i, ir[i], want); break; }
    if (mxr[i] != (float)((nranks - 1) * 64 + i)) { fail("group max member", (size_t)i, mxr[i], (nranks - 1) * 64 + i); break; }
  }
  }
  return failures != 0;
}

/* ---- special values ------------------------------------------------------ */
static int cmd_special(void) {
  size_t n = 20000;
  float *x = calloc(n, 4), *all = malloc(n * 4 * nranks);
  for (size_t i = 0; i < n; i++) {
    switch (i % 8) {
    case 0: x[i] = rank == 0 ? INFINITY : 1.0f; break;
    case 1: x[i] = rank == 1 ? NAN : 2.0f; break;
    case 2: x[i] = -0.0f; break;
    case 3: x[i] = 1e-40f; break;                 /* fp32 subnormal: 0 in fp16 */
    case 4: x[i] = 6e-8f * (float)(rank + 1); break; /* fp16 subnormal range */
    case 5: x[i] = 70000.0f; break;               /* beyond fp16: Inf */
    case 6: x[i] = rank == 0 ? -INFINITY : INFINITY; break;
    default: x[i] = 0.5f; break;
    }
  }
  NCCL_OK(ncclAllReduce(x, x, n, ncclFloat32, ncclSum, comm, NULL));
  MPI_Allgather(x, (int)n * 4, MPI_BYTE, all, (int)n * 4, MPI_BYTE, MPI_COMM_WORLD);
  for (int q = 0; q < nranks; q++)
    if (memcmp(all, all + (size_t)q * n, n * 4)) { fail("ranks disagree on special values", (size_t)q, 0, 0); break; }
  int bf = wire_bf16();
  for (size_t i = 0; i < n; i++) {
    int ok = 1;
    switch (i % 8) {
    case 0: ok = isinf(x[i]) && x[i] > 0; break;
    case 1: ok = nranks < 2 || isnan(x[i]); break;
    case 2: ok = x[i] == 0.0f; break;
    case 5: ok = bf ? x[i] == 70000.0f * nranks || fabsf(x[i] / (70000.0f * nranks) - 1) < 1e-2f : isinf(x[i]); break;
    case 6: ok = nranks < 2 || isnan(x[i]); break; /* -Inf + Inf */
    case 7: ok = x[i] == 0.5f * nranks; break;
    default: break;
    }
    if (!ok) { fail("special value", i, x[i], 0); break; }
  }
  free(x);
  free(all);
  return failures != 0;
}

/* ---- accumgroup: fusion together with accumulation -------------------------
 * DDP-like: pass 0 is the whole model in one bucket (a group of one call on a
 * buffer of its own), then each "backward pass" is one group of M fp32 Sum
 * all-reduces on persistent buffers (fused by the shim), run with
 * NCCLSHIM_ACCUM_STEPS=K. The shim learns the pass after passes 0..3 (all
 * synced); from then on pass i syncs iff i mod K == K-1 and the others are
 * answered locally: Sum -> nranks * own input. Every member is checked
 * exactly against the one it must be, so a wrong skip or a fused member left
 * out of the count shows. (Without the whole-model pass nothing marks these
 * groups as gradients, and nothing would be skipped.) */
static int cmd_accumgroup(int K) {
  enum { M = 5, PASSES = 14 };
  size_t sizes[M] = {16384, 20000, 16400, 70000, 16385};
  float *x[M];
  size_t total = 0;
  for (int m = 0; m < M; m++) x[m] = malloc(sizes[m] * 4), total += sizes[m];
  float *whole = malloc(total * 4);
  for (size_t i = 0; i < total; i++) whole[i] = exact_val(rank, i);
  NCCL_OK(ncclGroupStart());
  NCCL_OK(ncclAllReduce(whole, whole, total, ncclFloat32, ncclSum, comm, NULL));
  NCCL_OK(ncclGroupEnd());
  for (size_t i = 0; i < total; i++) {
    double want = 0;
    for (int q = 0; q < nranks; q++) want += exact_val(q, i);
    if (whole[i] != (float)want) { fail("accumgroup pass 0 (whole model)", i, whole[i], want); break; }
  }
  free(whole);
  for (int pass = 1; pass < PASSES; pass++) {
    for (int m = 0; m < M; m++)
      for (size_t i = 0; i < sizes[m]; i++) x[m][i] = exact_val(rank + m + pass, i);
    NCCL_OK(ncclGroupStart());
    for (int m = 0; m < M; m++) NCCL_OK(ncclAllReduce(x[m], x[m], sizes[m], ncclFloat32, ncclSum, comm, NULL));
    NCCL_OK(ncclGroupEnd());
    int synced = pass < 4 || pass % K == K - 1;
    char what[64];
    snprintf(what, sizeof what, "accumgroup pass %d (%s) member", pass, synced ? "synced" : "skipped");
    for (int m = 0; m < M; m++)
      for (size_t i = 0; i < sizes[m]; i++) {
        double want = 0;
        if (synced)
          for (int q = 0; q < nranks; q++) want += exact_val(q + m + pass, i);
        else
          want = (double)nranks * exact_val(rank + m + pass, i);
        if (x[m][i] != (float)want) { fail(what, i, x[m][i], want); break; }
      }
  }
  for (int m = 0; m < M; m++) free(x[m]);
  return failures != 0;
}

static int cmd_once(int expect) {
  size_t n = 1 << 16;
  float *x = calloc(n, 4);
  ncclResult_t r = ncclAllReduce(x, x, n, ncclFloat32, ncclSum, comm, NULL);
  if (rank == 0) printf("result %d (%s)\n", (int)r, ncclGetErrorString(r));
  if (r != ncclSuccess) fprintf(stderr, "rank %d ncclGetLastError: %s\n", rank, ncclGetLastError(comm));
  free(x);
  return (int)r != expect;
}

/* A rank without the shim whose first two collectives happen to match the
 * settings check and its confirmation (an int64 Max of n, then of 1): the
 * ranks with the shim must fail their first call naming that cause. On real
 * NCCL any other pairing hangs or mixes data. */
static int cmd_pairs(size_t n) {
  int64_t *x = calloc(n, sizeof *x);
  NCCL_OK(ncclAllReduce(x, x, n, ncclInt64, ncclMax, comm, NULL));
  NCCL_OK(ncclAllReduce(x, x, 1, ncclInt64, ncclMax, comm, NULL));
  free(x);
  return 0;
}

static void ring(const float *out, float *in, size_t n) {
  NCCL_OK(ncclGroupStart());
  NCCL_OK(ncclSend(out, n, ncclFloat32, (rank + 1) % nranks, comm2, NULL));
  NCCL_OK(ncclRecv(in, n, ncclFloat32, (rank + nranks - 1) % nranks, comm2, NULL));
  NCCL_OK(ncclGroupEnd());
  for (size_t i = 0; i < n; i++)
    if (in[i] != (float)((rank + nranks - 1) % nranks * 1000 + (int)i)) { fail("observed: ring", i, in[i], 0); break; }
}

static int cmd_observed(void) {
  enum { N = 64 };
  float out[N], in[N], *all = calloc((size_t)nranks * N, sizeof *all), b[N], red[N];
  for (int i = 0; i < N; i++) out[i] = (float)(rank * 1000 + i);
  ring(out, in, N);
  NCCL_OK(ncclAllGather(out, all, N, ncclFloat32, comm2, NULL));
  for (int i = 0; i < nranks * N; i++)
    if (all[i] != (float)(i / N * 1000 + i % N)) { fail("observed: allgather", (size_t)i, all[i], 0); break; }
  memcpy(b, out, sizeof b);
  NCCL_OK(ncclBroadcast(out, b, N, ncclFloat32, 1 % nranks, comm2, NULL));
  for (int i = 0; i < N; i++)
    if (b[i] != (float)(1 % nranks * 1000 + i)) { fail("observed: broadcast root 1", (size_t)i, b[i], 0); break; }
  memcpy(b, out, sizeof b);
  NCCL_OK(ncclBcast(b, N, ncclFloat32, 0, comm2, NULL));
  for (int i = 0; i < N; i++)
    if (b[i] != (float)i) { fail("observed: bcast root 0", (size_t)i, b[i], i); break; }
  NCCL_OK(ncclReduce(out, red, N, ncclFloat32, ncclSum, 0, comm2, NULL));
  for (int i = 0; rank == 0 && i < N; i++) {
    double want = 1000.0 * nranks * (nranks - 1) / 2 + (double)nranks * i;
    if (red[i] != (float)want) { fail("observed: reduce root 0", (size_t)i, red[i], want); break; }
  }
  ring(out, in, N);
  ncclResult_t r1 = ncclAlltoAll(all, all, N, ncclFloat32, comm2, NULL);
  ncclResult_t r2 = ncclGather(out, all, N, ncclFloat32, 0, comm2, NULL);
  ncclResult_t r3 = ncclScatter(all, out, N, ncclFloat32, 0, comm2, NULL);
  if (r1 != ncclInvalidUsage || r2 != ncclInvalidUsage || r3 != ncclInvalidUsage) {
    fprintf(stderr, "FAIL rank %d: alltoall/gather/scatter returned %d %d %d, the host NCCL's %d expected\n", rank,
            (int)r1, (int)r2, (int)r3, (int)ncclInvalidUsage);
    failures++;
  }
  for (int i = 0; i < N; i++) b[i] = (float)(rank + 1);
  NCCL_OK(ncclAllReduce(b, b, N, ncclFloat32, ncclSum, comm2, NULL));
  if (b[0] != (float)(nranks * (nranks + 1) / 2)) fail("observed: allreduce", 0, b[0], nranks * (nranks + 1) / 2);
  free(all);
  return failures != 0;
}

int main(int argc, char **argv) {
  int provided;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);
  const char *cmd = argc > 1 ? argv[1] : "exact";
  comm = tm_comm_world();
  comm2 = tm_comm_world();
  int rc = 2;
  if (!strcmp(cmd, "hash")) rc = cmd_hash();
  else if (!strcmp(cmd, "exact")) rc = cmd_exact();
  else if (!strcmp(cmd, "quantized")) rc = cmd_quantized();
  else if (!strcmp(cmd, "group")) rc = cmd_group();
  else if (!strcmp(cmd, "special")) rc = cmd_special();
  else if (!strcmp(cmd, "once")) rc = cmd_once(argc > 2 ? atoi(argv[2]) : 0);
  else if (!strcmp(cmd, "pairs")) rc = cmd_pairs(argc > 2 ? (size_t)atol(argv[2]) : 1);
  else if (!strcmp(cmd, "accumgroup")) rc = cmd_accumgroup(argc > 2 ? atoi(argv[2]) : 2);
  else if (!strcmp(cmd, "observed")) rc = cmd_observed();
  else fprintf(stderr, "unknown command %s\n", cmd);
  int all = 0;
  MPI_Allreduce(&rc, &all, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  ncclCommDestroy(comm2);
  ncclCommDestroy(comm);
  MPI_Finalize();
  return all;
}
