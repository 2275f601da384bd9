/* cu_ctx.c — the per-context table of cu_ctx.h.
 *
 * Readers scan the published entries without a lock (entries are complete
 * before the count that publishes them is stored with release order); a
 * mutex serialises creation. The first use of a context loads the module,
 * which cuModuleLoadData does into the current context, so the entry's
 * context is pushed for it when it is not the current one.
 *
 * A context's setup (module load or NVRTC compilation, counters, exchange
 * slots, the private streams) runs once, in relaxed capture mode, normally when a
 * communicator is created on it (nsc_cuctx_for from nsc_backend_prepare);
 * it is the only place that allocates with cuMemAlloc/cuMemHostAlloc.
 * Exchange slots are taken and given back under the entry's lock; an
 * abandoned one (its communicator ended mid-exchange) is reclaimed by a
 * later nsc_cuctx_oob_get once its event completed.
 *
 * Must not: synchronise a stream, free an entry, or exit. */
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cu_ctx.h"
#include "cu_nvrtc.h"

#define MAX_CTX 64
#define EV_BLOCK 64

static nsc_cuctx *table[MAX_CTX];
static const char *kernels_desc = "none"; /* atomic */
static int ntable; /* published entries, atomic */
static pthread_mutex_t table_lock = PTHREAD_MUTEX_INITIALIZER;

#define TRY(call, name)                                                                  \
  do {                                                                                   \
    CUresult r_ = (call);                                                                \
    if (r_ != CUDA_SUCCESS) {                                                            \
      *what = name;                                                                      \
      return r_;                                                                         \
    }                                                                                    \
  } while (0)

static unsigned long long ctx_id(const nsc_cu_api *cu, CUcontext ctx) {
  unsigned long long id = 0;
  if (cu->cuCtxGetId && cu->cuCtxGetId(ctx, &id) != CUDA_SUCCESS) id = 0;
  return id;
}

static nsc_cuctx *find(CUcontext ctx, unsigned long long id) {
  int n = __atomic_load_n(&ntable, __ATOMIC_ACQUIRE);
  for (int i = n - 1; i >= 0; i--)
    if (table[i]->ctx == ctx && table[i]->id == id) return table[i];
  return NULL;
}

CUresult nsc_cuctx_enter(const nsc_cuctx *c, int *pushed, const char **what) {
  const nsc_cu_api *cu = nsc_cu_driver();
  CUcontext cur = NULL;
  *pushed = 0;
  TRY(cu->cuCtxGetCurrent(&cur), "cuCtxGetCurrent");
  if (cur == c->ctx) return CUDA_SUCCESS;
  TRY(cu->cuCtxPushCurrent(c->ctx), "cuCtxPushCurrent");
  *pushed = 1;
  return CUDA_SUCCESS;
}

void nsc_cuctx_leave(int pushed) {
  CUcontext dummy;
  if (pushed) nsc_cu_driver()->cuCtxPopCurrent(&dummy);
}

/* The module: the embedded fatbin, else (built without nvcc, or a fatbin
 * this driver or device cannot use) the kernels compiled by NVRTC for the
 * device's architecture. Records which in c->kernels. */
static CUresult load_module(const nsc_cu_api *cu, nsc_cuctx *c, const char **what) {
  static char why[256];
  CUresult r = CUDA_ERROR_NO_BINARY_FOR_GPU;
  if (nsc_fatbin_size) {
    if ((r = cu->cuModuleLoadData(&c->mod, nsc_fatbin)) == CUDA_SUCCESS) {
      snprintf(c->kernels, sizeof c->kernels, "fatbin");
      return CUDA_SUCCESS;
    }
  }
  int major = 0, minor = 0;
  TRY(cu->cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, c->dev),
      "cuDeviceGetAttribute(COMPUTE_CAPABILITY_MAJOR)");
  TRY(cu->cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, c->dev),
      "cuDeviceGetAttribute(COMPUTE_CAPABILITY_MINOR)");
  void *image = NULL;
  char desc[80], err[200];
  if (nsc_nvrtc_image(major, minor, &image, desc, sizeof desc, err, sizeof err)) {
    /* Static text for *what: setup runs once per context, under table_lock. */
    if (nsc_fatbin_size)
      snprintf(why, sizeof why, "cuModuleLoadData(embedded fatbin) failed (%s), and %s",
               nsc_cu_errname(r), err);
    else
      snprintf(why, sizeof why, "built without nvcc, and %s", err);
    *what = why;
    return CUDA_ERROR_NO_BINARY_FOR_GPU;
  }
  r = cu->cuModuleLoadData(&c->mod, image);
  free(image);
  if (r != CUDA_SUCCESS) {
    snprintf(why, sizeof why, "cuModuleLoadData(%s)", desc);
    *what = why;
    return r;
  }
  snprintf(c->kernels, sizeof c->kernels, "%s%s", desc,
           nsc_fatbin_size ? " (the fatbin did not load)" : "");
  return CUDA_SUCCESS;
}

/* Fills a new entry for ctx (current on this thread during the call). */
static CUresult init_entry(const nsc_cu_api *cu, nsc_cuctx *c, const char **what) {
  static const char *const names[NSC_K_COUNT] = {
#define NSC_K_NAME(k) "nsc_k_" #k,
      NSC_KERNEL_NAMES(NSC_K_NAME)
#undef NSC_K_NAME
  };
  int v = 0;
  TRY(cu->cuCtxGetDevice(&c->dev), "cuCtxGetDevice");
  TRY(cu->cuDeviceGetAttribute(&c->sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, c->dev),
      "cuDeviceGetAttribute(MULTIPROCESSOR_COUNT)");
  if (cu->cuMemAllocAsync && cu->cuMemFreeAsync &&
      cu->cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED, c->dev) ==
          CUDA_SUCCESS)
    c->pools = v != 0;
  /* Staging comes from a pool of the shim's own, never from the device's
   * default pool, whose settings are the program's (PyTorch's cudaMallocAsync
   * backend keeps everything freed there): ours releases what it frees at
   * once (threshold 0), and it frees only blocks replaced at an agreement. */
  if (c->pools && cu->cuMemPoolCreate && cu->cuMemPoolSetAttribute && cu->cuMemAllocFromPoolAsync) {
    CUmemPoolProps props;
    memset(&props, 0, sizeof props);
    props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    props.handleTypes = CU_MEM_HANDLE_TYPE_NONE;
    props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    props.location.id = c->dev;
    cuuint64_t zero = 0;
    if (cu->cuMemPoolCreate(&c->pool, &props) != CUDA_SUCCESS) c->pool = NULL;
    else (void)cu->cuMemPoolSetAttribute(c->pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &zero);
  }
  /* Counters (64 bytes), then the exchange slots, in one pinned block. */
  const size_t oob = (size_t)NSC_CU_OOB_SLOTS * NSC_CU_OOB_BYTES;
  void *host = NULL;
  TRY(cu->cuMemHostAlloc(&host, 64 + oob, CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP),
      "cuMemHostAlloc(counters)");
  memset(host, 0, 64 + oob);
  c->counters = host;
  c->oob_host = (unsigned char *)host + 64;
  TRY(cu->cuMemAlloc(&c->oob_dev, oob), "cuMemAlloc(exchange slots)");
  /* A stream per slot: exchanges of different communicators (threads) on one
   * context must not queue behind each other, in orders that can differ
   * between ranks (each waits for its own collective's peers). */
  for (int i = 0; i < NSC_CU_OOB_SLOTS; i++) {
    TRY(cu->cuEventCreate(&c->oob_ev[i], CU_EVENT_DISABLE_TIMING), "cuEventCreate(exchange)");
    TRY(cu->cuStreamCreate(&c->oob_stream[i], CU_STREAM_NON_BLOCKING), "cuStreamCreate(exchange)");
  }
  TRY(cu->cuStreamCreate(&c->rel_stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate(release)");
  /* Kernels count in device memory (one atomic per block and counter, none
   * over PCIe); nsc_cuctx_counts copies them out. Zeroed here, at setup (a
   * communicator's creation, blocking anyway), before any kernel can add to
   * them: the memset's event is polled to completion. */
  TRY(cu->cuStreamCreate(&c->count_stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate(counters)");
  TRY(cu->cuEventCreate(&c->count_ev, CU_EVENT_DISABLE_TIMING), "cuEventCreate(counters)");
  TRY(cu->cuMemAlloc(&c->counters_dev, 16), "cuMemAlloc(counters)");
  TRY(cu->cuMemsetD8Async(c->counters_dev, 0, 16, c->count_stream), "cuMemsetD8Async(counters)");
  TRY(cu->cuEventRecord(c->count_ev, c->count_stream), "cuEventRecord(counters)");
  CUresult q;
  while ((q = cu->cuEventQuery(c->count_ev)) == CUDA_ERROR_NOT_READY) sched_yield();
  TRY(q, "cuEventQuery(counters)");
  /* Last: kernels that do not load leave the entry usable for the rest. */
  c->kload = load_module(cu, c, &c->kload_what);
  for (int k = 0; c->kload == CUDA_SUCCESS && k < NSC_K_COUNT; k++)
    if ((c->kload = cu->cuModuleGetFunction(&c->fn[k], c->mod, names[k])) != CUDA_SUCCESS) c->kload_what = names[k];
  /* Grids fill the device once: as many blocks per multiprocessor as the
   * driver says fit (registers decide: ptxas gives the 8-bit encoders 40
   * per thread, 6 blocks of 256), NSC_K_BLOCKS_PER_SM when it cannot say. */
  for (int k = 0; k < NSC_K_COUNT; k++) {
    int n = 0;
    if (c->kload != CUDA_SUCCESS || !cu->cuOccupancyMaxActiveBlocksPerMultiprocessor ||
        cu->cuOccupancyMaxActiveBlocksPerMultiprocessor(&n, c->fn[k], NSC_K_BLOCK, 0) != CUDA_SUCCESS || n < 1)
      n = NSC_K_BLOCKS_PER_SM;
    c->bps[k] = n;
  }
  return CUDA_SUCCESS;
}

/* *out if its setup succeeded, else its failure again. */
static CUresult usable(nsc_cuctx *c, nsc_cuctx **out, const char **what) {
  if (c->setup == CUDA_SUCCESS) {
    *out = c;
    return CUDA_SUCCESS;
  }
  *out = NULL;
  *what = c->setup_what;
  return c->setup;
}

static CUresult get_entry(CUcontext ctx, nsc_cuctx **out, const char **what) {
  const nsc_cu_api *cu = nsc_cu_driver();
  unsigned long long id = ctx_id(cu, ctx);
  nsc_cuctx *c = find(ctx, id);
  if (c) return usable(c, out, what);
  pthread_mutex_lock(&table_lock);
  CUresult r = CUDA_SUCCESS;
  if ((c = find(ctx, id))) {
    r = usable(c, out, what);
    goto done;
  }
  if (ntable == MAX_CTX) {
    *what = "context table (64 contexts) full";
    r = CUDA_ERROR_OUT_OF_MEMORY;
    goto done;
  }
  if (!(c = calloc(1, sizeof *c))) {
    *what = "calloc";
    r = CUDA_ERROR_OUT_OF_MEMORY;
    goto done;
  }
  c->ctx = ctx;
  c->id = id;
  int pushed, mode = nsc_cu_relax();
  if ((r = nsc_cuctx_enter(c, &pushed, what)) != CUDA_SUCCESS) {
    nsc_cu_unrelax(mode);
    free(c);
    goto done;
  }
  /* A failed setup is kept (its driver objects stay with the context) so
   * later calls fail the same way without trying again. */
  c->setup = init_entry(cu, c, &c->setup_what);
  nsc_cuctx_leave(pushed);
  nsc_cu_unrelax(mode);
  if (c->setup == CUDA_SUCCESS && c->kload == CUDA_SUCCESS && !strcmp(kernels_desc, "none"))
    __atomic_store_n(&kernels_desc, c->kernels, __ATOMIC_RELEASE);
  pthread_mutex_init(&c->lock, NULL);
  table[ntable] = c;
  __atomic_store_n(&ntable, ntable + 1, __ATOMIC_RELEASE);
  r = usable(c, out, what);
done:
  pthread_mutex_unlock(&table_lock);
  return r;
}

CUresult nsc_cuctx_of(CUstream s, nsc_cuctx **out, const char **what) {
  CUcontext ctx = NULL;
  TRY(nsc_cu_driver()->cuStreamGetCtx(s, &ctx), "cuStreamGetCtx");
  return get_entry(ctx, out, what);
}

CUresult nsc_cuctx_for(CUcontext ctx, nsc_cuctx **out, const char **what) { return get_entry(ctx, out, what); }

void nsc_cuctx_counts(uint64_t *overflow, uint64_t *underflow) {
  static pthread_mutex_t copy_lock = PTHREAD_MUTEX_INITIALIZER;
  const nsc_cu_api *cu = nsc_cu_driver();
  int n = __atomic_load_n(&ntable, __ATOMIC_ACQUIRE);
  *overflow = *underflow = 0;
  pthread_mutex_lock(&copy_lock);
  for (int i = 0; i < n; i++) {
    nsc_cuctx *c = table[i];
    if (!c->counters || !c->counters_dev) continue;
    const char *what = NULL;
    int pushed, mode = nsc_cu_relax(); /* queries beside another thread's global capture */
    if (nsc_cuctx_enter(c, &pushed, &what) == CUDA_SUCCESS) {
      if (cu->cuMemcpyDtoHAsync((void *)c->counters, c->counters_dev, 16, c->count_stream) == CUDA_SUCCESS &&
          cu->cuEventRecord(c->count_ev, c->count_stream) == CUDA_SUCCESS)
        while (cu->cuEventQuery(c->count_ev) == CUDA_ERROR_NOT_READY) sched_yield();
      nsc_cuctx_leave(pushed);
    }
    nsc_cu_unrelax(mode);
    *overflow += c->counters[0];
    *underflow += c->counters[1];
  }
  pthread_mutex_unlock(&copy_lock);
}

CUresult nsc_cuctx_side_stream(nsc_cuctx *c, CUstream s, CUstream *side, const char **what) {
  const nsc_cu_api *cu = nsc_cu_driver();
  CUresult r = CUDA_SUCCESS;
  *side = s;
  uintptr_t thread = s == CU_STREAM_PER_THREAD ? (uintptr_t)pthread_self() : 0;
  pthread_mutex_lock(&c->lock);
  for (int i = 0; i < c->nside; i++)
    if (c->sides[i].of == s && c->sides[i].thread == thread) {
      *side = c->sides[i].side;
      goto done;
    }
  if (c->nside == NSC_CU_MAX_SIDE) goto done; /* no overlap, still correct */
  int prio = 0, pushed, mode = nsc_cu_relax();
  if ((r = nsc_cuctx_enter(c, &pushed, what)) != CUDA_SUCCESS) {
    nsc_cu_unrelax(mode);
    goto done;
  }
  if (cu->cuStreamGetPriority(s, &prio) != CUDA_SUCCESS) prio = 0;
  CUstream n = NULL;
  if ((r = cu->cuStreamCreateWithPriority(&n, CU_STREAM_NON_BLOCKING, prio)) != CUDA_SUCCESS)
    *what = "cuStreamCreateWithPriority";
  nsc_cuctx_leave(pushed);
  nsc_cu_unrelax(mode);
  if (r == CUDA_SUCCESS) {
    c->sides[c->nside].of = s;
    c->sides[c->nside].thread = thread;
    c->sides[c->nside++].side = n;
    *side = n;
  }
done:
  pthread_mutex_unlock(&c->lock);
  return r;
}

CUresult nsc_cuctx_join(nsc_cuctx *c, CUstream waiter, CUstream signaller, const char **what) {
  const nsc_cu_api *cu = nsc_cu_driver();
  if (waiter == signaller) return CUDA_SUCCESS;
  int pushed;
  CUresult r = nsc_cuctx_enter(c, &pushed, what);
  if (r != CUDA_SUCCESS) return r;
  /* One event per context under the lock: the wait takes the event's state
   * at the time of the call, so the event is free again right after. */
  pthread_mutex_lock(&c->lock);
  if (!c->join_ev && (r = cu->cuEventCreate(&c->join_ev, CU_EVENT_DISABLE_TIMING)) != CUDA_SUCCESS) {
    *what = "cuEventCreate";
    c->join_ev = NULL;
  }
  if (r == CUDA_SUCCESS && (r = cu->cuEventRecord(c->join_ev, signaller)) != CUDA_SUCCESS)
    *what = "cuEventRecord";
  if (r == CUDA_SUCCESS && (r = cu->cuStreamWaitEvent(waiter, c->join_ev, 0)) != CUDA_SUCCESS)
    *what = "cuStreamWaitEvent";
  pthread_mutex_unlock(&c->lock);
  nsc_cuctx_leave(pushed);
  return r;
}

/* Adds a block of events to c's free list; c->lock held. */
static CUresult grow_pool(nsc_cuctx *c, const char **what) {
  if (c->nev + EV_BLOCK > NSC_CUEV_MAX) {
    *what = "event pool exhausted (marks not released?)";
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  nsc_cuev *blk = calloc(EV_BLOCK, sizeof *blk);
  if (!blk) {
    *what = "calloc";
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  int pushed, mode = nsc_cu_relax();
  CUresult r = nsc_cuctx_enter(c, &pushed, what);
  int made = 0;
  for (; r == CUDA_SUCCESS && made < EV_BLOCK; made++) {
    if ((r = nsc_cu_driver()->cuEventCreate(&blk[made].ev, CU_EVENT_DEFAULT)) != CUDA_SUCCESS) {
      *what = "cuEventCreate";
      break;
    }
    blk[made].owner = c;
    blk[made].next = c->free_ev;
    c->free_ev = &blk[made];
  }
  nsc_cuctx_leave(pushed);
  nsc_cu_unrelax(mode);
  c->nev += made;
  if (!made) free(blk); /* a partly filled block stays: its events are in use */
  return made ? CUDA_SUCCESS : r;
}

CUresult nsc_cuev_get(nsc_cuctx *c, nsc_cuev **e, const char **what) {
  CUresult r = CUDA_SUCCESS;
  pthread_mutex_lock(&c->lock);
  if (!c->free_ev) r = grow_pool(c, what);
  if ((*e = c->free_ev)) c->free_ev = (*e)->next;
  pthread_mutex_unlock(&c->lock);
  return *e ? CUDA_SUCCESS : r;
}

void nsc_cuev_put(nsc_cuev *e) {
  if (!e) return;
  nsc_cuctx *c = e->owner;
  pthread_mutex_lock(&c->lock);
  e->next = c->free_ev;
  c->free_ev = e;
  pthread_mutex_unlock(&c->lock);
}

/* Abandoned slots whose work completed become free; c->lock held. */
static void reclaim(nsc_cuctx *c) {
  if (!c->oob_abandoned) return;
  const char *what = NULL;
  int pushed, mode = nsc_cu_relax(); /* a query would invalidate a global-mode capture */
  if (nsc_cuctx_enter(c, &pushed, &what) == CUDA_SUCCESS) {
    for (int i = 0; i < NSC_CU_OOB_SLOTS; i++)
      if ((c->oob_abandoned & NSC_CU_SLOT_BIT(i)) && nsc_cu_driver()->cuEventQuery(c->oob_ev[i]) == CUDA_SUCCESS) {
        c->oob_abandoned &= ~NSC_CU_SLOT_BIT(i);
        c->oob_busy &= ~NSC_CU_SLOT_BIT(i);
      }
    nsc_cuctx_leave(pushed);
  }
  nsc_cu_unrelax(mode);
}

void nsc_cuctx_oob_abandon(nsc_cuctx *c, int slot) {
  pthread_mutex_lock(&c->lock);
  c->oob_abandoned |= NSC_CU_SLOT_BIT(slot);
  pthread_mutex_unlock(&c->lock);
}

CUresult nsc_cuctx_oob_get(nsc_cuctx *c, int *slot, const char **what) {
  pthread_mutex_lock(&c->lock);
  reclaim(c);
  uint64_t free_bits = ~c->oob_busy & (NSC_CU_SLOT_BIT(NSC_CU_OOB_SLOTS) - 1);
  *slot = free_bits ? __builtin_ctzll(free_bits) : -1;
  if (*slot >= 0) {
    c->oob_busy |= NSC_CU_SLOT_BIT(*slot);
    __atomic_and_fetch(&c->oob_ended, ~NSC_CU_SLOT_BIT(*slot), __ATOMIC_RELEASE); /* read without the lock */
  }
  pthread_mutex_unlock(&c->lock);
  if (*slot >= 0) return CUDA_SUCCESS;
  *what = "out-of-band exchange: all 32 slots of this context in use";
  return CUDA_ERROR_OUT_OF_MEMORY;
}

void nsc_cuctx_oob_put(nsc_cuctx *c, int slot) {
  pthread_mutex_lock(&c->lock);
  c->oob_busy &= ~NSC_CU_SLOT_BIT(slot);
  pthread_mutex_unlock(&c->lock);
}

int nsc_cuctx_oob_slot(const nsc_cuctx *c, CUdeviceptr dev) {
  if (dev < c->oob_dev || (dev - c->oob_dev) % NSC_CU_OOB_BYTES) return -1;
  CUdeviceptr i = (dev - c->oob_dev) / NSC_CU_OOB_BYTES;
  return i < NSC_CU_OOB_SLOTS ? (int)i : -1;
}

const char *nsc_cuctx_kernels(void) { return __atomic_load_n(&kernels_desc, __ATOMIC_ACQUIRE); }
