/* cu_kernels.c — the launchers of cu_kernels.h: grid sizes, parameter
 * blocks, segment tables.
 *
 * Grids: one block per tile (block-scaled encodes: per NSC_K_WARPS wire
 * blocks) up to what is resident at once, the driver's occupancy of each
 * kernel times the multiprocessors (enough warps to saturate memory);
 * blocks loop over the remaining work.
 *
 * Must not: synchronise, allocate device memory, or launch for empty work. */
#include <string.h>

#include "cu_kernels.h"

static unsigned grid_for(const nsc_cuctx *c, int k, uint64_t ntiles) {
  uint64_t cap = (uint64_t)(c->sms > 0 ? c->sms : 1) * (uint64_t)c->bps[k];
  return (unsigned)(ntiles < cap ? (ntiles ? ntiles : 1) : cap);
}

static CUresult launch(const nsc_cuctx *c, CUstream s, int k, uint64_t ntiles, void **params,
                       const char **what) {
  if (c->kload != CUDA_SUCCESS) { /* the kernels did not load in this context */
    *what = c->kload_what;
    return c->kload;
  }
  int pushed;
  CUresult r = nsc_cuctx_enter(c, &pushed, what);
  if (r != CUDA_SUCCESS) return r;
  r = nsc_cu_driver()->cuLaunchKernel(c->fn[k], grid_for(c, k, ntiles), 1, 1, NSC_K_BLOCK, 1, 1,
                                      0, s, params, NULL);
  nsc_cuctx_leave(pushed);
  if (r != CUDA_SUCCESS) *what = "cuLaunchKernel";
  return r;
}

static uint64_t tiles(uint64_t n) { return (n + NSC_K_TILE - 1) / NSC_K_TILE; }
/* Block-scaled encodes: a warp per wire block, NSC_K_WARPS per CTA. */
static uint64_t enc_ctas(uint64_t n, uint64_t block) {
  uint64_t nb = (n + block - 1) / block;
  return (nb + NSC_K_WARPS - 1) / NSC_K_WARPS;
}

CUresult nsc_cuk_to_wire(nsc_cuctx *c, CUstream s, nsc_fmt_t w, const float *src, void *dst,
                         size_t n, float scale, const char **what) {
  if (!n) return CUDA_SUCCESS;
  CUdeviceptr ps = (CUdeviceptr)(uintptr_t)src, pd = (CUdeviceptr)(uintptr_t)dst;
  uint64_t n64 = n;
  CUdeviceptr cnt = c->counters_dev;
  void *params[] = {&ps, &pd, &n64, &scale, &cnt};
  return launch(c, s, w == NSC_FMT_BF16 ? NSC_K_to_bf16 : NSC_K_to_f16, tiles(n), params,
                what);
}

CUresult nsc_cuk_from_wire(nsc_cuctx *c, CUstream s, nsc_fmt_t w, const void *src,
                           float *dst, size_t n, float scale, const char **what) {
  if (!n) return CUDA_SUCCESS;
  CUdeviceptr ps = (CUdeviceptr)(uintptr_t)src, pd = (CUdeviceptr)(uintptr_t)dst;
  uint64_t n64 = n;
  void *params[] = {&ps, &pd, &n64, &scale};
  return launch(c, s, w == NSC_FMT_BF16 ? NSC_K_from_bf16 : NSC_K_from_f16, tiles(n),
                params, what);
}

/* Kernel index for a segmented launch: [to_wire][bf16][large]. */
static const int seg_kernel[2][2][2] = {
    {{NSC_K_seg_from_f16_s, NSC_K_seg_from_f16_l}, {NSC_K_seg_from_bf16_s, NSC_K_seg_from_bf16_l}},
    {{NSC_K_seg_to_f16_s, NSC_K_seg_to_f16_l}, {NSC_K_seg_to_bf16_s, NSC_K_seg_to_bf16_l}},
};

CUresult nsc_cuk_seg(nsc_cuctx *c, CUstream s, int to_wire, nsc_fmt_t w,
                     const nsc_cu_seg *segs, int nseg, void *wire, float scale,
                     const char **what) {
  /* The large table is 32 KB: built in place, and its small prefix layout is
   * the same (nseg, ntiles, then the segments), so a small launch passes the
   * same memory with the small kernel's parameter size. */
  _Static_assert(offsetof(nsc_ksegtab_small, s) == offsetof(nsc_ksegtab_large, s),
                 "segment tables share their header layout");
  nsc_ksegtab_large tab;
  CUdeviceptr pw = (CUdeviceptr)(uintptr_t)wire, cnt = c->counters_dev;
  int i = 0;
  while (i < nseg) {
    memset(&tab, 0, offsetof(nsc_ksegtab_large, s));
    for (; i < nseg && tab.nseg < NSC_KSEG_LARGE; i++) {
      if (!segs[i].count) continue;
      nsc_kseg *k = &tab.s[tab.nseg++];
      k->src = (uint64_t)(uintptr_t)segs[i].src;
      k->dst = (uint64_t)(uintptr_t)segs[i].dst;
      k->count = segs[i].count;
      k->off = segs[i].off;
      k->tile0 = tab.ntiles;
      tab.ntiles += tiles(segs[i].count);
    }
    if (!tab.nseg) break;
    int large = tab.nseg > NSC_KSEG_SMALL;
    /* The small kernel reads sizeof(nsc_ksegtab_small) bytes from &tab. */
    void *params_to[] = {&tab, &pw, &scale, &cnt};
    void *params_from[] = {&tab, &pw, &scale};
    CUresult r = launch(c, s, seg_kernel[to_wire != 0][w == NSC_FMT_BF16][large], tab.ntiles,
                        to_wire ? params_to : params_from, what);
    if (r != CUDA_SUCCESS) return r;
  }
  return CUDA_SUCCESS;
}

CUresult nsc_cuk_scale(nsc_cuctx *c, CUstream s, char kind, const void *src, void *dst,
                       size_t n, double factor, const char **what) {
  int k;
  switch (kind) {
  case 'f': k = NSC_K_scale_f32; break;
  case 'd': k = NSC_K_scale_f64; break;
  case 'h': k = NSC_K_scale_f16; break;
  case 'b': k = NSC_K_scale_bf16; break;
  default: *what = "scale: unknown datatype kind"; return CUDA_ERROR_INVALID_VALUE;
  }
  if (!n) return CUDA_SUCCESS;
  CUdeviceptr ps = (CUdeviceptr)(uintptr_t)src, pd = (CUdeviceptr)(uintptr_t)dst;
  uint64_t n64 = n;
  float ff = (float)factor;
  void *params[] = {&ps, &pd, &n64, kind == 'd' ? (void *)&factor : (void *)&ff};
  return launch(c, s, k, tiles(n), params, what);
}

/* Each format's kernels, by its row of formats.h (fp16 and bf16 encode with
 * the plain casts: no tp_enc kernel, -1). */
enum { NSC_K_tp_enc_f16 = -1, NSC_K_tp_enc_bf16 = -1 };
#define NSC_K_OF(kind) \
  {NSC_FORMATS(NSC_K_ROW_##kind)}
#define NSC_K_ROW_enc(ID, name, bits, blocked, dt, k, bound, zero, doc) NSC_K_tp_enc_##k,
#define NSC_K_ROW_dec(ID, name, bits, blocked, dt, k, bound, zero, doc) NSC_K_tp_dec_##k,
#define NSC_K_ROW_sum(ID, name, bits, blocked, dt, k, bound, zero, doc) NSC_K_tp_sum_##k,
#define NSC_K_ROW_encx(ID, name, bits, blocked, dt, k, bound, zero, doc) NSC_K_tp_encx_##k,
static const int enc_kernel[NSC_FMT_COUNT] = NSC_K_OF(enc);
static const int dec_kernel[NSC_FMT_COUNT] = NSC_K_OF(dec);
static const int sum_kernel[NSC_FMT_COUNT] = NSC_K_OF(sum);
static const int encx_kernel[NSC_FMT_COUNT] = NSC_K_OF(encx);

CUresult nsc_cuk_fmt_encode(nsc_cuctx *c, CUstream s, nsc_fmt_t f, size_t block, const float *src,
                            void *dst, size_t n, float scale, const char **what) {
  if (!nsc_fmt_blocked(f))
    return nsc_cuk_to_wire(c, s, f, src, dst, n, scale, what);
  if (!n) return CUDA_SUCCESS;
  CUdeviceptr ps = (CUdeviceptr)(uintptr_t)src, pd = (CUdeviceptr)(uintptr_t)dst;
  uint64_t n64 = n, b64 = block;
  CUdeviceptr cnt = c->counters_dev; /* values flushed to zero: underflows */
  void *params[] = {&ps, &pd, &n64, &b64, &scale, &cnt};
  return launch(c, s, enc_kernel[f], enc_ctas(n, block), params, what);
}

CUresult nsc_cuk_fmt_decode(nsc_cuctx *c, CUstream s, nsc_fmt_t f, size_t block, const void *src,
                            float *dst, size_t n, float scale, const char **what) {
  if (!n) return CUDA_SUCCESS;
  CUdeviceptr ps = (CUdeviceptr)(uintptr_t)src, pd = (CUdeviceptr)(uintptr_t)dst;
  uint64_t n64 = n, b64 = block;
  void *params[] = {&ps, &pd, &n64, &b64, &scale};
  return launch(c, s, dec_kernel[f], tiles(n), params, what);
}

CUresult nsc_cuk_fmt_decode_sum(nsc_cuctx *c, CUstream s, nsc_fmt_t f, size_t block, const void *base,
                                size_t stride, int m, float *dst, size_t n, float post, const char **what) {
  if (!n) return CUDA_SUCCESS;
  CUdeviceptr pb = (CUdeviceptr)(uintptr_t)base, pd = (CUdeviceptr)(uintptr_t)dst;
  uint64_t st = stride, m64 = (uint64_t)m, n64 = n, b64 = block;
  void *params[] = {&pb, &st, &m64, &pd, &n64, &b64, &post};
  return launch(c, s, sum_kernel[f], tiles(n), params, what);
}

CUresult nsc_cuk_fmt_encode_opt(nsc_cuctx *c, CUstream s, nsc_fmt_t f, size_t block, const float *src,
                                void *dst, size_t n, float scale, const nsc_enc_opt *o, const char **what) {
  if (!o || (!o->resid && !o->stochastic)) return nsc_cuk_fmt_encode(c, s, f, block, src, dst, n, scale, what);
  if (!n) return CUDA_SUCCESS;
  CUdeviceptr ps = (CUdeviceptr)(uintptr_t)src, pr = (CUdeviceptr)(uintptr_t)o->resid,
              pd = (CUdeviceptr)(uintptr_t)dst;
  uint64_t n64 = n, b64 = block;
  nsc_kencopt k = {o->key, (uint64_t)c->counters_dev, 0, 0};
  k.flags = (o->resid ? NSC_KENC_EF : 0u) | (o->resid && o->resid_zero ? NSC_KENC_ZERO : 0u) |
            (o->stochastic ? NSC_KENC_SR : 0u);
  void *params[] = {&ps, &pr, &pd, &n64, &b64, &scale, &k};
  /* block-scaled: a warp per block of elements; fp16/bf16: element-wise */
  return launch(c, s, encx_kernel[f], nsc_fmt_blocked(f) ? enc_ctas(n, block) : tiles(n), params, what);
}
