/* host_stream.c — see host_stream.h. One worker, a fixed ring of tasks, one
 * mutex and two condition variables; tickets are submission counts, so
 * "task t has run" is done >= t. */
#include <pthread.h>
#include <signal.h>
#include <string.h>

#include "host_stream.h"

#define RING 256

typedef struct {
  nsc_hs_fn fn;
  _Alignas(16) unsigned char arg[NSC_HS_ARG_BYTES];
} task;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t work = PTHREAD_COND_INITIALIZER; /* the worker waits for tasks */
static pthread_cond_t done_cv = PTHREAD_COND_INITIALIZER; /* submitters and waiters wait for progress */
static task ring[RING];
static uint64_t head, done; /* submitted, run; under mu */
static int running, tried; /* under mu; running also read atomically */
static char handle;        /* its address is the side stream's handle */

static void *worker(void *unused) {
  (void)unused;
  pthread_mutex_lock(&mu);
  for (;;) {
    while (done == head) pthread_cond_wait(&work, &mu);
    task *t = &ring[done % RING]; /* stays ours until done moves past it */
    pthread_mutex_unlock(&mu);
    t->fn(t->arg);
    pthread_mutex_lock(&mu);
    done++;
    pthread_cond_broadcast(&done_cv);
  }
  return NULL;
}

void *nsc_hs_stream(void) {
  if (__atomic_load_n(&running, __ATOMIC_ACQUIRE)) return &handle;
  pthread_mutex_lock(&mu);
  if (!tried) {
    tried = 1;
    pthread_t th;
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old); /* inherited: no signal is ever delivered there */
    int rc = pthread_create(&th, NULL, worker, NULL);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (!rc) { /* else the caller's stream does the work: the same results, no overlap */
      pthread_detach(th);
      pthread_setname_np(th, "ncclshim-codec");
      __atomic_store_n(&running, 1, __ATOMIC_RELEASE);
    }
  }
  int up = running;
  pthread_mutex_unlock(&mu);
  return up ? &handle : NULL;
}

int nsc_hs_is(const void *s) { return s == (const void *)&handle; }

uint64_t nsc_hs_submit(nsc_hs_fn fn, const void *arg, unsigned bytes) {
  pthread_mutex_lock(&mu);
  if (!running) { /* in order all the same: run it here */
    uint64_t t = ++head;
    pthread_mutex_unlock(&mu);
    unsigned char copy[NSC_HS_ARG_BYTES] __attribute__((aligned(16)));
    memcpy(copy, arg, bytes);
    fn(copy);
    pthread_mutex_lock(&mu);
    done = t > done ? t : done;
    pthread_mutex_unlock(&mu);
    return t;
  }
  while (head - done >= RING) pthread_cond_wait(&done_cv, &mu);
  task *t = &ring[head % RING];
  t->fn = fn;
  memcpy(t->arg, arg, bytes);
  uint64_t ticket = ++head;
  pthread_cond_signal(&work);
  pthread_mutex_unlock(&mu);
  return ticket;
}

uint64_t nsc_hs_tail(void) {
  pthread_mutex_lock(&mu);
  uint64_t t = head;
  pthread_mutex_unlock(&mu);
  return t;
}

void nsc_hs_wait(uint64_t ticket) {
  pthread_mutex_lock(&mu);
  while (done < ticket) pthread_cond_wait(&done_cv, &mu);
  pthread_mutex_unlock(&mu);
}

void nsc_hs_forget(void) {
  pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
  pthread_cond_t c = PTHREAD_COND_INITIALIZER;
  mu = m;
  work = c;
  done_cv = c;
  head = done = 0;
  running = tried = 0;
}
