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

/* Every setting, one per line: name, value, source. */
void nsc_config_dump(const nsc_config *cfg, FILE *out, const char *prefix);

/* The effective value of row i as text (for dumps, banners and mismatch messages). */
void nsc_config_value_str(const nsc_config *cfg, int i, char *buf, size_t len);

/* 62-bit hash of each hashed row's value (0 for rows that are not hashed). */
int64_t nsc_config_row_hash(const nsc_config *cfg, int i);

/* The environment table of docs/environment.md, in Markdown. */
void nsc_config_markdown(FILE *out);

#endif
