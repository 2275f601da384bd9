/* formats.c — formats.h's rows as data (wire.h: nsc_fmt_infos, names). */
#include "wire.h"

const nsc_fmt_info nsc_fmt_infos[NSC_FMT_COUNT] = {
#define NSC_FMT_ROW(ID, name, bits, blocked, dt, k, bound, zero, doc) {name, bits, blocked, bound, zero, doc},
    NSC_FORMATS(NSC_FMT_ROW)
#undef NSC_FMT_ROW
};

/* A name fits ncclshim_stats.wire (char[8], shim/ncclshim.h) with its NUL. */
#define NSC_FMT_NAME_FITS(ID, name, bits, blocked, dt, k, bound, zero, doc) \
  _Static_assert(sizeof name <= 8, "format " name ": a name of 7 characters at most (ncclshim_stats.wire)");
NSC_FORMATS(NSC_FMT_NAME_FITS)
#undef NSC_FMT_NAME_FITS

const char *nsc_fmt_name(nsc_fmt_t f) { return (unsigned)f < NSC_FMT_COUNT ? nsc_fmt_infos[f].name : "?"; }
