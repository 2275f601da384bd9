/* numeric.c — the host NCCL's datatypes and reductions.
 *
 * Our own conversions between fp32 and fp16, bf16, fp8 e4m3 and e5m2, all
 * round-to-nearest-even. fp16 and bf16 overflow to +-Inf; fp8 saturates to the
 * largest finite value (Inf included), as CUDA's __nv_fp8 conversions with
 * __NV_SATFINITE do; NaN stays a quiet NaN. Reductions of the 16- and 8-bit
 * floating types widen both operands to fp32, operate, and round back at
 * every call, i.e. at every ring hop. Integer sums and products wrap; max and
 * min of floats propagate NaN.
 *
 * Must not: share code with the project's compress/ (this is the oracle it is
 * tested against), allocate, or call MPI. */
#include "hostnccl.h"

#include <math.h>
#include <string.h>

static uint32_t f2u(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static float u2f(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

/* m / 2^s rounded to nearest, ties to even (1 <= s <= 31). */
static uint32_t shift_rne(uint32_t m, int s) {
  uint32_t q = m >> s, r = m & ((1u << s) - 1), half = 1u << (s - 1);
  return q + (r > half || (r == half && (q & 1)));
}

/* A binary format with mb mantissa bits and minimum normal exponent emin,
 * exponent bias `bias`. Encodes the magnitude of a finite float (bits ax,
 * sign cleared) as exponent_field << mb | mantissa, unbounded above: a value
 * that rounds past the largest exponent gives a larger code, which the caller
 * turns into Inf or the saturated maximum. */
static uint32_t encode_mag(uint32_t ax, int mb, int emin, int bias) {
  int e = (int)(ax >> 23) - 127;
  if (ax >= 0x00800000u && e >= emin) {           /* normal in the target */
    int s = 23 - mb;
    uint32_t r = ax + ((1u << (s - 1)) - 1) + ((ax >> s) & 1);
    return (r - ((uint32_t)(127 - bias) << 23)) >> s;
  }
  /* Subnormal in the target: count units of 2^(emin - mb). The float is
   * m * 2^E with E = e - 23 (normal) or -149 (float subnormal). */
  uint32_t m = ax >= 0x00800000u ? (ax & 0x7fffffu) | 0x800000u : ax;
  int E = ax >= 0x00800000u ? e - 23 : -149;
  int s = (emin - mb) - E;
  if (s > 25) return 0;                           /* below half the smallest unit */
  return shift_rne(m, s);
}

static float decode_small(uint32_t code, int mb, int bias) {
  uint32_t ex = code >> mb, man = code & ((1u << mb) - 1);
  if (ex == 0) return ldexpf((float)man, 1 - bias - mb);
  return ldexpf((float)((1u << mb) | man), (int)ex - bias - mb);
}

uint16_t hn_f32_to_f16(float f) {
  uint32_t x = f2u(f), sign = (x >> 16) & 0x8000u, ax = x & 0x7fffffffu;
  if (ax - 0x38800000u < 0x477ff000u - 0x38800000u) /* fast path: [2^-14, 65520) -> normal */
    return (uint16_t)(sign | (ax + 0xfffu + ((ax >> 13) & 1) - 0x38000000u) >> 13);
  if (ax > 0x7f800000u) return (uint16_t)(sign | 0x7e00u | ((ax >> 13) & 0x3ffu));
  if (ax == 0x7f800000u) return (uint16_t)(sign | 0x7c00u);
  uint32_t c = encode_mag(ax, 10, -14, 15);
  return (uint16_t)(sign | (c >= 0x7c00u ? 0x7c00u : c));
}

float hn_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16, ex = (h >> 10) & 0x1fu, man = h & 0x3ffu;
  if (ex == 0x1f) return u2f(sign | 0x7f800000u | (man << 13));
  float v = decode_small(h & 0x7fffu, 10, 15);
  return sign ? -v : v;
}

uint16_t hn_f32_to_bf16(float f) {
  uint32_t x = f2u(f), sign = (x >> 16) & 0x8000u, ax = x & 0x7fffffffu;
  if (ax > 0x7f800000u) return (uint16_t)(sign | 0x7fc0u | ((ax >> 16) & 0x7fu));
  /* bf16 keeps fp32's exponent: rounding the low half of the bits is exact
   * for subnormals too and carries into Inf on overflow. */
  return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1)) >> 16);
}

float hn_bf16_to_f32(uint16_t h) { return u2f((uint32_t)h << 16); }

/* fp8: e4m3 has no Inf (S.1111.111 is NaN, max 448); e5m2 is IEEE-like (max 57344). */
static uint8_t to_fp8(float f, int mb, int emin, int bias, uint32_t maxcode, uint32_t nan) {
  uint32_t x = f2u(f), sign = (x >> 24) & 0x80u, ax = x & 0x7fffffffu;
  if (ax > 0x7f800000u) return (uint8_t)(sign | nan);
  if (ax == 0x7f800000u) return (uint8_t)(sign | maxcode);
  uint32_t c = encode_mag(ax, mb, emin, bias);
  return (uint8_t)(sign | (c > maxcode ? maxcode : c));
}

uint8_t hn_f32_to_e4m3(float f) { return to_fp8(f, 3, -6, 7, 0x7e, 0x7f); }
uint8_t hn_f32_to_e5m2(float f) { return to_fp8(f, 2, -14, 15, 0x7b, 0x7e); }

float hn_e4m3_to_f32(uint8_t b) {
  if ((b & 0x7f) == 0x7f) return NAN;
  float v = decode_small(b & 0x7fu, 3, 7);
  return (b & 0x80) ? -v : v;
}

float hn_e5m2_to_f32(uint8_t b) {
  uint32_t ex = (b >> 2) & 0x1f, man = b & 3;
  if (ex == 0x1f) return man ? NAN : ((b & 0x80) ? -INFINITY : INFINITY);
  float v = decode_small(b & 0x7fu, 2, 15);
  return (b & 0x80) ? -v : v;
}

static const struct { const char *name; size_t size; int is_float; } types[ncclNumTypes] = {
  [ncclInt8] = {"int8", 1, 0},       [ncclUint8] = {"uint8", 1, 0},
  [ncclInt32] = {"int32", 4, 0},     [ncclUint32] = {"uint32", 4, 0},
  [ncclInt64] = {"int64", 8, 0},     [ncclUint64] = {"uint64", 8, 0},
  [ncclFloat16] = {"float16", 2, 1}, [ncclFloat32] = {"float32", 4, 1},
  [ncclFloat64] = {"float64", 8, 1}, [ncclBfloat16] = {"bfloat16", 2, 1},
  [ncclFloat8e4m3] = {"float8e4m3", 1, 1}, [ncclFloat8e5m2] = {"float8e5m2", 1, 1},
};

size_t hn_type_size(ncclDataType_t t) { return types[t].size; }
int hn_type_is_float(ncclDataType_t t) { return types[t].is_float; }
const char *hn_type_name(ncclDataType_t t) {
  return (t >= 0 && t < ncclNumTypes) ? types[t].name : "invalid";
}

/* Decoding tables for the kernels (the functions above are the reference
 * they are built from; the unit test checks kernels and reference agree). */
static float tab_f16[1 << 16], tab_e4m3[256], tab_e5m2[256];
static pthread_once_t tab_once = PTHREAD_ONCE_INIT;

static void build_tables(void) {
  for (uint32_t i = 0; i < (1u << 16); i++) tab_f16[i] = hn_f16_to_f32((uint16_t)i);
  for (uint32_t i = 0; i < 256; i++) {
    tab_e4m3[i] = hn_e4m3_to_f32((uint8_t)i);
    tab_e5m2[i] = hn_e5m2_to_f32((uint8_t)i);
  }
}

#define F16(x) tab_f16[(x)]
#define E4M3(x) tab_e4m3[(x)]
#define E5M2(x) tab_e5m2[(x)]

/* One kernel set per datatype, from one macro: T the stored type, C the type
 * operated in, U the unsigned type integer sums and products wrap in. */
#define ID(x) (x)
#define FMAX(a, b) (isnan(a) || isnan(b) ? (a) + (b) : ((a) > (b) ? (a) : (b)))
#define FMIN(a, b) (isnan(a) || isnan(b) ? (a) + (b) : ((a) < (b) ? (a) : (b)))
#define IMAX(a, b) ((a) > (b) ? (a) : (b))
#define IMIN(a, b) ((a) < (b) ? (a) : (b))
#define ADD(U, a, b) ((U)(a) + (U)(b))
#define MUL(U, a, b) ((U)(a) * (U)(b))

#define KERNELS(tag, T, C, U, LOAD, STORE, MAX, MIN)                                     \
  static void reduce_##tag(void *d, const void *s, size_t n, enum hn_redop op) {         \
    T *dst = d;                                                                          \
    const T *src = s;                                                                    \
    switch (op) {                                                                        \
    case HN_SUM: for (size_t i = 0; i < n; i++) dst[i] = STORE((C)ADD(U, LOAD(src[i]), LOAD(dst[i]))); break; \
    case HN_PROD: for (size_t i = 0; i < n; i++) dst[i] = STORE((C)MUL(U, LOAD(src[i]), LOAD(dst[i]))); break; \
    case HN_MAX: for (size_t i = 0; i < n; i++) { C a = LOAD(src[i]), b = LOAD(dst[i]); dst[i] = STORE(MAX(a, b)); } break; \
    case HN_MIN: for (size_t i = 0; i < n; i++) { C a = LOAD(src[i]), b = LOAD(dst[i]); dst[i] = STORE(MIN(a, b)); } break; \
    }                                                                                    \
  }                                                                                      \
  static void premul_##tag(void *d, const void *s, size_t n, const void *scalar) {       \
    T *dst = d;                                                                          \
    const T *src = s;                                                                    \
    T sc;                                                                                \
    memcpy(&sc, scalar, sizeof sc);                                                      \
    C c = LOAD(sc);                                                                      \
    for (size_t i = 0; i < n; i++) dst[i] = STORE((C)MUL(U, LOAD(src[i]), c));           \
  }

KERNELS(i8, int8_t, int8_t, unsigned, ID, ID, IMAX, IMIN)
KERNELS(u8, uint8_t, uint8_t, unsigned, ID, ID, IMAX, IMIN)
KERNELS(i32, int32_t, int32_t, uint32_t, ID, ID, IMAX, IMIN)
KERNELS(u32, uint32_t, uint32_t, uint32_t, ID, ID, IMAX, IMIN)
KERNELS(i64, int64_t, int64_t, uint64_t, ID, ID, IMAX, IMIN)
KERNELS(u64, uint64_t, uint64_t, uint64_t, ID, ID, IMAX, IMIN)
KERNELS(f32, float, float, float, ID, ID, FMAX, FMIN)
KERNELS(f64, double, double, double, ID, ID, FMAX, FMIN)
KERNELS(f16, uint16_t, float, float, F16, hn_f32_to_f16, FMAX, FMIN)
KERNELS(bf16, uint16_t, float, float, hn_bf16_to_f32, hn_f32_to_bf16, FMAX, FMIN)
KERNELS(e4m3, uint8_t, float, float, E4M3, hn_f32_to_e4m3, FMAX, FMIN)
KERNELS(e5m2, uint8_t, float, float, E5M2, hn_f32_to_e5m2, FMAX, FMIN)

static const struct {
  void (*reduce)(void *, const void *, size_t, enum hn_redop);
  void (*premul)(void *, const void *, size_t, const void *);
} kern[ncclNumTypes] = {
  [ncclInt8] = {reduce_i8, premul_i8},       [ncclUint8] = {reduce_u8, premul_u8},
  [ncclInt32] = {reduce_i32, premul_i32},    [ncclUint32] = {reduce_u32, premul_u32},
  [ncclInt64] = {reduce_i64, premul_i64},    [ncclUint64] = {reduce_u64, premul_u64},
  [ncclFloat16] = {reduce_f16, premul_f16},  [ncclFloat32] = {reduce_f32, premul_f32},
  [ncclFloat64] = {reduce_f64, premul_f64},  [ncclBfloat16] = {reduce_bf16, premul_bf16},
  [ncclFloat8e4m3] = {reduce_e4m3, premul_e4m3}, [ncclFloat8e5m2] = {reduce_e5m2, premul_e5m2},
};

void hn_reduce(void *dst, const void *src, size_t n, ncclDataType_t t, enum hn_redop op) {
  pthread_once(&tab_once, build_tables);
  kern[t].reduce(dst, src, n, op);
}

void hn_premul(void *dst, const void *src, size_t n, ncclDataType_t t, const void *scalar) {
  pthread_once(&tab_once, build_tables);
  kern[t].premul(dst, src, n, scalar);
}

#define POSTDIV(T)                                             \
  do {                                                         \
    T *p = buf;                                                \
    for (size_t i = 0; i < n; i++) p[i] = (T)(p[i] / (T)d);    \
  } while (0)

void hn_postdiv(void *buf, size_t n, ncclDataType_t t, int d) {
  switch (t) {
  case ncclInt8: POSTDIV(int8_t); break;
  case ncclUint8: POSTDIV(uint8_t); break;
  case ncclInt32: POSTDIV(int32_t); break;
  case ncclUint32: POSTDIV(uint32_t); break;
  case ncclInt64: POSTDIV(int64_t); break;
  case ncclUint64: POSTDIV(uint64_t); break;
  default: break; /* floating types average by pre-multiplying */
  }
}

void hn_scalar_from_double(ncclDataType_t t, double v, void *out) {
  float f = (float)v;
  uint16_t h;
  uint8_t b;
  switch (t) {
  case ncclFloat16: h = hn_f32_to_f16(f); memcpy(out, &h, 2); break;
  case ncclBfloat16: h = hn_f32_to_bf16(f); memcpy(out, &h, 2); break;
  case ncclFloat8e4m3: b = hn_f32_to_e4m3(f); memcpy(out, &b, 1); break;
  case ncclFloat8e5m2: b = hn_f32_to_e5m2(f); memcpy(out, &b, 1); break;
  case ncclFloat32: memcpy(out, &f, 4); break;
  case ncclFloat64: memcpy(out, &v, 8); break;
  default: break; /* integer averages divide after the sum */
  }
}
