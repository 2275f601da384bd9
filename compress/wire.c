/* wire.c — the fast host path of the wire formats (wire.h).
 *
 * fp16/bf16 go through the vectorised casts of cast.c. The block-scaled
 * formats work block by block: one pass for the largest finite |x| (integer
 * max over the bit patterns), the scale exponent, one pass of codes (fp16s:
 * the fp16 cast with the block's power-of-two scale; int4: int8's loop with
 * int4's limit, then packed two per byte); each pass is a plain
 * loop without branches that the compiler vectorises, built twice (AVX2 and
 * baseline, chosen at load by the ifunc of target_clones; baseline only in
 * ASan/TSan builds, whose runtimes cannot run an ifunc resolver at load). A block holding
 * Inf or NaN, or a header marked invalid, goes through the reference element
 * rules. Every result is bit-identical to wire_ref.c (tests/unit/test_wire.c);
 * the file is compiled with -ffp-contract=off so no multiply-add is fused.
 *
 * nsc_fmt_encode_opt (error feedback, stochastic rounding) works on tiles of
 * y = x * scale + r: the sums, the scale exponents, nearest codes and the new
 * residuals in vectorised loops as above; stochastic codes and blocks holding
 * Inf/NaN element by element through the rules of wire_bits.h.
 *
 * Must not: allocate (tiles live on the stack: block <= NSC_FMT_MAX_BLOCK),
 * print, or start threads. */
#include <pthread.h>
#include <string.h>

#include "wire.h"
#include "wire_bits.h"

#define NSC_FMT_MAX_BLOCK 4096
#define TILE 1024

#if defined(__x86_64__) && !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
#define CLONES __attribute__((target_clones("avx2", "default")))
#else
#define CLONES
#endif

static float e4m3_lut[256];
static pthread_once_t lut_once = PTHREAD_ONCE_INIT;
static void lut_init(void) {
  for (int i = 0; i < 256; i++) e4m3_lut[i] = nsc_e4m3_value((uint8_t)i);
}

/* Two max reductions in signed 32-bit integers (|x|'s bits are below 2^31):
 * of select(finite, |x|, 0) and of |x| (>= Inf: special). In this form the
 * compiler emits vector compares and maxima; "fin && a > m ? a : m" on
 * unsigned values compiled to a scalar loop with a data-dependent branch,
 * which took most of an int8 encode's time (bench/wire_perf). */
CLONES static uint32_t finite_amax(const float *x, size_t n, int *special) {
  int32_t m = 0, all = 0;
  for (size_t i = 0; i < n; i++) {
    int32_t a = (int32_t)(NSC_F2U(x[i]) & 0x7fffffffu);
    int32_t v = a < (int32_t)NSC_F32_INF ? a : 0;
    m = m > v ? m : v;
    all = all > a ? all : a;
  }
  *special = all >= (int32_t)NSC_F32_INF;
  return (uint32_t)m;
}

/* Clamped before rounding (the same codes: +-lim are integers and rint is
 * monotonic), so the clamp stays in float min/max instead of integer masks. */
CLONES static void int8_codes(const float *x, int8_t *c, size_t n, float p1, float p2, float lim) {
  for (size_t i = 0; i < n; i++) {
    float v = x[i] * p1 * p2;
    v = v > lim ? lim : v;
    v = v < -lim ? -lim : v;
    c[i] = (int8_t)(int)rintf(v);
  }
}

CLONES static void fp8_codes(const float *x, uint8_t *c, size_t n, float p1, float p2, uint32_t lim) {
  for (size_t i = 0; i < n; i++) {
    uint32_t u = NSC_F2U(x[i] * p1 * p2), sign = (u >> 24) & 0x80u, a = u & 0x7fffffffu;
    uint32_t e = a >> 23, s = 141u - e < 31u ? 141u - e : 31u;
    uint32_t m = (a & 0x7fffffu) | 0x800000u;
    uint32_t rs = (m + (1u << (s - 1u)) - 1u + ((m >> s) & 1u)) >> s;
    uint32_t rn = (a - 0x3c000000u + 0x7ffffu + ((a >> 20) & 1u)) >> 20;
    uint32_t r = a < 0x3c800000u ? rs : rn;
    c[i] = (uint8_t)(sign | (r > lim ? lim : r));
  }
}

CLONES static void int8_values(const int8_t *c, float *d, size_t n, float p1, float p2) {
  for (size_t i = 0; i < n; i++) d[i] = (float)c[i] * p1 * p2;
}

CLONES static void fp8_values(const uint8_t *c, float *d, size_t n, float p1, float p2) {
  for (size_t i = 0; i < n; i++) d[i] = e4m3_lut[c[i]] * p1 * p2;
}

CLONES static void mul_into(float *d, const float *s, size_t n, float f) {
  for (size_t i = 0; i < n; i++) d[i] = s[i] * f;
}

CLONES static void add_into(float *acc, const float *t, size_t n) {
  for (size_t i = 0; i < n; i++) acc[i] = acc[i] + t[i];
}

CLONES static void canon_nan(float *d, size_t n) {
  for (size_t i = 0; i < n; i++) {
    uint32_t u = NSC_F2U(d[i]);
    d[i] = NSC_U2F((u & 0x7fffffffu) > NSC_F32_INF ? NSC_NAN_BITS : u);
  }
}

static void split(int e, float *p1, float *p2) {
  int e1 = nsc_pow2_split(e);
  *p1 = nsc_pow2(e1);
  *p2 = nsc_pow2(e - e1);
}

/* int4: codes c[0..len) (-8..7) into the run's nibbles from element lo. */
CLONES static void pack_pairs(uint8_t *dst, const int8_t *c, size_t npairs) {
  for (size_t j = 0; j < npairs; j++) dst[j] = (uint8_t)(((uint8_t)c[2 * j] & 0x0fu) | ((uint8_t)c[2 * j + 1] << 4));
}
static void pack_int4(uint8_t *codes, size_t lo, const int8_t *c, size_t len) {
  size_t i = 0;
  if (lo % 2 && len) nsc_code_put(NSC_FMT_INT4, codes, lo + i++, nsc_nib(c[0])); /* an odd start: its high nibble */
  pack_pairs(codes + (lo + i) / 2, c + i, (len - i) / 2);
  i += (len - i) / 2 * 2;
  if (i < len) nsc_code_put(NSC_FMT_INT4, codes, lo + i, nsc_nib(c[i]));
}
/* The codes of whole bytes: the low nibble first, each sign-extended by
 * shifts of a signed byte (nsc_unnib's value), in a loop the compiler
 * vectorises (selecting each element's nibble by its index did not: int4
 * decoded at a third of int8's speed, bench/wire_perf). */
CLONES static void unpack_pairs(const uint8_t *src, int8_t *c, size_t npairs) {
  for (size_t j = 0; j < npairs; j++) {
    int8_t b = (int8_t)src[j];
    c[2 * j] = (int8_t)((int8_t)(b * 16) >> 4);
    c[2 * j + 1] = (int8_t)(b >> 4);
  }
}
static void unpack_int4(const uint8_t *codes, size_t lo, int8_t *c, size_t len) {
  size_t i = 0;
  if (lo % 2 && len) c[i++] = nsc_unnib(codes[lo / 2] >> 4); /* an odd start: its high nibble */
  unpack_pairs(codes + (lo + i) / 2, c + i, (len - i) / 2);
  i += (len - i) / 2 * 2;
  if (i < len) c[i] = nsc_unnib(codes[(lo + i) / 2]);
}

/* Values of a block (elements lo.. of the run) flushed to zero by their
 * codes (an underflow each): loops the compiler vectorises over whole codes
 * (int4's unpacked, fp16s' copied out first); reading each code through
 * nsc_code_get took a quarter of an int4 all-reduce's CPU time (perf). */
/* (a block is at most NSC_FMT_MAX_BLOCK elements: 32-bit counts, which
 * vectorise where 64-bit ones widen every lane) */
CLONES static uint32_t flushed8(int int8, const float *y, const uint8_t *c, size_t len) {
  uint32_t k = 0;
  for (size_t i = 0; i < len; i++) k += nsc_w8_flushed(int8, NSC_F2U(y[i]) & 0x7fffffffu, c[i]);
  return k;
}
CLONES static uint32_t flushed_int(const float *y, const int8_t *c, size_t len) {
  uint32_t k = 0;
  for (size_t i = 0; i < len; i++) k += nsc_bs_flushed(NSC_FMT_INT4, NSC_F2U(y[i]) & 0x7fffffffu, nsc_nib(c[i]));
  return k;
}
CLONES static uint32_t flushed16(const float *y, const uint16_t *c, size_t len) {
  uint32_t k = 0;
  for (size_t i = 0; i < len; i++) k += nsc_bs_flushed(NSC_FMT_FP16S, NSC_F2U(y[i]) & 0x7fffffffu, c[i]);
  return k;
}
static uint64_t flushed(nsc_fmt_t f, const float *y, const uint8_t *codes, size_t lo, size_t len) {
  if (f == NSC_FMT_INT8 || f == NSC_FMT_FP8) return flushed8(f == NSC_FMT_INT8, y, codes + lo, len);
  if (f == NSC_FMT_INT4) {
    int8_t c[NSC_FMT_MAX_BLOCK];
    unpack_int4(codes, lo, c, len);
    return flushed_int(y, c, len);
  }
  uint16_t c[NSC_FMT_MAX_BLOCK];
  memcpy(c, codes + 2 * lo, 2 * len);
  return flushed16(y, c, len);
}

/* One element's code by the rules of wire_bits.h. */
static void code_at(nsc_fmt_t f, uint8_t *codes, size_t i, float y, int k, uint32_t lim, int sr, uint32_t u24) {
  nsc_code_put(f, codes, i, nsc_bs_code_x((int)f, y, k, lim, sr, u24));
}

/* The codes of one block of y (len elements from element lo of the run,
 * scale exponent k, limit lim): the vectorised loops (fp16s: the fp16 cast,
 * one multiply by 2^-k, which rounds once as nsc_ldexp2 does; int4: int8's
 * loop with its limit, then packed), or element by element through the
 * rules where the loops do not apply: a block holding Inf/NaN, stochastic
 * rounding, an fp16s top block (lim clamps) or scale beyond one float. */
static void block_codes(nsc_fmt_t f, const float *y, uint8_t *codes, size_t lo, size_t len, int k, uint32_t lim,
                        int special, const nsc_enc_opt *o) {
  int sr = o && o->stochastic;
  if (special || sr || (f == NSC_FMT_FP16S && (lim != NSC_F16S_LIM || k < -126 || k > 126))) {
    for (size_t i = 0; i < len; i++)
      code_at(f, codes, lo + i, y[i], k, lim, sr, sr ? nsc_sr_bits(o->key, lo + i) : 0);
    return;
  }
  if (f == NSC_FMT_FP16S) {
    nsc_cast_to_wire(NSC_FMT_FP16, y, (uint16_t *)(void *)(codes + 2 * lo), len, nsc_pow2(-k), NULL);
    return;
  }
  float p1, p2;
  split(-k, &p1, &p2);
  if (f == NSC_FMT_INT4) {
    int8_t c[NSC_FMT_MAX_BLOCK];
    int8_codes(y, c, len, p1, p2, (float)lim);
    pack_int4(codes, lo, c, len);
  } else if (f == NSC_FMT_INT8) {
    int8_codes(y, (int8_t *)(codes + lo), len, p1, p2, (float)lim);
  } else {
    fp8_codes(y, codes + lo, len, p1, p2, lim);
  }
}

/* Elements [lo, lo + len) of the input as fp32 values times scale: the
 * input itself (fp32, scale 1), or tile (a 16-bit input widened, exactly,
 * then multiplied: what encoding its fp32 copy would read). */
static const float *load(nsc_fmt_t in, const void *src, size_t lo, size_t len, float scale, float *tile) {
  if (in != NSC_FMT_FP32) {
    nsc_cast_from_wire(in, (const uint16_t *)src + lo, tile, len, scale);
    return tile;
  }
  const float *x = (const float *)src + lo;
  if (scale == 1.0f) return x;
  mul_into(tile, x, len, scale);
  return tile;
}

static void encode_blocked(nsc_fmt_t in, nsc_fmt_t f, size_t block, const void *src, uint8_t *dst, size_t n,
                           float scale, nsc_cast_counts *counts) {
  float tile[NSC_FMT_MAX_BLOCK];
  uint64_t uf = 0;
  size_t nb = (n + block - 1) / block;
  uint8_t *codes = dst + 2 * nb;
  for (size_t b = 0; b < nb; b++) {
    size_t lo = b * block, len = lo + block < n ? block : n - lo;
    const float *x = load(in, src, lo, len, scale, tile);
    int special;
    uint32_t amax = finite_amax(x, len, &special);
    int k = nsc_bs_k((int)f, amax);
    uint32_t lim = nsc_bs_lim((int)f, amax, k, special);
    uint16_t h = nsc_bs_header(k, special);
    memcpy(dst + 2 * b, &h, 2);
    block_codes(f, x, codes, lo, len, k, lim, special, NULL);
    if (counts) uf += flushed(f, x, codes, lo, len);
  }
  if (counts) counts->underflow += uf;
}

/* A 16-bit wire from a 16-bit input: tile by tile (the cast's own threads
 * and streaming stores are for whole fp32 buffers). */
static void encode16_in(nsc_fmt_t in, nsc_fmt_t f, const void *src, uint16_t *dst, size_t n, float scale,
                        nsc_cast_counts *counts) {
  float t[TILE];
  for (size_t i0 = 0; i0 < n; i0 += TILE) {
    size_t len = n - i0 < TILE ? n - i0 : TILE;
    nsc_cast_to_wire(f, load(in, src, i0, len, scale, t), dst + i0, len, 1.0f, counts);
  }
}

static void encode_in(nsc_fmt_t in, nsc_fmt_t f, size_t block, const void *src, void *dst, size_t n, float scale,
                      nsc_cast_counts *counts) {
  if (nsc_fmt_blocked(f)) encode_blocked(in, f, block, src, dst, n, scale, counts);
  else if (in == NSC_FMT_FP32) nsc_cast_to_wire(f, src, dst, n, scale, counts);
  else encode16_in(in, f, src, dst, n, scale, counts);
}

void nsc_fmt_encode(nsc_fmt_t f, size_t block, const float *src, void *dst, size_t n, float scale,
                    nsc_cast_counts *counts) {
  encode_in(NSC_FMT_FP32, f, block, src, dst, n, scale, counts);
}

/* Elements [i0, i0 + len) of an encoded run of n, unscaled. */
static void decode_range(nsc_fmt_t f, size_t block, const void *src, size_t n, size_t i0, size_t len, float *d) {
  if (!nsc_fmt_blocked(f)) {
    nsc_cast_from_wire(f, (const uint16_t *)src + i0, d, len, 1.0f);
    return;
  }
  if (f == NSC_FMT_FP8) pthread_once(&lut_once, lut_init);
  const uint8_t *codes = (const uint8_t *)src + 2 * ((n + block - 1) / block);
  for (size_t i = i0; i < i0 + len;) {
    size_t b = i / block, end = (b + 1) * block < i0 + len ? (b + 1) * block : i0 + len;
    uint16_t h;
    memcpy(&h, (const uint8_t *)src + 2 * b, 2);
    int k = (int)(h & 0x3ffu) - NSC_W8_BIAS;
    /* int8 blocks with Inf/NaN codes, invalid headers, and fp16s scales
     * beyond one float: element by element */
    if ((h & (NSC_W8_INVALID | (f == NSC_FMT_INT8 || f == NSC_FMT_INT4 ? NSC_W8_SPECIAL : 0))) ||
        (f == NSC_FMT_FP16S && (k < -126 || k > 126))) {
      for (size_t j = i; j < end; j++) d[j - i0] = nsc_bs_value((int)f, nsc_code_get(f, codes, j), h);
    } else if (f == NSC_FMT_INT4) {
      int8_t c[TILE];
      float p1, p2;
      split(k, &p1, &p2);
      for (size_t j = i; j < end; j += TILE) {
        size_t len = end - j < TILE ? end - j : TILE;
        unpack_int4(codes, j, c, len);
        int8_values(c, d + (j - i0), len, p1, p2);
      }
    } else if (f == NSC_FMT_FP16S) {
      /* fp16 -> fp32 is exact; one multiply by 2^k rounds once as nsc_ldexp2
       * does; Inf stays, NaN made canonical as the rules say */
      nsc_cast_from_wire(NSC_FMT_FP16, (const uint16_t *)(const void *)(codes + 2 * i), d + (i - i0), end - i,
                         nsc_pow2(k));
      canon_nan(d + (i - i0), end - i);
    } else {
      float p1, p2;
      split(k, &p1, &p2);
      if (f == NSC_FMT_INT8) int8_values((const int8_t *)codes + i, d + (i - i0), end - i, p1, p2);
      else fp8_values(codes + i, d + (i - i0), end - i, p1, p2);
    }
    i = end;
  }
}

void nsc_fmt_decode(nsc_fmt_t f, size_t block, const void *src, float *dst, size_t n, float scale) {
  if (!nsc_fmt_blocked(f)) {
    nsc_cast_from_wire(f, src, dst, n, scale);
    return;
  }
  decode_range(f, block, src, n, 0, n, dst);
  if (scale != 1.0f) mul_into(dst, dst, n, scale);
}

void nsc_fmt_decode_out(nsc_fmt_t out, nsc_fmt_t f, size_t block, const void *src, void *dst, size_t n, float scale,
                        nsc_cast_counts *counts) {
  if (out == NSC_FMT_FP32) {
    nsc_fmt_decode(f, block, src, dst, n, scale);
    return;
  }
  float t[TILE];
  for (size_t i0 = 0; i0 < n; i0 += TILE) {
    size_t len = n - i0 < TILE ? n - i0 : TILE;
    decode_range(f, block, src, n, i0, len, t);
    if (scale != 1.0f) mul_into(t, t, len, scale);
    nsc_cast_to_wire(out, t, (uint16_t *)dst + i0, len, 1.0f, counts);
  }
}

void nsc_fmt_decode_sum(nsc_fmt_t f, size_t block, const void *base, size_t stride, int m, float *dst,
                        size_t n, float post) {
  float tmp[TILE];
  for (size_t i0 = 0; i0 < n; i0 += TILE) {
    size_t len = n - i0 < TILE ? n - i0 : TILE;
    float *acc = dst + i0;
    decode_range(f, block, base, n, i0, len, acc);
    for (int j = 1; j < m; j++) {
      decode_range(f, block, (const uint8_t *)base + (size_t)j * stride, n, i0, len, tmp);
      add_into(acc, tmp, len);
    }
    if (post != 1.0f) mul_into(acc, acc, len, post);
    canon_nan(acc, len);
  }
}

/* ---- error feedback and stochastic rounding ---- */

CLONES static void ef_tile(nsc_fmt_t f, const float *x, const float *r, float *y, size_t n) {
  for (size_t i = 0; i < n; i++) y[i] = r ? nsc_ef_in((int)f, x[i], r[i]) : x[i];
}

CLONES static void resid_tile(const float *y, const float *v, float *r, size_t n) {
  for (size_t i = 0; i < n; i++) r[i] = nsc_ef_resid(y[i], v[i]);
}

static void count_tile(nsc_fmt_t f, const float *y, size_t n, nsc_cast_counts *counts) {
  uint32_t lo = f == NSC_FMT_BF16 ? NSC_BF16_OVF_LO : NSC_F16_OVF_LO;
  uint32_t hi = f == NSC_FMT_BF16 ? NSC_BF16_UNF_HI : NSC_F16_UNF_HI;
  uint64_t ov = 0, uf = 0;
  for (size_t i = 0; i < n; i++) {
    uint32_t a = NSC_F2U(y[i]) & 0x7fffffffu;
    ov += nsc_bits_is_overflow(a, lo);
    uf += nsc_bits_is_underflow(a, hi);
  }
  counts->overflow += ov;
  counts->underflow += uf;
}

static void encode16_opt(nsc_fmt_t in, nsc_fmt_t f, const void *src, uint16_t *dst, size_t n, float scale,
                         const nsc_enc_opt *o, nsc_cast_counts *counts) {
  float x[TILE], y[TILE], v[TILE];
  int bf = f == NSC_FMT_BF16;
  const float *r0 = o->resid && !o->resid_zero ? o->resid : NULL;
  for (size_t i0 = 0; i0 < n; i0 += TILE) {
    size_t len = n - i0 < TILE ? n - i0 : TILE;
    ef_tile(f, load(in, src, i0, len, scale, x), r0 ? r0 + i0 : NULL, y, len);
    if (o->stochastic) {
      for (size_t i = 0; i < len; i++) dst[i0 + i] = nsc_w16_code_x(bf, y[i], 1, nsc_sr_bits(o->key, i0 + i));
      if (counts) count_tile(f, y, len, counts);
    } else {
      nsc_cast_to_wire(f, y, dst + i0, len, 1.0f, counts);
    }
    if (!o->resid) continue;
    nsc_cast_from_wire(f, dst + i0, v, len, 1.0f);
    resid_tile(y, v, o->resid + i0, len);
  }
}

static void encode_blocked_opt(nsc_fmt_t in, nsc_fmt_t f, size_t block, const void *src, uint8_t *dst, size_t n,
                               float scale, const nsc_enc_opt *o, nsc_cast_counts *counts) {
  float x[NSC_FMT_MAX_BLOCK], y[NSC_FMT_MAX_BLOCK], v[NSC_FMT_MAX_BLOCK];
  uint64_t uf = 0;
  size_t nb = (n + block - 1) / block;
  uint8_t *codes = dst + 2 * nb;
  const float *r0 = o->resid && !o->resid_zero ? o->resid : NULL;
  if (f == NSC_FMT_FP8) pthread_once(&lut_once, lut_init);
  for (size_t b = 0; b < nb; b++) {
    size_t lo = b * block, len = lo + block < n ? block : n - lo;
    ef_tile(f, load(in, src, lo, len, scale, x), r0 ? r0 + lo : NULL, y, len);
    int special;
    uint32_t amax = finite_amax(y, len, &special);
    int k = nsc_bs_k((int)f, amax);
    uint32_t lim = nsc_bs_lim((int)f, amax, k, special);
    uint16_t h = nsc_bs_header(k, special);
    memcpy(dst + 2 * b, &h, 2);
    block_codes(f, y, codes, lo, len, k, lim, special, o);
    if (counts) uf += flushed(f, y, codes, lo, len);
    if (!o->resid) continue;
    decode_range(f, block, dst, n, lo, len, v);
    resid_tile(y, v, o->resid + lo, len);
  }
  if (counts) counts->underflow += uf;
}

void nsc_fmt_encode_in(nsc_fmt_t in, nsc_fmt_t f, size_t block, const void *src, void *dst, size_t n, float scale,
                       const nsc_enc_opt *o, nsc_cast_counts *counts) {
  if (!o || (!o->resid && !o->stochastic)) encode_in(in, f, block, src, dst, n, scale, counts);
  else if (nsc_fmt_blocked(f)) encode_blocked_opt(in, f, block, src, dst, n, scale, o, counts);
  else encode16_opt(in, f, src, dst, n, scale, o, counts);
}

void nsc_fmt_encode_opt(nsc_fmt_t f, size_t block, const float *src, void *dst, size_t n, float scale,
                        const nsc_enc_opt *o, nsc_cast_counts *counts) {
  nsc_fmt_encode_in(NSC_FMT_FP32, f, block, src, dst, n, scale, o, counts);
}
