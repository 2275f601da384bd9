/* agree.h — the shim's own agreements between the ranks of a communicator:
 * small ncclInt64 Max all-reduces of values of its own (settings' hashes,
 * node keys, whether an allocation succeeded, accumulation's decisions),
 * on a private buffer and stream of the caller's stream's context, their
 * answers polled for, never the caller's data, and nothing synchronised.
 * Used by the configuration check (coll/check.c), accumulation
 * (coll/accumulate.c) and the staging block's growth (staging/settle.c).
 *
 * Must not: decide whether an exchange is issued (its callers decide, from
 * agreed values only), or wait on the caller's stream. */
#ifndef NSC_AGREE_H
#define NSC_AGREE_H

#include <nccl.h>
#include <stdint.h>

#include "backend.h"

struct nsc_comm;
struct nsc_xchg; /* comm.h */

/* An exchange of n values (their maxima on every rank), issued and waited
 * for. Issued even when this rank has no private buffer: then on an
 * all-ones buffer on `caller` (every value reads -1 on every rank), and this
 * rank returns ncclSystemError. */
ncclResult_t nsc_exchange_max(struct nsc_comm *c, const nsc_backend *be, nsc_stream caller, int64_t *vals, int n);
/* The same in two halves: begin issues it (x->live once a private buffer was
 * taken, even if the collective failed; without one the poisoned exchange is
 * issued on `caller` and x stays not live), end waits for it, copies the
 * result back and frees the buffer; end returns the collective's result. */
ncclResult_t nsc_exchange_begin(struct nsc_comm *c, const nsc_backend *be, nsc_stream caller, const int64_t *vals,
                                int n, struct nsc_xchg *x);
ncclResult_t nsc_exchange_end(struct nsc_xchg *x, int64_t *vals);
/* The peers issue an exchange of n values that this rank cannot take part
 * in properly: it issues it too, on an all-ones buffer (every rank sees the
 * poison). ncclSystemError, or NCCL's own error. */
ncclResult_t nsc_exchange_poisoned(struct nsc_comm *c, const nsc_backend *be, nsc_stream caller, int n);
/* After an exchange whose outcome was `mine` on this rank: one more
 * exchange in which every rank says whether it had the answer; ncclSuccess
 * when every rank had it (see agree.c). */
ncclResult_t nsc_exchange_confirm(struct nsc_comm *c, const nsc_backend *be, nsc_stream s, ncclResult_t mine);
/* A read-back's answer e (backend.h's oob_end) through the fault point
 * NCCLSHIM_FAULT_OOB_END (the n-th read-back of the process fails). */
int nsc_exchange_readback_fault(int e);

#endif
