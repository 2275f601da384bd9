/* log.h — per-collective records and what is written from them: the summary
 * table, JSON Lines (NCCLSHIM_LOG=calls) and the Chrome trace.
 *
 * The hook path only fills a record and pushes it into a bounded ring; times
 * are read later from backend marks (CUDA events, never synchronised), and
 * all file I/O happens at communicator close or process exit. */
#ifndef NSC_LOG_H
#define NSC_LOG_H

#include <nccl.h>
#include <pthread.h>
#include <stdint.h>

#include "backend.h"
#include "config.h"

enum { NSC_MARK_BEGIN = 0, NSC_MARK_CAST_IN = 1, NSC_MARK_COLL = 2, NSC_MARK_END = 3, NSC_NMARKS = 4 };

typedef struct nsc_rec {
  uint64_t seq;            /* per-communicator sequence number */
  int action;              /* nsc_action */
  int dtype, wire_dtype, op;
  int nmembers;            /* fused: members in this collective */
  int untimed;             /* captured into a graph: counted, not timed */
  size_t count;
  uint64_t logical_bytes, wire_bytes;
  uint64_t wall_ns;        /* CLOCK_REALTIME at the call */
  uint64_t host_ns;        /* CLOCK_MONOTONIC at the call */
  ncclResult_t result;
  const nsc_backend *be;
  nsc_stream stream;
  nsc_mark m[NSC_NMARKS];
  unsigned marked;         /* bit i: m[i] was taken */
} nsc_rec;

/* Aggregates for one action, in the summary. */
typedef struct {
  uint64_t calls, logical_bytes, wire_bytes, timed;
  uint64_t time_ns, cast_ns;
} nsc_log_totals;

typedef struct nsc_comm_log {
  int open;
  uint64_t id;             /* communicator pointer value, for names only */
  int rank, nranks;
  uint64_t first_wall_ns, last_wall_ns;
  nsc_log_totals by_action[4];
  uint64_t accum_synced, accum_skipped;
  uint64_t dropped;        /* records folded into totals without detail */
  nsc_rec *ring;           /* NCCLSHIM_LOG_RING entries */
  size_t ring_cap, ring_head, ring_len;
  uint64_t *times;         /* collective times of completed records, for p50/p99 */
  size_t ntimes, times_cap;
  pthread_mutex_t lock;
} nsc_comm_log;

void nsc_log_init(const nsc_config *cfg);
/* In a forked child: forget everything, write nothing. */
void nsc_log_forget(void);
/* 1 when records are kept at all (NCCLSHIM_LOG != off or a trace file). */
int nsc_log_on(void);

void nsc_log_comm_open(nsc_comm_log *l, uint64_t id, int rank, int nranks);
/* Start a record: wall clock, first mark. */
void nsc_log_begin(nsc_rec *r, const nsc_backend *be, nsc_stream s);
void nsc_log_mark(nsc_rec *r, int which);
/* The record is complete from the host's view (its work is enqueued). */
void nsc_log_commit(nsc_comm_log *l, nsc_rec *r);
/* Drop a record's marks without committing it (failed call). */
void nsc_log_discard(nsc_rec *r);
void nsc_log_accum(nsc_comm_log *l, int synced);
/* Write this communicator's summary (and its JSON lines / trace events). */
void nsc_log_comm_close(nsc_comm_log *l);

#endif
