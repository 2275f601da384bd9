/* config.h — the shim's settings, generated from config.def.
 *
 * The parser is a pure function of an environment array (so it is unit-tested
 * and fuzzed without touching the process environment). It never prints and
 * never allocates; on error it fills a one-line message naming the variable,
 * the value and what is allowed. */
#ifndef NSC_CONFIG_H
#define NSC_CONFIG_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "formats.h"

#define NSC_CFG_STR_MAX 4096
/* An INT or SIZE row set to "auto" (its choices allow it): the shim decides. */
#define NSC_CFG_AUTO (-1LL)
/* NCCLSHIM_ACCUM_STEPS asks for accumulation: K >= 2, or auto. */
#define nsc_cfg_accumulating(cfg) ((cfg)->accum_steps > 1 || (cfg)->accum_steps == NSC_CFG_AUTO)

/* NCCLSHIM_COMPRESS: off, then the wire formats in formats.h's order (a
 * format's value is its nsc_fmt_t + 1), and its choices string. */
enum {
  NSC_COMPRESS_OFF = 0,
#define NSC_COMPRESS_ENUM(ID, name, bits, blocked, dt, k, bound, zero, doc) NSC_COMPRESS_##ID = NSC_FMT_##ID + 1,
  NSC_FORMATS(NSC_COMPRESS_ENUM)
#undef NSC_COMPRESS_ENUM
};
#define NSC_COMPRESS_CHOICE(ID, name, bits, blocked, dt, k, bound, zero, doc) "|" name
#define NSC_COMPRESS_CHOICES "off" NSC_FORMATS(NSC_COMPRESS_CHOICE)
enum { NSC_ALGO_AUTO = 0, NSC_ALGO_RING = 1, NSC_ALGO_TWOPHASE = 2, NSC_ALGO_HIER = 3 };
enum { NSC_LOG_OFF = 0, NSC_LOG_SUMMARY = 1, NSC_LOG_CALLS = 2 };
enum { NSC_ROUND_NEAREST = 0, NSC_ROUND_STOCHASTIC = 1 };
enum { NSC_GATHER_AUTO = 0, NSC_GATHER_ALLGATHER = 1, NSC_GATHER_SENDRECV = 2 };

#define NSC_FIELD_BOOL(f) int f;
#define NSC_FIELD_INT(f) long long f;
#define NSC_FIELD_SIZE(f) long long f;
#define NSC_FIELD_FLOAT(f) double f;
#define NSC_FIELD_ENUM(f) int f;
#define NSC_FIELD_STR(f) char f[NSC_CFG_STR_MAX];

/* Index of each row, for from_env[] and nsc_config_row(). */
enum {
#define NSC_CFG(field, type, def, lo, hi, choices, hashed, desc) NSC_CFGI_##field,
#include "config.def"
#undef NSC_CFG
  NSC_CFG_COUNT
};

typedef struct nsc_config {
#define NSC_CFG(field, type, def, lo, hi, choices, hashed, desc) NSC_FIELD_##type(field)
#include "config.def"
#undef NSC_CFG
  /* Where each value came from: 1 = environment, 0 = default. */
  unsigned char from_env[NSC_CFG_COUNT];
} nsc_config;

typedef struct {
  const char *env;     /* "NCCLSHIM_MIN_BYTES" */
  const char *type;    /* "SIZE" */
  const char *def;     /* default as written */
  long long lo, hi;    /* range (INT, SIZE); for FLOAT see flo/fhi */
  double flo, fhi;
  const char *choices; /* "off|fp16|bf16" */
  int hashed;
  const char *desc;
} nsc_config_row;

const nsc_config_row *nsc_config_row_at(int i);

/* Parse defaults, then every NCCLSHIM_* entry of envp (NULL-terminated
 * "NAME=value" strings). Returns 0, or -1 with a message in err. On error
 * *cfg holds the defaults only: no partially applied value. */
int nsc_config_parse(char *const *envp, nsc_config *cfg, char *err, size_t errlen);

/* Every problem of envp's NCCLSHIM_* entries (and of names that are ours
 * misspelt, see nsc_config_name), one message each through report, in the
 * words nsc_config_parse would use for the first; returns their number (0:
 * the shim would accept this environment). */
int nsc_config_check(char *const *envp, void (*report)(void *ctx, const char *msg), void *ctx);

/* What the environment variable name (nlen chars, not NUL-terminated) is to
 * the shim: NSC_NAME_OURS (*row: its row), NSC_NAME_UNKNOWN (NCCLSHIM_* but
 * no row), NSC_NAME_MISSPELT (NCCL_SHIM_*, ncclshim_* in another case,
 * NCCLSHIM without '_', or one edit from a row's name), NSC_NAME_OTHER (not
 * ours; every NCCL_* name but NCCL_SHIM_*). For the two kinds of mistake
 * *row is the nearest row (its "did you mean"), or -1. */
enum { NSC_NAME_OTHER = 0, NSC_NAME_OURS, NSC_NAME_UNKNOWN, NSC_NAME_MISSPELT };
int nsc_config_name(const char *name, size_t nlen, int *row);

/* 1 when envp sets the BOOL row i to a true value (1, true, yes, on), whatever
 * else envp holds: NCCLSHIM_DISABLE and NCCLSHIM_DUMP_CONFIG still count when
 * another setting is invalid. */
int nsc_config_flag(char *const *envp, int i);

/* Every setting, one per line: name, value, source. */
void nsc_config_dump(const nsc_config *cfg, FILE *out, const char *prefix);

/* The same from an environment that may hold mistakes (what
 * NCCLSHIM_DUMP_CONFIG=1 prints when the parse failed): each row with the
 * value envp gives it (or "INVALID" and why) or its default, then one line
 * per misspelt or unknown name. */
void nsc_config_dump_env(char *const *envp, FILE *out, const char *prefix);

/* The effective value of row i as text (for dumps, banners and mismatch messages). */
void nsc_config_value_str(const nsc_config *cfg, int i, char *buf, size_t len);

/* 62-bit hash of each hashed row's value (0 for rows that are not hashed). */
int64_t nsc_config_row_hash(const nsc_config *cfg, int i);

/* The environment table of docs/environment.md, in Markdown. */
void nsc_config_markdown(FILE *out);

#endif
