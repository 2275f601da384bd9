/* config.c — parse, dump and hash the settings declared in config.def.
 *
 * Pure functions over an injected environment array: no getenv, no printing
 * to stderr, no allocation. A value is accepted only when the whole string
 * parses and lies in range; anything else yields one message naming the
 * variable, the value (shortened if long) and what is allowed, and leaves the
 * configuration at its defaults so nothing half-parsed is ever applied. */
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
    if (k < 0) return fail(err, errlen, i, v, "expected one of %s", r->pub.choices);
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

int nsc_config_parse(char *const *envp, nsc_config *cfg, char *err, size_t errlen) {
  pthread_once(&names_once, build_names);
  set_defaults(cfg);
  if (err && errlen) err[0] = '\0';
  if (!envp) return 0;
  nsc_config tmp = *cfg;
  for (char *const *e = envp; *e; e++) {
    const char *kv = *e;
    if (strncmp(kv, PREFIX, PREFIX_LEN) != 0) continue;
    const char *eq = strchr(kv, '=');
    size_t nlen = eq ? (size_t)(eq - kv) : strlen(kv);
    const char *val = eq ? eq + 1 : "";
    int found = -1;
    for (int i = 0; i < NSC_CFG_COUNT; i++)
      if (strlen(env_names[i]) == nlen && !strncmp(env_names[i], kv, nlen)) { found = i; break; }
    if (found < 0) {
      if (err && errlen)
        snprintf(err, errlen, "unknown variable %.*s (misspelt? NCCLSHIM_DUMP_CONFIG=1 or docs/environment.md lists the known ones)",
                 (int)(nlen > 80 ? 80 : nlen), kv);
      return -1;
    }
    if (set_value(&tmp, found, val, err, errlen)) return -1;
    tmp.from_env[found] = 1;
  }
  /* Rows that constrain each other: int4 packs two codes per byte within a
   * run, and a GPU kernel writes each byte from one wire block, so its blocks
   * hold an even number of elements. */
  if (tmp.compress == NSC_COMPRESS_INT4 && tmp.block_elems % 2) {
    char v[32];
    snprintf(v, sizeof v, "%lld", tmp.block_elems);
    fail(err, errlen, NSC_CFGI_block_elems, v, "an even number from 16 to 4096 with NCCLSHIM_COMPRESS=int4 (two codes per byte)");
    return -1;
  }
  *cfg = tmp;
  return 0;
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
