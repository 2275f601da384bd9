/* unsupported.c — the entry points of nccl.h that the host NCCL does not
 * implement (memory and window registration, ncclMemAlloc, shrink, revoke,
 * scalable init, all-to-all, gather, scatter, group simulation): each is
 * exported like the others (weak ncclX, strong pncclX) so that a program
 * linked against a real NCCL loads, and each returns ncclInvalidUsage with a
 * message for ncclGetLastError naming it. The newer entry points PyTorch 2.15
 * imports that this nccl.h does not declare are in unsupported_newer.c.
 *
 * Must not: touch any argument (a caller may pass anything), or pretend to
 * succeed: a call that cannot be honoured fails loudly. */
#include "hostnccl.h"

ncclResult_t hn_unsupported(const char *fn) {
  return hn_err(ncclInvalidUsage, "%s is not implemented by the host NCCL (a test substrate on host memory)", fn);
}

/* Define pncclX with NCCL's parameter list, ignore the arguments, alias ncclX. */
#define UNSUPPORTED(name, params)                  \
  ncclResult_t p##name params { return hn_unsupported(#name); } \
  HN_ALIAS(name)

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-parameter"
UNSUPPORTED(ncclMemAlloc, (void **ptr, size_t size));
UNSUPPORTED(ncclMemFree, (void *ptr));
UNSUPPORTED(ncclCommRevoke, (ncclComm_t comm, int revokeFlags));
UNSUPPORTED(ncclCommShrink, (ncclComm_t comm, int *excludeRanksList, int excludeRanksCount, ncclComm_t *newcomm,
                             ncclConfig_t *config, int shrinkFlags));
UNSUPPORTED(ncclCommInitRankScalable, (ncclComm_t *newcomm, int nranks, int myrank, int nId,
                                       ncclUniqueId *commIds, ncclConfig_t *config));
UNSUPPORTED(ncclCommRegister, (const ncclComm_t comm, void *buff, size_t size, void **handle));
UNSUPPORTED(ncclCommDeregister, (const ncclComm_t comm, void *handle));
UNSUPPORTED(ncclCommWindowRegister, (ncclComm_t comm, void *buff, size_t size, ncclWindow_t *win, int winFlags));
UNSUPPORTED(ncclCommWindowDeregister, (ncclComm_t comm, ncclWindow_t win));
UNSUPPORTED(ncclAlltoAll, (const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
                           ncclComm_t comm, cudaStream_t stream));
UNSUPPORTED(ncclGather, (const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype, int root,
                         ncclComm_t comm, cudaStream_t stream));
UNSUPPORTED(ncclScatter, (const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype, int root,
                          ncclComm_t comm, cudaStream_t stream));
UNSUPPORTED(ncclGroupSimulateEnd, (ncclSimInfo_t *simInfo));

/* Returns nothing in NCCL (deprecated there): it re-reads NCCL_DEBUG*, which
 * we do not have. NCCL 2.30's nccl.h declares it only where NCCL_OS_LINUX is
 * defined and makes it an empty macro elsewhere (PyTorch 2.15's wheel): the
 * symbol is exported all the same, as libnccl exports it. */
#ifdef pncclResetDebugInit
#undef ncclResetDebugInit
#undef pncclResetDebugInit
void ncclResetDebugInit(void);
void pncclResetDebugInit(void);
#endif
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
void pncclResetDebugInit(void) {}
HN_ALIAS(ncclResetDebugInit);
#pragma GCC diagnostic pop
