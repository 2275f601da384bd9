/* cast_impl.h — the internal seam between the dispatcher (cast.c) and the
 * implementations of the buffer casts (cast_scalar.c, cast_avx2.c,
 * cast_avx512.c). Visible to the unit tests and the benchmark, which drive
 * each implementation directly; not part of the public interface (cast.h).
 *
 * Contract of every implementation function: any alignment of src and dst
 * (elements naturally aligned), any n including 0, src and dst not
 * overlapping, results bit-identical to the scalar reference, counts (when
 * non-NULL) added to. nt != 0 asks for non-temporal stores where the
 * implementation has them (the caller decides by size).
 *
 * Must not: allocate, print, or start threads (cast.c owns threading). */
#ifndef NSC_CAST_IMPL_H
#define NSC_CAST_IMPL_H

#include <stddef.h>
#include <stdint.h>
#include "cast.h"

typedef void (*nsc_to_wire_fn)(const float *src, uint16_t *dst, size_t n, float scale,
                               nsc_cast_counts *counts, int nt);
typedef void (*nsc_from_wire_fn)(const uint16_t *src, float *dst, size_t n, float scale,
                                 int nt);

typedef struct {
  const char *name;
  int (*available)(void); /* CPU (and OS) support it */
  nsc_to_wire_fn to_wire[2];     /* indexed by nsc_fmt_t */
  nsc_from_wire_fn from_wire[2];
} nsc_cast_impl;

/* The implementations, best last; each file defines one. */
extern const nsc_cast_impl nsc_cast_impl_scalar;
extern const nsc_cast_impl nsc_cast_impl_f16c;
extern const nsc_cast_impl nsc_cast_impl_avx512;

/* All of them in order (scalar first), for tests and benchmarks. */
extern const nsc_cast_impl *const nsc_cast_impls[];
extern const int nsc_cast_nimpls;

/* The implementation the buffer casts use now. */
const nsc_cast_impl *nsc_cast_current(void);

/* Buffers of at least this many fp32 bytes use non-temporal stores, which
 * save the read-for-ownership of the output but leave it out of the cache.
 * Measured on the 2-core EPYC VM (32 MiB L3): streaming loses up to 2x when
 * input and output still fit the cache (<= 8 MiB of fp32) and wins from
 * 16 MiB on. Threads split buffers of at least NSC_CAST_MT_BYTES. */
#define NSC_CAST_NT_BYTES ((size_t)16 << 20)
#define NSC_CAST_MT_BYTES ((size_t)4 << 20)

/* Vector paths keep 32-bit per-lane counters; they fold them into the 64-bit
 * totals at least every this many elements (well below 2^32 per lane). */
#define NSC_CAST_COUNT_BLOCK ((size_t)1 << 24)

/* Elements to convert before dst reaches `align` bytes for non-temporal stores
 * (at most n); clears *nt when dst can never get there (not element-aligned). */
static inline size_t nsc_nt_head(const void *dst, size_t elsize, size_t align, size_t n,
                                 int *nt) {
  uintptr_t p = (uintptr_t)dst;
  if (!*nt) return 0;
  if (p % elsize) {
    *nt = 0;
    return 0;
  }
  size_t head = ((align - p % align) % align) / elsize;
  return head < n ? head : n;
}

/* A vector main loop: converts a prefix of the n elements (a multiple of its
 * step) and returns how many; dst is `align`-aligned when nt is set. */
typedef size_t (*nsc_to_wire_vec)(const float *src, uint16_t *dst, size_t n, float scale,
                                  nsc_cast_counts *c, int nt);
typedef size_t (*nsc_from_wire_vec)(const uint16_t *src, float *dst, size_t n, float scale,
                                    int nt);

/* Head (up to the store alignment) and tail by the scalar implementation, the
 * middle by the vector loop: one shape for every vector implementation. */
static inline void nsc_to_wire_split(nsc_fmt_t w, const float *src, uint16_t *dst, size_t n,
                                     float scale, nsc_cast_counts *c, int nt, size_t align,
                                     nsc_to_wire_vec vec) {
  size_t head = nsc_nt_head(dst, sizeof *dst, align, n, &nt);
  nsc_cast_impl_scalar.to_wire[w](src, dst, head, scale, c, 0);
  size_t done = head + vec(src + head, dst + head, n - head, scale, c, nt);
  nsc_cast_impl_scalar.to_wire[w](src + done, dst + done, n - done, scale, c, 0);
}
static inline void nsc_from_wire_split(nsc_fmt_t w, const uint16_t *src, float *dst,
                                       size_t n, float scale, int nt, size_t align,
                                       nsc_from_wire_vec vec) {
  size_t head = nsc_nt_head(dst, sizeof *dst, align, n, &nt);
  nsc_cast_impl_scalar.from_wire[w](src, dst, head, scale, 0);
  size_t done = head + vec(src + head, dst + head, n - head, scale, nt);
  nsc_cast_impl_scalar.from_wire[w](src + done, dst + done, n - done, scale, 0);
}

/* Expands to body(DO_SCALE, DO_COUNT, NT) with the three flags as constants,
 * so each vector loop is compiled without per-element tests. */
#define NSC_SPECIALISE3(body, do_scale, do_count, nt)                                 \
  switch ((do_scale) << 2 | (do_count) << 1 | (nt)) {                                 \
  case 0: body(0, 0, 0); break;                                                       \
  case 1: body(0, 0, 1); break;                                                       \
  case 2: body(0, 1, 0); break;                                                       \
  case 3: body(0, 1, 1); break;                                                       \
  case 4: body(1, 0, 0); break;                                                       \
  case 5: body(1, 0, 1); break;                                                       \
  case 6: body(1, 1, 0); break;                                                       \
  default: body(1, 1, 1); break;                                                      \
  }

/* Defines to_<tag>/from_<tag> (the nsc_cast_impl entry points) for one wire
 * type from the file's always-inline loops to_wire_vec(w, src, dst, n, scale,
 * c, DS, DC, NT) and from_wire_vec(w, src, dst, n, scale, DS, NT); ALIGN is the
 * store width the non-temporal path needs. */
#define NSC_TO_BODY(ds, dc, nt_) done = to_wire_vec(w, src, dst, n, scale, c, ds, dc, nt_)
#define NSC_FROM_BODY(ds, dc, nt_) done = from_wire_vec(w, src, dst, n, scale, ds, nt_)
#define NSC_DEFINE_VEC_WIRE(ATTR, ALIGN, W, tag)                                        \
  static ATTR size_t to_##tag##_vec(const float *src, uint16_t *dst, size_t n,          \
                                    float scale, nsc_cast_counts *c, int nt) {          \
    const nsc_fmt_t w = W;                                                             \
    size_t done = 0;                                                                    \
    NSC_SPECIALISE3(NSC_TO_BODY, scale != 1.0f, c != NULL, nt != 0)                     \
    return done;                                                                        \
  }                                                                                     \
  static ATTR size_t from_##tag##_vec(const uint16_t *src, float *dst, size_t n,        \
                                      float scale, int nt) {                            \
    const nsc_fmt_t w = W;                                                             \
    size_t done = 0;                                                                    \
    NSC_SPECIALISE3(NSC_FROM_BODY, scale != 1.0f, 0, nt != 0)                           \
    return done;                                                                        \
  }                                                                                     \
  static void to_##tag(const float *src, uint16_t *dst, size_t n, float scale,          \
                       nsc_cast_counts *c, int nt) {                                    \
    nsc_to_wire_split(W, src, dst, n, scale, c, nt, ALIGN, to_##tag##_vec);             \
  }                                                                                     \
  static void from_##tag(const uint16_t *src, float *dst, size_t n, float scale,        \
                         int nt) {                                                      \
    nsc_from_wire_split(W, src, dst, n, scale, nt, ALIGN, from_##tag##_vec);            \
  }

#endif
