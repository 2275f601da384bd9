/* cast.c — the buffer casts of cast.h: picks the implementation once by CPU
 * features, decides non-temporal stores by size, splits large buffers over
 * threads when asked to, and implements nsc_scale_buffer on top.
 *
 * Threads (nsc_cast_set_threads) are created per call and joined before it
 * returns: nothing runs in the background, and a failed pthread_create only
 * means the calling thread converts that part itself. Parts are multiples of
 * 64 elements, so every part keeps the store alignment of a single-thread run
 * and the results (and counts, summed after the join) are the same.
 *
 * Must not: allocate on the hot path, print, fail, or start a thread unless
 * nsc_cast_set_threads asked for more than one. */
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "cast_impl.h"

#define MAX_THREADS 64

const nsc_cast_impl *const nsc_cast_impls[] = {&nsc_cast_impl_scalar, &nsc_cast_impl_f16c,
                                               &nsc_cast_impl_avx512};
const int nsc_cast_nimpls = sizeof nsc_cast_impls / sizeof nsc_cast_impls[0];

static _Atomic(const nsc_cast_impl *) current;
static pthread_once_t chosen = PTHREAD_ONCE_INIT;
static atomic_int nthreads = 1;

static const nsc_cast_impl *best(void) {
  for (int i = nsc_cast_nimpls - 1; i > 0; i--)
    if (nsc_cast_impls[i]->available()) return nsc_cast_impls[i];
  return &nsc_cast_impl_scalar;
}

static void choose(void) { atomic_store(&current, best()); }

const nsc_cast_impl *nsc_cast_current(void) {
  const nsc_cast_impl *p = atomic_load_explicit(&current, memory_order_acquire);
  if (p) return p;
  pthread_once(&chosen, choose);
  return atomic_load(&current);
}

const char *nsc_cast_impl_name(void) { return nsc_cast_current()->name; }

/* NULL or "auto" goes back to the automatic choice. */
int nsc_cast_force_impl(const char *name) {
  pthread_once(&chosen, choose);
  if (!name || !strcmp(name, "auto")) {
    atomic_store(&current, best());
    return 0;
  }
  for (int i = 0; i < nsc_cast_nimpls; i++)
    if (!strcmp(nsc_cast_impls[i]->name, name)) {
      if (!nsc_cast_impls[i]->available()) return -1;
      atomic_store(&current, nsc_cast_impls[i]);
      return 0;
    }
  return -1;
}

void nsc_cast_set_threads(int t) {
  atomic_store(&nthreads, t < 1 ? 1 : t > MAX_THREADS ? MAX_THREADS : t);
}

/* One part of a threaded cast; to_wire selects the direction. */
typedef struct {
  const nsc_cast_impl *impl;
  int to_wire, nt, count;
  nsc_fmt_t w;
  const void *src;
  void *dst;
  size_t n;
  float scale;
  nsc_cast_counts c;
} part;

static void *run_part(void *arg) {
  part *p = arg;
  if (p->to_wire)
    p->impl->to_wire[p->w](p->src, p->dst, p->n, p->scale, p->count ? &p->c : NULL, p->nt);
  else
    p->impl->from_wire[p->w](p->src, p->dst, p->n, p->scale, p->nt);
  return NULL;
}

/* Runs proto over n elements in t parts (src/dst element sizes given). */
static void run_parallel(part proto, int t, size_t ssize, size_t dsize,
                         nsc_cast_counts *counts) {
  part parts[MAX_THREADS];
  pthread_t tid[MAX_THREADS];
  int started[MAX_THREADS] = {0};
  /* ceil(n / t) rounded up to 64: t parts always cover all n elements */
  size_t per = ((proto.n + (size_t)t - 1) / (size_t)t + 63) & ~(size_t)63, off = 0;
  pthread_attr_t attr;
  int attr_ok = pthread_attr_init(&attr) == 0;
  if (attr_ok) pthread_attr_setstacksize(&attr, (size_t)256 << 10);
  for (int k = 0; k < t; k++) {
    size_t len = proto.n - off < per ? proto.n - off : per;
    parts[k] = proto;
    parts[k].src = (const char *)proto.src + off * ssize;
    parts[k].dst = (char *)proto.dst + off * dsize;
    parts[k].n = len;
    memset(&parts[k].c, 0, sizeof parts[k].c);
    off += len;
    if (k > 0 && len)
      started[k] = pthread_create(&tid[k], attr_ok ? &attr : NULL, run_part, &parts[k]) == 0;
  }
  if (attr_ok) pthread_attr_destroy(&attr);
  run_part(&parts[0]);
  for (int k = 1; k < t; k++) {
    if (started[k]) pthread_join(tid[k], NULL);
    else run_part(&parts[k]);
  }
  if (counts)
    for (int k = 0; k < t; k++) {
      counts->overflow += parts[k].c.overflow;
      counts->underflow += parts[k].c.underflow;
    }
}

static int threads_for(size_t n) {
  int t = atomic_load_explicit(&nthreads, memory_order_relaxed);
  return t > 1 && n * sizeof(float) >= NSC_CAST_MT_BYTES ? t : 1;
}

void nsc_cast_to_wire(nsc_fmt_t w, const float *src, uint16_t *dst, size_t n, float scale,
                      nsc_cast_counts *counts) {
  const nsc_cast_impl *impl = nsc_cast_current();
  int nt = n * sizeof(float) >= NSC_CAST_NT_BYTES, t = threads_for(n);
  if (t == 1) {
    impl->to_wire[w](src, dst, n, scale, counts, nt);
    return;
  }
  part proto = {.impl = impl, .to_wire = 1, .nt = nt, .count = counts != NULL, .w = w,
                .src = src, .dst = dst, .n = n, .scale = scale};
  run_parallel(proto, t, sizeof *src, sizeof *dst, counts);
}

void nsc_cast_from_wire(nsc_fmt_t w, const uint16_t *src, float *dst, size_t n,
                        float scale) {
  const nsc_cast_impl *impl = nsc_cast_current();
  int nt = n * sizeof(float) >= NSC_CAST_NT_BYTES, t = threads_for(n);
  if (t == 1) {
    impl->from_wire[w](src, dst, n, scale, nt);
    return;
  }
  part proto = {.impl = impl, .to_wire = 0, .nt = nt, .w = w, .src = src, .dst = dst,
                .n = n, .scale = scale};
  run_parallel(proto, t, sizeof *src, sizeof *dst, NULL);
}

/* fp16/bf16: widen and multiply through a stack buffer, then round back; the
 * chunk is read completely before it is written, so src == dst works. */
static void scale_wire(nsc_fmt_t w, const uint16_t *src, uint16_t *dst, size_t n,
                       float f) {
  float tmp[2048];
  for (size_t i = 0; i < n; i += 2048) {
    size_t k = n - i < 2048 ? n - i : 2048;
    nsc_cast_from_wire(w, src + i, tmp, k, f);
    nsc_cast_to_wire(w, tmp, dst + i, k, 1.0f, NULL);
  }
}

int nsc_scale_buffer(char kind, const void *src, void *dst, size_t n, double factor) {
  switch (kind) {
  case 'f': {
    const float *s = src;
    float *d = dst, f = (float)factor;
    for (size_t i = 0; i < n; i++) d[i] = s[i] * f;
    return 0;
  }
  case 'd': {
    const double *s = src;
    double *d = dst;
    for (size_t i = 0; i < n; i++) d[i] = s[i] * factor;
    return 0;
  }
  case 'h':
    scale_wire(NSC_FMT_FP16, src, dst, n, (float)factor);
    return 0;
  case 'b':
    scale_wire(NSC_FMT_BF16, src, dst, n, (float)factor);
    return 0;
  default:
    return -1;
  }
}
