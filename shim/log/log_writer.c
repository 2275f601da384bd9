/* log_writer.c — the log's writer thread: all formatting and file I/O of the
 * log, off the calling threads, so that a job stopped by a signal keeps its
 * log.
 *
 * Started at the first record (never before the first intercepted call; not
 * in a forked child, which is inert), at nice +10 with every signal blocked.
 * At exit the last round runs on the exiting thread instead (see
 * nsc_log_writer_stop): the process never waits for a niced thread. Once a second (detail mode), or at
 * once when a ring is half full, it takes the resolved detail records of
 * every open log (nsc_log_collect) and appends them: one write() per file
 * and round, whole lines only. Closed logs (destroy, exit) are queued to it
 * and written after the records taken before them (each communicator's
 * lines in seq order; lines of different communicators may interleave). So a SIGKILL
 * loses at most the last second of records (and, on a GPU, those whose
 * events had not completed yet), and every line the files hold parses.
 *
 * SIGTERM (what torchrun and schedulers send first): when its disposition
 * was the default, ours is installed at the writer's start. The handler
 * only uses async-signal-safe calls: it sets a flag, posts the writer's
 * semaphore and sleeps (nanosleep, at most 3 s) until the writer reports it
 * is done, then puts the previous disposition back and raises the signal
 * again: the process dies of SIGTERM as it would have. The writer, with
 * every signal blocked, closes the open logs without querying the device
 * (records not read yet are "unknown"), writes them (summary lines, tables,
 * the trace's closing "]"), locking with a 2 s deadline (a lock held by the
 * interrupted thread leaves that communicator unwritten, never a hang).
 * When the program had its own SIGTERM handler, that handler is called after
 * a round that writes the records so far (at the first SIGTERM only; later
 * ones go straight to it); the summary then comes at exit.
 * A disposition of SIG_IGN is left alone. A handler the program installs
 * after ours replaces it (no summary at SIGTERM, records still within 1 s).
 *
 * NVML (diag_nvml.c) is read in the writer's own rounds only, never at
 * SIGTERM (the round with a deadline) nor in the exit round, and only once
 * the diagnosis follows a device; rounds then come once a second in summary
 * mode too.
 *
 * Exit and SIGTERM (exit_state): the exit round runs on the exiting thread
 * with SIGTERM blocked there; a SIGTERM handled on another thread meanwhile
 * waits (3 s at most) until that round has written everything, and the
 * writer's SIGTERM round runs unless the exit round already did (both take
 * round_lock, and the second finds the files finished). When the exit
 * thread cannot get round_lock in time, the writer writes the last round
 * itself.
 *
 * Must not: run anything but async-signal-safe code in the handler, swallow
 * or delay the signal beyond the 3 s bound, query the device (CUDA events;
 * NVML as above is the one exception), or run in a
 * forked child. */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "diag_nvml.h"
#include "log_int.h"
#include "msg.h"

#define PERIOD_NS 1000000000ll   /* detail reaches its file within a second */
#define TERM_LOCK_NS 2000000000ll /* at SIGTERM: longest wait for one of our locks */
#define TERM_WAIT_NS 3000000000ll /* the handler's longest wait for the writer */
#define EXIT_ROUND_NS 2000000000ll /* exit: longest wait for a round the writer is in */

static const nsc_log_source *src; /* the open logs (log_rec.c), told at nsc_log_init */
static int threaded = 1;     /* 0 (tests): write on the closing thread */
static int started;          /* start() ran */
static int running;          /* the thread exists (in this process) */
static pthread_once_t once = PTHREAD_ONCE_INIT;
static pthread_t thread;
static sem_t wake;
static pid_t owner;          /* the process the thread belongs to (not a forked child) */
static int stop_req, term_req, term_done;
/* Exit: 0 not yet; 1 the exit round is coming or running; 2 it wrote
 * everything; 3 it could not get round_lock (the writer writes it). */
enum { EXIT_NONE = 0, EXIT_WRITING = 1, EXIT_DONE = 2, EXIT_GAVE_UP = 3 };
static int exit_state;
static long long term_deadline; /* CLOCK_MONOTONIC ns, set by the first SIGTERM */
static struct sigaction prev_term;
static int term_fatal;       /* SIGTERM's previous disposition was the default */
static pthread_mutex_t q_lock = PTHREAD_MUTEX_INITIALIZER;
/* Held by whoever runs a round: the writer, or at exit the exiting thread. */
static pthread_mutex_t round_lock = PTHREAD_MUTEX_INITIALIZER;
static nsc_log_final *q_head, **q_tail = &q_head;

void nsc_log_writer_threaded(int on) { threaded = on; }

static struct timespec after_clock(clockid_t id, long long ns) {
  struct timespec t;
  clock_gettime(id, &t);
  long long v = (long long)t.tv_nsec + ns;
  t.tv_sec += (time_t)(v / 1000000000ll);
  t.tv_nsec = (long)(v % 1000000000ll);
  return t;
}

static struct timespec after_ns(long long ns) { return after_clock(CLOCK_REALTIME, ns); }

/* The writer's second, on the monotonic clock where the C library has
 * sem_clockwait (glibc 2.30; looked up, so the shim still loads on an older
 * one): a wall-clock step back must not stall the writer. */
typedef int (*clockwait_fn)(sem_t *, clockid_t, const struct timespec *);
static clockwait_fn clockwait;

static void wait_period(void) {
  struct timespec t = after_clock(clockwait ? CLOCK_MONOTONIC : CLOCK_REALTIME, PERIOD_NS);
  while ((clockwait ? clockwait(&wake, CLOCK_MONOTONIC, &t) : sem_timedwait(&wake, &t)) && errno == EINTR) {}
}

/* One round: the closed logs queued, then the detail records of the open
 * logs (taken in this order, a log closed after the queue was taken has its
 * records of this round written before its final in the next: seq order). */
static void round_once(const struct timespec *deadline, int nvml) {
  nsc_log_final *f = NULL;
  if (!(deadline ? pthread_mutex_timedlock(&q_lock, deadline) : pthread_mutex_lock(&q_lock))) {
    f = q_head;
    q_head = NULL;
    q_tail = &q_head;
    pthread_mutex_unlock(&q_lock);
  }
  /* NVML (the diagnosis's device busy on a GPU) is read here only, off the
   * calling threads, before the steps waiting for its samples are settled. */
  if (nvml) nsc_nvml_poll();
  for (nsc_log_final *g = f; g; g = g->next) src->final_settle(g);
  nsc_log_batch *b = NULL;
  size_t nb = 0;
  src->collect(&b, &nb, deadline);
  if (nb || f) nsc_log_out_round(b, nb, f);
  for (size_t i = 0; i < nb; i++) {
    free(b[i].recs);
    free(b[i].steps);
  }
  free(b);
  while (f) {
    nsc_log_final *next = f->next;
    src->final_free(f);
    f = next;
  }
}

static void *writer_main(void *arg) {
  (void)arg;
  /* Below the program's threads (nice +10, this thread only): on busy cores
   * the writer yields to the job; falling behind drops detail (counted),
   * never slows a call. */
  setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), 10);
  for (;;) {
    if (!__atomic_load_n(&stop_req, __ATOMIC_ACQUIRE) && !__atomic_load_n(&term_req, __ATOMIC_ACQUIRE)) {
      if (nsc_log_detail() || nsc_nvml_wanted()) { /* NVML: read once a second */
        wait_period();
      } else {
        while (sem_wait(&wake) && errno == EINTR) {}
      }
    }
    if (__atomic_load_n(&term_req, __ATOMIC_ACQUIRE) && !__atomic_load_n(&term_done, __ATOMIC_ACQUIRE)) {
      struct timespec dl = after_ns(TERM_LOCK_NS);
      int locked = !pthread_mutex_timedlock(&round_lock, &dl);
      if (locked && __atomic_load_n(&exit_state, __ATOMIC_ACQUIRE) != EXIT_DONE) { /* else exit wrote everything */
        if (term_fatal) src->close_all_now(&dl);
        round_once(&dl, 0);
        if (term_fatal) nsc_log_out_finish();
      }
      if (locked) pthread_mutex_unlock(&round_lock);
      __atomic_store_n(&term_done, 1, __ATOMIC_RELEASE);
      if (term_fatal) break; /* the process is dying: the files are complete */
      /* The program's handler took over and the process may live on: back
       * to rounds once a second (a later SIGTERM goes straight to it). */
      __atomic_store_n(&term_req, 0, __ATOMIC_RELEASE);
      continue;
    }
    /* At exit the exiting thread runs the last round itself (writer_stop),
     * unless it could not get round_lock in time. */
    pthread_mutex_lock(&round_lock);
    int stop = __atomic_load_n(&stop_req, __ATOMIC_ACQUIRE);
    if (!stop) round_once(NULL, 1);
    if (stop && __atomic_load_n(&exit_state, __ATOMIC_ACQUIRE) == EXIT_GAVE_UP) {
      round_once(NULL, 0);
      nsc_log_out_finish();
    }
    pthread_mutex_unlock(&round_lock);
    if (stop) break;
  }
  __atomic_store_n(&running, 0, __ATOMIC_RELEASE);
  return NULL;
}

static long long mono_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (long long)t.tv_sec * 1000000000ll + t.tv_nsec;
}

/* Async-signal-safe only: atomics, getpid, clock_gettime, sem_post,
 * nanosleep, sigaction, raise. The first SIGTERM sets the deadline; one
 * arriving on another thread meanwhile (a launcher sending it twice) waits
 * for the same deadline, no longer. */
static void on_term(int sig, siginfo_t *si, void *uc) {
  int saved = errno;
  int ex = __atomic_load_n(&exit_state, __ATOMIC_ACQUIRE);
  if (getpid() == owner && ex != EXIT_DONE && (__atomic_load_n(&running, __ATOMIC_ACQUIRE) || ex == EXIT_WRITING)) {
    long long none = 0, dl = mono_ns() + TERM_WAIT_NS;
    if (__atomic_compare_exchange_n(&term_deadline, &none, dl, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
      __atomic_store_n(&term_req, 1, __ATOMIC_RELEASE);
      sem_post(&wake);
    } else {
      dl = none; /* the first one's */
    }
    struct timespec d = {0, 2000000};
    while (!__atomic_load_n(&term_done, __ATOMIC_ACQUIRE) && __atomic_load_n(&exit_state, __ATOMIC_ACQUIRE) != EXIT_DONE &&
           mono_ns() < dl)
      nanosleep(&d, NULL);
  }
  if (prev_term.sa_flags & SA_SIGINFO) {
    if (prev_term.sa_sigaction) prev_term.sa_sigaction(sig, si, uc);
  } else if (prev_term.sa_handler == SIG_DFL) {
    /* Blocked while we run: delivered, with the default action, on return. */
    sigaction(sig, &prev_term, NULL);
    raise(sig);
  } else if (prev_term.sa_handler != SIG_IGN) {
    prev_term.sa_handler(sig);
  }
  errno = saved;
}

static void install_term(void) {
  struct sigaction sa, cur;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = on_term;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_SIGINFO | SA_RESTART;
  prev_term.sa_handler = SIG_DFL; /* what on_term chains to, until sigaction tells */
  if (sigaction(SIGTERM, &sa, &cur)) return;
  if (!(cur.sa_flags & SA_SIGINFO) && cur.sa_handler == SIG_IGN) {
    sigaction(SIGTERM, &cur, NULL); /* ignored: stays ignored, nothing to do */
    return;
  }
  prev_term = cur;
  term_fatal = !(cur.sa_flags & SA_SIGINFO) && cur.sa_handler == SIG_DFL;
}

static void start(void) {
  *(void **)&clockwait = dlsym(RTLD_DEFAULT, "sem_clockwait");
  if (threaded && !sem_init(&wake, 0, 0)) {
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old); /* the thread inherits it: no signal is ever delivered there */
    int rc = pthread_create(&thread, NULL, writer_main, NULL);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc) {
      nsc_warn("cannot start the log writer thread (%s): logs are written at communicator close and exit only",
               strerror(rc));
    } else {
      pthread_setname_np(thread, "ncclshim-log");
      owner = getpid();
      __atomic_store_n(&running, 1, __ATOMIC_RELEASE);
      install_term();
    }
  }
  __atomic_store_n(&started, 1, __ATOMIC_RELEASE);
}

void nsc_log_writer_told(const nsc_log_source *s) { src = s; }

void nsc_log_writer_start(void) {
  if (__atomic_load_n(&started, __ATOMIC_ACQUIRE)) return;
  pthread_once(&once, start);
}

void nsc_log_writer_nudge(void) {
  if (__atomic_load_n(&running, __ATOMIC_ACQUIRE)) sem_post(&wake);
}

void nsc_log_writer_final(nsc_log_final *f) {
  if (!__atomic_load_n(&running, __ATOMIC_ACQUIRE) || getpid() != owner) {
    src->final_settle(f); /* no writer: on this (closing) thread, with the samples read so far */
    nsc_log_out_round(NULL, 0, f);
    src->final_free(f);
    return;
  }
  pthread_mutex_lock(&q_lock);
  *q_tail = f;
  q_tail = &f->next;
  pthread_mutex_unlock(&q_lock);
  sem_post(&wake);
}

/* Exit: the last round (closed logs, the records left, the trace's "]")
 * runs on the exiting thread, at the program's priority: waiting for the
 * writer at nice +10 on busy cores kept the process alive for hundreds of
 * ms while the program's other threads ran into its finalised state (torch's
 * gloo threads into a finalised interpreter). The writer is
 * told to stop and is not waited for, only a round it is in (at most
 * EXIT_ROUND_NS); it ends with the process. */
void nsc_log_writer_stop(void) {
  if (!__atomic_load_n(&running, __ATOMIC_ACQUIRE) || getpid() != owner) {
    if (!__atomic_load_n(&term_done, __ATOMIC_ACQUIRE)) nsc_log_out_finish();
    return;
  }
  int none = EXIT_NONE;
  if (!__atomic_compare_exchange_n(&exit_state, &none, EXIT_WRITING, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
    return; /* a second exit (atexit and a destructor): the first one writes */
  /* A SIGTERM now is handled on another thread (it waits for this round) or
   * here once the round is written, never in the middle of it. */
  sigset_t term, old;
  sigemptyset(&term);
  sigaddset(&term, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &term, &old);
  __atomic_store_n(&stop_req, 1, __ATOMIC_RELEASE);
  sem_post(&wake);
  (void)pthread_detach(thread); /* it ends by itself, or with the process: nobody joins it */
  struct timespec dl = after_ns(EXIT_ROUND_NS);
  if (pthread_mutex_timedlock(&round_lock, &dl)) {
    __atomic_store_n(&exit_state, EXIT_GAVE_UP, __ATOMIC_RELEASE);
    sem_post(&wake);
    nsc_warn("the log writer's round did not finish within %lld s at exit; it writes the last round itself, if the "
             "process lives long enough", EXIT_ROUND_NS / 1000000000ll);
  } else {
    round_once(NULL, 0); /* a no-op once a fatal SIGTERM's round finished the files */
    nsc_log_out_finish();
    __atomic_store_n(&exit_state, EXIT_DONE, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&round_lock);
  }
  pthread_sigmask(SIG_SETMASK, &old, NULL); /* a SIGTERM that came meanwhile is delivered now */
}
