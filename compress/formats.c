/* formats.c — a format's name for the log and the tools (wire.h), and the
 * rows' compile-time checks. */
#include "wire.h"

/* A name fits ncclshim_stats.wire (char[8], shim/ncclshim.h) with its NUL. */
#define NSC_FMT_NAME_FITS(ID, name, bits, blocked, dt, k, bound, zero, doc) \
  _Static_assert(sizeof name <= 8, "format " name ": a name of 7 characters at most (ncclshim_stats.wire)");
NSC_FORMATS(NSC_FMT_NAME_FITS)
#undef NSC_FMT_NAME_FITS

const char *nsc_fmt_name(nsc_fmt_t f) { return nsc_fmt_row(f) ? nsc_fmt_row(f)->name : "?"; }
