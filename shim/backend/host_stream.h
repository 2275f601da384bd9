/* host_stream.h — the host backend's side stream: one worker thread per
 * process that runs host codec work in the order it was submitted, so that
 * the calling thread can wait in a host NCCL call (whose emulated link
 * sleeps) while the next piece is encoded — what a GPU's side stream gives
 * the CUDA backend (docs/collectives.md, "Pipelined pieces").
 *
 * A task is a function with a small argument block copied at submission; a
 * ticket counts submissions, and nsc_hs_wait(t) returns once the first t
 * tasks have run (they run in order). Host codec work cannot fail, so tasks
 * return nothing. The worker starts at the first nsc_hs_stream; when it
 * cannot (pthread_create fails; tried once) there is no side stream and the
 * caller's stream does the work: the same results, no overlap.
 *
 * Must not: print, call NCCL, take the shim's locks, allocate per task (the queue is
 * a fixed ring; a full ring makes the submitter wait), or deliver signals to
 * the worker. */
#ifndef NSC_HOST_STREAM_H
#define NSC_HOST_STREAM_H

#include <stdint.h>

#define NSC_HS_ARG_BYTES 96

typedef void (*nsc_hs_fn)(void *arg);

/* The side stream's handle, as the host backend hands it out, or NULL when
 * no worker can run (the caller then uses its own stream). */
void *nsc_hs_stream(void);
/* 1 when s is the side stream's handle. */
int nsc_hs_is(const void *s);
/* Queue fn with a copy of arg[0..bytes) (bytes <= NSC_HS_ARG_BYTES); the
 * ticket of this task. */
uint64_t nsc_hs_submit(nsc_hs_fn fn, const void *arg, unsigned bytes);
/* The ticket of the last task submitted so far. */
uint64_t nsc_hs_tail(void);
/* Returns once task `ticket` and all before it have run. */
void nsc_hs_wait(uint64_t ticket);
/* In a forked child: no worker; the next nsc_hs_stream starts one. */
void nsc_hs_forget(void);

#endif
