/* transport.c — how the host NCCL moves bytes: Open MPI point-to-point on each
 * communicator's own MPI communicator, in slices of at most
 * HOSTNCCL_SLICE_BYTES (MPI counts are int), plus the emulated link clock.
 *
 * MPI is initialised here with MPI_THREAD_MULTIPLE requested if the program
 * has not initialised it (and finalised at exit then). When MPI provides less
 * than THREAD_MULTIPLE every MPI call is serialised by one mutex, and waits
 * poll (MPI_Testall with the mutex released in between) so that two threads
 * with their own communicators cannot deadlock on it. Waits also give up when
 * the communicator is being aborted (ncclCommAbort from another thread).
 *
 * Must not: hold the serialising mutex while sleeping or waiting, or spin on
 * the link clock (deadlines are slept to with clock_nanosleep). */
#include "hostnccl.h"

#include <errno.h>
#include <stdio.h>
#include <sched.h>
#include <stdlib.h>

static int mpi_serial;
static pthread_mutex_t mpi_mutex = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t mpi_once = PTHREAD_ONCE_INIT;
static char mpi_init_error[160];

static void finalize_at_exit(void) {
  int fin = 0;
  MPI_Finalized(&fin);
  if (!fin) MPI_Finalize();
}

static void mpi_init_once(void) {
  int inited = 0, fin = 0, provided = MPI_THREAD_SINGLE;
  MPI_Initialized(&inited);
  MPI_Finalized(&fin);
  if (fin) {
    snprintf(mpi_init_error, sizeof mpi_init_error, "MPI is already finalized");
    return;
  }
  if (!inited) {
    if (MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS) {
      snprintf(mpi_init_error, sizeof mpi_init_error, "MPI_Init_thread failed");
      return;
    }
    atexit(finalize_at_exit);
  } else {
    MPI_Query_thread(&provided);
  }
  mpi_serial = provided < MPI_THREAD_MULTIPLE;
  if (hn_cfg()->log)
    hn_log("MPI initialised by %s, thread level %d%s", inited ? "the program" : "the host NCCL", provided,
           mpi_serial ? " (< MPI_THREAD_MULTIPLE: MPI calls serialised)" : "");
}

ncclResult_t hn_mpi_init(void) {
  pthread_once(&mpi_once, mpi_init_once);
  if (mpi_init_error[0]) return hn_err(ncclSystemError, "hostnccl: %s", mpi_init_error);
  return ncclSuccess;
}

void hn_mpi_lock(void) { if (mpi_serial) pthread_mutex_lock(&mpi_mutex); }
void hn_mpi_unlock(void) { if (mpi_serial) pthread_mutex_unlock(&mpi_mutex); }

ncclResult_t hn_mpi_err(int rc, const char *what) {
  char msg[MPI_MAX_ERROR_STRING] = "";
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  return hn_err(ncclSystemError, "hostnccl: %s failed: %s", what, msg);
}

void hn_cancel_all(MPI_Request *reqs, int n) {
  hn_mpi_lock();
  for (int i = 0; i < n; i++) {
    if (reqs[i] == MPI_REQUEST_NULL) continue;
    MPI_Cancel(&reqs[i]);
    MPI_Request_free(&reqs[i]);
  }
  hn_mpi_unlock();
}

ncclResult_t hn_wait(ncclComm_t comm, MPI_Request *reqs, int n) {
  for (unsigned spins = 0;; spins++) {
    int done = 0;
    hn_mpi_lock();
    int rc = MPI_Testall(n, reqs, &done, MPI_STATUSES_IGNORE);
    hn_mpi_unlock();
    if (rc != MPI_SUCCESS) return hn_mpi_err(rc, "MPI_Testall");
    if (done) return ncclSuccess;
    if (comm && __atomic_load_n(&comm->aborting, __ATOMIC_ACQUIRE)) {
      hn_cancel_all(reqs, n);
      return hn_err(ncclSystemError, "hostnccl: communicator %p aborted during an operation", (void *)comm);
    }
    if (spins >= 64) sched_yield(); /* ranks are often oversubscribed here */
  }
}

static size_t min_sz(size_t a, size_t b) { return a < b ? a : b; }

ncclResult_t hn_sendrecv(ncclComm_t comm, const void *sbuf, size_t sbytes, int dst,
                         void *rbuf, size_t rbytes, int src, int tag) {
  size_t slice = hn_cfg()->slice_bytes;
  if (dst < 0) sbytes = 0;
  if (src < 0) rbytes = 0;
  for (size_t off = 0; off < sbytes || off < rbytes; off += slice) {
    MPI_Request r[2];
    int n = 0, rc = MPI_SUCCESS;
    hn_mpi_lock();
    if (off < rbytes)
      rc = MPI_Irecv((char *)rbuf + off, (int)min_sz(slice, rbytes - off), MPI_BYTE, src, tag,
                     comm->mpi, &r[n++]);
    if (rc == MPI_SUCCESS && off < sbytes)
      rc = MPI_Isend((const char *)sbuf + off, (int)min_sz(slice, sbytes - off), MPI_BYTE, dst,
                     tag, comm->mpi, &r[n++]);
    hn_mpi_unlock();
    if (rc != MPI_SUCCESS) return hn_mpi_err(rc, "MPI_Isend/Irecv");
    HN_CHECK(hn_wait(comm, r, n));
  }
  return ncclSuccess;
}

ncclResult_t hn_post(ncclComm_t comm, int is_send, void *buf, size_t bytes, int peer, int tag,
                     MPI_Request **reqs, int *nreq, int *capreq) {
  size_t slice = hn_cfg()->slice_bytes;
  for (size_t off = 0; off < bytes; off += slice) {
    if (*nreq == *capreq) {
      int cap = *capreq ? 2 * *capreq : 16;
      MPI_Request *p = realloc(*reqs, (size_t)cap * sizeof *p);
      if (!p) return hn_err(ncclSystemError, "hostnccl: out of host memory");
      *reqs = p;
      *capreq = cap;
    }
    int len = (int)min_sz(slice, bytes - off), rc;
    MPI_Request *r = &(*reqs)[*nreq];
    hn_mpi_lock();
    rc = is_send ? MPI_Isend((char *)buf + off, len, MPI_BYTE, peer, tag, comm->mpi, r)
                 : MPI_Irecv((char *)buf + off, len, MPI_BYTE, peer, tag, comm->mpi, r);
    hn_mpi_unlock();
    if (rc != MPI_SUCCESS) return hn_mpi_err(rc, is_send ? "MPI_Isend" : "MPI_Irecv");
    (*nreq)++;
  }
  return ncclSuccess;
}

int hn_link_on(void) { return hn_cfg()->link_gbps > 0 || hn_cfg()->link_lat_us > 0; }

void hn_now(struct timespec *t) { clock_gettime(CLOCK_MONOTONIC, t); }

void hn_link_deadline(struct timespec *dl, const struct timespec *start, size_t bytes) {
  const hn_config *c = hn_cfg();
  double s = c->link_lat_us * 1e-6 + (c->link_gbps > 0 ? (double)bytes * 8.0 / (c->link_gbps * 1e9) : 0);
  long long ns = start->tv_nsec + (long long)(s * 1e9 + 0.5);
  dl->tv_sec = start->tv_sec + (time_t)(ns / 1000000000);
  dl->tv_nsec = (long)(ns % 1000000000);
}

void hn_sleep_until(const struct timespec *dl) {
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, dl, NULL) == EINTR) {}
}
