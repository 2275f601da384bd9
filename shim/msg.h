/* msg.h — the shim's own messages on stderr and its error-passing macros.
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

/* Pass an ncclResult_t up; ncclInProgress is not an error. */
#define NSC_OK(r) ((r) == ncclSuccess || (r) == ncclInProgress)
#define NSC_CHECK(call)                        \
  do {                                         \
    ncclResult_t r_ = (call);                  \
    if (!NSC_OK(r_)) return r_;                \
  } while (0)
#define NSC_CHECKGOTO(call, res, label)        \
  do {                                         \
    (res) = (call);                            \
    if (!NSC_OK(res)) goto label;              \
  } while (0)

#endif
