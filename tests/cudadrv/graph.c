/* graph.c — stream capture and graphs of the CUDA driver test double.
 *
 * A capture collects the work enqueued on its streams (the origin, and every
 * stream that waited on an event recorded in it) in enqueue order, each node
 * with its dependencies: the previous node of its stream and the nodes its
 * stream joined through events since. A launch runs every captured stream's
 * nodes on a thread of its own, each node once its dependencies are done, so
 * independent branches run concurrently as on a GPU (a missing join shows);
 * the launching stream goes on once all are done. What the driver forbids during capture (see cd_unsafe in
 * core.c, and queries/synchronisation of captured streams or events)
 * invalidates it: counted in capture_violations, printed, and the end of the
 * capture fails with CUDA_ERROR_STREAM_CAPTURE_INVALIDATED. Ending with a
 * forked stream not joined back fails with ..._UNJOINED (also counted).
 * Allocations made by cuMemAllocAsync during capture belong to the graph and
 * are freed with it.
 *
 * Must not: run captured work at capture time. */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "cudadrv.h"

#define GRAPH_MAGIC 0x47525048
#define EXEC_MAGIC 0x47455843

struct CUgraph_st {
  int magic;
  cd_op *head;
  CUdeviceptr *allocs;
  int nallocs;
};

struct CUgraphExec_st {
  int magic;
  int refs;
  cd_op *head;
};

static pthread_mutex_t caps = PTHREAD_MUTEX_INITIALIZER;
static cd_capture *active;
static unsigned long long next_cap = 1;

void cd_captures_lock(void) { pthread_mutex_lock(&caps); }
void cd_captures_unlock(void) { pthread_mutex_unlock(&caps); }
cd_capture *cd_captures_first(void) { return active; }

void cd_capture_invalidate(cd_capture *c, const char *fmt, ...) {
  if (__atomic_exchange_n(&c->invalid, 1, __ATOMIC_ACQ_REL)) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(c->why, sizeof c->why, fmt, ap);
  va_end(ap);
  cd_count(&cd_stats.capture_violations);
  cd_note("capture %llu invalidated: %s", c->id, c->why);
}

static int member(cd_capture *c, struct CUstream_st *s) {
  for (int i = 0; i < c->nmembers; i++)
    if (c->members[i] == s) return i;
  return -1;
}

static void deps_add(cd_deps *d, uint64_t n) {
  if (!n || d->all) return;
  for (int i = 0; i < d->k; i++)
    if (d->n[i] == n) return;
  if (d->k == CD_DEPS) d->all = 1; /* more than it can name: after everything before */
  else d->n[d->k++] = n;
}

static void deps_merge(cd_deps *d, const cd_deps *from) {
  d->all |= from->all;
  for (int i = 0; i < from->k; i++) deps_add(d, from->n[i]);
}

/* Under caps: what s's next node (or an event recorded on s now) depends on. */
static void current_deps(const struct CUstream_st *s, cd_deps *out) {
  memset(out, 0, sizeof *out);
  deps_add(out, s->cap_last);
  deps_merge(out, &s->cap_joins);
}

void cd_capture_record_deps(struct CUstream_st *s, cd_deps *out) {
  pthread_mutex_lock(&caps);
  current_deps(s, out);
  pthread_mutex_unlock(&caps);
}

void cd_capture_add(cd_capture *c, struct CUstream_st *s, cd_op *op) {
  pthread_mutex_lock(&caps);
  op->next = NULL;
  if (c->tail) c->tail->next = op;
  else c->head = op;
  c->tail = op;
  current_deps(s, &op->deps);
  int b = member(c, s);
  op->branch = b < 0 ? 0 : b;
  op->node = s->cap_last = ++c->nodes;
  memset(&s->cap_joins, 0, sizeof s->cap_joins);
  pthread_mutex_unlock(&caps);
}

CUresult cd_capture_join(struct CUstream_st *s, struct CUevent_st *e) {
  CUresult r = CUDA_SUCCESS;
  pthread_mutex_lock(&e->lock);
  cd_capture *c = e->cap;
  struct CUstream_st *from = e->s;
  uint64_t node = e->cap_node;
  cd_deps d = e->cap_deps;
  pthread_mutex_unlock(&e->lock);
  pthread_mutex_lock(&caps);
  if (!s->cap) {
    if (c->nmembers == 64) r = CUDA_ERROR_OUT_OF_MEMORY;
    else {
      c->members[c->nmembers] = s;
      c->joined[c->nmembers++] = 0;
      s->cap = c;
      s->cap_last = 0; /* no work of its own yet */
      memset(&s->cap_joins, 0, sizeof s->cap_joins);
    }
  }
  if (r == CUDA_SUCCESS) deps_merge(&s->cap_joins, &d);
  int i = member(c, from);
  if (r == CUDA_SUCCESS && i >= 0 && node > c->joined[i]) c->joined[i] = node;
  pthread_mutex_unlock(&caps);
  return r;
}

void cd_capture_note_alloc(cd_capture *c, CUdeviceptr p) {
  pthread_mutex_lock(&caps);
  c->allocs = realloc(c->allocs, (size_t)(c->nallocs + 1) * sizeof *c->allocs);
  c->allocs[c->nallocs++] = p;
  pthread_mutex_unlock(&caps);
}

static void free_allocs(CUdeviceptr *a, int n) {
  for (int i = 0; i < n; i++) cd_free_device(a[i], 1);
  free(a);
}

#define READY() do { CUresult r_ = cd_ready(); if (r_ != CUDA_SUCCESS) return r_; } while (0)

CD_EXPORT CUresult cuStreamBeginCapture(CUstream h, CUstreamCaptureMode mode) {
  READY();
  if (!h || h == CU_STREAM_LEGACY) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  if ((unsigned)mode > CU_STREAM_CAPTURE_MODE_RELAXED) return CUDA_ERROR_INVALID_VALUE;
  struct CUstream_st *s;
  CUresult r = cd_stream(h, &s);
  if (r != CUDA_SUCCESS) return r;
  if (s->cap) return CUDA_ERROR_ILLEGAL_STATE;
  cd_capture *c = calloc(1, sizeof *c);
  c->mode = mode;
  c->thread = pthread_self();
  c->origin = s;
  c->members[0] = s;
  c->nmembers = 1;
  pthread_mutex_lock(&caps);
  c->id = next_cap++;
  c->next_active = active;
  active = c;
  s->cap = c;
  s->cap_last = 0;
  memset(&s->cap_joins, 0, sizeof s->cap_joins);
  pthread_mutex_unlock(&caps);
  return CUDA_SUCCESS;
}

static void ops_free(cd_op *op) {
  while (op) {
    cd_op *n = op->next;
    cd_op_free(op);
    op = n;
  }
}

int cd_is_capture_alloc(CUdeviceptr p);

CD_EXPORT CUresult cuStreamEndCapture(CUstream h, CUgraph *g) {
  READY();
  struct CUstream_st *s;
  CUresult r = cd_stream(h, &s);
  if (r != CUDA_SUCCESS) return r;
  *g = NULL;
  cd_capture *c = s->cap;
  if (!c || c->origin != s) return CUDA_ERROR_STREAM_CAPTURE_UNMATCHED;
  if (c->mode != CU_STREAM_CAPTURE_MODE_RELAXED && !pthread_equal(c->thread, pthread_self()))
    return CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD;
  pthread_mutex_lock(&caps);
  for (int i = 1; i < c->nmembers && !c->invalid; i++)
    if (c->members[i]->cap_last > c->joined[i]) {
      pthread_mutex_unlock(&caps);
      cd_capture_invalidate(c, "cuStreamEndCapture with stream %llu's work not joined back", c->members[i]->id);
      pthread_mutex_lock(&caps);
      r = CUDA_ERROR_STREAM_CAPTURE_UNJOINED;
    }
  for (cd_capture **p = &active; *p; p = &(*p)->next_active)
    if (*p == c) {
      *p = c->next_active;
      break;
    }
  for (int i = 0; i < c->nmembers; i++) c->members[i]->cap = NULL;
  pthread_mutex_unlock(&caps);
  if (c->invalid) {
    ops_free(c->head);
    free_allocs(c->allocs, c->nallocs);
    free(c);
    return r != CUDA_SUCCESS ? r : CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
  }
  struct CUgraph_st *gr = calloc(1, sizeof *gr);
  gr->magic = GRAPH_MAGIC;
  gr->head = c->head;
  gr->allocs = c->allocs; /* the graph owns what its allocation nodes made */
  gr->nallocs = c->nallocs;
  free(c);
  *g = gr;
  return CUDA_SUCCESS;
}

CD_EXPORT CUresult cuStreamIsCapturing(CUstream h, CUstreamCaptureStatus *st) {
  READY();
  struct CUstream_st *s;
  CUresult r = cd_stream(h, &s);
  if (r != CUDA_SUCCESS) return r;
  cd_capture *c = s->cap;
  *st = !c ? CU_STREAM_CAPTURE_STATUS_NONE : c->invalid ? CU_STREAM_CAPTURE_STATUS_INVALIDATED
                                                       : CU_STREAM_CAPTURE_STATUS_ACTIVE;
  return CUDA_SUCCESS;
}

CD_EXPORT CUresult cuStreamGetCaptureInfo(CUstream h, CUstreamCaptureStatus *st, cuuint64_t *id, CUgraph *g,
                                          const CUgraphNode **deps, const CUgraphEdgeData **edges, size_t *ndeps) {
  CUresult r = cuStreamIsCapturing(h, st);
  if (r != CUDA_SUCCESS) return r;
  struct CUstream_st *s;
  cd_stream(h, &s);
  cd_capture *c = s->cap;
  if (id && c) *id = c->id;
  if (g) *g = NULL;
  if (deps) *deps = NULL;
  if (edges) *edges = NULL;
  if (ndeps) *ndeps = 0;
  return CUDA_SUCCESS;
}

/* ---- graphs ---- */
CD_EXPORT CUresult cuGraphCreate(CUgraph *g, unsigned flags) {
  READY();
  if (flags) return CUDA_ERROR_INVALID_VALUE;
  *g = calloc(1, sizeof **g);
  (*g)->magic = GRAPH_MAGIC;
  return CUDA_SUCCESS;
}

CD_EXPORT CUresult cuGraphDestroy(CUgraph g) {
  READY();
  if (!g || g->magic != GRAPH_MAGIC) return CUDA_ERROR_INVALID_VALUE;
  ops_free(g->head);
  free_allocs(g->allocs, g->nallocs);
  g->magic = 0;
  free(g);
  return CUDA_SUCCESS;
}

static cd_op *op_copy(const cd_op *o) {
  cd_op *n = malloc(sizeof *n);
  *n = *o;
  n->next = NULL;
  if (o->kind == OP_KERNEL) {
    size_t sz = cd_kernel_params_size(o->u.k.fn);
    n->u.k.params = malloc(sz ? sz : 1);
    memcpy(n->u.k.params, o->u.k.params, sz);
  } else if (o->kind == OP_COPY && o->u.copy.staged) {
    n->u.copy.staged = malloc(o->u.copy.bytes);
    memcpy(n->u.copy.staged, o->u.copy.staged, o->u.copy.bytes);
  } else if (o->kind == OP_HOST && o->u.host.refs) { /* cuLaunchHostFunc has none */
    __atomic_add_fetch(n->u.host.refs, 1, __ATOMIC_ACQ_REL);
  } else if (o->kind == OP_GRAPH) {
    __atomic_add_fetch(&o->u.graph.exec->refs, 1, __ATOMIC_ACQ_REL);
  }
  return n;
}

CD_EXPORT CUresult cuGraphInstantiateWithFlags(CUgraphExec *e, CUgraph g, unsigned long long flags) {
  (void)flags;
  READY();
  if (!g || g->magic != GRAPH_MAGIC) return CUDA_ERROR_INVALID_VALUE;
  struct CUgraphExec_st *x = calloc(1, sizeof *x);
  x->magic = EXEC_MAGIC;
  x->refs = 1;
  cd_op **tail = &x->head;
  for (cd_op *op = g->head; op; op = op->next) {
    *tail = op_copy(op);
    tail = &(*tail)->next;
  }
  *e = x;
  return CUDA_SUCCESS;
}

void cd_graph_exec_put(struct CUgraphExec_st *x) {
  if (__atomic_sub_fetch(&x->refs, 1, __ATOMIC_ACQ_REL)) return;
  ops_free(x->head);
  free(x);
}

/* One launch: the nodes in capture order, a done flag per node, and a
 * thread per branch that runs its branch's nodes as their dependencies
 * complete. */
typedef struct {
  cd_op **nodes;    /* by node number - 1 */
  uint64_t n;
  unsigned char *done;
  uint64_t ndone;   /* nodes done so far, in any order */
  pthread_mutex_t lock;
  pthread_cond_t cv;
} launch;

typedef struct {
  launch *l;
  unsigned char mine[64]; /* the branches this runner runs, in capture order */
} branch_arg;

static int ready(const launch *l, const cd_op *op) {
  if (op->deps.all) { /* every earlier node */
    for (uint64_t i = 0; i + 1 < op->node; i++)
      if (!l->done[i]) return 0;
    return 1;
  }
  for (int i = 0; i < op->deps.k; i++)
    if (!l->done[op->deps.n[i] - 1]) return 0;
  return 1;
}

static void *run_branch(void *arg) {
  branch_arg *a = arg;
  launch *l = a->l;
  for (uint64_t i = 0; i < l->n; i++) {
    cd_op *op = l->nodes[i];
    if (!a->mine[op->branch]) continue;
    pthread_mutex_lock(&l->lock);
    while (!ready(l, op)) pthread_cond_wait(&l->cv, &l->lock);
    pthread_mutex_unlock(&l->lock);
    cd_op_run(op);
    pthread_mutex_lock(&l->lock);
    l->done[i] = 1;
    l->ndone++;
    pthread_cond_broadcast(&l->cv);
    pthread_mutex_unlock(&l->lock);
  }
  return NULL;
}

void cd_graph_run(struct CUgraphExec_st *x) {
  launch l = {.n = 0};
  int branches = 0;
  for (cd_op *op = x->head; op; op = op->next) {
    l.n++;
    if (op->branch + 1 > branches) branches = op->branch + 1;
  }
  if (!l.n) return;
  l.nodes = malloc(l.n * sizeof *l.nodes);
  l.done = calloc(l.n, 1);
  uint64_t i = 0;
  for (cd_op *op = x->head; op; op = op->next) l.nodes[i++] = op;
  /* Built graphs (cuGraphCreate) and copies keep capture numbering; a node
   * numbered out of place (none today) falls back to capture order. */
  int numbered = 1;
  for (i = 0; i < l.n; i++) numbered &= l.nodes[i]->node == i + 1;
  if (!numbered || branches == 1) {
    for (i = 0; i < l.n; i++) cd_op_run(l.nodes[i]);
  } else {
    pthread_mutex_init(&l.lock, NULL);
    pthread_cond_init(&l.cv, NULL);
    pthread_t th[64];
    static branch_arg zero;
    branch_arg *args = malloc(64 * sizeof *args);
    int started[64] = {0};
    args[0] = zero;
    args[0].l = &l;
    args[0].mine[0] = 1;
    for (int b = 1; b < branches; b++) {
      args[b] = zero;
      args[b].l = &l;
      args[b].mine[b] = 1;
      started[b] = pthread_create(&th[b], NULL, run_branch, &args[b]) == 0;
      if (!started[b]) args[0].mine[b] = 1; /* no thread: this one runs it too, in capture order (a topological order) */
    }
    run_branch(&args[0]);
    for (int b = 1; b < branches; b++)
      if (started[b]) pthread_join(th[b], NULL);
    free(args);
    pthread_cond_destroy(&l.cv);
    pthread_mutex_destroy(&l.lock);
  }
  free(l.nodes);
  free(l.done);
}

CD_EXPORT CUresult cuGraphExecDestroy(CUgraphExec x) {
  READY();
  if (!x || x->magic != EXEC_MAGIC) return CUDA_ERROR_INVALID_VALUE;
  x->magic = 0;
  cd_graph_exec_put(x);
  return CUDA_SUCCESS;
}

CD_EXPORT CUresult cuGraphLaunch(CUgraphExec x, CUstream h) {
  READY();
  if (!x || x->magic != EXEC_MAGIC) return CUDA_ERROR_INVALID_VALUE;
  struct CUstream_st *s;
  CUresult r = cd_stream(h, &s);
  if (r != CUDA_SUCCESS) return r;
  cd_op *op = cd_op_new(OP_GRAPH, "cuGraphLaunch");
  __atomic_add_fetch(&x->refs, 1, __ATOMIC_ACQ_REL);
  op->u.graph.exec = x;
  return cd_enqueue(s, op);
}

CD_EXPORT CUresult cuGraphUpload(CUgraphExec x, CUstream h) {
  (void)h;
  READY();
  return x && x->magic == EXEC_MAGIC ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}
