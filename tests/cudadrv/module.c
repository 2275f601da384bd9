/* module.c — modules and kernels of the CUDA driver test double.
 *
 * cuModuleLoadData accepts a fatbin (the shim's embedded one: magic
 * 0xBA55ED50, its size from the header), an ELF cubin or PTX text (NVRTC's
 * output), copied as the driver does (the shim frees NVRTC's image at once).
 * A fatbin without SASS or PTX this device runs (CUDADRV_SM, default 90)
 * is rejected with CUDA_ERROR_NO_BINARY_FOR_GPU, as the driver does;
 * CUDADRV_NO_FATBIN=1 rejects every fatbin (a driver older than the
 * toolkit), so the NVRTC path can be tested. cuModuleGetFunction finds a kernel only if its name is in that
 * image and compress/kernels.cu has it: kernels run as that very source
 * compiled for the CPU (tests/simt: a fiber per thread, barriers, lockstep
 * shuffles, faulting misaligned accesses), not as host references.
 * cuLaunchKernel copies the launch's parameters at call time with the layout
 * of the compiled kernel's own signature, as the driver does; the double's
 * contract per kernel (the parameter sizes it expects, which must agree)
 * says what each operand's extent is. The stream's worker checks those
 * extents — any access outside a live allocation is an illegal access
 * (counted, reported), as are overlapping cast operands and a block size
 * other than the kernels' NSC_K_BLOCK — maps device pointers to host views,
 * and runs the kernel on the launch's grid. A kernel fault is an illegal
 * access too.
 *
 * Must not: run a kernel at launch time, run a host reference in place of a
 * kernel, or accept an image that is not a fatbin, cubin or PTX. */
#include <stdlib.h>
#include <string.h>

#include "cast_impl.h"
#include "cu_abi.h"
#include "cudadrv.h"
#include "simt_kernels.h"
#include "wire.h"

#define MOD_MAGIC 0x4d4f4455
#define FN_MAGIC 0x46554e43
#define FATBIN_MAGIC 0xBA55ED50u
#define MAXP 7

/* One launch as the stream's worker runs it. */
typedef struct {
  const struct CUfunc_st *fn;
  unsigned grid, block;
} cd_launch;

typedef void (*krun)(const cd_kernel *k, const unsigned char *const *p, const cd_launch *l);

/* The double's contract for a kernel: the parameter sizes it expects (the
 * compiled kernel's own layout must agree, or the kernel is not found) and
 * what each operand's extent is, checked before the kernel runs. */
struct cd_kernel {
  const char *name;
  int np;
  size_t sz[MAXP];
  krun run;
  int wire;  /* nsc_fmt_t, nsc_fmt_t or scale kind */
  int large; /* segment table size */
};

struct CUmod_st {
  int magic;
  CUcontext ctx;
  const unsigned char *image;
  size_t size;
  struct CUfunc_st fns[64]; /* every kernel of cu_abi.h (36) fits */
  int nfn;
};

static uint64_t u64_at(const unsigned char *p) {
  uint64_t v;
  memcpy(&v, p, 8);
  return v;
}
static float f32_at(const unsigned char *p) {
  float v;
  memcpy(&v, p, 4);
  return v;
}

static int overlap(const void *a, size_t na, const void *b, size_t nb) {
  return (const char *)a < (const char *)b + nb && (const char *)b < (const char *)a + na;
}

/* Runs the real kernel (compiled for the CPU) on host views: args[i] points
 * at parameter i with device pointers already replaced by their views. */
static void run_real(const cd_launch *l, void **args) {
  const char *why = simt_launch(l->fn->sk, l->grid, l->block, (void *const *)args);
  if (why) cd_count_illegal("%s: %s", l->fn->k->name, why);
}

/* The counters operand (2 x u64) as a host pointer; 0 stays NULL. Returns -1
 * on a bad pointer (counted). */
static int counters_view(uint64_t dp, const char *k, uint64_t **out) {
  if (dp && cd_is_host_memory((uintptr_t)dp)) cd_count(&cd_stats.kernel_host_atomics);
  *out = dp ? cd_view((CUdeviceptr)dp, 16, k, 0) : NULL;
  return dp && !*out ? -1 : 0;
}

static void k_to(const cd_kernel *k, const unsigned char *const *p, const cd_launch *l) {
  uint64_t n = u64_at(p[2]);
  const float *src = cd_view((CUdeviceptr)u64_at(p[0]), n * 4, k->name, 0);
  uint16_t *dst = cd_view((CUdeviceptr)u64_at(p[1]), n * 2, k->name, 0);
  float scale = f32_at(p[3]);
  uint64_t *cnt;
  if (!src || !dst || counters_view(u64_at(p[4]), k->name, &cnt)) return;
  if (overlap(src, n * 4, dst, n * 2)) {
    cd_count_illegal("%s: source and destination overlap", k->name);
    return;
  }
  run_real(l, (void *[]){&src, &dst, &n, &scale, &cnt});
}

static void k_from(const cd_kernel *k, const unsigned char *const *p, const cd_launch *l) {
  uint64_t n = u64_at(p[2]);
  const uint16_t *src = cd_view((CUdeviceptr)u64_at(p[0]), n * 2, k->name, 0);
  float *dst = cd_view((CUdeviceptr)u64_at(p[1]), n * 4, k->name, 0);
  float scale = f32_at(p[3]);
  if (!src || !dst) return;
  if (overlap(src, n * 2, dst, n * 4)) {
    cd_count_illegal("%s: source and destination overlap", k->name);
    return;
  }
  run_real(l, (void *[]){&src, &dst, &n, &scale});
}

static uint64_t tiles(uint64_t n) { return (n + NSC_K_TILE - 1) / NSC_K_TILE; }

/* Both segment kernels; the table is the small or large layout (same
 * header). The kernel gets a copy whose segment pointers are host views. */
static void k_seg(const cd_kernel *k, const unsigned char *const *p, const cd_launch *l, int to) {
  size_t tsize = k->large ? sizeof(nsc_ksegtab_large) : sizeof(nsc_ksegtab_small);
  nsc_ksegtab_large *tab = malloc(sizeof *tab); /* room for either layout */
  if (!tab) return;
  memcpy(tab, p[0], tsize);
  uint32_t cap = k->large ? NSC_KSEG_LARGE : NSC_KSEG_SMALL, nseg = tab->nseg;
  uint64_t tsum = 0, wend = 0;
  if (nseg > cap) {
    cd_count_illegal("%s: %u segments in a table of %u", k->name, nseg, cap);
    goto out;
  }
  for (uint32_t i = 0; i < nseg; i++) {
    if (tab->s[i].tile0 != tsum) {
      cd_count_illegal("%s: segment %u has tile0 %llu, the prefix sum is %llu", k->name, i,
                       (unsigned long long)tab->s[i].tile0, (unsigned long long)tsum);
      goto out;
    }
    tsum += tiles(tab->s[i].count);
    if (tab->s[i].off + tab->s[i].count > wend) wend = tab->s[i].off + tab->s[i].count;
  }
  if (tsum != tab->ntiles) {
    cd_count_illegal("%s: table says %llu tiles, segments have %llu", k->name, (unsigned long long)tab->ntiles,
                     (unsigned long long)tsum);
    goto out;
  }
  uint64_t wire_dp = u64_at(p[1]);
  uint16_t *wire = wend ? cd_view((CUdeviceptr)wire_dp, wend * 2, k->name, 0) : (uint16_t *)(uintptr_t)wire_dp;
  if (wend && !wire) goto out;
  for (uint32_t i = 0; i < nseg; i++) {
    if (!tab->s[i].count) continue;
    uint64_t *side = to ? &tab->s[i].src : &tab->s[i].dst;
    float *f = cd_view((CUdeviceptr)*side, tab->s[i].count * 4, k->name, 0);
    if (!f) goto out;
    if (overlap(f, tab->s[i].count * 4, wire + tab->s[i].off, tab->s[i].count * 2)) {
      cd_count_illegal("%s: segment %u overlaps the wire buffer", k->name, i);
      goto out;
    }
    *side = (uint64_t)(uintptr_t)f;
  }
  float scale = f32_at(p[2]);
  if (to) {
    uint64_t *cnt;
    if (!counters_view(u64_at(p[3]), k->name, &cnt)) run_real(l, (void *[]){tab, &wire, &scale, &cnt});
  } else {
    run_real(l, (void *[]){tab, &wire, &scale});
  }
out:
  free(tab);
}
static void k_seg_to(const cd_kernel *k, const unsigned char *const *p, const cd_launch *l) { k_seg(k, p, l, 1); }
static void k_seg_from(const cd_kernel *k, const unsigned char *const *p, const cd_launch *l) { k_seg(k, p, l, 0); }

static void k_scale(const cd_kernel *k, const unsigned char *const *p, const cd_launch *l) {
  uint64_t n = u64_at(p[2]);
  size_t es = k->wire == 'd' ? 8 : k->wire == 'f' ? 4 : 2;
  const void *src = cd_view((CUdeviceptr)u64_at(p[0]), n * es, k->name, 0);
  void *dst = cd_view((CUdeviceptr)u64_at(p[1]), n * es, k->name, 0);
  if (!src || !dst) return;
  if (src != dst && overlap(src, n * es, dst, n * es)) {
    cd_count_illegal("%s: source and destination overlap (not in place)", k->name);
    return;
  }
  run_real(l, (void *[]){&src, &dst, &n, (void *)p[3]});
}

/* Two-phase wire formats (compress/wire.h); wire = nsc_fmt_t. */
static int tp_block_ok(const cd_kernel *k, uint64_t block) {
  if (block == 0) cd_count_illegal("%s: block size 0", k->name);
  return block != 0;
}
static void k_tp_enc(const cd_kernel *k, const unsigned char *const *p, const cd_launch *l) {
  uint64_t n = u64_at(p[2]), block = u64_at(p[3]);
  if (!tp_block_ok(k, block)) return;
  const float *src = cd_view((CUdeviceptr)u64_at(p[0]), n * 4, k->name, 0);
  void *dst = cd_view((CUdeviceptr)u64_at(p[1]), nsc_fmt_bytes((nsc_fmt_t)k->wire, n, block), k->name, 0);
  float scale = f32_at(p[4]);
  uint64_t *cnt;
  if (!src || !dst || counters_view(u64_at(p[5]), k->name, &cnt)) return;
  run_real(l, (void *[]){&src, &dst, &n, &block, &scale, &cnt});
}
static void k_tp_dec(const cd_kernel *k, const unsigned char *const *p, const cd_launch *l) {
  uint64_t n = u64_at(p[2]), block = u64_at(p[3]);
  if (!tp_block_ok(k, block)) return;
  const void *src = cd_view((CUdeviceptr)u64_at(p[0]), nsc_fmt_bytes((nsc_fmt_t)k->wire, n, block), k->name, 0);
  float *dst = cd_view((CUdeviceptr)u64_at(p[1]), n * 4, k->name, 0);
  float scale = f32_at(p[4]);
  if (!src || !dst) return;
  run_real(l, (void *[]){&src, &dst, &n, &block, &scale});
}
static void k_tp_sum(const cd_kernel *k, const unsigned char *const *p, const cd_launch *l) {
  uint64_t stride = u64_at(p[1]), m = u64_at(p[2]), n = u64_at(p[4]), block = u64_at(p[5]);
  if (!tp_block_ok(k, block)) return;
  size_t one = nsc_fmt_bytes((nsc_fmt_t)k->wire, n, block);
  if (m == 0 || stride < one) {
    cd_count_illegal("%s: %llu contributions %llu bytes apart, each %zu bytes", k->name, (unsigned long long)m,
                     (unsigned long long)stride, one);
    return;
  }
  const void *base = cd_view((CUdeviceptr)u64_at(p[0]), (m - 1) * stride + one, k->name, 0);
  float *dst = cd_view((CUdeviceptr)u64_at(p[3]), n * 4, k->name, 0);
  float post = f32_at(p[6]);
  if (!base || !dst) return;
  run_real(l, (void *[]){&base, &stride, &m, &dst, &n, &block, &post});
}

/* tp_encx_*: the residuals are viewed too (only with NSC_KENC_EF: the kernel
 * gets NULL otherwise, and must not touch them), and so are the counters. */
static void k_tp_encx(const cd_kernel *k, const unsigned char *const *p, const cd_launch *l) {
  uint64_t n = u64_at(p[3]), block = u64_at(p[4]);
  if (!tp_block_ok(k, block)) return;
  nsc_kencopt o;
  memcpy(&o, p[6], sizeof o);
  size_t wb = nsc_fmt_bytes((nsc_fmt_t)k->wire, n, block);
  const float *src = cd_view((CUdeviceptr)u64_at(p[0]), n * 4, k->name, 0);
  float *resid = o.flags & NSC_KENC_EF ? cd_view((CUdeviceptr)u64_at(p[1]), n * 4, k->name, 0) : NULL;
  void *dst = cd_view((CUdeviceptr)u64_at(p[2]), wb, k->name, 0);
  float scale = f32_at(p[5]);
  uint64_t *cnt;
  if (!src || !dst || ((o.flags & NSC_KENC_EF) && !resid) || counters_view(o.counters, k->name, &cnt)) return;
  if (resid && (overlap(resid, n * 4, src, n * 4) || overlap(resid, n * 4, dst, wb))) {
    cd_count_illegal("%s: residuals overlap an operand", k->name);
    return;
  }
  o.counters = (uint64_t)(uintptr_t)cnt;
  run_real(l, (void *[]){&src, &resid, &dst, &n, &block, &scale, &o});
}

#define TAB_S sizeof(nsc_ksegtab_small)
#define TAB_L sizeof(nsc_ksegtab_large)
static const cd_kernel kernels[] = {
    {"nsc_k_to_f16", 5, {8, 8, 8, 4, 8}, k_to, NSC_FMT_FP16, 0},
    {"nsc_k_to_bf16", 5, {8, 8, 8, 4, 8}, k_to, NSC_FMT_BF16, 0},
    {"nsc_k_from_f16", 4, {8, 8, 8, 4}, k_from, NSC_FMT_FP16, 0},
    {"nsc_k_from_bf16", 4, {8, 8, 8, 4}, k_from, NSC_FMT_BF16, 0},
    {"nsc_k_seg_to_f16_s", 4, {TAB_S, 8, 4, 8}, k_seg_to, NSC_FMT_FP16, 0},
    {"nsc_k_seg_to_bf16_s", 4, {TAB_S, 8, 4, 8}, k_seg_to, NSC_FMT_BF16, 0},
    {"nsc_k_seg_from_f16_s", 3, {TAB_S, 8, 4}, k_seg_from, NSC_FMT_FP16, 0},
    {"nsc_k_seg_from_bf16_s", 3, {TAB_S, 8, 4}, k_seg_from, NSC_FMT_BF16, 0},
    {"nsc_k_seg_to_f16_l", 4, {TAB_L, 8, 4, 8}, k_seg_to, NSC_FMT_FP16, 1},
    {"nsc_k_seg_to_bf16_l", 4, {TAB_L, 8, 4, 8}, k_seg_to, NSC_FMT_BF16, 1},
    {"nsc_k_seg_from_f16_l", 3, {TAB_L, 8, 4}, k_seg_from, NSC_FMT_FP16, 1},
    {"nsc_k_seg_from_bf16_l", 3, {TAB_L, 8, 4}, k_seg_from, NSC_FMT_BF16, 1},
    {"nsc_k_scale_f32", 4, {8, 8, 8, 4}, k_scale, 'f', 0},
    {"nsc_k_scale_f64", 4, {8, 8, 8, 8}, k_scale, 'd', 0},
    {"nsc_k_scale_f16", 4, {8, 8, 8, 4}, k_scale, 'h', 0},
    {"nsc_k_scale_bf16", 4, {8, 8, 8, 4}, k_scale, 'b', 0},
    {"nsc_k_tp_enc_int8", 6, {8, 8, 8, 8, 4, 8}, k_tp_enc, NSC_FMT_INT8, 0},
    {"nsc_k_tp_enc_fp8", 6, {8, 8, 8, 8, 4, 8}, k_tp_enc, NSC_FMT_FP8, 0},
    {"nsc_k_tp_dec_f16", 5, {8, 8, 8, 8, 4}, k_tp_dec, NSC_FMT_FP16, 0},
    {"nsc_k_tp_dec_bf16", 5, {8, 8, 8, 8, 4}, k_tp_dec, NSC_FMT_BF16, 0},
    {"nsc_k_tp_dec_int8", 5, {8, 8, 8, 8, 4}, k_tp_dec, NSC_FMT_INT8, 0},
    {"nsc_k_tp_dec_fp8", 5, {8, 8, 8, 8, 4}, k_tp_dec, NSC_FMT_FP8, 0},
    {"nsc_k_tp_sum_f16", 7, {8, 8, 8, 8, 8, 8, 4}, k_tp_sum, NSC_FMT_FP16, 0},
    {"nsc_k_tp_sum_bf16", 7, {8, 8, 8, 8, 8, 8, 4}, k_tp_sum, NSC_FMT_BF16, 0},
    {"nsc_k_tp_sum_int8", 7, {8, 8, 8, 8, 8, 8, 4}, k_tp_sum, NSC_FMT_INT8, 0},
    {"nsc_k_tp_sum_fp8", 7, {8, 8, 8, 8, 8, 8, 4}, k_tp_sum, NSC_FMT_FP8, 0},
    {"nsc_k_tp_encx_f16", 7, {8, 8, 8, 8, 8, 4, sizeof(nsc_kencopt)}, k_tp_encx, NSC_FMT_FP16, 0},
    {"nsc_k_tp_encx_bf16", 7, {8, 8, 8, 8, 8, 4, sizeof(nsc_kencopt)}, k_tp_encx, NSC_FMT_BF16, 0},
    {"nsc_k_tp_encx_int8", 7, {8, 8, 8, 8, 8, 4, sizeof(nsc_kencopt)}, k_tp_encx, NSC_FMT_INT8, 0},
    {"nsc_k_tp_encx_fp8", 7, {8, 8, 8, 8, 8, 4, sizeof(nsc_kencopt)}, k_tp_encx, NSC_FMT_FP8, 0},
    {"nsc_k_tp_enc_f16s", 6, {8, 8, 8, 8, 4, 8}, k_tp_enc, NSC_FMT_FP16S, 0},
    {"nsc_k_tp_dec_f16s", 5, {8, 8, 8, 8, 4}, k_tp_dec, NSC_FMT_FP16S, 0},
    {"nsc_k_tp_sum_f16s", 7, {8, 8, 8, 8, 8, 8, 4}, k_tp_sum, NSC_FMT_FP16S, 0},
    {"nsc_k_tp_encx_f16s", 7, {8, 8, 8, 8, 8, 4, sizeof(nsc_kencopt)}, k_tp_encx, NSC_FMT_FP16S, 0},
    {"nsc_k_tp_enc_int4", 6, {8, 8, 8, 8, 4, 8}, k_tp_enc, NSC_FMT_INT4, 0},
    {"nsc_k_tp_dec_int4", 5, {8, 8, 8, 8, 4}, k_tp_dec, NSC_FMT_INT4, 0},
    {"nsc_k_tp_sum_int4", 7, {8, 8, 8, 8, 8, 8, 4}, k_tp_sum, NSC_FMT_INT4, 0},
    {"nsc_k_tp_encx_int4", 7, {8, 8, 8, 8, 8, 4, sizeof(nsc_kencopt)}, k_tp_encx, NSC_FMT_INT4, 0},
};
#define NKERNELS (sizeof kernels / sizeof kernels[0])

size_t cd_kernel_params_size(const struct CUfunc_st *f) { return f->sk->total; }

void cd_kernel_pack(const struct CUfunc_st *f, void **params, unsigned char *buf) {
  for (int i = 0; i < f->sk->np; i++) memcpy(buf + f->sk->off[i], params[i], f->sk->size[i]);
}

void cd_kernel_run(const struct CUfunc_st *f, const unsigned char *params, unsigned grid, unsigned block) {
  const unsigned char *p[MAXP];
  for (int i = 0; i < f->sk->np; i++) p[i] = params + f->sk->off[i];
  cd_launch l = {f, grid, block};
  cd_exec_dev = f->mod->ctx->dev;
  f->k->run(f->k, p, &l);
  cd_exec_dev = -1;
  cd_count(&cd_stats.launches);
}

/* The compiled kernel's signature against the contract: same count and
 * sizes, or the double could not read its parameters. */
static const simt_kernel *compiled(const cd_kernel *k) {
  const simt_kernel *sk = simt_kernel_find(k->name);
  if (!sk) {
    cd_note("%s: not in the kernels compiled for the CPU (tests/simt)", k->name);
    return NULL;
  }
  int same = sk->np == k->np;
  for (int i = 0; same && i < k->np; i++) same = sk->size[i] == k->sz[i];
  if (!same) cd_count_illegal("%s: the compiled kernel's parameters differ from the double's contract", k->name);
  return same ? sk : NULL;
}

#define READY() do { CUresult r_ = cd_ready(); if (r_ != CUDA_SUCCESS) return r_; } while (0)

/* The images the driver takes: a fatbin (magic, header size, payload size),
 * an ELF cubin (sized by its section headers), or NUL-terminated PTX text
 * (what NVRTC produces). Kernel names are then looked up inside. */
/* Whether a fatbin has code this device runs, as the driver decides: SASS
 * for sm_XY runs on the same major with minor >= Y; PTX for compute_XY is
 * compiled for any device of XY or newer. Entries: u16 kind (1 PTX, 2 ELF),
 * u16, u32 header size, u64 payload size, ..., u32 arch at offset 28. */
static int fatbin_runs_here(const unsigned char *img, size_t hsize, uint64_t fsize) {
  int sm = cd_device_sm();
  for (uint64_t off = hsize; off + 32 <= hsize + fsize;) {
    uint16_t kind;
    uint32_t ehs, arch;
    uint64_t size;
    memcpy(&kind, img + off, 2);
    memcpy(&ehs, img + off + 4, 4);
    memcpy(&size, img + off + 8, 8);
    memcpy(&arch, img + off + 28, 4);
    if (kind == 2 && (int)arch / 10 == sm / 10 && (int)arch % 10 <= sm % 10) return 1;
    if (kind == 1 && (int)arch <= sm) return 1;
    if (!ehs) break;
    off += ehs + size;
  }
  return 0;
}

static CUresult image_size(const unsigned char *img, size_t *size) {
  uint32_t magic;
  memcpy(&magic, img, 4);
  if (magic == FATBIN_MAGIC) {
    const char *nf = getenv("CUDADRV_NO_FATBIN");
    if (nf && !strcmp(nf, "1")) return CUDA_ERROR_NO_BINARY_FOR_GPU;
    uint16_t hsize;
    uint64_t fsize;
    memcpy(&hsize, img + 6, 2);
    memcpy(&fsize, img + 8, 8);
    if (!fatbin_runs_here(img, hsize, fsize)) return CUDA_ERROR_NO_BINARY_FOR_GPU;
    *size = hsize + fsize;
    return CUDA_SUCCESS;
  }
  if (!memcmp(img, "\x7f" "ELF", 4) && img[4] == 2) { /* 64-bit ELF */
    uint64_t shoff;
    uint16_t shentsize, shnum;
    memcpy(&shoff, img + 0x28, 8);
    memcpy(&shentsize, img + 0x3a, 2);
    memcpy(&shnum, img + 0x3c, 2);
    *size = shoff + (size_t)shentsize * shnum;
    return CUDA_SUCCESS;
  }
  size_t n = strnlen((const char *)img, (size_t)64 << 20);
  if (n < (size_t)64 << 20 && memmem(img, n, ".version", 8) && memmem(img, n, ".entry", 6)) {
    *size = n + 1;
    return CUDA_SUCCESS;
  }
  return CUDA_ERROR_INVALID_IMAGE;
}

CD_EXPORT CUresult cuModuleLoadData(CUmodule *m, const void *image) {
  READY();
  CUcontext c = cd_current();
  if (!c) return CUDA_ERROR_INVALID_CONTEXT;
  CUresult r = cd_unsafe("cuModuleLoadData");
  if (r != CUDA_SUCCESS) return r;
  cd_sync_call("cuModuleLoadData");
  const unsigned char *img = image;
  size_t size;
  if (!img) return CUDA_ERROR_INVALID_VALUE;
  if ((r = image_size(img, &size)) != CUDA_SUCCESS) return r;
  struct CUmod_st *mod = calloc(1, sizeof *mod);
  unsigned char *copy = malloc(size);
  if (!mod || !copy) {
    free(mod);
    free(copy);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  memcpy(copy, img, size);
  mod->magic = MOD_MAGIC;
  mod->ctx = c;
  mod->image = copy;
  mod->size = size;
  *m = mod;
  return CUDA_SUCCESS;
}

CD_EXPORT CUresult cuModuleLoadFatBinary(CUmodule *m, const void *image) { return cuModuleLoadData(m, image); }
CD_EXPORT CUresult cuModuleLoadDataEx(CUmodule *m, const void *image, unsigned n, CUjit_option *o, void **v) {
  (void)n;
  (void)o;
  (void)v;
  return cuModuleLoadData(m, image);
}

CD_EXPORT CUresult cuModuleUnload(CUmodule m) {
  READY();
  if (!m || m->magic != MOD_MAGIC) return CUDA_ERROR_INVALID_HANDLE;
  m->magic = 0; /* kept: launches in flight name its functions */
  return CUDA_SUCCESS;
}

CD_EXPORT CUresult cuModuleGetFunction(CUfunction *f, CUmodule m, const char *name) {
  READY();
  if (!m || m->magic != MOD_MAGIC) return CUDA_ERROR_INVALID_HANDLE;
  if (!name) return CUDA_ERROR_INVALID_VALUE;
  for (int i = 0; i < m->nfn; i++)
    if (!strcmp(m->fns[i].k->name, name)) {
      *f = &m->fns[i];
      return CUDA_SUCCESS;
    }
  /* in the image: NUL-terminated (fatbin/ELF symbol) or followed by '(' (PTX .entry) */
  size_t len = strlen(name);
  char ptx[160];
  snprintf(ptx, sizeof ptx, "%s(", name);
  if (!memmem(m->image, m->size, name, len + 1) && !memmem(m->image, m->size, ptx, len + 1))
    return CUDA_ERROR_NOT_FOUND;
  for (size_t i = 0; i < NKERNELS; i++)
    if (!strcmp(kernels[i].name, name) && m->nfn < (int)(sizeof m->fns / sizeof m->fns[0])) {
      struct CUfunc_st *fn = &m->fns[m->nfn++];
      const simt_kernel *sk = compiled(&kernels[i]);
      if (!sk) return CUDA_ERROR_NOT_FOUND;
      fn->magic = FN_MAGIC;
      fn->k = &kernels[i];
      fn->sk = sk;
      fn->mod = m;
      *f = fn;
      return CUDA_SUCCESS;
    }
  return CUDA_ERROR_NOT_FOUND;
}

/* Occupancy as a GPU of this double's kind would report it for the shim's
 * kernels: registers decide, and the double assumes 40 per thread (what
 * ptxas reports for the widest of them), 65536 per multiprocessor, at most
 * 2048 threads and 32 blocks: 6 blocks of 256 threads. */
CD_EXPORT CUresult cuOccupancyMaxActiveBlocksPerMultiprocessor(int *n, CUfunction f, int block, size_t dyn) {
  READY();
  if (!n || !f || f->magic != FN_MAGIC || block <= 0 || block > 1024) return CUDA_ERROR_INVALID_VALUE;
  int by_regs = 65536 / (40 * block), by_threads = 2048 / block;
  *n = by_regs < by_threads ? by_regs : by_threads;
  if (*n > 32) *n = 32;
  if (dyn) *n = 0; /* the kernels use no dynamic shared memory: a caller asking for some is wrong */
  return CUDA_SUCCESS;
}

CD_EXPORT CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                                  unsigned bz, unsigned shmem, CUstream h, void **params, void **extra) {
  READY();
  if (!f || f->magic != FN_MAGIC) return CUDA_ERROR_INVALID_HANDLE;
  if (!gx || !gy || !gz || !bx || !by || !bz) return CUDA_ERROR_INVALID_VALUE;
  if (bx * by * bz > NSC_K_BLOCK) return CUDA_ERROR_INVALID_VALUE; /* __launch_bounds__ */
  if (extra || !params) return CUDA_ERROR_INVALID_VALUE;
  struct CUstream_st *s;
  CUresult r = cd_stream(h, &s);
  if (r != CUDA_SUCCESS) return r;
  if (s->ctx != f->mod->ctx) return CUDA_ERROR_INVALID_HANDLE; /* function of another context */
  if (bx * by * bz != NSC_K_BLOCK || shmem)
    cd_count_illegal("%s launched with %u threads per block and %u bytes of shared memory (kernels need %d, 0)",
                     f->k->name, bx * by * bz, shmem, NSC_K_BLOCK);
  cd_op *op = cd_op_new(OP_KERNEL, f->k->name);
  op->u.k.fn = f;
  op->u.k.grid = gx;
  for (uint64_t m = __atomic_load_n(&cd_stats.kernel_max_grid, __ATOMIC_RELAXED);
       gx > m && !__atomic_compare_exchange_n(&cd_stats.kernel_max_grid, &m, gx, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED);) {
  }
  op->u.k.block = bx * by * bz;
  op->u.k.params = malloc(cd_kernel_params_size(f));
  cd_kernel_pack(f, params, op->u.k.params);
  return cd_enqueue(s, op);
}
