/* config.c — parse, check, dump and hash the settings declared in config.def.
 *
 * Pure functions over an injected environment array: no getenv, no printing
 * to stderr, no allocation. A value is accepted only when the whole string
 * parses and lies in range; anything else yields one message naming the
 * variable, the value (shortened if long) and what is allowed, and leaves the
 * configuration at its defaults so nothing half-parsed is ever applied.
 *
 * Names are judged here once, for the shim and for the tools that check an
 * environment before a job starts (ncclshim-envcheck): every NCCLSHIM_* name
 * must be a row of config.def, and a name that is ours misspelt (NCCL_SHIM_*,
 * ncclshim_* in any case, NCCLSHIM without its '_', or one edit away from a
 * row's name) is refused the same way, with "did you mean" the nearest row.
 * NCCL's own NCCL_* names are never taken for ours. */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define PREFIX "NCCLSHIM_"
#define PREFIX_LEN (sizeof(PREFIX) - 1)

enum { T_BOOL, T_INT, T_SIZE, T_FLOAT, T_ENUM, T_STR };

typedef struct {
  nsc_config_row pub;
  const char *field;
  int type;
  size_t offset;
} row_t;

#define NSC_CFG(field, type, def, lo, hi, choices, hashed, desc)                       \
  {{NULL, #type, def, (long long)(lo), (long long)(hi), (double)(lo), (double)(hi),     \
    choices, hashed, desc},                                                              \
   #field, T_##type, offsetof(nsc_config, field)},
static row_t rows[NSC_CFG_COUNT] = {
#include "config.def"
};
#undef NSC_CFG

/* "min_bytes" -> "NCCLSHIM_MIN_BYTES", built once. */
static char env_names[NSC_CFG_COUNT][64];
static pthread_once_t names_once = PTHREAD_ONCE_INIT;
static void build_names(void) {
  for (int i = 0; i < NSC_CFG_COUNT; i++) {
    size_t n = 0;
    for (const char *p = PREFIX; *p; p++) env_names[i][n++] = *p;
    for (const char *p = rows[i].field; *p && n < sizeof env_names[i] - 1; p++)
      env_names[i][n++] = (char)toupper((unsigned char)*p);
    env_names[i][n] = '\0';
    rows[i].pub.env = env_names[i];
  }
}

const nsc_config_row *nsc_config_row_at(int i) {
  if (i < 0 || i >= NSC_CFG_COUNT) return NULL;
  pthread_once(&names_once, build_names);
  return &rows[i].pub;
}

static void *field_ptr(nsc_config *cfg, int i) { return (char *)cfg + rows[i].offset; }
static const void *cfield_ptr(const nsc_config *cfg, int i) {
  return (const char *)cfg + rows[i].offset;
}

/* Shown values are cut so a megabyte of garbage gives a one-line message. */
static void shorten(const char *v, char *out, size_t len) {
  size_t n = strlen(v);
  if (n + 1 <= len && n <= 64) { memcpy(out, v, n + 1); return; }
  snprintf(out, len, "%.60s...(%zu chars)", v, n);
}

static int fail(char *err, size_t errlen, int i, const char *value, const char *fmt, ...) {
  char shown[96], allowed[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(allowed, sizeof allowed, fmt, ap);
  va_end(ap);
  shorten(value, shown, sizeof shown);
  if (err && errlen) snprintf(err, errlen, "%s='%s' is invalid: %s", env_names[i], shown, allowed);
  return -1;
}

static int parse_ll(const char *s, long long *out, const char **end) {
  if (!isdigit((unsigned char)s[0]) && !(s[0] == '-' && isdigit((unsigned char)s[1]))) return -1;
  char *e;
  errno = 0;
  long long v = strtoll(s, &e, 10);
  if (errno == ERANGE) return -2;
  *out = v;
  *end = e;
  return 0;
}

/* Bytes with an optional binary suffix: 65536, 64K, 64KiB, 1M, 4G, 1T. */
static int parse_size(const char *s, long long *out) {
  const char *e;
  long long v;
  int r = parse_ll(s, &v, &e);
  if (r) return r;
  long long mul = 1;
  if (*e) {
    const char *units = "KMGT";
    const char *u = strchr(units, toupper((unsigned char)*e));
    if (!u) return -1;
    for (long k = 0; k <= u - units; k++) mul *= 1024;
    e++;
    if (*e == 'i' && e[1] == 'B') e += 2;
    else if (*e == 'B') e += 1;
    if (*e) return -1;
  }
  if (v < 0) { *out = v; return 0; }
  if (v > LLONG_MAX / mul) return -2;
  *out = v * mul;
  return 0;
}

static int parse_bool(const char *s, int *out) {
  static const char *yes[] = {"1", "true", "yes", "on"}, *no[] = {"0", "false", "no", "off"};
  for (size_t k = 0; k < 4; k++) {
    if (!strcasecmp(s, yes[k])) { *out = 1; return 0; }
    if (!strcasecmp(s, no[k])) { *out = 0; return 0; }
  }
  return -1;
}

/* Index of s among "a|b|c", or -1. */
static int enum_index(const char *choices, const char *s) {
  size_t n = strlen(s);
  int idx = 0;
  for (const char *p = choices; *p; idx++) {
    const char *bar = strchr(p, '|');
    size_t len = bar ? (size_t)(bar - p) : strlen(p);
    if (len == n && !strncasecmp(p, s, n)) return idx;
    if (!bar) break;
    p = bar + 1;
  }
  return -1;
}

/* Edit distance (insertions, deletions, substitutions and swaps of two
 * neighbours, case-insensitive) between a[0..na) and b[0..nb), or limit + 1
 * as soon as it must exceed limit. Strings of up to NAME_MAX_CMP chars. */
#define NAME_MAX_CMP 96
static int distance(const char *a, size_t na, const char *b, size_t nb, int limit) {
  if (na > NAME_MAX_CMP || nb > NAME_MAX_CMP) return limit + 1;
  if ((na > nb ? na - nb : nb - na) > (size_t)limit) return limit + 1;
  int rows[3][NAME_MAX_CMP + 1]; /* the previous two rows and this one */
  for (size_t j = 0; j <= nb; j++) rows[1][j] = (int)j;
  for (size_t i = 1; i <= na; i++) {
    int *cur = rows[(i + 1) % 3], *prev = rows[i % 3], *prev2 = rows[(i + 2) % 3];
    cur[0] = (int)i;
    int best = cur[0];
    for (size_t j = 1; j <= nb; j++) {
      int same = toupper((unsigned char)a[i - 1]) == toupper((unsigned char)b[j - 1]);
      int d = prev[j - 1] + !same;
      if (prev[j] + 1 < d) d = prev[j] + 1;
      if (cur[j - 1] + 1 < d) d = cur[j - 1] + 1;
      if (i > 1 && j > 1 && toupper((unsigned char)a[i - 1]) == toupper((unsigned char)b[j - 2]) &&
          toupper((unsigned char)a[i - 2]) == toupper((unsigned char)b[j - 1]) && prev2[j - 2] + 1 < d)
        d = prev2[j - 2] + 1;
      cur[j] = d;
      if (d < best) best = d;
    }
    if (best > limit) return limit + 1;
  }
  int d = rows[(na + 1) % 3][nb];
  return d > limit ? limit + 1 : d;
}

static int starts_nocase(const char *s, size_t n, const char *prefix) {
  size_t k = strlen(prefix);
  return n >= k && !strncasecmp(s, prefix, k);
}

/* The row nearest to NCCLSHIM_<rest> (rest: rlen chars, any case), at most
 * limit edits away, or -1. */
static int nearest_row(const char *rest, size_t rlen, int limit) {
  int best = -1, bestd = limit + 1;
  for (int i = 0; i < NSC_CFG_COUNT; i++) {
    const char *f = env_names[i] + PREFIX_LEN;
    int d = distance(rest, rlen, f, strlen(f), bestd - 1 < limit ? bestd - 1 : limit);
    if (d < bestd) { bestd = d; best = i; }
  }
  return best;
}

int nsc_config_name(const char *name, size_t nlen, int *row) {
  pthread_once(&names_once, build_names);
  *row = -1;
  if (nlen > PREFIX_LEN && !strncmp(name, PREFIX, PREFIX_LEN)) {
    for (int i = 0; i < NSC_CFG_COUNT; i++)
      if (strlen(env_names[i]) == nlen && !strncmp(env_names[i], name, nlen)) { *row = i; return NSC_NAME_OURS; }
  } else if (nlen == PREFIX_LEN && !strncmp(name, PREFIX, nlen)) {
    return NSC_NAME_UNKNOWN;
  }
  /* The rest of a name spelt with one of our prefixes, in any case. */
  static const char *const ours[] = {"NCCLSHIM_", "NCCL_SHIM_", "NCCLSHIM"};
  for (size_t k = 0; k < sizeof ours / sizeof *ours; k++)
    if (starts_nocase(name, nlen, ours[k])) {
      size_t p = strlen(ours[k]);
      size_t rlen = nlen - p;
      *row = nearest_row(name + p, rlen, rlen > 8 ? 2 : 1);
      return strncmp(name, PREFIX, PREFIX_LEN) ? NSC_NAME_MISSPELT : NSC_NAME_UNKNOWN;
    }
  /* Anything else is ours only one edit away from a row's full name; NCCL's
   * NCCL_* variables never are (NCCL_SHM_* are two edits from ours). */
  if (starts_nocase(name, nlen, "NCCL_")) return NSC_NAME_OTHER;
  for (int i = 0; i < NSC_CFG_COUNT; i++)
    if (distance(name, nlen, env_names[i], strlen(env_names[i]), 1) <= 1) {
      *row = i;
      return NSC_NAME_MISSPELT;
    }
  return NSC_NAME_OTHER;
}

/* The message for a name nsc_config_name did not find among the rows. */
static void name_message(const char *name, size_t nlen, int kind, int row, char *err, size_t errlen) {
  if (!err || !errlen) return;
  char mean[96] = "";
  if (row >= 0) snprintf(mean, sizeof mean, ": did you mean %s?", env_names[row]);
  int shown = (int)(nlen > 80 ? 80 : nlen);
  if (kind == NSC_NAME_UNKNOWN)
    snprintf(err, errlen, "unknown variable %.*s%s (every setting: docs/environment.md, or NCCLSHIM_DUMP_CONFIG=1)",
             shown, name, mean);
  else
    snprintf(err, errlen,
             "misspelt variable %.*s%s (the shim reads NCCLSHIM_* names in upper case only; every setting: "
             "docs/environment.md, or NCCLSHIM_DUMP_CONFIG=1)",
             shown, name, mean);
}

/* INT and SIZE rows may name special values in choices ("0", "auto", or
 * "0|auto"): "0" allows 0 (off) below min; "auto" stores NSC_CFG_AUTO (-1):
 * the shim decides (its value prints as "auto"). */
static int zero_is_off(const row_t *r) { return enum_index(r->pub.choices, "0") >= 0; }
static int has_auto(const row_t *r) { return enum_index(r->pub.choices, "auto") >= 0; }

static void int_range(const row_t *r, char *buf, size_t len) {
  snprintf(buf, len, "%s%s[%lld, %lld]", has_auto(r) ? "auto, " : "", zero_is_off(r) ? "0 (off) or " : "", r->pub.lo,
           r->pub.hi);
}

static int set_value(nsc_config *cfg, int i, const char *v, char *err, size_t errlen) {
  const row_t *r = &rows[i];
  void *dst = field_ptr(cfg, i);
  if (!*v) return fail(err, errlen, i, v, "empty value; unset it for the default (%s)", r->pub.def);
  switch (r->type) {
  case T_BOOL:
    if (parse_bool(v, (int *)dst)) return fail(err, errlen, i, v, "expected 0 or 1");
    return 0;
  case T_INT:
  case T_SIZE: {
    long long x;
    const char *e = NULL;
    if (has_auto(r) && !strcasecmp(v, "auto")) {
      *(long long *)dst = NSC_CFG_AUTO;
      return 0;
    }
    int rc = r->type == T_SIZE ? parse_size(v, &x) : parse_ll(v, &x, &e);
    if (rc == 0 && r->type == T_INT && *e) rc = -1;
    const char *what = r->type == T_SIZE ? "an integer number of bytes (suffix K, M, G or T allowed)"
                                         : "an integer";
    char range[96];
    int_range(r, range, sizeof range);
    if (rc == -2) return fail(err, errlen, i, v, "out of range; expected %s in %s", what, range);
    if (rc) return fail(err, errlen, i, v, "expected %s in %s", what, range);
    if ((x < r->pub.lo || x > r->pub.hi) && !(x == 0 && zero_is_off(r)))
      return fail(err, errlen, i, v, "out of range; expected %s in %s", what, range);
    *(long long *)dst = x;
    return 0;
  }
  case T_FLOAT: {
    char *e;
    errno = 0;
    double x = strtod(v, &e);
    if (e == v || *e || isspace((unsigned char)v[0]) || errno == ERANGE || !isfinite(x) ||
        x <= r->pub.flo || x > r->pub.fhi)
      return fail(err, errlen, i, v, "expected a finite number > %g and <= %g", r->pub.flo, r->pub.fhi);
    *(double *)dst = x;
    return 0;
  }
  case T_ENUM: {
    int k = enum_index(r->pub.choices, v);
    if (k < 0) {
      /* "did you mean" every choice one edit away */
      char mean[128] = "";
      for (const char *p = r->pub.choices; *p;) {
        const char *bar = strchr(p, '|');
        size_t len = bar ? (size_t)(bar - p) : strlen(p), m = strlen(mean);
        if (distance(v, strlen(v), p, len, 1) <= 1 && m + len + 8 < sizeof mean)
          snprintf(mean + m, sizeof mean - m, "%s%.*s", m ? " or " : "", (int)len, p);
        if (!bar) break;
        p = bar + 1;
      }
      if (mean[0]) return fail(err, errlen, i, v, "expected one of %s (did you mean %s?)", r->pub.choices, mean);
      return fail(err, errlen, i, v, "expected one of %s", r->pub.choices);
    }
    *(int *)dst = k;
    return 0;
  }
  case T_STR: {
    size_t n = strlen(v);
    if (n > (size_t)r->pub.hi) return fail(err, errlen, i, v, "longer than %lld characters", r->pub.hi);
    memcpy(dst, v, n + 1);
    return 0;
  }
  }
  return fail(err, errlen, i, v, "internal: unknown type");
}

static void set_defaults(nsc_config *cfg) {
  memset(cfg, 0, sizeof *cfg);
  for (int i = 0; i < NSC_CFG_COUNT; i++)
    if (*rows[i].pub.def) (void)set_value(cfg, i, rows[i].pub.def, NULL, 0);
}

/* Rows that constrain each other: int4 packs two codes per byte within a
 * run, and a GPU kernel writes each byte from one wire block, so its blocks
 * hold an even number of elements. */
static int cross_check(const nsc_config *cfg, char *err, size_t errlen) {
  if (cfg->compress == NSC_COMPRESS_INT4 && cfg->block_elems % 2) {
    char v[32];
    snprintf(v, sizeof v, "%lld", cfg->block_elems);
    return fail(err, errlen, NSC_CFGI_block_elems, v,
                "an even number from 16 to 4096 with NCCLSHIM_COMPRESS=int4 (two codes per byte)");
  }
  return 0;
}

/* The one pass over an environment both entry points make: each entry that
 * is ours is set into cfg, or reported (report(ctx, message)); returns the
 * number of problems, stopping at the first when report is NULL (err then
 * holds its message). */
static int scan(char *const *envp, nsc_config *cfg, char *err, size_t errlen,
                void (*report)(void *, const char *), void *ctx) {
  int problems = 0;
  char msg[768];
  for (char *const *e = envp; e && *e; e++) {
    const char *kv = *e;
    const char *eq = strchr(kv, '=');
    size_t nlen = eq ? (size_t)(eq - kv) : strlen(kv);
    const char *val = eq ? eq + 1 : "";
    int row, kind = nsc_config_name(kv, nlen, &row);
    if (kind == NSC_NAME_OTHER) continue;
    int bad;
    if (kind == NSC_NAME_OURS) {
      bad = set_value(cfg, row, val, msg, sizeof msg) != 0;
      if (!bad) cfg->from_env[row] = 1;
    } else {
      name_message(kv, nlen, kind, row, msg, sizeof msg);
      bad = 1;
    }
    if (!bad) continue;
    problems++;
    if (!report) {
      if (err && errlen) snprintf(err, errlen, "%s", msg);
      return problems;
    }
    report(ctx, msg);
  }
  if (cross_check(cfg, msg, sizeof msg)) {
    problems++;
    if (report) report(ctx, msg);
    else if (err && errlen) snprintf(err, errlen, "%s", msg);
  }
  return problems;
}

int nsc_config_parse(char *const *envp, nsc_config *cfg, char *err, size_t errlen) {
  pthread_once(&names_once, build_names);
  set_defaults(cfg);
  if (err && errlen) err[0] = '\0';
  if (!envp) return 0;
  nsc_config tmp = *cfg;
  if (scan(envp, &tmp, err, errlen, NULL, NULL)) return -1;
  *cfg = tmp;
  return 0;
}

int nsc_config_check(char *const *envp, void (*report)(void *ctx, const char *msg), void *ctx) {
  pthread_once(&names_once, build_names);
  nsc_config tmp;
  set_defaults(&tmp);
  return scan(envp, &tmp, NULL, 0, report, ctx);
}

void nsc_config_value_str(const nsc_config *cfg, int i, char *buf, size_t len) {
  const row_t *r = &rows[i];
  const void *p = cfield_ptr(cfg, i);
  switch (r->type) {
  case T_BOOL: snprintf(buf, len, "%d", *(const int *)p); break;
  case T_INT:
  case T_SIZE:
    if (*(const long long *)p == NSC_CFG_AUTO && has_auto(r)) snprintf(buf, len, "auto");
    else snprintf(buf, len, "%lld", *(const long long *)p);
    break;
  case T_FLOAT: snprintf(buf, len, "%.17g", *(const double *)p); break;
  case T_ENUM: {
    int k = *(const int *)p;
    const char *s = r->pub.choices;
    for (int j = 0; j < k && s; j++) { s = strchr(s, '|'); if (s) s++; }
    const char *bar = s ? strchr(s, '|') : NULL;
    snprintf(buf, len, "%.*s", s ? (int)(bar ? bar - s : (long)strlen(s)) : 1, s ? s : "?");
    break;
  }
  case T_STR: snprintf(buf, len, "%s", (const char *)p); break;
  }
}

void nsc_config_dump(const nsc_config *cfg, FILE *out, const char *prefix) {
  pthread_once(&names_once, build_names);
  char v[NSC_CFG_STR_MAX];
  for (int i = 0; i < NSC_CFG_COUNT; i++) {
    nsc_config_value_str(cfg, i, v, sizeof v);
    fprintf(out, "%s%-28s = %-12s (%s)\n", prefix, env_names[i], v, cfg->from_env[i] ? "environment" : "default");
  }
}

int nsc_config_flag(char *const *envp, int i) {
  pthread_once(&names_once, build_names);
  if (i < 0 || i >= NSC_CFG_COUNT || rows[i].type != T_BOOL) return 0;
  size_t n = strlen(env_names[i]);
  int on = 0;
  for (char *const *e = envp; e && *e; e++)
    if (!strncmp(*e, env_names[i], n) && (*e)[n] == '=' && parse_bool(*e + n + 1, &on)) on = 0;
  return on;
}

void nsc_config_dump_env(char *const *envp, FILE *out, const char *prefix) {
  pthread_once(&names_once, build_names);
  nsc_config cfg;
  set_defaults(&cfg);
  char v[NSC_CFG_STR_MAX], msg[768];
  for (int i = 0; i < NSC_CFG_COUNT; i++) {
    const char *given = NULL;
    size_t n = strlen(env_names[i]);
    for (char *const *e = envp; e && *e; e++)
      if (!strncmp(*e, env_names[i], n) && (*e)[n] == '=') given = *e + n + 1;
    if (given && set_value(&cfg, i, given, msg, sizeof msg)) {
      fprintf(out, "%s%-28s   INVALID: %s\n", prefix, env_names[i], msg);
      continue;
    }
    nsc_config_value_str(&cfg, i, v, sizeof v);
    fprintf(out, "%s%-28s = %-12s (%s)\n", prefix, env_names[i], v, given ? "environment" : "default");
  }
  for (char *const *e = envp; e && *e; e++) {
    const char *eq = strchr(*e, '=');
    size_t nlen = eq ? (size_t)(eq - *e) : strlen(*e);
    int row, kind = nsc_config_name(*e, nlen, &row);
    if (kind != NSC_NAME_UNKNOWN && kind != NSC_NAME_MISSPELT) continue;
    name_message(*e, nlen, kind, row, msg, sizeof msg);
    fprintf(out, "%s%s\n", prefix, msg);
  }
  if (cross_check(&cfg, msg, sizeof msg)) fprintf(out, "%s%s\n", prefix, msg);
}

int64_t nsc_config_row_hash(const nsc_config *cfg, int i) {
  if (i < 0 || i >= NSC_CFG_COUNT || !rows[i].pub.hashed) return 0;
  char v[NSC_CFG_STR_MAX];
  nsc_config_value_str(cfg, i, v, sizeof v);
  uint64_t h = 1469598103934665603ull; /* FNV-1a */
  for (const char *p = rows[i].field; *p; p++) h = (h ^ (unsigned char)*p) * 1099511628211ull;
  for (const char *p = v; *p; p++) h = (h ^ (unsigned char)*p) * 1099511628211ull;
  return (int64_t)(h >> 2); /* 62 bits: negation cannot overflow */
}

void nsc_config_markdown(FILE *out) {
  pthread_once(&names_once, build_names);
  fprintf(out, "| variable | type | default | allowed | meaning |\n|---|---|---|---|---|\n");
  for (int i = 0; i < NSC_CFG_COUNT; i++) {
    const row_t *r = &rows[i];
    char allowed[128];
    switch (r->type) {
    case T_BOOL: snprintf(allowed, sizeof allowed, "0, 1"); break;
    case T_INT:
    case T_SIZE:
      snprintf(allowed, sizeof allowed, "%s%s%lld .. %lld%s", has_auto(r) ? "auto, " : "",
               zero_is_off(r) ? "0 (off), or " : "", r->pub.lo, r->pub.hi,
               r->type == T_SIZE ? " bytes (K/M/G/T suffixes)" : "");
      break;
    case T_FLOAT: snprintf(allowed, sizeof allowed, "> %g, <= %g", r->pub.flo, r->pub.fhi); break;
    case T_ENUM: snprintf(allowed, sizeof allowed, "%s", r->pub.choices); break;
    case T_STR: snprintf(allowed, sizeof allowed, "path, <= %lld chars", r->pub.hi); break;
    }
    for (char *c = allowed; *c; c++) if (*c == '|') *c = '/';
    fprintf(out, "| `%s` | %s | `%s` | %s | %s |\n", env_names[i], r->pub.type,
            *r->pub.def ? r->pub.def : "(none)", allowed, r->pub.desc);
  }
}
