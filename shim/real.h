/* real.h — the table of real NCCL functions the shim forwards to.
 *
 * One row per function (GOTCHA-style): adding a hook touches one line here.
 * Resolution happens once, lazily, at the first intercepted call: first the
 * already-loaded libnccl.so.2 (dlopen RTLD_NOLOAD) and its pnccl* profiling
 * alias, then dlsym(RTLD_NEXT, "pnccl*"), then dlsym(RTLD_NEXT, "nccl*").
 * Never dlopens a library that is not already loaded, never exits. */
#ifndef NSC_REAL_H
#define NSC_REAL_H

#include <nccl.h>
#include <stddef.h>

#define NSC_REAL_LIST(X)                                                                   \
  X(AllReduce, (const void *, void *, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t,     \
                cudaStream_t))                                                             \
  X(ReduceScatter, (const void *, void *, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, \
                    cudaStream_t))                                                         \
  X(AllGather, (const void *, void *, size_t, ncclDataType_t, ncclComm_t, cudaStream_t))   \
  X(Broadcast, (const void *, void *, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t)) \
  X(Bcast, (void *, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t))                \
  X(Reduce, (const void *, void *, size_t, ncclDataType_t, ncclRedOp_t, int, ncclComm_t,   \
             cudaStream_t))                                                                \
  X(AlltoAll, (const void *, void *, size_t, ncclDataType_t, ncclComm_t, cudaStream_t))    \
  X(Gather, (const void *, void *, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t)) \
  X(Scatter, (const void *, void *, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t)) \
  X(Send, (const void *, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t))           \
  X(Recv, (void *, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t))                 \
  X(GroupStart, (void))                                                                    \
  X(GroupEnd, (void))                                                                      \
  X(CommInitRank, (ncclComm_t *, int, ncclUniqueId, int))                                 \
  X(CommInitRankConfig, (ncclComm_t *, int, ncclUniqueId, int, ncclConfig_t *))           \
  X(CommInitRankScalable, (ncclComm_t *, int, int, int, ncclUniqueId *, ncclConfig_t *))  \
  X(CommInitAll, (ncclComm_t *, int, const int *))                                         \
  X(CommSplit, (ncclComm_t, int, int, ncclComm_t *, ncclConfig_t *))                      \
  X(CommDestroy, (ncclComm_t))                                                             \
  X(CommAbort, (ncclComm_t))                                                               \
  X(CommFinalize, (ncclComm_t))                                                            \
  X(CommGetAsyncError, (ncclComm_t, ncclResult_t *))                                       \
  X(GetVersion, (int *))                                                                   \
  X(CommCount, (const ncclComm_t, int *))                                                  \
  X(CommUserRank, (const ncclComm_t, int *))

typedef struct {
#define X(name, args) ncclResult_t(*name) args;
  NSC_REAL_LIST(X)
#undef X
  const char *(*GetLastError)(ncclComm_t); /* (not an ncclResult_t: outside the list) */
  const char *how; /* how AllReduce was found, for the banner */
} nsc_real_t;

extern nsc_real_t nsc_real;

/* The dynamic-loader operations resolution uses; injected so unit tests can
 * check the order without a real libnccl. */
typedef struct {
  void *(*open_loaded)(const char *soname); /* dlopen(RTLD_NOLOAD) or NULL */
  void *(*sym)(void *handle, const char *name);
  void *next; /* the handle meaning "after this library" (RTLD_NEXT) */
} nsc_dl_ops;

/* Resolve every row into *out. Returns 0 when AllReduce was found (other rows
 * may stay NULL on old NCCL versions), -1 with a message otherwise. */
int nsc_real_resolve_with(const nsc_dl_ops *ops, nsc_real_t *out, char *err, size_t errlen);

/* Resolve into nsc_real with the process's loader; once. */
int nsc_real_resolve(char *err, size_t errlen);
/* Resolve nsc_real.GetLastError alone (ncclGetLastError before any other
 * intercepted call: nothing else is set up). */
void nsc_real_resolve_last_error(void);

#endif
