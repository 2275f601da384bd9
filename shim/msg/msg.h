/* msg.h — the shim's own messages on stderr, and NSC_OK for result codes.
 *
 * Every line starts "ncclshim[host:pid]" so it can be grepped out of a job's
 * interleaved output. Messages are for humans; nothing parses them. */
#ifndef NSC_MSG_H
#define NSC_MSG_H

#include <nccl.h>

void nsc_msg(const char *level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
#define nsc_warn(...) nsc_msg("WARN", __VA_ARGS__)
#define nsc_info(...) nsc_msg("INFO", __VA_ARGS__)

/* Print at most once per flag (a static int at the call site). */
#define nsc_warn_once(flagp, ...)                                           \
  do {                                                                      \
    if (!__atomic_exchange_n((flagp), 1, __ATOMIC_RELAXED)) nsc_warn(__VA_ARGS__); \
  } while (0)

/* ncclInProgress is not an error. */
#define NSC_OK(r) ((r) == ncclSuccess || (r) == ncclInProgress)

#endif
