/* simt.cc — the fibers that run the threads of a CUDA block on one CPU
 * thread (simt.h says what is modelled and what is not).
 *
 * A launch runs its blocks one after another on the calling OS thread. A
 * block is blockDim fibers, each on its own stack (256 KiB, a guard page
 * below it, from a pool of schedulers shared by all threads), started in thread order and switched by a small x86-64 context
 * switch (callee-saved registers and the stack pointer; no signal mask, so
 * a switch costs nanoseconds, not a system call). A fiber runs until it
 * waits: at __syncthreads() for the whole block, at a shuffle for its warp;
 * the last to arrive releases the others and goes on. A pass over the block
 * that finds nobody runnable while some wait is a deadlock: the launch
 * faults. Faults (also misaligned vector accesses, bad shuffle masks)
 * abandon the block's fibers and end the launch.
 *
 * AddressSanitizer is told about every switch (its fiber interface), and a
 * stack is unpoisoned before reuse, so sanitizer builds of the double run
 * the kernels too.
 *
 * Must not: allocate per launch (schedulers are made when all are busy and
 * kept), run two blocks of one OS thread at once, or return into a faulted
 * fiber. */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>

#include "simt.h"
#include "simt_kernels.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#define SIMT_ASAN 1
#else
#define SIMT_ASAN 0
#endif

#if !defined(__x86_64__)
#error "tests/simt: the fiber switch is written for x86-64"
#endif

/* simt_swap(save, load): saves the callee-saved registers on this stack and
 * its pointer in *save, continues on the stack `load` (made by this function
 * or by fiber_stack below). */
extern "C" void simt_swap(void **save, void *load);
__asm__(".text\n"
        ".p2align 4\n"
        ".type simt_swap,@function\n"
        "simt_swap:\n"
        "  pushq %rbp\n  pushq %rbx\n  pushq %r12\n  pushq %r13\n  pushq %r14\n  pushq %r15\n"
        "  movq %rsp, (%rdi)\n"
        "  movq %rsi, %rsp\n"
        "  popq %r15\n  popq %r14\n  popq %r13\n  popq %r12\n  popq %rbx\n  popq %rbp\n"
        "  ret\n"
        ".size simt_swap, .-simt_swap\n");

#define STACK_BYTES ((size_t)256 << 10)
#define MAX_THREADS 256 /* the kernels' NSC_K_BLOCK; the double refuses larger blocks */

enum { T_READY, T_BAR, T_WARP, T_DONE, T_FAULT };

struct fiber {
  void *sp;
  int state;
  simt_lane lane;
  void *fake; /* ASan's fake stack of this fiber */
};

struct warp {
  unsigned lanes, arrived, gen;
  uint64_t slot[2][32];
};

struct sched {
  char *stacks; /* MAX_THREADS stacks, each a guard page then STACK_BYTES - page */
  fiber f[MAX_THREADS];
  warp w[MAX_THREADS / 32];
  unsigned n, bar_arrived;
  fiber *cur;
  void *main_sp;
  void (*body)(void *);
  void *arg;
  int faulted;
  char msg[256];
  const void *main_bottom; /* ASan: the scheduler's stack */
  size_t main_size;
  void *main_fake;
  sched *next; /* in the pool */
};

/* Schedulers (stacks included) are pooled, not per OS thread: the double has
 * a worker thread per stream, and stacks with guard pages are VMAs. */
static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;
static sched *pool;
static thread_local sched *S; /* the scheduler of this thread's launch */
thread_local simt_lane *simt_cur;
static simt_counts counts;

static void count(uint64_t *c, uint64_t v) { __atomic_add_fetch(c, v, __ATOMIC_RELAXED); }

static char *stack_lo(unsigned i) { return S->stacks + (size_t)i * STACK_BYTES; }

/* ---- switching ---------------------------------------------------------------------- */

static void to_fiber(fiber *f, unsigned i) {
  S->cur = f;
  simt_cur = &f->lane;
#if SIMT_ASAN
  __sanitizer_start_switch_fiber(&S->main_fake, stack_lo(i), STACK_BYTES);
#else
  (void)i;
#endif
  simt_swap(&S->main_sp, f->sp);
#if SIMT_ASAN
  __sanitizer_finish_switch_fiber(S->main_fake, NULL, NULL);
#endif
  S->cur = NULL;
  simt_cur = NULL;
}

/* From the running fiber back to the scheduler; returns when it is resumed
 * (never for a fiber that is done or faulted). */
static void to_main(void) {
  fiber *f = S->cur;
  int last = f->state == T_DONE || f->state == T_FAULT;
#if SIMT_ASAN
  __sanitizer_start_switch_fiber(last ? NULL : &f->fake, S->main_bottom, S->main_size);
#else
  (void)last;
#endif
  simt_swap(&f->sp, S->main_sp);
#if SIMT_ASAN
  __sanitizer_finish_switch_fiber(f->fake, &S->main_bottom, &S->main_size);
#endif
}

static void fiber_entry(void) {
#if SIMT_ASAN
  __sanitizer_finish_switch_fiber(NULL, &S->main_bottom, &S->main_size);
#endif
  S->body(S->arg);
  S->cur->state = T_DONE;
  to_main();
  __builtin_trap(); /* a finished fiber is never resumed */
}

/* A fresh stack for fiber i whose first switch enters fiber_entry with the
 * alignment of a called function (rsp + 8 a multiple of 16). */
static void *fiber_stack(unsigned i) {
  char *lo = stack_lo(i) + getpagesize();
  size_t len = STACK_BYTES - getpagesize();
#if SIMT_ASAN
  __asan_unpoison_memory_region(lo, len); /* frames a faulted fiber abandoned */
#endif
  uint64_t *sp = (uint64_t *)(((uintptr_t)(lo + len)) & ~(uintptr_t)15);
  *--sp = 0;                          /* fiber_entry's "return address" */
  *--sp = (uint64_t)(uintptr_t)fiber_entry;
  for (int r = 0; r < 6; r++) *--sp = 0; /* r15 r14 r13 r12 rbx rbp */
  return sp;
}

static sched *sched_get(void) {
  pthread_mutex_lock(&pool_lock);
  sched *s = pool;
  if (s) pool = s->next;
  pthread_mutex_unlock(&pool_lock);
  if (s) return s;
  s = (sched *)mmap(NULL, sizeof *s, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (s == MAP_FAILED) return NULL;
  void *st = mmap(NULL, STACK_BYTES * MAX_THREADS, PROT_READ | PROT_WRITE,
                  MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (st == MAP_FAILED) {
    munmap(s, sizeof *s);
    return NULL;
  }
  s->stacks = (char *)st;
  for (unsigned i = 0; i < MAX_THREADS; i++) mprotect(s->stacks + (size_t)i * STACK_BYTES, getpagesize(), PROT_NONE);
  return s;
}

static void sched_put(sched *s) {
  pthread_mutex_lock(&pool_lock);
  s->next = pool;
  pool = s;
  pthread_mutex_unlock(&pool_lock);
}

/* ---- faults, barriers, shuffles ------------------------------------------------------------ */

__attribute__((format(printf, 1, 2), noreturn)) static void fault(const char *fmt, ...) {
  fiber *f = S->cur;
  if (!S->faulted) {
    int n = snprintf(S->msg, sizeof S->msg, "block %u thread %u: ", f->lane.bid.x, f->lane.tid.x);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(S->msg + n, sizeof S->msg - (size_t)n, fmt, ap);
    va_end(ap);
  }
  S->faulted = 1;
  f->state = T_FAULT;
  to_main();
  __builtin_trap();
}

extern "C" void simt_syncthreads(void) {
  count(&counts.barriers, 1);
  if (++S->bar_arrived == S->n) {
    S->bar_arrived = 0;
    for (unsigned i = 0; i < S->n; i++)
      if (S->f[i].state == T_BAR) S->f[i].state = T_READY;
    return;
  }
  S->cur->state = T_BAR;
  to_main();
}

extern "C" uint64_t simt_shfl(int mode, unsigned mask, uint64_t bits, unsigned arg, int width) {
  count(&counts.shuffles, 1);
  fiber *f = S->cur;
  unsigned tid = f->lane.tid.x, lane = tid % 32;
  warp *w = &S->w[tid / 32];
  unsigned full = w->lanes == 32 ? 0xffffffffu : (1u << w->lanes) - 1u;
  const char *name = mode ? "__shfl_xor_sync" : "__shfl_down_sync";
  if (mask != full) fault("%s with mask %#x in a warp of %u lanes (every lane must take part)", name, mask, w->lanes);
  if (width <= 0 || width > 32 || (width & (width - 1))) fault("%s with width %d", name, width);
  unsigned par = w->gen & 1u;
  w->slot[par][lane] = bits;
  if (++w->arrived == w->lanes) {
    w->arrived = 0;
    w->gen++;
    for (unsigned i = tid - lane; i < tid - lane + w->lanes; i++)
      if (S->f[i].state == T_WARP) S->f[i].state = T_READY;
  } else {
    f->state = T_WARP;
    to_main();
  }
  /* down: lane + delta within the lane's segment of `width`; xor: lane ^
   * mask, not in a later segment; otherwise (or past the warp) its own value */
  unsigned seg = lane / (unsigned)width * (unsigned)width, src = mode ? lane ^ arg : lane + arg;
  return src < seg + (unsigned)width && src < w->lanes ? w->slot[par][src] : bits;
}

extern "C" void simt_vec_access(const void *p, size_t bytes) {
  count(&counts.vec_accesses, 1);
  if ((uintptr_t)p % bytes) fault("misaligned %zu-byte vector access at %p", bytes, p);
}

extern "C" void simt_mem(const void *p, size_t bytes, int store, int vec) {
  if (vec) simt_vec_access(p, bytes);
  count(store ? &counts.stores : &counts.loads, 1);
  count(store ? &counts.store_bytes : &counts.load_bytes, bytes);
}

/* ---- fp16 conversions as PTX defines them ------------------------------------------------------ */

extern "C" uint16_t simt_cvt_rn_f16_f32(float x) {
  if (x != x) return 0x7fff; /* cvt: canonical NaN, whatever the input's payload */
  _Float16 h = (_Float16)x;  /* IEEE round to nearest even, overflow to Inf */
  uint16_t u;
  memcpy(&u, &h, 2);
  return u;
}

extern "C" float simt_cvt_f32_f16(uint16_t u) {
  if ((u & 0x7fffu) > 0x7c00u) return __uint_as_float(0x7fffffffu);
  _Float16 h;
  memcpy(&h, &u, 2);
  return (float)h;
}

/* ---- launches ----------------------------------------------------------------------------------- */

/* Runs block b; 0, or -1 when it faulted. */
static int run_block(unsigned b, unsigned grid, unsigned block) {
  S->n = block;
  S->bar_arrived = 0;
  for (unsigned i = 0; i < block; i++) {
    fiber *f = &S->f[i];
    f->sp = fiber_stack(i);
    f->state = T_READY;
    f->fake = NULL;
    f->lane.tid = simt_dim3{i, 0, 0};
    f->lane.bid = simt_dim3{b, 0, 0};
    f->lane.bdim = simt_dim3{block, 1, 1};
    f->lane.gdim = simt_dim3{grid, 1, 1};
  }
  for (unsigned w = 0; w < (block + 31) / 32; w++) {
    S->w[w].lanes = block - w * 32 < 32 ? block - w * 32 : 32;
    S->w[w].arrived = 0;
    S->w[w].gen = 0;
  }
  for (;;) {
    unsigned ran = 0, done = 0, bar = 0, wrp = 0;
    for (unsigned i = 0; i < block; i++) {
      fiber *f = &S->f[i];
      if (f->state == T_READY) {
        to_fiber(f, i);
        ran++;
        if (S->faulted) return -1;
      }
      done += f->state == T_DONE;
    }
    if (done == block) return 0;
    if (!ran) {
      for (unsigned i = 0; i < block; i++) {
        bar += S->f[i].state == T_BAR;
        wrp += S->f[i].state == T_WARP;
      }
      snprintf(S->msg, sizeof S->msg,
               "block %u: deadlock: %u of %u threads wait at __syncthreads, %u at a warp shuffle, %u exited",
               b, bar, block, wrp, block - bar - wrp);
      S->faulted = 1;
      return -1;
    }
  }
}

struct launch_arg {
  const simt_kernel *k;
  void *const *args;
};
static void launch_body(void *a) {
  launch_arg *l = (launch_arg *)a;
  l->k->call(l->args);
}

extern "C" const char *simt_launch(const simt_kernel *k, unsigned grid, unsigned block, void *const *args) {
  static thread_local char why[sizeof S->msg];
  if (!grid || !block || block > MAX_THREADS) {
    snprintf(why, sizeof why, "launch of %u blocks of %u threads (at most %d)", grid, block, MAX_THREADS);
    return why;
  }
  if (!(S = sched_get())) return "cannot map fiber stacks";
  launch_arg la = {k, args};
  S->body = launch_body;
  S->arg = &la;
  S->faulted = 0;
  count(&counts.launches, 1);
  for (unsigned b = 0; b < grid; b++) {
    count(&counts.blocks, 1);
    if (run_block(b, grid, block)) {
      count(&counts.faults, 1);
      memcpy(why, S->msg, sizeof why);
      sched_put(S);
      S = NULL;
      return why;
    }
  }
  sched_put(S);
  S = NULL;
  return NULL;
}

extern "C" void simt_get_counts(simt_counts *out) {
  out->launches = __atomic_load_n(&counts.launches, __ATOMIC_RELAXED);
  out->blocks = __atomic_load_n(&counts.blocks, __ATOMIC_RELAXED);
  out->barriers = __atomic_load_n(&counts.barriers, __ATOMIC_RELAXED);
  out->shuffles = __atomic_load_n(&counts.shuffles, __ATOMIC_RELAXED);
  out->vec_accesses = __atomic_load_n(&counts.vec_accesses, __ATOMIC_RELAXED);
  out->faults = __atomic_load_n(&counts.faults, __ATOMIC_RELAXED);
  out->loads = __atomic_load_n(&counts.loads, __ATOMIC_RELAXED);
  out->stores = __atomic_load_n(&counts.stores, __ATOMIC_RELAXED);
  out->load_bytes = __atomic_load_n(&counts.load_bytes, __ATOMIC_RELAXED);
  out->store_bytes = __atomic_load_n(&counts.store_bytes, __ATOMIC_RELAXED);
}
