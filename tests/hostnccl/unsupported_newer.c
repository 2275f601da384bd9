/* unsupported_newer.c — entry points of newer NCCL releases (2.29/2.30) that
 * PyTorch 2.15's libtorch_cuda.so imports (`nm -D --undefined-only`) but the
 * nccl.h we build against does not declare: suspend/resume, grow, memory
 * statistics, the device API's communicators and window pointers, one-sided
 * signals. Exported like the rest (weak ncclX, strong pncclX) so that torch
 * loads with this library as its libnccl.so.2; each returns ncclInvalidUsage
 * with a message for ncclGetLastError.
 *
 * This file deliberately includes no nccl.h: the types these functions take
 * exist only in the newer header, and every one of them is a pointer or an
 * integer, so the parameter lists below keep NCCL's shapes with opaque
 * pointers. Must not: read any argument. */
#include <stddef.h>
#include <stdint.h>

typedef int hn_result_t; /* ncclResult_t */
hn_result_t hn_unsupported(const char *fn);

#define NEWER(name, params)                                                          \
  hn_result_t p##name params;                                                      \
  hn_result_t p##name params { return hn_unsupported(#name); }                     \
  extern __typeof__(p##name) name __attribute__((weak, alias("p" #name), visibility("default")))

#define V __attribute__((visibility("default")))
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-parameter"
V NEWER(ncclCommGetUniqueId, (void *comm, void *uniqueId));
V NEWER(ncclCommGrow, (void *comm, int nRanks, const void *uniqueId, int rank, void **newcomm, void *config));
V NEWER(ncclCommMemStats, (void *comm, int stat, uint64_t *value));
V NEWER(ncclCommSuspend, (void *comm, int flags));
V NEWER(ncclCommResume, (void *comm));
V NEWER(ncclDevCommCreate, (void *comm, const void *reqs, void *outDevComm));
V NEWER(ncclDevCommDestroy, (void *comm, const void *devComm));
V NEWER(ncclGetLsaMultimemDevicePointer, (void *window, size_t offset, void **outPtr));
V NEWER(ncclGetPeerDevicePointer, (void *window, size_t offset, int peer, void **outPtr));
V NEWER(ncclPutSignal, (const void *localbuff, size_t count, int datatype, int peer, void *peerWin,
                        size_t peerWinOffset, int sigIdx, int ctx, unsigned int flags, void *comm, void *stream));
V NEWER(ncclSignal, (int peer, int sigIdx, int ctx, unsigned int flags, void *comm, void *stream));
V NEWER(ncclWaitSignal, (int nDesc, void *signalDescs, void *comm, void *stream));
V NEWER(ncclWinGetUserPtr, (void *comm, void *win, void **outUserPtr));
#pragma GCC diagnostic pop
