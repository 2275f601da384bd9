/* stream.c — streams of the CUDA driver test double: each stream is an
 * ordered queue run by its own worker thread, so work really runs after the
 * call that enqueued it returns and a missing wait or synchronisation shows
 * up as a wrong result. Also events (record, query, synchronize, wait,
 * elapsed time), the legacy default stream (ordered with every blocking
 * stream of its context) and the per-thread default stream, copies, sets,
 * host functions and the cudadrv_enqueue hooks.
 *
 * Must not: run enqueued work on the calling thread, free a stream or event
 * (handles stay valid for validation; they are marked dead), or take a
 * stream's lock while holding another's. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cudadrv.h"

#define STREAM_MAGIC 0x5354524d
#define EVENT_MAGIC 0x45564e54

static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;
static struct CUstream_st **reg;
static size_t nreg, capreg;
static unsigned long long next_sid = 100;
static __thread struct CUstream_st *per_thread[8];
static __thread uint64_t last_seq; /* position given to this thread's last push */

void cd_graph_run(struct CUgraphExec_st *g);
void cd_graph_exec_put(struct CUgraphExec_st *g);

#define READY() do { CUresult r_ = cd_ready(); if (r_ != CUDA_SUCCESS) return r_; } while (0)

cd_op *cd_op_new(cd_opkind k, const char *api) {
  cd_op *op = calloc(1, sizeof *op);
  op->kind = k;
  op->api = api;
  return op;
}

void cd_op_free(cd_op *op) {
  if (!op) return;
  if (op->kind == OP_KERNEL) free(op->u.k.params);
  if (op->kind == OP_COPY) free(op->u.copy.staged);
  if (op->kind == OP_HOST && (!op->u.host.refs || !__atomic_sub_fetch(op->u.host.refs, 1, __ATOMIC_ACQ_REL))) {
    if (op->u.host.release) op->u.host.release(op->u.host.arg);
    free(op->u.host.refs);
  }
  if (op->kind == OP_GRAPH) cd_graph_exec_put(op->u.graph.exec);
  free(op);
}

static uint64_t now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

int cd_is_capture_alloc(CUdeviceptr p);

void cd_op_run(cd_op *op) {
  switch (op->kind) {
  case OP_KERNEL: cd_kernel_run(op->u.k.fn, op->u.k.params, op->u.k.grid, op->u.k.block); break;
  case OP_COPY: {
    void *d = cd_view(op->u.copy.dst, op->u.copy.bytes, op->api, 1);
    const void *s = op->u.copy.staged ? op->u.copy.staged : cd_view(op->u.copy.src, op->u.copy.bytes, op->api, 1);
    if (d && s) memmove(d, s, op->u.copy.bytes);
    break;
  }
  case OP_SET: {
    unsigned w = op->u.set.width;
    unsigned char *d = cd_view(op->u.set.dst, op->u.set.n * w, op->api, 0);
    if (!d) break;
    if (w == 1) memset(d, (int)(op->u.set.value & 0xff), op->u.set.n);
    else
      for (size_t i = 0; i < op->u.set.n; i++) memcpy(d + i * w, &op->u.set.value, w); /* little endian */
    break;
  }
  case OP_RECORD: {
    struct CUevent_st *e = op->u.rec.ev;
    pthread_mutex_lock(&e->lock);
    if (op->u.rec.gen > e->done_gen) {
      e->done_gen = op->u.rec.gen;
      e->ns = now_ns();
    }
    pthread_mutex_unlock(&e->lock);
    break;
  }
  case OP_WAIT: {
    struct CUstream_st *t = op->u.wait.s;
    pthread_mutex_lock(&t->lock);
    while (t->done < op->u.wait.seq) pthread_cond_wait(&t->cv, &t->lock);
    pthread_mutex_unlock(&t->lock);
    break;
  }
  case OP_HOST:
    op->u.host.fn(op->u.host.arg);
    cd_count(&cd_stats.host_ops);
    break;
  case OP_FREE:
    if (!cd_is_capture_alloc(op->u.free.p) && cd_free_async_run(op->u.free.p, op->u.free.gen))
      cd_count_illegal("cuMemFreeAsync of %p: not a live allocation when it ran", (void *)(uintptr_t)op->u.free.p);
    break;
  case OP_GRAPH: cd_graph_run(op->u.graph.exec); break;
  }
}

/* CUDADRV_STREAM_DELAY_US=US[,N]: every operation of every N-th stream
 * created (N = 1 when not given: every stream; the first stream counts as
 * 0) starts US microseconds late on its worker, so its work finishes well
 * after the host moved on, and later than that of the other streams: a
 * result read without the wait it needed is stale. */
static long stream_delay_us(void) {
  static long us = -1, every = 1, made;
  pthread_mutex_lock(&reg_lock);
  if (us < 0) {
    const char *e = getenv("CUDADRV_STREAM_DELAY_US");
    const char *comma = e ? strchr(e, ',') : NULL;
    us = e ? atol(e) : 0;
    every = comma ? atol(comma + 1) : 1;
    if (us < 0) us = 0;
    if (every < 1) every = 1;
  }
  long d = made++ % every == 0 ? us : 0;
  pthread_mutex_unlock(&reg_lock);
  return d;
}

static void *worker(void *arg) {
  struct CUstream_st *s = arg;
  long delay = s->delay_us;
  pthread_mutex_lock(&s->lock);
  for (;;) {
    while (!s->head && !s->dead) pthread_cond_wait(&s->cv, &s->lock);
    if (!s->head) break;
    cd_op *op = s->head;
    pthread_mutex_unlock(&s->lock);
    if (delay) nanosleep(&(struct timespec){delay / 1000000, (delay % 1000000) * 1000}, NULL);
    cd_op_run(op);
    pthread_mutex_lock(&s->lock);
    s->head = op->next;
    if (!s->head) s->tail = NULL;
    pthread_mutex_unlock(&s->lock);
    cd_op_free(op); /* released before anyone sees it done */
    pthread_mutex_lock(&s->lock);
    s->done++;
    pthread_cond_broadcast(&s->cv);
  }
  pthread_mutex_unlock(&s->lock);
  return NULL;
}

static struct CUstream_st *stream_new(CUcontext c, unsigned flags, int prio, int kind) {
  struct CUstream_st *s = calloc(1, sizeof *s);
  s->magic = STREAM_MAGIC;
  s->ctx = c;
  s->flags = flags;
  s->prio = prio;
  s->kind = kind;
  s->delay_us = stream_delay_us();
  pthread_mutex_init(&s->lock, NULL);
  pthread_cond_init(&s->cv, NULL);
  pthread_attr_t at;
  pthread_attr_init(&at);
  pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
  pthread_create(&s->thr, &at, worker, s);
  pthread_attr_destroy(&at);
  pthread_mutex_lock(&reg_lock);
  s->id = next_sid++;
  if (nreg == capreg) {
    capreg = capreg ? 2 * capreg : 64;
    reg = realloc(reg, capreg * sizeof *reg);
  }
  reg[nreg++] = s;
  pthread_mutex_unlock(&reg_lock);
  pthread_mutex_lock(&c->lock);
  s->next_in_ctx = c->streams;
  c->streams = s;
  pthread_mutex_unlock(&c->lock);
  return s;
}

CUresult cd_stream(CUstream h, struct CUstream_st **out) {
  CUcontext c;
  if (h == NULL || h == CU_STREAM_LEGACY) {
    if (!(c = cd_current())) return CUDA_ERROR_INVALID_CONTEXT;
    struct CUstream_st *l = __atomic_load_n(&c->legacy, __ATOMIC_ACQUIRE);
    if (!l) {
      static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
      pthread_mutex_lock(&m);
      if (!(l = c->legacy)) {
        l = stream_new(c, 0, 0, 1);
        __atomic_store_n(&c->legacy, l, __ATOMIC_RELEASE);
      }
      pthread_mutex_unlock(&m);
    }
    *out = l;
    return CUDA_SUCCESS;
  }
  if (h == CU_STREAM_PER_THREAD) {
    if (!(c = cd_current())) return CUDA_ERROR_INVALID_CONTEXT;
    if (!per_thread[c->dev]) per_thread[c->dev] = stream_new(c, 0, 0, 2);
    *out = per_thread[c->dev];
    return CUDA_SUCCESS;
  }
  int found = 0;
  pthread_mutex_lock(&reg_lock);
  for (size_t i = nreg; i-- > 0 && !found;) found = reg[i] == h;
  pthread_mutex_unlock(&reg_lock);
  if (found && h->magic != STREAM_MAGIC) {
    /* A real driver may have given the handle to a new stream by now (or
     * freed it): any use after cuStreamDestroy is undefined there. */
    cd_count_illegal("stream %p used after cuStreamDestroy", (void *)h);
    return CUDA_ERROR_INVALID_HANDLE;
  }
  if (!found) return CUDA_ERROR_INVALID_HANDLE;
  *out = h;
  return CUDA_SUCCESS;
}

/* Appends op; returns the position it gets (s->enq after it). */
static uint64_t push(struct CUstream_st *s, cd_op *op) {
  pthread_mutex_lock(&s->lock);
  op->next = NULL;
  if (s->tail) s->tail->next = op;
  else s->head = op;
  s->tail = op;
  uint64_t seq = ++s->enq;
  pthread_cond_broadcast(&s->cv);
  pthread_mutex_unlock(&s->lock);
  last_seq = seq;
  return seq;
}

static uint64_t pending(struct CUstream_st *s, uint64_t *enq) {
  pthread_mutex_lock(&s->lock);
  uint64_t p = s->enq - s->done;
  *enq = s->enq;
  pthread_mutex_unlock(&s->lock);
  return p;
}

static void push_wait(struct CUstream_st *s, struct CUstream_st *t, uint64_t seq) {
  cd_op *w = cd_op_new(OP_WAIT, "implicit legacy-stream ordering");
  w->u.wait.s = t;
  w->u.wait.seq = seq;
  push(s, w);
}

static int blocking(const struct CUstream_st *s) { return s->kind == 2 || (s->kind == 0 && !(s->flags & CU_STREAM_NON_BLOCKING)); }

/* The legacy stream waits for every blocking stream of its context, and a
 * blocking stream for the legacy stream. */
CUresult cd_enqueue(struct CUstream_st *s, cd_op *op) {
  if (s->cap) {
    cd_capture_add(s->cap, s, op);
    return CUDA_SUCCESS;
  }
  CUcontext c = s->ctx;
  uint64_t seq;
  if (s->kind == 1) {
    pthread_mutex_lock(&c->lock);
    struct CUstream_st *list = c->streams;
    pthread_mutex_unlock(&c->lock);
    for (struct CUstream_st *b = list; b; b = b->next_in_ctx) {
      if (b == s || !blocking(b)) continue;
      if (b->cap) {
        cd_capture_invalidate(b->cap, "%s on the legacy stream while a blocking stream of its context is capturing", op->api);
        cd_op_free(op);
        return CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
      }
      if (pending(b, &seq)) push_wait(s, b, seq);
    }
  } else if (blocking(s) && c->legacy && pending(c->legacy, &seq)) {
    push_wait(s, c->legacy, seq);
  }
  push(s, op);
  return CUDA_SUCCESS;
}

void cd_stream_drain(struct CUstream_st *s) {
  pthread_mutex_lock(&s->lock);
  uint64_t target = s->enq;
  while (s->done < target) pthread_cond_wait(&s->cv, &s->lock);
  pthread_mutex_unlock(&s->lock);
}

/* ---- stream API ---- */
CD_EXPORT CUresult cuStreamCreateWithPriority(CUstream *h, unsigned flags, int prio) {
  READY();
  CUcontext c = cd_current();
  if (!c) return CUDA_ERROR_INVALID_CONTEXT;
  if (flags & ~(unsigned)CU_STREAM_NON_BLOCKING) return CUDA_ERROR_INVALID_VALUE;
  *h = stream_new(c, flags, prio < -5 ? -5 : prio > 0 ? 0 : prio, 0);
  return CUDA_SUCCESS;
}
CD_EXPORT CUresult cuStreamCreate(CUstream *h, unsigned flags) { return cuStreamCreateWithPriority(h, flags, 0); }

CD_EXPORT CUresult cuCtxGetStreamPriorityRange(int *least, int *greatest) {
  READY();
  if (least) *least = 0;
  if (greatest) *greatest = -5;
  return CUDA_SUCCESS;
}

#define STREAM(h, s) struct CUstream_st *s; do { CUresult r_ = cd_stream(h, &s); if (r_ != CUDA_SUCCESS) return r_; } while (0)

CD_EXPORT CUresult cuStreamDestroy(CUstream h) {
  READY();
  if (!h || h == CU_STREAM_LEGACY || h == CU_STREAM_PER_THREAD) return CUDA_ERROR_INVALID_HANDLE;
  STREAM(h, s);
  if (s->cap) cd_capture_invalidate(s->cap, "cuStreamDestroy of a capturing stream");
  pthread_mutex_lock(&s->lock);
  s->magic = 0;
  s->dead = 1;
  pthread_cond_broadcast(&s->cv);
  pthread_mutex_unlock(&s->lock);
  return CUDA_SUCCESS;
}

CD_EXPORT CUresult cuStreamGetPriority(CUstream h, int *p) {
  READY();
  STREAM(h, s);
  *p = s->prio;
  return CUDA_SUCCESS;
}
CD_EXPORT CUresult cuStreamGetFlags(CUstream h, unsigned *f) {
  READY();
  STREAM(h, s);
  *f = s->flags;
  return CUDA_SUCCESS;
}
CD_EXPORT CUresult cuStreamGetCtx(CUstream h, CUcontext *c) {
  READY();
  STREAM(h, s);
  *c = s->ctx;
  return CUDA_SUCCESS;
}
CD_EXPORT CUresult cuStreamGetId(CUstream h, unsigned long long *id) {
  READY();
  STREAM(h, s);
  *id = s->id;
  return CUDA_SUCCESS;
}

/* Querying or synchronising s: illegal on a capturing stream in any mode,
 * and an unsafe call for the capture-mode rules. */
static CUresult stream_wait_check(struct CUstream_st *s, const char *api) {
  if (s->cap) {
    cd_capture_invalidate(s->cap, "%s of the capturing stream", api);
    return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  }
  return cd_unsafe(api);
}

CD_EXPORT CUresult cuStreamQuery(CUstream h) {
  READY();
  STREAM(h, s);
  CUresult r = stream_wait_check(s, "cuStreamQuery");
  if (r != CUDA_SUCCESS) return r;
  uint64_t e;
  r = pending(s, &e) ? CUDA_ERROR_NOT_READY : CUDA_SUCCESS;
  cd_poll_result("cuStreamQuery", r);
  return r;
}

CD_EXPORT CUresult cuStreamSynchronize(CUstream h) {
  READY();
  STREAM(h, s);
  CUresult r = stream_wait_check(s, "cuStreamSynchronize");
  if (r != CUDA_SUCCESS) return r;
  cd_sync_call("cuStreamSynchronize");
  cd_stream_drain(s);
  return CUDA_SUCCESS;
}

CD_EXPORT CUresult cuLaunchHostFunc(CUstream h, CUhostFn fn, void *arg) {
  READY();
  if (!fn) return CUDA_ERROR_INVALID_VALUE;
  STREAM(h, s);
  cd_op *op = cd_op_new(OP_HOST, "cuLaunchHostFunc");
  op->u.host.fn = fn;
  op->u.host.arg = arg;
  return cd_enqueue(s, op);
}

/* ---- events ---- */
static CUresult event_of(CUevent e) { return e && e->magic == EVENT_MAGIC ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE; }
#define EVENT(e) do { CUresult r_ = event_of(e); if (r_ != CUDA_SUCCESS) return r_; } while (0)

CD_EXPORT CUresult cuEventCreate(CUevent *out, unsigned flags) {
  READY();
  CUcontext c = cd_current();
  if (!c) return CUDA_ERROR_INVALID_CONTEXT;
  struct CUevent_st *e = calloc(1, sizeof *e);
  e->magic = EVENT_MAGIC;
  e->flags = flags;
  e->ctx = c;
  pthread_mutex_init(&e->lock, NULL);
  *out = e;
  return CUDA_SUCCESS;
}

CD_EXPORT CUresult cuEventDestroy(CUevent e) {
  READY();
  EVENT(e);
  e->magic = 0; /* kept: queued records may still name it */
  return CUDA_SUCCESS;
}

static CUresult record(CUevent e, CUstream h, const char *api) {
  READY();
  EVENT(e);
  STREAM(h, s);
  if (s->ctx != e->ctx) return CUDA_ERROR_INVALID_HANDLE;
  if (s->cap) {
    cd_deps d;
    cd_capture_record_deps(s, &d);
    pthread_mutex_lock(&e->lock);
    e->cap = s->cap;
    e->cap_node = s->cap_last;
    e->cap_deps = d;
    e->s = s;
    pthread_mutex_unlock(&e->lock);
    return CUDA_SUCCESS;
  }
  cd_op *op = cd_op_new(OP_RECORD, api);
  op->u.rec.ev = e;
  pthread_mutex_lock(&e->lock);
  uint64_t gen = op->u.rec.gen = ++e->gen;
  e->cap = NULL;
  pthread_mutex_unlock(&e->lock);
  CUresult r = cd_enqueue(s, op); /* op may be run and freed from here on */
  if (r != CUDA_SUCCESS) return r;
  uint64_t seq = last_seq; /* the record's position in s */
  pthread_mutex_lock(&e->lock);
  if (gen == e->gen) {
    e->s = s;
    e->seq = seq;
  }
  pthread_mutex_unlock(&e->lock);
  return CUDA_SUCCESS;
}

CD_EXPORT CUresult cuEventRecord(CUevent e, CUstream h) { return record(e, h, "cuEventRecord"); }
CD_EXPORT CUresult cuEventRecordWithFlags(CUevent e, CUstream h, unsigned flags) {
  (void)flags;
  return record(e, h, "cuEventRecordWithFlags");
}

/* An event whose last record is part of an active capture. */
static int captured(CUevent e, cd_capture **c) {
  pthread_mutex_lock(&e->lock);
  *c = e->cap && e->s && e->s->cap == e->cap ? e->cap : NULL;
  pthread_mutex_unlock(&e->lock);
  return *c != NULL;
}

/* Querying or synchronising e: illegal on an event recorded in an active
 * capture, and an unsafe call for the capture-mode rules. */
static CUresult event_wait_check(CUevent e, const char *api) {
  cd_capture *c;
  if (captured(e, &c)) {
    cd_capture_invalidate(c, "%s of an event recorded in the capture", api);
    return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  }
  return cd_unsafe(api);
}

CD_EXPORT CUresult cuEventQuery(CUevent e) {
  READY();
  EVENT(e);
  CUresult r = event_wait_check(e, "cuEventQuery");
  if (r != CUDA_SUCCESS) return r;
  pthread_mutex_lock(&e->lock);
  r = e->done_gen == e->gen ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
  pthread_mutex_unlock(&e->lock);
  cd_poll_result("cuEventQuery", r);
  return r;
}

CD_EXPORT CUresult cuEventSynchronize(CUevent e) {
  READY();
  EVENT(e);
  CUresult r = event_wait_check(e, "cuEventSynchronize");
  if (r != CUDA_SUCCESS) return r;
  cd_sync_call("cuEventSynchronize");
  pthread_mutex_lock(&e->lock);
  struct CUstream_st *s = e->s;
  uint64_t seq = e->seq;
  pthread_mutex_unlock(&e->lock);
  if (s) {
    pthread_mutex_lock(&s->lock);
    while (s->done < seq) pthread_cond_wait(&s->cv, &s->lock);
    pthread_mutex_unlock(&s->lock);
  }
  return CUDA_SUCCESS;
}

CD_EXPORT CUresult cuEventElapsedTime(float *ms, CUevent a, CUevent b) {
  READY();
  EVENT(a);
  EVENT(b);
  if ((a->flags | b->flags) & CU_EVENT_DISABLE_TIMING) return CUDA_ERROR_INVALID_HANDLE;
  pthread_mutex_lock(&a->lock);
  uint64_t ga = a->gen, da = a->done_gen, ta = a->ns;
  pthread_mutex_unlock(&a->lock);
  pthread_mutex_lock(&b->lock);
  uint64_t gb = b->gen, db = b->done_gen, tb = b->ns;
  pthread_mutex_unlock(&b->lock);
  if (!ga || !gb) return CUDA_ERROR_INVALID_HANDLE;
  if (da != ga || db != gb) return CUDA_ERROR_NOT_READY;
  *ms = (float)(((double)tb - (double)ta) / 1e6);
  return CUDA_SUCCESS;
}

CD_EXPORT CUresult cuStreamWaitEvent(CUstream h, CUevent e, unsigned flags) {
  READY();
  EVENT(e);
  STREAM(h, s);
  if (flags & ~(unsigned)CU_EVENT_WAIT_EXTERNAL) return CUDA_ERROR_INVALID_VALUE;
  cd_capture *c;
  if (captured(e, &c)) {
    if (s->cap && s->cap != c) return CUDA_ERROR_STREAM_CAPTURE_MERGE;
    return cd_capture_join(s, e);
  }
  pthread_mutex_lock(&e->lock);
  struct CUstream_st *t = e->s;
  uint64_t seq = e->seq;
  int rec_in_old_capture = e->cap != NULL;
  pthread_mutex_unlock(&e->lock);
  if (rec_in_old_capture) return CUDA_ERROR_STREAM_CAPTURE_ISOLATION;
  if (!t || s->cap) return CUDA_SUCCESS; /* never recorded; or outside work under capture: no node */
  cd_op *op = cd_op_new(OP_WAIT, "cuStreamWaitEvent");
  op->u.wait.s = t;
  op->u.wait.seq = seq;
  return cd_enqueue(s, op);
}

/* ---- copies and sets ---- */
static CUresult copy_async(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream h, const char *api, int stage_src,
                           int sync_dst) {
  STREAM(h, s);
  if (!n) return CUDA_SUCCESS;
  cd_op *op = cd_op_new(OP_COPY, api);
  op->u.copy.dst = dst;
  op->u.copy.src = src;
  op->u.copy.bytes = n;
  /* Pageable host source: copied at call time, as the driver stages it. */
  if (stage_src && !cd_is_pinned_or_device((const void *)(uintptr_t)src)) {
    op->u.copy.staged = malloc(n);
    memcpy(op->u.copy.staged, (const void *)(uintptr_t)src, n);
  }
  int pageable_dst = sync_dst && !cd_is_pinned_or_device((const void *)(uintptr_t)dst);
  CUresult r = cd_enqueue(s, op);
  /* Device to pageable host returns only once the copy is done. */
  if (r == CUDA_SUCCESS && pageable_dst && !s->cap) {
    cd_sync_call("a device-to-pageable-host cuMemcpy*Async");
    cd_stream_drain(s);
  }
  return r;
}

CD_EXPORT CUresult cuMemcpyHtoDAsync(CUdeviceptr dst, const void *src, size_t n, CUstream h) {
  READY();
  return copy_async(dst, (CUdeviceptr)(uintptr_t)src, n, h, "cuMemcpyHtoDAsync", 1, 0);
}
CD_EXPORT CUresult cuMemcpyDtoHAsync(void *dst, CUdeviceptr src, size_t n, CUstream h) {
  READY();
  return copy_async((CUdeviceptr)(uintptr_t)dst, src, n, h, "cuMemcpyDtoHAsync", 0, 1);
}
CD_EXPORT CUresult cuMemcpyDtoDAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream h) {
  READY();
  return copy_async(dst, src, n, h, "cuMemcpyDtoDAsync", 0, 0);
}
CD_EXPORT CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream h) {
  READY();
  return copy_async(dst, src, n, h, "cuMemcpyAsync", 1, 1);
}

/* Synchronous forms run on the legacy stream, then wait for it: an unsafe,
 * synchronising call; *s gets the legacy stream. */
static CUresult sync_form(const char *api, struct CUstream_st **s) {
  CUresult r = cd_ready();
  if (r == CUDA_SUCCESS) r = cd_unsafe(api);
  if (r != CUDA_SUCCESS) return r;
  cd_sync_call(api);
  return cd_stream(NULL, s);
}

static CUresult copy_sync(CUdeviceptr dst, CUdeviceptr src, size_t n, const char *api) {
  struct CUstream_st *s;
  CUresult r = sync_form(api, &s);
  if (r == CUDA_SUCCESS && (r = copy_async(dst, src, n, NULL, api, 1, 0)) == CUDA_SUCCESS) cd_stream_drain(s);
  return r;
}
CD_EXPORT CUresult cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t n) { return copy_sync(dst, src, n, "cuMemcpy"); }
CD_EXPORT CUresult cuMemcpyHtoD(CUdeviceptr dst, const void *src, size_t n) {
  return copy_sync(dst, (CUdeviceptr)(uintptr_t)src, n, "cuMemcpyHtoD");
}
CD_EXPORT CUresult cuMemcpyDtoH(void *dst, CUdeviceptr src, size_t n) {
  return copy_sync((CUdeviceptr)(uintptr_t)dst, src, n, "cuMemcpyDtoH");
}
CD_EXPORT CUresult cuMemcpyDtoD(CUdeviceptr dst, CUdeviceptr src, size_t n) { return copy_sync(dst, src, n, "cuMemcpyDtoD"); }

static CUresult set_async(CUdeviceptr dst, unsigned v, unsigned w, size_t n, CUstream h, const char *api) {
  READY();
  STREAM(h, s);
  if (!n) return CUDA_SUCCESS;
  if (dst % w) return CUDA_ERROR_INVALID_VALUE;
  cd_op *op = cd_op_new(OP_SET, api);
  op->u.set.dst = dst;
  op->u.set.value = v;
  op->u.set.width = w;
  op->u.set.n = n;
  return cd_enqueue(s, op);
}
CD_EXPORT CUresult cuMemsetD8Async(CUdeviceptr d, unsigned char v, size_t n, CUstream h) { return set_async(d, v, 1, n, h, "cuMemsetD8Async"); }
CD_EXPORT CUresult cuMemsetD16Async(CUdeviceptr d, unsigned short v, size_t n, CUstream h) { return set_async(d, v, 2, n, h, "cuMemsetD16Async"); }
CD_EXPORT CUresult cuMemsetD32Async(CUdeviceptr d, unsigned v, size_t n, CUstream h) { return set_async(d, v, 4, n, h, "cuMemsetD32Async"); }

static CUresult set_sync(CUdeviceptr d, unsigned v, unsigned w, size_t n, const char *api) {
  struct CUstream_st *s;
  CUresult r = sync_form(api, &s);
  if (r == CUDA_SUCCESS && (r = set_async(d, v, w, n, NULL, api)) == CUDA_SUCCESS) cd_stream_drain(s);
  return r;
}
CD_EXPORT CUresult cuMemsetD8(CUdeviceptr d, unsigned char v, size_t n) { return set_sync(d, v, 1, n, "cuMemsetD8"); }
CD_EXPORT CUresult cuMemsetD32(CUdeviceptr d, unsigned v, size_t n) { return set_sync(d, v, 4, n, "cuMemsetD32"); }

/* ---- hooks: host work in stream order ---- */
static cd_op *host_op(void (*fn)(void *), void *arg, void (*release)(void *)) {
  cd_op *op = cd_op_new(OP_HOST, "cudadrv_enqueue");
  op->u.host.fn = fn;
  op->u.host.arg = arg;
  op->u.host.release = release;
  op->u.host.refs = malloc(sizeof(int));
  *op->u.host.refs = 1;
  return op;
}

CD_EXPORT int cudadrv_enqueue(void *stream, void (*fn)(void *), void *arg, void (*release)(void *)) {
  return cudadrv_enqueue_multi(&stream, 1, fn, arg, release);
}

CD_EXPORT int cudadrv_enqueue_multi(void *const *streams, int n, void (*fn)(void *), void *arg,
                                    void (*release)(void *)) {
  READY();
  if (n < 1 || n > 64 || !fn) return CUDA_ERROR_INVALID_VALUE;
  struct CUstream_st *ss[64] = {0};
  for (int i = 0; i < n; i++) {
    CUresult r = cd_stream((CUstream)streams[i], &ss[i]);
    if (r != CUDA_SUCCESS) return r;
  }
  struct CUstream_st *m = ss[0];
  uint64_t seq;
  for (int i = 1; i < n; i++)
    if (ss[i] != m && !m->cap && !ss[i]->cap && pending(ss[i], &seq)) push_wait(m, ss[i], seq);
  CUresult r = cd_enqueue(m, host_op(fn, arg, release));
  if (r != CUDA_SUCCESS || m->cap) return r;
  seq = last_seq;
  for (int i = 1; i < n; i++)
    if (ss[i] != m && !ss[i]->cap) push_wait(ss[i], m, seq);
  return CUDA_SUCCESS;
}

CD_EXPORT void *cudadrv_stream_handle(void *h) {
  struct CUstream_st *s;
  return cd_ready() == CUDA_SUCCESS && cd_stream((CUstream)h, &s) == CUDA_SUCCESS ? (void *)s : NULL;
}
