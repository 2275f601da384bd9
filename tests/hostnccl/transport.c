/* transport.c — how the host NCCL moves bytes: messages posted as requests of
 * either transport, Open MPI point-to-point on each communicator's own MPI
 * communicator or TCP sockets (socket.c), in slices of at most
 * HOSTNCCL_SLICE_BYTES (MPI counts are int), one wait for both, plus the
 * emulated links' clock (the same for both transports: it sits above them;
 * which links a message crosses is fabric.c's).
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

void hn_cancel_all(hn_req *reqs, int n) {
  hn_mpi_lock();
  for (int i = 0; i < n; i++) {
    if (reqs[i].mpi == MPI_REQUEST_NULL) continue;
    MPI_Cancel(&reqs[i].mpi);
    MPI_Request_free(&reqs[i].mpi);
  }
  hn_mpi_unlock();
  for (int i = 0; i < n; i++) reqs[i].fd = -1; /* the socket stays the comm's */
}

static int is_sock(const hn_req *r) { return r->comm && r->comm->sock; }

/* Socket requests of one socket and direction complete in the order posted:
 * only the first pending one of its stream may move. */
static int is_head(const hn_req *reqs, int i) {
  for (int j = 0; j < i; j++)
    if (reqs[j].fd == reqs[i].fd && reqs[j].is_send == reqs[i].is_send && is_sock(&reqs[j])) return 0;
  return 1;
}

/* Threads of this process inside hn_wait with a message still pending
 * (hostnccl_waiting: a test knows that a call is blocked on a peer). */
static int waiting;

HN_EXPORT int hostnccl_waiting(void) { return __atomic_load_n(&waiting, __ATOMIC_ACQUIRE); }

static ncclResult_t wait_reqs(hn_req *reqs, int n, int *counted);

ncclResult_t hn_wait(hn_req *reqs, int n) {
  int counted = 0;
  ncclResult_t res = wait_reqs(reqs, n, &counted);
  if (counted) __atomic_sub_fetch(&waiting, 1, __ATOMIC_RELEASE);
  return res;
}

static ncclResult_t wait_reqs(hn_req *reqs, int n, int *counted) {
  hn_req *heads[64];
  for (unsigned spins = 0;; spins++) {
    int pending = 0, mpi_pending = 0, nheads = 0;
    for (int i = 0; i < n; i++) {
      hn_req *r = &reqs[i];
      if (is_sock(r)) {
        if (r->fd < 0) continue;
        if (!is_head(reqs, i)) { pending++; continue; }
        int rc = hn_sock_progress(r);
        if (rc < 0) { hn_cancel_all(reqs, n); return ncclSystemError; } /* message set by progress */
        if (rc == 0) {
          pending++;
          if (nheads < (int)(sizeof heads / sizeof heads[0])) heads[nheads++] = r;
        }
      } else if (r->mpi != MPI_REQUEST_NULL) {
        int done = 0;
        hn_mpi_lock();
        int rc = MPI_Test(&r->mpi, &done, MPI_STATUS_IGNORE);
        hn_mpi_unlock();
        if (rc != MPI_SUCCESS) return hn_mpi_err(rc, "MPI_Test");
        if (!done) pending++, mpi_pending++;
      }
    }
    if (!pending) return ncclSuccess;
    if (!*counted) *counted = 1, __atomic_add_fetch(&waiting, 1, __ATOMIC_RELEASE);
    for (int i = 0; i < n; i++) {
      ncclComm_t c = reqs[i].comm;
      if (c && __atomic_load_n(&c->aborting, __ATOMIC_ACQUIRE)) {
        hn_cancel_all(reqs, n);
        return hn_err(ncclSystemError, "hostnccl: communicator %p aborted during an operation", (void *)c);
      }
    }
    /* Sockets sleep in poll() (short, so that an abort is seen); MPI polls. */
    if (nheads && !mpi_pending) hn_sock_poll(heads, nheads, 50);
    else if (spins >= 64) sched_yield(); /* ranks are often oversubscribed here */
  }
}

static size_t min_sz(size_t a, size_t b) { return a < b ? a : b; }

ncclResult_t hn_sendrecv(ncclComm_t comm, const void *sbuf, size_t sbytes, int dst,
                         void *rbuf, size_t rbytes, int src, int tag) {
  size_t slice = hn_cfg()->slice_bytes;
  if (dst < 0) sbytes = 0;
  if (src < 0) rbytes = 0;
  for (size_t off = 0; off < sbytes || off < rbytes; off += slice) {
    hn_req r[2], *rp = r;
    int n = 0, cap = 2;
    ncclResult_t res = ncclSuccess;
    if (off < rbytes)
      res = hn_post(comm, 0, (char *)rbuf + off, min_sz(slice, rbytes - off), src, tag, &rp, &n, &cap);
    if (res == ncclSuccess && off < sbytes)
      res = hn_post(comm, 1, (char *)sbuf + off, min_sz(slice, sbytes - off), dst, tag, &rp, &n, &cap);
    if (res == ncclSuccess) res = hn_wait(r, n);
    else hn_cancel_all(r, n);
    if (res != ncclSuccess) return res;
  }
  return ncclSuccess;
}

ncclResult_t hn_post(ncclComm_t comm, int is_send, void *buf, size_t bytes, int peer, int tag,
                     hn_req **reqs, int *nreq, int *capreq) {
  size_t slice = hn_cfg()->slice_bytes;
  for (size_t off = 0; off < bytes; off += slice) {
    if (*nreq == *capreq) {
      int cap = *capreq ? 2 * *capreq : 16;
      hn_req *p = realloc(*reqs, (size_t)cap * sizeof *p);
      if (!p) return hn_err(ncclSystemError, "hostnccl: out of host memory");
      *reqs = p;
      *capreq = cap;
    }
    size_t len = min_sz(slice, bytes - off);
    hn_req *r = &(*reqs)[*nreq];
    *r = (hn_req){.comm = comm, .mpi = MPI_REQUEST_NULL, .fd = -1, .is_send = is_send,
                  .buf = (char *)buf + off, .len = len, .done = 0};
    if (comm->sock) {
      int idx = (tag - 1) * comm->nranks + peer;
      r->fd = is_send ? comm->sfd[idx] : comm->rfd[idx];
    } else {
      int rc;
      hn_mpi_lock();
      rc = is_send ? MPI_Isend(r->buf, (int)len, MPI_BYTE, peer, tag, comm->mpi, &r->mpi)
                   : MPI_Irecv(r->buf, (int)len, MPI_BYTE, peer, tag, comm->mpi, &r->mpi);
      hn_mpi_unlock();
      if (rc != MPI_SUCCESS) return hn_mpi_err(rc, is_send ? "MPI_Isend" : "MPI_Irecv");
    }
    (*nreq)++;
  }
  return ncclSuccess;
}

int hn_link_on(void) {
  const hn_config *c = hn_cfg();
  return c->link_gbps > 0 || c->intra_gbps > 0 || c->link_lat_us > 0;
}

void hn_now(struct timespec *t) { clock_gettime(CLOCK_MONOTONIC, t); }

void hn_sleep_until(const struct timespec *dl) {
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, dl, NULL) == EINTR) {}
}
