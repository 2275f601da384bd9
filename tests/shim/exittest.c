/* exittest.c — the shim's exit work timed against a thread of the program
 * that is still running into the exit (issue 24: "terminate called without
 * an active exception" in a gloo thread during interpreter shutdown, seen
 * only with the shim preloaded: its exit work kept the process alive while
 * torch's threads ran into the finalised interpreter).
 *
 *   exittest [-s SPINNERS] [-d DELAY_MS] [-n CALLS] [-k] [-t TERM_US]
 *
 * Each rank makes CALLS fp32 all-reduces of 64 Ki floats, destroys its
 * communicator (-k: keeps it, as a program that never destroys it) and
 * finalises MPI; then, as Python does before exit(), it marks itself
 * finalised and returns from main while SPINNERS threads keep the cores busy
 * (the job's other threads) and one more thread wakes DELAY_MS after the
 * return: finding the process still there, it "runs into the finalised
 * program" and aborts, as the gloo thread did. The program's own atexit
 * handler, registered before any NCCL call so that it runs after the shim's,
 * prints how long the exit handlers before it took. Exit 0 when the process
 * ended before the late thread woke. -t: one more thread sends the process
 * SIGTERM TERM_US microseconds after main returned (a launcher stopping the
 * job while the shim writes its last log round at exit). */
#include <mpi.h>
#include <nccl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "testmpi.h"

static struct timespec t_return;
static volatile int finalised;
static long delay_ms = 200, term_us = -1;

static double ms_since(const struct timespec *t) {
  struct timespec n;
  clock_gettime(CLOCK_MONOTONIC, &n);
  return (double)(n.tv_sec - t->tv_sec) * 1e3 + (double)(n.tv_nsec - t->tv_nsec) / 1e6;
}

static void after_shim(void) {
  if (finalised) fprintf(stderr, "exittest: exit handlers before ours took %.1f ms\n", ms_since(&t_return));
}

static void *spin(void *arg) {
  (void)arg;
  for (volatile unsigned long x = 0;; x++) {}
  return NULL;
}

/* Sleeps until us microseconds after main returned. */
static void sleep_after_return(long us) {
  struct timespec t = t_return;
  t.tv_sec += us / 1000000;
  t.tv_nsec += (us % 1000000) * 1000;
  if (t.tv_nsec >= 1000000000) { t.tv_sec++; t.tv_nsec -= 1000000000; }
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &t, NULL)) {}
}

static void *late(void *arg) {
  (void)arg;
  sleep_after_return(delay_ms * 1000);
  fprintf(stderr, "exittest: a thread ran into the finalised program %ld ms after main returned\n", delay_ms);
  abort();
  return NULL;
}

static void *term(void *arg) {
  (void)arg;
  sleep_after_return(term_us);
  kill(getpid(), SIGTERM);
  return NULL;
}

int main(int argc, char **argv) {
  int spinners = 2, calls = 200, keep = 0, o;
  while ((o = getopt(argc, argv, "s:d:n:kt:")) != -1) {
    if (o == 's') spinners = atoi(optarg);
    else if (o == 'd') delay_ms = atol(optarg);
    else if (o == 'n') calls = atoi(optarg);
    else if (o == 'k') keep = 1;
    else if (o == 't') term_us = atol(optarg);
    else return 2;
  }
  atexit(after_shim); /* before the shim's (registered at its first call): runs after it */
  MPI_Init(&argc, &argv);
  ncclComm_t comm = tm_comm_world();
  size_t n = 65536;
  float *x = malloc(n * sizeof *x);
  for (int c = 0; c < calls; c++) {
    for (size_t i = 0; i < n; i++) x[i] = 1.0f;
    NCCL_OK(ncclAllReduce(x, x, n, ncclFloat32, ncclSum, comm, NULL));
  }
  if (!keep) ncclCommDestroy(comm);
  MPI_Finalize();
  free(x);
  pthread_t t;
  for (int i = 0; i < spinners; i++) pthread_create(&t, NULL, spin, NULL);
  clock_gettime(CLOCK_MONOTONIC, &t_return);
  finalised = 1;
  pthread_create(&t, NULL, late, NULL);
  if (term_us >= 0) pthread_create(&t, NULL, term, NULL);
  return 0;
}
