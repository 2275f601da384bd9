/* perf_data.c — datatypes, input generation and result checking for
 * allreduce_perf (the scheme is described in perf_data.h).
 *
 * fp16 and bf16 are converted here by a small generic codec (round to nearest
 * even through rint()), independent of the shim's casts in compress/: the
 * checker must not share code with what it checks.
 *
 * Must not: call NCCL, MPI or CUDA; allocate; depend on the rounding mode
 * being anything but the default (round to nearest even). */
#include "perf_data.h"
#include "wire.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

const perf_type_t perf_types[] = {
  /* exact_limit: |partial results| stay below it, so they are exact. float
   * uses bf16's 2^8 (not 2^24) so its data stay exact in the shim's wire
   * types; the floating types shift values by up to 2^±4 on top. */
  {"int8", ncclInt8, 1, PERF_INT, 127, 0},
  {"uint8", ncclUint8, 1, PERF_UINT, 255, 0},
  {"int32", ncclInt32, 4, PERF_INT, 0x1p20, 0},
  {"uint32", ncclUint32, 4, PERF_UINT, 0x1p20, 0},
  {"int64", ncclInt64, 8, PERF_INT, 0x1p20, 0},
  {"uint64", ncclUint64, 8, PERF_UINT, 0x1p20, 0},
  {"half", ncclFloat16, 2, PERF_FLOAT, 0x1p11, 0x1p-11},
  {"float", ncclFloat32, 4, PERF_FLOAT, 0x1p8, 0x1p-24},
  {"double", ncclFloat64, 8, PERF_FLOAT, 0x1p20, 0x1p-53},
  {"bfloat16", ncclBfloat16, 2, PERF_FLOAT, 0x1p8, 0x1p-8},
};
const int perf_ntypes = (int)(sizeof perf_types / sizeof perf_types[0]);

const perf_op_t perf_ops[] = {
  {"sum", ncclSum}, {"prod", ncclProd}, {"max", ncclMax}, {"min", ncclMin}, {"avg", ncclAvg},
};
const int perf_nops = (int)(sizeof perf_ops / sizeof perf_ops[0]);

int perf_type_index(const char *name) {
  for (int i = 0; i < perf_ntypes; i++)
    if (strcmp(name, perf_types[i].name) == 0) return i;
  /* nccl-tests also knows these aliases. */
  if (strcmp(name, "char") == 0) return 0;
  if (strcmp(name, "int") == 0) return 2;
  if (strcmp(name, "fp16") == 0) return 6;
  if (strcmp(name, "fp32") == 0) return 7;
  if (strcmp(name, "fp64") == 0) return 8;
  if (strcmp(name, "bf16") == 0) return 9;
  return -1;
}

int perf_op_index(const char *name) {
  for (int i = 0; i < perf_nops; i++)
    if (strcmp(name, perf_ops[i].name) == 0) return i;
  return -1;
}

/* The 16-bit floats: one rounding's relative error (compress/formats.h). */
double perf_wire_unit(const char *wire) {
  int f = nsc_fmt_by_name(wire);
  return f >= 0 && !nsc_fmt_blocked((nsc_fmt_t)f) ? nsc_fmt_bound((nsc_fmt_t)f) : 0;
}

/* The block-scaled formats, per element: two roundings (input and sum) of at
 * most their bound times the block's largest |x| each (compress/formats.h:
 * int8 M/127.5, fp8 (2^-4 + 2^-17) M, fp16s (2^-11 + 2^-39) M, int4 M/7.5);
 * blocks whose largest |x| reaches 2^111 round their top step down (more
 * than that), which the generated data never comes near. */
double perf_wire_block_coef(const char *wire) {
  int f = nsc_fmt_by_name(wire);
  return f >= 0 && nsc_fmt_blocked((nsc_fmt_t)f) ? 2 * nsc_fmt_bound((nsc_fmt_t)f) : 0;
}

/* ---- fp16 / bf16: sign, ebits exponent bits, mbits stored mantissa bits ---- */

static uint16_t mini_encode(double x, int ebits, int mbits) {
  const int bias = (1 << (ebits - 1)) - 1;
  const uint32_t sign = signbit(x) ? 1u << (ebits + mbits) : 0;
  const uint32_t expall = ((1u << ebits) - 1) << mbits;
  if (isnan(x)) return (uint16_t)(sign | expall | (1u << (mbits - 1)));
  x = fabs(x);
  if (isinf(x)) return (uint16_t)(sign | expall);
  if (x == 0) return (uint16_t)sign;
  int e = ilogb(x);
  if (e < 1 - bias) e = 1 - bias; /* subnormals share the smallest exponent */
  double q = rint(ldexp(x, mbits - e)); /* one rounding, to nearest even */
  if (q >= ldexp(1, mbits + 1)) { q /= 2; e++; } /* rounded up to the next binade */
  if (e > bias) return (uint16_t)(sign | expall); /* beyond the range: Inf */
  uint32_t qi = (uint32_t)q;
  if (qi < (1u << mbits)) return (uint16_t)(sign | qi); /* subnormal */
  return (uint16_t)(sign | ((uint32_t)(e + bias) << mbits) | (qi - (1u << mbits)));
}

static double mini_decode(uint16_t h, int ebits, int mbits) {
  const int bias = (1 << (ebits - 1)) - 1;
  const unsigned e = (h >> mbits) & ((1u << ebits) - 1), m = h & ((1u << mbits) - 1);
  const double s = (h >> (ebits + mbits)) & 1 ? -1.0 : 1.0;
  if (e == (1u << ebits) - 1) return m ? NAN : s * INFINITY;
  if (e == 0) return s * ldexp(m, 1 - bias - mbits);
  return s * ldexp(m + (1u << mbits), (int)e - bias - mbits);
}

double perf_load(const perf_type_t *t, const void *p) {
  union { int8_t i8; uint8_t u8; int32_t i32; uint32_t u32; int64_t i64; uint64_t u64;
          uint16_t h; float f; double d; } u;
  memcpy(&u, p, t->size);
  switch (t->nccl) {
  case ncclInt8: return u.i8;
  case ncclUint8: return u.u8;
  case ncclInt32: return u.i32;
  case ncclUint32: return u.u32;
  case ncclInt64: return (double)u.i64;
  case ncclUint64: return (double)u.u64;
  case ncclFloat16: return mini_decode(u.h, 5, 10);
  case ncclBfloat16: return mini_decode(u.h, 8, 7);
  case ncclFloat32: return u.f;
  case ncclFloat64: return u.d;
  default: return NAN;
  }
}

void perf_store(const perf_type_t *t, void *p, double v) {
  union { int8_t i8; uint8_t u8; int32_t i32; uint32_t u32; int64_t i64; uint64_t u64;
          uint16_t h; float f; double d; } u;
  switch (t->nccl) {
  case ncclInt8: u.i8 = (int8_t)v; break;
  case ncclUint8: u.u8 = (uint8_t)v; break;
  case ncclInt32: u.i32 = (int32_t)v; break;
  case ncclUint32: u.u32 = (uint32_t)v; break;
  case ncclInt64: u.i64 = (int64_t)v; break;
  case ncclUint64: u.u64 = (uint64_t)v; break;
  case ncclFloat16: u.h = mini_encode(v, 5, 10); break;
  case ncclBfloat16: u.h = mini_encode(v, 8, 7); break;
  case ncclFloat32: u.f = (float)v; break;
  case ncclFloat64: u.d = v; break;
  default: return;
  }
  memcpy(p, &u, t->size);
}

/* ---- generation ---- */

/* Hash streams besides the ranks (ranks use 0..nranks-1). */
enum { STREAM_ELEM = 1 << 20, STREAM_PAIR = 2 << 20 };

static inline uint64_t hash3(uint64_t seed, uint64_t stream, uint64_t i) {
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + (stream << 40) + i; /* splitmix64 finaliser */
  x ^= x >> 31; x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 27; x *= 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

void perf_gen_init(perf_gen_t *g, const perf_type_t *t, const perf_op_t *op,
                   int nranks, uint64_t seed, int random) {
  g->type = t;
  g->op = op;
  g->nranks = nranks;
  g->seed = seed;
  g->random = random && t->kind == PERF_FLOAT;
  g->mag = floor(t->exact_limit / nranks);
  if (g->mag < 1) g->mag = 1; /* more ranks than the type can sum exactly */
  g->first = 0;
}

static int is_pow2(int n) { return n > 0 && (n & (n - 1)) == 0; }

int perf_gen_bounded(const perf_gen_t *g) {
  ncclRedOp_t op = g->op->nccl;
  if (g->random) return op == ncclSum || op == ncclAvg || op == ncclProd;
  return g->type->kind == PERF_FLOAT && op == ncclAvg && !is_pow2(g->nranks);
}

/* Random mode: full-mantissa values, exact in the type. */
static double random_value(const perf_gen_t *g, int r, size_t i) {
  const int p = -ilogb(g->type->unit); /* significant bits: 11, 8, 24, 53 */
  uint64_t h = hash3(g->seed, (uint64_t)r, i);
  double m = ldexp(1, p - 1) + (double)(h & ((1ull << (p - 1)) - 1)); /* [2^(p-1), 2^p) */
  double s = (h >> 63) ? -1.0 : 1.0;
  if (g->op->nccl == ncclProd) /* [1, 2) on 8 ranks at most, +-1 beyond: no overflow */
    return r < 8 ? s * ldexp(m, 1 - p) : s;
  return s * ldexp(m, -p - (int)((h >> 60) & 3)); /* [2^-4, 1) */
}

/* Exact mode: small integers (times 2^-4..2^4 for floating types). */
static double exact_value(const perf_gen_t *g, int r, size_t i) {
  const int sgn = g->type->kind != PERF_UINT, fl = g->type->kind == PERF_FLOAT;
  const uint64_t e = hash3(g->seed, STREAM_ELEM, i);
  const double m = g->mag;
  const int shift = fl ? (int)(e % 9) - 4 : 0;
  double v;
  switch (g->op->nccl) {
  case ncclProd: /* +-1 or +-2, at most 6 ranks with 2: |product| <= 64 */
    v = (r < 6 && ((e >> r) & 1)) ? 2 : 1;
    if (sgn && ((e >> (8 + r % 48)) & 1)) v = -v;
    return v;
  case ncclAvg: { /* c +- d in pairs of ranks: the sum is n*c, the average c */
    const double dmax = floor(m / 2), cmax = m - dmax;
    double c = sgn ? (double)(e % (uint64_t)(2 * cmax + 1)) - cmax
                   : dmax + (double)(e % (uint64_t)(cmax - dmax + 1));
    double d = (double)(hash3(g->seed, STREAM_PAIR + (uint64_t)r / 2, i) % (uint64_t)(dmax + 1));
    if (r % 2 == 1) v = c - d;
    else v = r + 1 < g->nranks ? c + d : c;
    return ldexp(v, shift);
  }
  default: { /* sum, min, max: |x| <= mag, so every partial sum is exact */
    uint64_t h = hash3(g->seed, (uint64_t)r, i);
    v = sgn ? (double)(h % (uint64_t)(2 * m + 1)) - m : (double)(h % (uint64_t)(m + 1));
    return ldexp(v, shift);
  }
  }
}

static inline double gen_value(const perf_gen_t *g, int r, size_t i) {
  return g->random ? random_value(g, r, i) : exact_value(g, r, i);
}

/* The exact result of element i and the scale its bound uses: sum |x_r|
 * (sum), sum |x_r| / n (avg), prod |x_r| (prod), 0 (min, max). Long double:
 * a double reference for random fp64 inputs would itself be off by ~(n-1)u. */
static long double exact_result(const perf_gen_t *g, size_t i, long double *scale) {
  const ncclRedOp_t op = g->op->nccl;
  long double acc = gen_value(g, 0, i);
  long double abs_acc = fabsl(acc);
  for (int r = 1; r < g->nranks; r++) {
    long double v = gen_value(g, r, i);
    switch (op) {
    case ncclProd: acc *= v; abs_acc *= fabsl(v); break;
    case ncclMax: acc = v > acc ? v : acc; break;
    case ncclMin: acc = v < acc ? v : acc; break;
    default: acc += v; abs_acc += fabsl(v); break;
    }
  }
  if (op == ncclAvg) {
    acc /= g->nranks;
    abs_acc /= g->nranks;
  }
  *scale = (op == ncclMax || op == ncclMin) ? 0 : abs_acc;
  return acc;
}

static double bound_coef(const perf_gen_t *g) {
  return g->op->nccl == ncclAvg ? g->nranks + 2 : g->nranks + 1;
}

void perf_fill_input(const perf_gen_t *g, int rank, void *buf, size_t count) {
  char *p = buf;
  for (size_t i = 0; i < count; i++) perf_store(g->type, p + i * g->type->size, gen_value(g, rank, i));
}

void perf_fill_sentinel(const perf_gen_t *g, void *buf, size_t count) {
  unsigned char *p = buf;
  const size_t sz = g->type->size;
  long double scale;
  for (size_t i = 0; i < count; i++) {
    perf_store(g->type, p + i * sz, (double)exact_result(g, g->first + i, &scale));
    for (size_t b = 0; b < sz; b++) p[i * sz + b] = (unsigned char)~p[i * sz + b];
  }
}

void perf_check_result(const perf_gen_t *g, const void *got, size_t count,
                       double unit, perf_check_t *res) {
  const unsigned char *p = got;
  const size_t sz = g->type->size;
  const int bounded = perf_gen_bounded(g);
  const double coef = bound_coef(g);
  unsigned char want[8];
  for (size_t i = 0; i < count; i++) {
    long double scale, exact = exact_result(g, g->first + i, &scale);
    long double v = perf_load(g->type, p + i * sz);
    long double err = fabsl(v - exact);
    if (bounded) {
      if (!(err <= coef * unit * scale)) res->wrong++; /* NaN is wrong too */
    } else {
      perf_store(g->type, want, (double)exact);
      if (memcmp(want, p + i * sz, sz) != 0) res->wrong++;
    }
    /* Relative to the data's magnitude, not to |exact|: cancellation makes
     * the plain relative error of a near-zero sum meaningless. */
    long double denom = scale > 0 ? scale : fabsl(exact);
    double rel = denom != 0 ? (double)(err / denom) : (err == 0 ? 0 : INFINITY);
    if (isnan(rel)) rel = INFINITY;
    if (rel > res->max_relerr) res->max_relerr = rel;
  }
}

uint64_t perf_count_changed(const perf_gen_t *g, int rank, const void *buf, size_t count) {
  const unsigned char *p = buf;
  const size_t sz = g->type->size;
  unsigned char want[8];
  uint64_t changed = 0;
  for (size_t i = 0; i < count; i++) {
    perf_store(g->type, want, gen_value(g, rank, i));
    if (memcmp(want, p + i * sz, sz) != 0) changed++;
  }
  return changed;
}

void perf_corrupt_one(const perf_type_t *t, void *buf, size_t count) {
  if (count == 0) return;
  /* Little-endian: the top byte's bit 6 is the exponent's top bit for the
   * floating types (x becomes ~x*2^(2^(ebits-1)) or ~x/2^(...)) and 2^(8s-2)
   * for the integers. */
  unsigned char *p = (unsigned char *)buf + (count / 2) * t->size + t->size - 1;
  *p ^= 0x40;
}

void perf_check_block(const perf_gen_t *g, const void *got, size_t count, double coef, size_t block,
                      perf_check_t *res) {
  const unsigned char *p = got;
  const size_t sz = g->type->size, n = (size_t)g->nranks, end = g->first + count;
  const size_t nb = (end + block - 1) / block; /* aligned blocks of the whole index range up to the end */
  double *bm = calloc(nb * n + 1, sizeof *bm); /* bm[r * nb + k]: max |x_r| in block k */
  if (!bm) {
    res->wrong += count; /* cannot check: count everything wrong rather than pass */
    return;
  }
  size_t lo = g->first / block > 0 ? (g->first / block - 1) * block : 0;
  for (size_t r = 0; r < n; r++)
    for (size_t i = lo; i < end; i++) {
      double a = fabs(gen_value(g, (int)r, i));
      if (a > bm[r * nb + i / block]) bm[r * nb + i / block] = a;
    }
  const double div = g->op->nccl == ncclAvg ? (double)n : 1.0;
  for (size_t i = 0; i < count; i++) {
    size_t k = (g->first + i) / block;
    double m = 0;
    for (size_t r = 0; r < n; r++) {
      double w = bm[r * nb + k];
      if (k > 0 && bm[r * nb + k - 1] > w) w = bm[r * nb + k - 1];
      if (k + 1 < nb && bm[r * nb + k + 1] > w) w = bm[r * nb + k + 1];
      m += w;
    }
    long double scale, exact = exact_result(g, g->first + i, &scale);
    long double err = fabsl(perf_load(g->type, p + i * sz) - exact);
    if (!(err <= coef * m / div + (double)(n + 1) * 0x1p-24 * scale)) res->wrong++;
    long double denom = scale > 0 ? scale : fabsl(exact);
    double rel = denom != 0 ? (double)(err / denom) : (err == 0 ? 0 : INFINITY);
    if (isnan(rel)) rel = INFINITY;
    if (rel > res->max_relerr) res->max_relerr = rel;
  }
  free(bm);
}
