/* wire.h — wire formats of the two-phase collectives (shim/exec/): how a run
 * of fp32 values is encoded for the network and decoded again.
 *
 *   The formats are the rows of formats.h:
 *   NSC_FMT_FP16, NSC_FMT_BF16: 2 bytes per element (the casts of cast.h).
 *   NSC_FMT_INT8, NSC_FMT_FP8 (e4m3), NSC_FMT_FP16S (fp16 codes), NSC_FMT_INT4:
 *     block-scaled, one 16-bit power-of-two scale header per block of `block`
 *     elements (wire_bits.h has the rules and bounds): ceil(n/block) headers,
 *     then n codes of one byte (int8, fp8), two (fp16s) or half a byte (int4,
 *     element 2i in the low nibble of byte i).
 *
 * Each operation has a scalar reference (nsc_fmt_*_ref, the test oracle) and
 * a fast host path (nsc_fmt_*, block-structured loops the compiler
 * vectorises, AVX2 clone chosen at run time) with bit-identical results; the
 * CUDA kernels (kernels.cu) implement the same element rules. `scale`
 * multiplies each value before encoding / after decoding (1: no multiply).
 * decode_sum adds m encoded runs that lie `stride` bytes apart, in the order
 * 0..m-1, in fp32, then multiplies by `post` (1: none); NaN results are the
 * canonical 0x7fc00000.
 *
 * nsc_fmt_encode_opt adds error feedback and stochastic rounding (element
 * rules and bounds in wire_bits.h): with o->resid, each element encodes
 * x * scale + r[i] and r[i] becomes what that lost (r read as 0 when
 * o->resid_zero: the bucket's first call); with o->stochastic, codes are
 * rounded stochastically with the random stream o->key (nsc_sr_key). With
 * neither it is nsc_fmt_encode.
 *
 * Must not: allocate, print, or depend on anything in shim/. */
#ifndef NSC_WIRE_H
#define NSC_WIRE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "cast.h"
#include "formats.h"

/* A format's row (formats.h), as data. */
typedef struct {
  const char *name;
  int bits;        /* per code: 16, 8 or 4 (two per byte) */
  int blocked;     /* a power-of-two scale per block: two phases only */
  double bound;    /* one rounding's largest error (formats.h) */
  int zero;        /* block-scaled: values 2^zero below the block's largest flush to 0 */
  const char *doc;
} nsc_fmt_info;
/* A format's row, or NULL for a value that is none; inline (no table to
 * link: the pure rooms and the benchmarks' checkers, which do not link the
 * codec, read the rows too). */
#define NSC_FMT_ROW(ID, name, bits, blocked, dt, k, bound, zero, doc) {name, bits, blocked, bound, zero, doc},
static inline const nsc_fmt_info *nsc_fmt_row(nsc_fmt_t f) {
  static const nsc_fmt_info rows[NSC_FMT_COUNT] = {NSC_FORMATS(NSC_FMT_ROW)};
  return (unsigned)f < NSC_FMT_COUNT ? &rows[f] : NULL;
}
#undef NSC_FMT_ROW
/* The format named `name` (NCCLSHIM_COMPRESS's spelling), or -1. */
static inline int nsc_fmt_by_name(const char *name) {
  for (int f = 0; name && f < NSC_FMT_COUNT; f++)
    if (!strcmp(nsc_fmt_row((nsc_fmt_t)f)->name, name)) return f;
  return -1;
}
/* One rounding's bound (formats.h); whether a format is block-scaled (a
 * header per block: NCCL cannot sum it); the bits of a code. */
static inline double nsc_fmt_bound(nsc_fmt_t f) { return nsc_fmt_row(f) ? nsc_fmt_row(f)->bound : 0; }
static inline int nsc_fmt_blocked(nsc_fmt_t f) { return nsc_fmt_row(f) ? nsc_fmt_row(f)->blocked : 0; }
static inline int nsc_fmt_code_bits(nsc_fmt_t f) { return nsc_fmt_row(f) ? nsc_fmt_row(f)->bits : 16; }
/* Encoded size of n elements: the headers, then the codes (4-bit codes two
 * per byte, an odd run's last byte half used). */
static inline size_t nsc_fmt_bytes(nsc_fmt_t f, size_t n, size_t block) {
  return (nsc_fmt_blocked(f) ? 2 * ((n + block - 1) / block) : 0) + (n * (size_t)nsc_fmt_code_bits(f) + 7) / 8;
}
const char *nsc_fmt_name(nsc_fmt_t f);
/* Code i of a run's codes (whole bytes little-endian, or int4's nibble:
 * element 2j in the low nibble of byte j), and storing one (an odd run's
 * last high nibble stays 0). The host paths' one definition of the packing;
 * the kernels have their own (compress/kernels.cu), tested against these. */
static inline uint32_t nsc_code_get(nsc_fmt_t f, const uint8_t *codes, size_t i) {
  int bits = nsc_fmt_code_bits(f);
  if (bits == 4) return (uint32_t)(codes[i / 2] >> (4 * (i % 2))) & 0xfu;
  uint16_t c = 0;
  memcpy(&c, codes + (size_t)bits / 8 * i, (size_t)bits / 8);
  return c;
}
static inline void nsc_code_put(nsc_fmt_t f, uint8_t *codes, size_t i, uint32_t c) {
  int bits = nsc_fmt_code_bits(f);
  if (bits == 4) {
    uint8_t *b = codes + i / 2;
    *b = i % 2 ? (uint8_t)((*b & 0x0fu) | (c << 4)) : (uint8_t)(c & 0x0fu);
    return;
  }
  uint16_t c16 = (uint16_t)c;
  memcpy(codes + (size_t)bits / 8 * i, &c16, (size_t)bits / 8);
}

void nsc_fmt_encode(nsc_fmt_t f, size_t block, const float *src, void *dst, size_t n, float scale,
                    nsc_cast_counts *counts);
void nsc_fmt_decode(nsc_fmt_t f, size_t block, const void *src, float *dst, size_t n, float scale);
void nsc_fmt_decode_sum(nsc_fmt_t f, size_t block, const void *base, size_t stride, int m, float *dst,
                        size_t n, float post);

typedef struct {
  float *resid;     /* NULL: no error feedback; else n fp32 residuals, read and rewritten */
  int resid_zero;   /* resid holds nothing yet: read as 0 */
  int stochastic;   /* 0: round to nearest even */
  uint64_t key;     /* the random stream (stochastic only) */
} nsc_enc_opt;

/* The random stream of one encode: a pure function of the configured seed,
 * the call's counter, the encoding rank and which run of that call it is. */
uint64_t nsc_sr_key(uint64_t seed, uint64_t call, uint32_t rank, uint32_t run);

void nsc_fmt_encode_opt(nsc_fmt_t f, size_t block, const float *src, void *dst, size_t n, float scale,
                        const nsc_enc_opt *o, nsc_cast_counts *counts);

/* A 16-bit input or output straight from or into its own bits, in tiles
 * (no fp32 copy of the run): in / out is the 16-bit row (NSC_FMT_FP16,
 * NSC_FMT_BF16) or NSC_FMT_FP32 (fp32: nsc_fmt_encode_opt, nsc_fmt_decode).
 * nsc_fmt_encode_in is bit for bit nsc_fmt_encode_opt of the input's exact
 * fp32 widening; nsc_fmt_decode_out is nsc_fmt_decode, then the cast of
 * cast.h rounding each value once to `out` (its overflows and underflows
 * added to counts, which may be NULL). */
#define NSC_FMT_FP32 NSC_FMT_COUNT /* no 16-bit row: fp32 itself */
void nsc_fmt_encode_in(nsc_fmt_t in, nsc_fmt_t f, size_t block, const void *src, void *dst, size_t n, float scale,
                       const nsc_enc_opt *o, nsc_cast_counts *counts);
void nsc_fmt_decode_out(nsc_fmt_t out, nsc_fmt_t f, size_t block, const void *src, void *dst, size_t n, float scale,
                        nsc_cast_counts *counts);
void nsc_fmt_encode_opt_ref(nsc_fmt_t f, size_t block, const float *src, void *dst, size_t n, float scale,
                            const nsc_enc_opt *o, nsc_cast_counts *counts);

/* The scalar references (element by element through wire_bits.h / cast.h). */
void nsc_fmt_encode_ref(nsc_fmt_t f, size_t block, const float *src, void *dst, size_t n, float scale,
                        nsc_cast_counts *counts);
void nsc_fmt_decode_ref(nsc_fmt_t f, size_t block, const void *src, float *dst, size_t n, float scale);
void nsc_fmt_decode_sum_ref(nsc_fmt_t f, size_t block, const void *base, size_t stride, int m, float *dst,
                            size_t n, float post);

#endif
