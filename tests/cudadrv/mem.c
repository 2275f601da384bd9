/* mem.c — memory of the CUDA driver test double: device memory (cuMemAlloc,
 * memory pools and cuMemAllocAsync, VMM: cuMemAddressReserve/Create/Map/
 * SetAccess), pinned host memory (cuMemHostAlloc, cuMemHostRegister), managed
 * memory, their pointer attributes, and the translation that lets the
 * double's own work (kernels, copies, the host NCCL's collectives) reach it.
 *
 * Device memory lives in one sparse memfd per device (CUDADRV_DEVICE_GB,
 * default 64) mapped twice: at the device addresses handed out, PROT_NONE, so
 * host code that dereferences a device pointer gets SIGSEGV as on a GPU; and
 * at a private host view used by cd_view()/cudadrv_host_view(). VMM physical
 * allocations are memfds of their own mapped over both views. Freed ranges
 * are punched out of the file, so memory use follows live allocations.
 *
 * Must not: hand out device addresses host code can touch, or translate a
 * range that is not inside one live (and, for VMM, access-enabled) mapping. */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "cudadrv.h"

#define ALIGN 512
#define VMM_GRAN ((size_t)2 << 20)
#define POOL_MAGIC 0x504f4f4c
#define PHYS_MAGIC 0x50485953

enum { K_DEVICE = 1, K_PINNED, K_REGISTERED, K_MANAGED, K_VMM };

struct CUmemPoolHandle_st {
  int magic;
  int dev;
  cuuint64_t threshold;
};

typedef struct {
  int magic, dev, fd, released, maps;
  size_t size;
} phys;

typedef struct {
  uintptr_t base;
  size_t size;
  int kind, dev, from_capture;
  unsigned access; /* VMM: bit d = device d may read and write */
  int ar; /* arena holding the address (VMM: the reservation's, dev: the memory's) */
  unsigned flags;
  CUcontext ctx;
  unsigned long long id;
  struct CUmemPoolHandle_st *pool;
  phys *ph;
  size_t ext;                /* K_DEVICE: the arena extent's length */
  struct CUstream_st *freeing; /* a cuMemFreeAsync on this stream has not run yet */
  uint64_t gen;              /* reuses of the block (a queued free of an older gen is void) */
} alloc_rec;

typedef struct {
  uintptr_t off;
  size_t len;
} extent;

typedef struct {
  int fd;
  size_t size, used;
  char *dev, *host;
  extent *fr; /* free extents sorted by offset */
  int nfr, capfr;
} arena;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static arena arenas[8];
static alloc_rec *tab;
static size_t ntab, captab;
static alloc_rec resv[256]; /* VMM reservations */
static int nresv;
static unsigned long long next_buf = 1;
static struct CUmemPoolHandle_st default_pool[8], *cur_pool[8];

static uintptr_t extent_take(arena *a, size_t len, size_t align);

size_t cd_device_bytes(void) {
  const char *e = getenv("CUDADRV_DEVICE_GB");
  long gb = e ? atol(e) : 64;
  return (size_t)(gb > 0 && gb <= 1024 ? gb : 64) << 30;
}

static int arena_init(int dev) {
  arena *a = &arenas[dev];
  if (a->dev) return 0;
  a->size = cd_device_bytes();
  a->fd = memfd_create("cudadrv-device", MFD_CLOEXEC);
  if (a->fd < 0 || ftruncate(a->fd, (off_t)a->size)) return -1;
  void *d = mmap(NULL, a->size, PROT_NONE, MAP_SHARED | MAP_NORESERVE, a->fd, 0);
  void *h = mmap(NULL, a->size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, a->fd, 0);
  if (d == MAP_FAILED || h == MAP_FAILED) return -1;
  a->fr = malloc(16 * sizeof *a->fr);
  a->capfr = 16;
  a->nfr = 1;
  a->fr[0] = (extent){ALIGN, a->size - ALIGN}; /* offset 0 never handed out */
  a->host = h;
  a->dev = d;
  /* CUDADRV_HELD_MB: what a caching allocator (PyTorch's) already holds of
   * this device, never given back: allocations beyond the rest fail with
   * CUDA_ERROR_OUT_OF_MEMORY, as beside a real training job. */
  const char *held = getenv("CUDADRV_HELD_MB");
  size_t hb = held ? (size_t)strtoull(held, NULL, 10) << 20 : 0;
  if (hb) (void)extent_take(a, hb < a->size - 2 * ALIGN ? hb : a->size - 2 * ALIGN, ALIGN);
  return 0;
}

static int arena_of(uintptr_t p) {
  for (int i = 0; i < 8; i++)
    if (arenas[i].dev && p >= (uintptr_t)arenas[i].dev && p < (uintptr_t)arenas[i].dev + arenas[i].size) return i;
  return -1;
}

/* First fit; lock held. Returns the offset or 0. */
static uintptr_t extent_take(arena *a, size_t len, size_t align) {
  for (int i = 0; i < a->nfr; i++) {
    uintptr_t s = (a->fr[i].off + align - 1) & ~(uintptr_t)(align - 1);
    if (s + len > a->fr[i].off + a->fr[i].len) continue;
    extent e = a->fr[i];
    uintptr_t end = e.off + e.len;
    /* split: [e.off, s) and [s+len, end) stay free */
    int nparts = (s > e.off) + (s + len < end);
    if (a->nfr + 1 > a->capfr) {
      a->capfr *= 2;
      a->fr = realloc(a->fr, (size_t)a->capfr * sizeof *a->fr);
    }
    memmove(&a->fr[i + nparts], &a->fr[i + 1], (size_t)(a->nfr - i - 1) * sizeof *a->fr);
    int k = i;
    if (s > e.off) a->fr[k++] = (extent){e.off, s - e.off};
    if (s + len < end) a->fr[k++] = (extent){s + len, end - s - len};
    a->nfr += nparts - 1;
    a->used += len;
    return s;
  }
  return 0;
}

static void extent_give(arena *a, uintptr_t off, size_t len) {
  int i = 0;
  while (i < a->nfr && a->fr[i].off < off) i++;
  if (a->nfr + 1 > a->capfr) {
    a->capfr *= 2;
    a->fr = realloc(a->fr, (size_t)a->capfr * sizeof *a->fr);
  }
  memmove(&a->fr[i + 1], &a->fr[i], (size_t)(a->nfr - i) * sizeof *a->fr);
  a->fr[i] = (extent){off, len};
  a->nfr++;
  a->used -= len;
  if (i + 1 < a->nfr && a->fr[i].off + a->fr[i].len == a->fr[i + 1].off) {
    a->fr[i].len += a->fr[i + 1].len;
    memmove(&a->fr[i + 1], &a->fr[i + 2], (size_t)(a->nfr - i - 2) * sizeof *a->fr);
    a->nfr--;
  }
  if (i > 0 && a->fr[i - 1].off + a->fr[i - 1].len == a->fr[i].off) {
    a->fr[i - 1].len += a->fr[i].len;
    memmove(&a->fr[i], &a->fr[i + 1], (size_t)(a->nfr - i - 1) * sizeof *a->fr);
    a->nfr--;
  }
  /* release the whole pages of the range */
  uintptr_t ps = 4096, s = (off + ps - 1) & ~(ps - 1), e = (off + len) & ~(ps - 1);
  if (e > s) fallocate(a->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)s, (off_t)(e - s));
}

/* ---- the table of allocations, sorted by base; lock held ---- */
static size_t tab_upper(uintptr_t p) { /* first index with base > p */
  size_t lo = 0, hi = ntab;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (tab[mid].base <= p) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}
static alloc_rec *tab_find(uintptr_t p) {
  size_t i = tab_upper(p);
  if (!i) return NULL;
  alloc_rec *r = &tab[i - 1];
  return p < r->base + r->size ? r : NULL;
}
static alloc_rec *tab_add(const alloc_rec *r) {
  if (ntab == captab) {
    captab = captab ? 2 * captab : 256;
    tab = realloc(tab, captab * sizeof *tab);
  }
  size_t i = tab_upper(r->base);
  memmove(&tab[i + 1], &tab[i], (ntab - i) * sizeof *tab);
  tab[i] = *r;
  tab[i].id = next_buf++;
  ntab++;
  return &tab[i];
}
static void tab_del(alloc_rec *r) {
  size_t i = (size_t)(r - tab);
  memmove(&tab[i], &tab[i + 1], (ntab - i - 1) * sizeof *tab);
  ntab--;
}

static void *host_of(const alloc_rec *r, uintptr_t p) {
  if (r->kind == K_DEVICE || r->kind == K_VMM) {
    arena *a = &arenas[r->ar];
    return a->host + (p - (uintptr_t)a->dev);
  }
  return (void *)p;
}

__thread int cd_exec_dev = -1;

void *cd_view(CUdeviceptr dp, size_t bytes, const char *api, int host_ok) {
  uintptr_t p = (uintptr_t)dp;
  void *out = NULL;
  const char *why = "not in any allocation";
  pthread_mutex_lock(&lock);
  alloc_rec *r = tab_find(p);
  int d = cd_exec_dev;
  char other[128];
  if (r && bytes > r->base + r->size - p) why = "runs past the end of its allocation";
  else if (r && r->kind == K_VMM && !(r->access & (d >= 0 ? 1u << d : ~0u))) why = "VMM mapping without cuMemSetAccess for this device";
  else if (r && d >= 0 && r->kind == K_DEVICE && r->dev != d) {
    snprintf(other, sizeof other, "memory of device %d used by a kernel on device %d (no peer access)", r->dev, d);
    why = other;
  } else if (r) out = host_of(r, p);
  else if (host_ok && arena_of(p) < 0) out = (void *)p; /* pageable host memory */
  pthread_mutex_unlock(&lock);
  if (!out) cd_count_illegal("%s: %zu bytes at %p %s", api, bytes, (void *)p, why);
  return out;
}

CD_EXPORT int cudadrv_host_view(const void *p, size_t bytes, void **host) {
  *host = cd_view((CUdeviceptr)(uintptr_t)p, bytes, "cudadrv_host_view", 0);
  return *host ? 0 : -1;
}

int cd_is_host_memory(uintptr_t p) {
  pthread_mutex_lock(&lock);
  alloc_rec *r = tab_find(p);
  int yes = r && (r->kind == K_PINNED || r->kind == K_REGISTERED);
  pthread_mutex_unlock(&lock);
  return yes;
}

int cd_is_pinned_or_device(const void *p) {
  pthread_mutex_lock(&lock);
  int yes = tab_find((uintptr_t)p) != NULL;
  pthread_mutex_unlock(&lock);
  return yes;
}

CUresult cd_alloc_device(int dev, CUcontext ctx, size_t bytes, struct CUmemPoolHandle_st *pool,
                         CUdeviceptr *out) {
  if (!bytes) return CUDA_ERROR_INVALID_VALUE;
  CUresult r = CUDA_ERROR_OUT_OF_MEMORY;
  pthread_mutex_lock(&lock);
  size_t len = (bytes + ALIGN - 1) & ~(size_t)(ALIGN - 1);
  uintptr_t off;
  if (!arena_init(dev) && (off = extent_take(&arenas[dev], len, ALIGN))) {
    alloc_rec a = {.base = (uintptr_t)arenas[dev].dev + off, .size = bytes, .kind = K_DEVICE,
                   .dev = dev, .ar = dev, .ctx = ctx, .pool = pool, .ext = len};
    tab_add(&a);
    *out = (CUdeviceptr)a.base;
    r = CUDA_SUCCESS;
  }
  pthread_mutex_unlock(&lock);
  return r;
}

CUresult cd_free_device(CUdeviceptr p, int async) {
  (void)async; /* cuMemFree may free pool memory too (it synchronises) */
  pthread_mutex_lock(&lock);
  alloc_rec *r = tab_find((uintptr_t)p);
  CUresult res = CUDA_ERROR_INVALID_VALUE;
  if (r && r->base == (uintptr_t)p && r->kind == K_DEVICE) {
    arena *a = &arenas[r->ar];
    extent_give(a, r->base - (uintptr_t)a->dev, r->ext);
    tab_del(r);
    res = CUDA_SUCCESS;
  } else if (!async && r && r->base == (uintptr_t)p && r->kind == K_MANAGED) {
    munmap((void *)r->base, r->size);
    tab_del(r);
    res = CUDA_SUCCESS;
  }
  pthread_mutex_unlock(&lock);
  return res;
}

/* The queued cuMemFreeAsync of p (generation gen) runs: frees the block
 * unless it was handed out again since (then the free is void). 0, or -1
 * when p is no live allocation. */
int cd_free_async_run(CUdeviceptr p, uint64_t gen) {
  pthread_mutex_lock(&lock);
  alloc_rec *r = tab_find((uintptr_t)p);
  int rc = -1;
  if (r && r->base == (uintptr_t)p && r->kind == K_DEVICE && r->gen != gen) rc = 0; /* reused */
  else if (r && r->base == (uintptr_t)p && r->kind == K_DEVICE) {
    arena *a = &arenas[r->ar];
    extent_give(a, r->base - (uintptr_t)a->dev, r->ext);
    tab_del(r);
    rc = 0;
  }
  pthread_mutex_unlock(&lock);
  return rc;
}

/* Flags an allocation as made during capture (freed with its graph). */
int cd_mark_capture_alloc(CUdeviceptr p) {
  pthread_mutex_lock(&lock);
  alloc_rec *r = tab_find((uintptr_t)p);
  if (r) r->from_capture = 1;
  pthread_mutex_unlock(&lock);
  return r != NULL;
}
int cd_is_capture_alloc(CUdeviceptr p) {
  pthread_mutex_lock(&lock);
  alloc_rec *r = tab_find((uintptr_t)p);
  int yes = r && r->from_capture && r->base == (uintptr_t)p;
  pthread_mutex_unlock(&lock);
  return yes;
}

#define READY() do { CUresult r_ = cd_ready(); if (r_ != CUDA_SUCCESS) return r_; } while (0)
#define CURRENT(c) CUcontext c = cd_current(); if (!c) return CUDA_ERROR_INVALID_CONTEXT
#define UNSAFE(api) do { CUresult r_ = cd_unsafe(api); if (r_ != CUDA_SUCCESS) return r_; cd_sync_call(api); } while (0)

static void drain_ctx(CUcontext c) {
  pthread_mutex_lock(&c->lock);
  struct CUstream_st *list = c->streams;
  pthread_mutex_unlock(&c->lock);
  for (struct CUstream_st *s = list; s; s = s->next_in_ctx) cd_stream_drain(s);
}

/* ---- device memory ---- */
CD_EXPORT CUresult cuMemAlloc(CUdeviceptr *p, size_t bytes) {
  READY();
  CURRENT(c);
  UNSAFE("cuMemAlloc");
  return cd_alloc_device(c->dev, c, bytes, NULL, p);
}

CD_EXPORT CUresult cuMemFree(CUdeviceptr p) {
  READY();
  CURRENT(c);
  if (!p) return CUDA_SUCCESS;
  UNSAFE("cuMemFree");
  drain_ctx(c); /* cuMemFree synchronises the device */
  return cd_free_device(p, 0);
}

CD_EXPORT CUresult cuMemGetInfo(size_t *freeb, size_t *total) {
  READY();
  CURRENT(c);
  pthread_mutex_lock(&lock);
  arena_init(c->dev);
  *total = arenas[c->dev].size;
  *freeb = arenas[c->dev].size - arenas[c->dev].used;
  pthread_mutex_unlock(&lock);
  return CUDA_SUCCESS;
}

CD_EXPORT CUresult cuMemGetAddressRange(CUdeviceptr *base, size_t *size, CUdeviceptr p) {
  READY();
  pthread_mutex_lock(&lock);
  alloc_rec *r = tab_find((uintptr_t)p);
  if (r) {
    if (base) *base = (CUdeviceptr)r->base;
    if (size) *size = r->size;
  }
  pthread_mutex_unlock(&lock);
  return r ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
}

/* ---- pools ---- */
static struct CUmemPoolHandle_st *pool_of_dev(int dev) {
  pthread_mutex_lock(&lock);
  if (!default_pool[dev].magic) {
    default_pool[dev] = (struct CUmemPoolHandle_st){POOL_MAGIC, dev, 0};
    cur_pool[dev] = &default_pool[dev];
  }
  struct CUmemPoolHandle_st *p = cur_pool[dev];
  pthread_mutex_unlock(&lock);
  return p;
}

CD_EXPORT CUresult cuDeviceGetDefaultMemPool(CUmemoryPool *pool, CUdevice dev) {
  READY();
  if (!cd_primary(dev)) return CUDA_ERROR_INVALID_DEVICE;
  pool_of_dev(dev);
  *pool = &default_pool[dev];
  return CUDA_SUCCESS;
}
CD_EXPORT CUresult cuDeviceGetMemPool(CUmemoryPool *pool, CUdevice dev) {
  READY();
  if (!cd_primary(dev)) return CUDA_ERROR_INVALID_DEVICE;
  *pool = pool_of_dev(dev);
  return CUDA_SUCCESS;
}
CD_EXPORT CUresult cuDeviceSetMemPool(CUdevice dev, CUmemoryPool pool) {
  READY();
  if (!cd_primary(dev) || !pool || pool->magic != POOL_MAGIC || pool->dev != dev) return CUDA_ERROR_INVALID_VALUE;
  pool_of_dev(dev);
  cur_pool[dev] = pool;
  return CUDA_SUCCESS;
}
CD_EXPORT CUresult cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *props) {
  READY();
  if (!props || props->location.type != CU_MEM_LOCATION_TYPE_DEVICE || !cd_primary(props->location.id))
    return CUDA_ERROR_INVALID_VALUE;
  struct CUmemPoolHandle_st *p = calloc(1, sizeof *p);
  p->magic = POOL_MAGIC;
  p->dev = props->location.id;
  *pool = p;
  return CUDA_SUCCESS;
}
CD_EXPORT CUresult cuMemPoolDestroy(CUmemoryPool pool) {
  READY();
  if (!pool || pool->magic != POOL_MAGIC || pool == &default_pool[pool->dev]) return CUDA_ERROR_INVALID_VALUE;
  pool->magic = 0; /* kept: allocations may still name it */
  return CUDA_SUCCESS;
}
CD_EXPORT CUresult cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute a, void *v) {
  READY();
  if (!pool || pool->magic != POOL_MAGIC || !v) return CUDA_ERROR_INVALID_VALUE;
  if (a == CU_MEMPOOL_ATTR_RELEASE_THRESHOLD) pool->threshold = *(cuuint64_t *)v;
  return CUDA_SUCCESS;
}
CD_EXPORT CUresult cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute a, void *v) {
  READY();
  if (!pool || pool->magic != POOL_MAGIC || !v) return CUDA_ERROR_INVALID_VALUE;
  if (a == CU_MEMPOOL_ATTR_RELEASE_THRESHOLD) *(cuuint64_t *)v = pool->threshold;
  else if (a == CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES || a == CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC ||
           a == CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES)
    *(int *)v = 1;
  else *(cuuint64_t *)v = 0;
  return CUDA_SUCCESS;
}
CD_EXPORT CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t keep) {
  (void)keep;
  READY();
  return pool && pool->magic == POOL_MAGIC ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

static CUresult alloc_async(CUdeviceptr *p, size_t bytes, struct CUmemPoolHandle_st *pool, CUstream h) {
  struct CUstream_st *s;
  CUresult r = cd_stream(h, &s);
  if (r != CUDA_SUCCESS) return r;
  if (!pool) pool = pool_of_dev(s->ctx->dev);
  if (pool->magic != POOL_MAGIC) return CUDA_ERROR_INVALID_VALUE;
  if (!bytes) return CUDA_ERROR_INVALID_VALUE;
  /* As a real pool does: a block freed on this stream is handed out again
   * at once, before its free ran, since the stream orders the two; work on
   * other streams that still uses it without a join sees it overwritten. */
  if (!s->cap) {
    pthread_mutex_lock(&lock);
    alloc_rec *hit = NULL;
    for (size_t i = 0; i < ntab && !hit; i++)
      if (tab[i].kind == K_DEVICE && tab[i].freeing == s && tab[i].pool == pool && tab[i].ext >= bytes) hit = &tab[i];
    if (hit) {
      hit->freeing = NULL;
      hit->gen++;
      hit->size = bytes;
      *p = (CUdeviceptr)hit->base;
      cd_stats.pool_reuses++;
    }
    pthread_mutex_unlock(&lock);
    if (hit) return CUDA_SUCCESS;
  }
  if ((r = cd_alloc_device(pool->dev, s->ctx, bytes, pool, p)) != CUDA_SUCCESS) return r;
  if (s->cap) {
    cd_count(&cd_stats.graph_allocs);
    cd_mark_capture_alloc(*p);
    cd_capture_note_alloc(s->cap, *p);
  }
  return CUDA_SUCCESS;
}

CD_EXPORT CUresult cuMemAllocAsync(CUdeviceptr *p, size_t bytes, CUstream h) {
  READY();
  return alloc_async(p, bytes, NULL, h);
}
CD_EXPORT CUresult cuMemAllocFromPoolAsync(CUdeviceptr *p, size_t bytes, CUmemoryPool pool, CUstream h) {
  READY();
  if (!pool) return CUDA_ERROR_INVALID_VALUE;
  return alloc_async(p, bytes, pool, h);
}

CD_EXPORT CUresult cuMemFreeAsync(CUdeviceptr p, CUstream h) {
  READY();
  struct CUstream_st *s;
  CUresult r = cd_stream(h, &s);
  if (r != CUDA_SUCCESS) return r;
  pthread_mutex_lock(&lock);
  alloc_rec *a = tab_find((uintptr_t)p);
  int ok = a && a->base == (uintptr_t)p && a->kind == K_DEVICE && !a->freeing;
  uint64_t gen = 0;
  if (ok && !s->cap && !a->from_capture) { /* reusable at once on s (a captured free belongs to the graph) */
    a->freeing = s;
    gen = a->gen;
  } else if (ok) gen = a->gen;
  pthread_mutex_unlock(&lock);
  if (!ok) return CUDA_ERROR_INVALID_VALUE;
  cd_op *op = cd_op_new(OP_FREE, "cuMemFreeAsync");
  op->u.free.p = p;
  op->u.free.gen = gen;
  return cd_enqueue(s, op);
}

/* ---- pinned, registered and managed host memory ---- */
static CUresult host_map(size_t bytes, int kind, unsigned flags, void **out) {
  CURRENT(c);
  if (!bytes) return CUDA_ERROR_INVALID_VALUE;
  void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  alloc_rec a = {.base = (uintptr_t)p, .size = bytes, .kind = kind, .dev = c->dev, .ctx = c, .flags = flags};
  pthread_mutex_lock(&lock);
  tab_add(&a);
  pthread_mutex_unlock(&lock);
  *out = p;
  return CUDA_SUCCESS;
}

CD_EXPORT CUresult cuMemHostAlloc(void **p, size_t bytes, unsigned flags) {
  READY();
  UNSAFE("cuMemHostAlloc");
  return host_map(bytes, K_PINNED, flags, p);
}
CD_EXPORT CUresult cuMemAllocHost(void **p, size_t bytes) {
  READY();
  UNSAFE("cuMemAllocHost");
  return host_map(bytes, K_PINNED, 0, p);
}
CD_EXPORT CUresult cuMemAllocManaged(CUdeviceptr *p, size_t bytes, unsigned flags) {
  READY();
  UNSAFE("cuMemAllocManaged");
  if (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST) return CUDA_ERROR_INVALID_VALUE;
  void *h = NULL;
  CUresult r = host_map(bytes, K_MANAGED, flags, &h);
  *p = (CUdeviceptr)(uintptr_t)h;
  return r;
}

CD_EXPORT CUresult cuMemFreeHost(void *p) {
  READY();
  UNSAFE("cuMemFreeHost");
  pthread_mutex_lock(&lock);
  alloc_rec *a = tab_find((uintptr_t)p);
  CUresult r = CUDA_ERROR_INVALID_VALUE;
  if (a && a->base == (uintptr_t)p && a->kind == K_PINNED) {
    munmap(p, a->size);
    tab_del(a);
    r = CUDA_SUCCESS;
  }
  pthread_mutex_unlock(&lock);
  return r;
}

CD_EXPORT CUresult cuMemHostRegister(void *p, size_t bytes, unsigned flags) {
  READY();
  CURRENT(c);
  if (!p || !bytes) return CUDA_ERROR_INVALID_VALUE;
  alloc_rec a = {.base = (uintptr_t)p, .size = bytes, .kind = K_REGISTERED, .dev = c->dev, .ctx = c, .flags = flags};
  pthread_mutex_lock(&lock);
  CUresult r = tab_find((uintptr_t)p) || tab_find((uintptr_t)p + bytes - 1) ? CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED
                                                                          : CUDA_SUCCESS;
  if (r == CUDA_SUCCESS) tab_add(&a);
  pthread_mutex_unlock(&lock);
  return r;
}
CD_EXPORT CUresult cuMemHostUnregister(void *p) {
  READY();
  pthread_mutex_lock(&lock);
  alloc_rec *a = tab_find((uintptr_t)p);
  CUresult r = CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
  if (a && a->base == (uintptr_t)p && a->kind == K_REGISTERED) {
    tab_del(a);
    r = CUDA_SUCCESS;
  }
  pthread_mutex_unlock(&lock);
  return r;
}

CD_EXPORT CUresult cuMemHostGetDevicePointer(CUdeviceptr *d, void *p, unsigned flags) {
  READY();
  if (flags) return CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&lock);
  alloc_rec *a = tab_find((uintptr_t)p);
  int ok = a && (a->kind == K_PINNED || a->kind == K_REGISTERED);
  pthread_mutex_unlock(&lock);
  if (!ok) return CUDA_ERROR_INVALID_VALUE;
  *d = (CUdeviceptr)(uintptr_t)p; /* unified addressing */
  return CUDA_SUCCESS;
}

/* ---- VMM ---- */
CD_EXPORT CUresult cuMemGetAllocationGranularity(size_t *g, const CUmemAllocationProp *prop,
                                                 CUmemAllocationGranularity_flags o) {
  (void)o;
  READY();
  if (!prop || prop->type != CU_MEM_ALLOCATION_TYPE_PINNED || prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
    return CUDA_ERROR_INVALID_VALUE;
  *g = VMM_GRAN;
  return CUDA_SUCCESS;
}

CD_EXPORT CUresult cuMemAddressReserve(CUdeviceptr *p, size_t size, size_t align, CUdeviceptr addr,
                                       unsigned long long flags) {
  (void)addr;
  (void)flags;
  READY();
  if (!size || size % VMM_GRAN) return CUDA_ERROR_INVALID_VALUE;
  CUcontext c = cd_current();
  int dev = c ? c->dev : 0;
  CUresult r = CUDA_ERROR_OUT_OF_MEMORY;
  pthread_mutex_lock(&lock);
  uintptr_t off;
  if (nresv < 256 && !arena_init(dev) && (off = extent_take(&arenas[dev], size, align > VMM_GRAN ? align : VMM_GRAN))) {
    resv[nresv++] = (alloc_rec){.base = (uintptr_t)arenas[dev].dev + off, .size = size, .dev = dev};
    *p = (CUdeviceptr)resv[nresv - 1].base;
    r = CUDA_SUCCESS;
  }
  pthread_mutex_unlock(&lock);
  return r;
}

CD_EXPORT CUresult cuMemAddressFree(CUdeviceptr p, size_t size) {
  READY();
  CUresult r = CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&lock);
  for (int i = 0; i < nresv; i++)
    if (resv[i].base == (uintptr_t)p && resv[i].size == size) {
      arena *a = &arenas[resv[i].dev];
      extent_give(a, resv[i].base - (uintptr_t)a->dev, size);
      resv[i] = resv[--nresv];
      r = CUDA_SUCCESS;
      break;
    }
  pthread_mutex_unlock(&lock);
  return r;
}

CD_EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle *h, size_t size, const CUmemAllocationProp *prop,
                               unsigned long long flags) {
  READY();
  if (flags || !prop || prop->type != CU_MEM_ALLOCATION_TYPE_PINNED ||
      prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE || !cd_primary(prop->location.id) || !size ||
      size % VMM_GRAN)
    return CUDA_ERROR_INVALID_VALUE;
  phys *ph = calloc(1, sizeof *ph);
  ph->fd = memfd_create("cudadrv-vmm", MFD_CLOEXEC);
  if (ph->fd < 0 || ftruncate(ph->fd, (off_t)size)) {
    free(ph);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  ph->magic = PHYS_MAGIC;
  ph->dev = prop->location.id;
  ph->size = size;
  *h = (CUmemGenericAllocationHandle)(uintptr_t)ph;
  return CUDA_SUCCESS;
}

static void phys_put(phys *ph) {
  if (ph->released && !ph->maps) {
    close(ph->fd);
    ph->magic = 0;
    free(ph);
  }
}

CD_EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle h) {
  READY();
  phys *ph = (phys *)(uintptr_t)h;
  if (!ph || ph->magic != PHYS_MAGIC || ph->released) return CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&lock);
  ph->released = 1;
  phys_put(ph);
  pthread_mutex_unlock(&lock);
  return CUDA_SUCCESS;
}

static alloc_rec *resv_of(uintptr_t p, size_t size) {
  for (int i = 0; i < nresv; i++)
    if (p >= resv[i].base && p + size <= resv[i].base + resv[i].size) return &resv[i];
  return NULL;
}

CD_EXPORT CUresult cuMemMap(CUdeviceptr p, size_t size, size_t offset, CUmemGenericAllocationHandle h,
                            unsigned long long flags) {
  READY();
  phys *ph = (phys *)(uintptr_t)h;
  if (flags || !ph || ph->magic != PHYS_MAGIC || offset + size > ph->size || size % VMM_GRAN) return CUDA_ERROR_INVALID_VALUE;
  CUresult r = CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&lock);
  alloc_rec *rv = resv_of((uintptr_t)p, size);
  if (rv && !tab_find((uintptr_t)p) && !tab_find((uintptr_t)p + size - 1)) {
    arena *a = &arenas[rv->dev];
    char *dv = (char *)(uintptr_t)p, *hv = a->host + ((uintptr_t)p - (uintptr_t)a->dev);
    if (mmap(dv, size, PROT_NONE, MAP_SHARED | MAP_FIXED, ph->fd, (off_t)offset) != MAP_FAILED &&
        mmap(hv, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, ph->fd, (off_t)offset) != MAP_FAILED) {
      alloc_rec m = {.base = (uintptr_t)p, .size = size, .kind = K_VMM, .dev = ph->dev, .ar = rv->dev, .ph = ph};
      tab_add(&m);
      ph->maps++;
      r = CUDA_SUCCESS;
    } else r = CUDA_ERROR_OUT_OF_MEMORY;
  }
  pthread_mutex_unlock(&lock);
  return r;
}

CD_EXPORT CUresult cuMemUnmap(CUdeviceptr p, size_t size) {
  READY();
  CUresult r = CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&lock);
  alloc_rec *m = tab_find((uintptr_t)p);
  if (m && m->kind == K_VMM && m->base == (uintptr_t)p && m->size == size) {
    arena *a = &arenas[m->ar];
    uintptr_t off = (uintptr_t)p - (uintptr_t)a->dev;
    mmap((void *)(uintptr_t)p, size, PROT_NONE, MAP_SHARED | MAP_FIXED | MAP_NORESERVE, a->fd, (off_t)off);
    mmap(a->host + off, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED | MAP_NORESERVE, a->fd, (off_t)off);
    phys *ph = m->ph;
    tab_del(m);
    ph->maps--;
    phys_put(ph);
    r = CUDA_SUCCESS;
  }
  pthread_mutex_unlock(&lock);
  return r;
}

CD_EXPORT CUresult cuMemSetAccess(CUdeviceptr p, size_t size, const CUmemAccessDesc *desc, size_t count) {
  READY();
  if (!desc || !count) return CUDA_ERROR_INVALID_VALUE;
  unsigned rw = 0;
  for (size_t i = 0; i < count; i++)
    if (desc[i].location.type == CU_MEM_LOCATION_TYPE_DEVICE && desc[i].flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE &&
        cd_primary(desc[i].location.id))
      rw |= 1u << desc[i].location.id;
  CUresult r = CUDA_SUCCESS;
  pthread_mutex_lock(&lock);
  for (uintptr_t q = (uintptr_t)p; q < (uintptr_t)p + size;) {
    alloc_rec *m = tab_find(q);
    if (!m || m->kind != K_VMM) {
      r = CUDA_ERROR_INVALID_VALUE;
      break;
    }
    m->access = rw; /* the access of the devices named; others none */
    q = m->base + m->size;
  }
  pthread_mutex_unlock(&lock);
  return r;
}

/* ---- pointer attributes ---- */
static CUresult attr(const alloc_rec *r, CUpointer_attribute a, void *data, uintptr_t p) {
  int dev_mem = r && (r->kind == K_DEVICE || r->kind == K_VMM);
  switch (a) {
  case CU_POINTER_ATTRIBUTE_CONTEXT: *(CUcontext *)data = r && r->kind != K_VMM ? r->ctx : NULL; break;
  case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
    *(unsigned *)data = !r ? 0
                        : dev_mem || (r->kind == K_MANAGED && r->flags == CU_MEM_ATTACH_GLOBAL) ? CU_MEMORYTYPE_DEVICE
                                                                                              : CU_MEMORYTYPE_HOST;
    break;
  case CU_POINTER_ATTRIBUTE_DEVICE_POINTER: *(CUdeviceptr *)data = r ? (CUdeviceptr)p : 0; break;
  case CU_POINTER_ATTRIBUTE_HOST_POINTER:
    if (dev_mem) return CUDA_ERROR_INVALID_VALUE;
    *(void **)data = r ? (void *)p : NULL;
    break;
  case CU_POINTER_ATTRIBUTE_SYNC_MEMOPS: *(int *)data = 0; break;
  case CU_POINTER_ATTRIBUTE_BUFFER_ID: *(unsigned long long *)data = r ? r->id : 0; break;
  case CU_POINTER_ATTRIBUTE_IS_MANAGED: *(int *)data = r && r->kind == K_MANAGED; break;
  case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL: *(int *)data = r ? r->dev : -2; break;
  case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE: *(int *)data = r && r->kind == K_DEVICE && !r->pool; break;
  case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR: *(CUdeviceptr *)data = r ? (CUdeviceptr)r->base : 0; break;
  case CU_POINTER_ATTRIBUTE_RANGE_SIZE: *(size_t *)data = r ? r->size : 0; break;
  case CU_POINTER_ATTRIBUTE_MAPPED: *(int *)data = r != NULL; break;
  case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE: *(CUmemoryPool *)data = r ? r->pool : NULL; break;
  case CU_POINTER_ATTRIBUTE_ACCESS_FLAGS:
    *(unsigned *)data = r && (r->kind != K_VMM || r->access) ? CU_POINTER_ATTRIBUTE_ACCESS_FLAG_READWRITE
                                                             : CU_POINTER_ATTRIBUTE_ACCESS_FLAG_NONE;
    break;
  case CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES:
  case CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE: *(int *)data = 0; break;
  default: return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}

CD_EXPORT CUresult cuPointerGetAttribute(void *data, CUpointer_attribute a, CUdeviceptr p) {
  READY();
  if (!data) return CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&lock);
  alloc_rec *r = tab_find((uintptr_t)p);
  alloc_rec copy = r ? *r : (alloc_rec){0};
  pthread_mutex_unlock(&lock);
  /* Memory the driver does not know: an error, as the real one answers. */
  if (!r) return CUDA_ERROR_INVALID_VALUE;
  return attr(&copy, a, data, (uintptr_t)p);
}

CD_EXPORT CUresult cuPointerGetAttributes(unsigned n, CUpointer_attribute *as, void **data, CUdeviceptr p) {
  READY();
  pthread_mutex_lock(&lock);
  alloc_rec *r = tab_find((uintptr_t)p);
  alloc_rec copy = r ? *r : (alloc_rec){0};
  pthread_mutex_unlock(&lock);
  /* Unknown memory: success, with the values of no allocation. */
  for (unsigned i = 0; i < n; i++) {
    CUresult e = attr(r ? &copy : NULL, as[i], data[i], (uintptr_t)p);
    if (e != CUDA_SUCCESS && !(as[i] == CU_POINTER_ATTRIBUTE_HOST_POINTER)) return e;
    if (e != CUDA_SUCCESS) *(void **)data[i] = NULL;
  }
  return CUDA_SUCCESS;
}
