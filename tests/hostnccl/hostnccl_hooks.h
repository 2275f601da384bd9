/* hostnccl_hooks.h — test hooks exported by the host NCCL (libnccl.so.2 in
 * build/lib/hostnccl) besides the NCCL API.
 *
 * The all-reduce counters are per process, over all threads and communicators, and count the
 * ncclAllReduce calls the host NCCL accepted (arguments valid, not failed by
 * HOSTNCCL_FAIL_CALL), at call time (also inside a group or on a nonblocking
 * communicator), with bytes = count * sizeof(datatype). They only grow.
 *
 * A test that must also run against the real NCCL looks the hooks up instead
 * of linking them:
 *   int (*get)(uint64_t *, uint64_t *) =
 *       (int (*)(uint64_t *, uint64_t *))dlsym(RTLD_DEFAULT, "hostnccl_get_counters");
 *   if (get) ... (NULL: not the host NCCL)
 *
 * Must not: grow into a second API; hooks observe, they never change behaviour. */
#ifndef HOSTNCCL_HOOKS_H
#define HOSTNCCL_HOOKS_H

#include <stdint.h>

/* All datatypes together. Returns 0. */
int hostnccl_get_counters(uint64_t *allreduce_calls, uint64_t *allreduce_bytes);
/* One datatype (an ncclDataType_t value). Returns 0, or -1 for an invalid type. */
int hostnccl_get_type_counters(int datatype, uint64_t *allreduce_calls, uint64_t *allreduce_bytes);
/* The launches this process made on communicator comm so far (an
 * ncclComm_t; void * here so that this header needs no nccl.h), or on every
 * communicator together when comm is NULL (the shim's sub-communicators
 * included): a collective outside a group, or a group end, that moved or
 * reduced anything (a collective of count 0 alone launches nothing, as in
 * NCCL; a group that holds any send or receive does), one per communicator
 * it touched. Each paid HOSTNCCL_LAUNCH_US. Returns 0, or -1 when launches
 * is NULL. */
int hostnccl_get_launches(void *comm, uint64_t *launches);
/* Threads of this process waiting inside a call for a peer's message right
 * now (any communicator): a test that aborts from another thread knows the
 * call it means to interrupt is blocked on a peer, not merely about to be
 * made. */
int hostnccl_waiting(void);

#endif
