/* test_config.c — the configuration parser (shim/config/config.c) as a pure function
 * of an injected environment: defaults, every kind of bad value, unknown
 * names, and the one-line messages that name variable, value and range.
 * Also the environment table generator (docs/environment.md) and the per-setting hashes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <math.h>
#include <string.h>

#include <cmocka.h>

#include "config.h"

static int parse1(const char *kv, nsc_config *cfg, char *err, size_t len) {
  char *env[] = {(char *)"PATH=/bin", (char *)kv, NULL};
  return nsc_config_parse(env, cfg, err, len);
}

static void defaults(void **state) {
  (void)state;
  nsc_config cfg;
  char err[512];
  char *env[] = {(char *)"HOME=/root", (char *)"NCCL_DEBUG=INFO", NULL};
  assert_int_equal(nsc_config_parse(env, &cfg, err, sizeof err), 0);
  assert_int_equal(cfg.disable, 0);
  assert_int_equal(cfg.compress, NSC_COMPRESS_FP16);
  assert_int_equal(cfg.min_bytes, 65536);
  assert_true(cfg.prescale == 1.0);
  assert_int_equal(cfg.accum_steps, 1);
  assert_int_equal(cfg.fuse_bytes, 64ll << 20);
  assert_int_equal(cfg.log, NSC_LOG_SUMMARY);
  assert_string_equal(cfg.log_file, "");
  assert_int_equal(cfg.from_env[NSC_CFGI_compress], 0);
  assert_int_equal(nsc_config_parse(NULL, &cfg, err, sizeof err), 0);
}

static void good_values(void **state) {
  (void)state;
  nsc_config cfg;
  char err[512];
  assert_int_equal(parse1("NCCLSHIM_COMPRESS=bf16", &cfg, err, sizeof err), 0);
  assert_int_equal(cfg.compress, NSC_COMPRESS_BF16);
  assert_int_equal(cfg.from_env[NSC_CFGI_compress], 1);
  assert_int_equal(parse1("NCCLSHIM_COMPRESS=OFF", &cfg, err, sizeof err), 0);
  assert_int_equal(cfg.compress, NSC_COMPRESS_OFF);
  assert_int_equal(parse1("NCCLSHIM_MIN_BYTES=4K", &cfg, err, sizeof err), 0);
  assert_int_equal(cfg.min_bytes, 4096);
  assert_int_equal(parse1("NCCLSHIM_MIN_BYTES=2MiB", &cfg, err, sizeof err), 0);
  assert_int_equal(cfg.min_bytes, 2 << 20);
  assert_int_equal(parse1("NCCLSHIM_FUSE_BYTES=0", &cfg, err, sizeof err), 0);
  assert_int_equal(cfg.fuse_bytes, 0);
  assert_int_equal(parse1("NCCLSHIM_CHUNK_BYTES=0", &cfg, err, sizeof err), 0); /* off */
  assert_int_equal(cfg.chunk_bytes, 0);
  assert_int_equal(parse1("NCCLSHIM_CHUNK_BYTES=64K", &cfg, err, sizeof err), 0); /* the smallest chunk */
  assert_int_equal(cfg.chunk_bytes, 65536);
  assert_int_equal(parse1("NCCLSHIM_PRESCALE=0.5", &cfg, err, sizeof err), 0);
  assert_true(cfg.prescale == 0.5);
  assert_int_equal(parse1("NCCLSHIM_PRESCALE=2e-38", &cfg, err, sizeof err), 0);
  assert_true(isfinite((float)(1.0 / cfg.prescale))); /* the smallest accepted F keeps 1/F finite in fp32 */
  assert_int_equal(parse1("NCCLSHIM_DISABLE=true", &cfg, err, sizeof err), 0);
  assert_int_equal(cfg.disable, 1);
  assert_int_equal(parse1("NCCLSHIM_ACCUM_STEPS=65536", &cfg, err, sizeof err), 0);
  assert_int_equal(cfg.accum_steps, 65536);
  assert_int_equal(parse1("NCCLSHIM_LOG_FILE=/tmp/x.%r.%p", &cfg, err, sizeof err), 0);
  assert_string_equal(cfg.log_file, "/tmp/x.%r.%p");
  assert_int_equal(parse1("NCCLSHIM_COMPRESS=int8", &cfg, err, sizeof err), 0);
  assert_int_equal(cfg.compress, NSC_COMPRESS_INT8);
  assert_int_equal(parse1("NCCLSHIM_ALGO=twophase", &cfg, err, sizeof err), 0);
  assert_int_equal(cfg.algo, NSC_ALGO_TWOPHASE);
  assert_int_equal(parse1("NCCLSHIM_BLOCK_ELEMS=4096", &cfg, err, sizeof err), 0);
  assert_int_equal(cfg.block_elems, 4096);
  assert_int_equal(parse1("NCCLSHIM_LOG=calls", &cfg, err, sizeof err), 0);
  assert_int_equal(cfg.log, NSC_LOG_CALLS);
}

/* Each bad value: parse fails, the message names the variable and the value,
 * and the configuration is left at its defaults. */
static void expect_bad(const char *kv, const char *must_contain) {
  nsc_config cfg;
  char err[512];
  assert_int_equal(parse1(kv, &cfg, err, sizeof err), -1);
  char name[64];
  snprintf(name, sizeof name, "%.*s", (int)(strchr(kv, '=') - kv), kv);
  if (!strstr(err, name) || !strstr(err, must_contain)) fail_msg("message for %s: %s", kv, err);
  assert_int_equal(cfg.compress, NSC_COMPRESS_FP16);
  assert_int_equal(cfg.min_bytes, 65536);
  assert_int_equal(cfg.accum_steps, 1);
  assert_null(memchr(err, '\n', strlen(err)));
}

static void bad_values(void **state) {
  (void)state;
  /* empty */
  expect_bad("NCCLSHIM_COMPRESS=", "empty");
  expect_bad("NCCLSHIM_LOG_FILE=", "empty");
  expect_bad("NCCLSHIM_MIN_BYTES=", "empty");
  /* garbage */
  expect_bad("NCCLSHIM_COMPRESS=fp4", "off|fp16|bf16|int8|fp8|fp16s|int4");
  expect_bad("NCCLSHIM_ALGO=tree", "auto|ring|twophase|hier");
  expect_bad("NCCLSHIM_BLOCK_ELEMS=8", "16");
  { /* rows that constrain each other: int4's wire blocks hold an even number of elements */
    nsc_config cfg;
    char err[512];
    char *odd[] = {"NCCLSHIM_COMPRESS=int4", "NCCLSHIM_BLOCK_ELEMS=17", NULL};
    assert_int_equal(nsc_config_parse(odd, &cfg, err, sizeof err), -1);
    if (!strstr(err, "NCCLSHIM_BLOCK_ELEMS='17'") || !strstr(err, "even") || !strstr(err, "int4"))
      fail_msg("int4 with an odd block: %s", err);
    assert_int_equal(cfg.compress, NSC_COMPRESS_FP16); /* the defaults, nothing half-parsed */
    char *even[] = {"NCCLSHIM_COMPRESS=int4", "NCCLSHIM_BLOCK_ELEMS=18", NULL};
    assert_int_equal(nsc_config_parse(even, &cfg, err, sizeof err), 0);
    assert_int_equal(cfg.compress, NSC_COMPRESS_INT4);
    char *other[] = {"NCCLSHIM_COMPRESS=int8", "NCCLSHIM_BLOCK_ELEMS=17", NULL};
    assert_int_equal(nsc_config_parse(other, &cfg, err, sizeof err), 0);
  }
  expect_bad("NCCLSHIM_MIN_BYTES=lots", "[0, ");
  expect_bad("NCCLSHIM_DISABLE=maybe", "0 or 1");
  expect_bad("NCCLSHIM_PRESCALE=abc", "finite");
  expect_bad("NCCLSHIM_LOG=verbose", "off|summary|calls");
  /* negative */
  expect_bad("NCCLSHIM_MIN_BYTES=-1", "[0, ");
  expect_bad("NCCLSHIM_ACCUM_STEPS=-4", "[1, 65536]");
  expect_bad("NCCLSHIM_ACCUM_STEPS=0", "[1, 65536]");
  /* 1-3 used to turn pipelining off silently (0 elements a chunk), 7 to cut
   * an 8 MiB call into 2 million chunks: below 64 KiB only 0 (off) is allowed. */
  expect_bad("NCCLSHIM_CHUNK_BYTES=1", "0 (off) or [65536, 1099511627776]");
  expect_bad("NCCLSHIM_CHUNK_BYTES=3", "0 (off) or [65536, ");
  expect_bad("NCCLSHIM_CHUNK_BYTES=7", "0 (off) or [65536, ");
  expect_bad("NCCLSHIM_CHUNK_BYTES=65535", "0 (off) or [65536, ");
  expect_bad("NCCLSHIM_CHUNK_BYTES=-1", "0 (off) or [65536, ");
  expect_bad("NCCLSHIM_PRESCALE=-2", "> 1e-38");
  expect_bad("NCCLSHIM_PRESCALE=0", "> 1e-38");
  /* 1/F must be finite in fp32 (else every exact zero becomes 0 * Inf = NaN) */
  expect_bad("NCCLSHIM_PRESCALE=1e-40", "> 1e-38");
  expect_bad("NCCLSHIM_PRESCALE=1e-38", "> 1e-38");
  /* overflow */
  expect_bad("NCCLSHIM_MIN_BYTES=99999999999999999999999", "out of range");
  expect_bad("NCCLSHIM_MIN_BYTES=9000000000000000000K", "out of range");
  expect_bad("NCCLSHIM_ACCUM_STEPS=99999999", "out of range");
  expect_bad("NCCLSHIM_PRESCALE=1e400", "finite");
  expect_bad("NCCLSHIM_PRESCALE=inf", "finite");
  expect_bad("NCCLSHIM_PRESCALE=nan", "finite");
  /* trailing junk and spaces */
  expect_bad("NCCLSHIM_MIN_BYTES=64KB2", "[0, ");
  expect_bad("NCCLSHIM_MIN_BYTES=64 ", "[0, ");
  expect_bad("NCCLSHIM_MIN_BYTES= 64", "[0, ");
  expect_bad("NCCLSHIM_ACCUM_STEPS=4x", "[1, 65536]");
  expect_bad("NCCLSHIM_ACCUM_STEPS=4K", "[1, 65536]");
  expect_bad("NCCLSHIM_PRESCALE=2.0x", "finite");
  expect_bad("NCCLSHIM_COMPRESS=fp16 ", "off|fp16|bf16|int8|fp8|fp16s|int4");
}

static void very_long_value(void **state) {
  (void)state;
  static char kv[70000];
  nsc_config cfg;
  char err[512];
  int n = snprintf(kv, sizeof kv, "NCCLSHIM_LOG_FILE=");
  memset(kv + n, 'a', sizeof kv - n - 1);
  kv[sizeof kv - 1] = '\0';
  assert_int_equal(parse1(kv, &cfg, err, sizeof err), -1);
  assert_non_null(strstr(err, "NCCLSHIM_LOG_FILE"));
  assert_non_null(strstr(err, "chars)")); /* value shortened in the message */
  assert_true(strlen(err) < 300);
  memcpy(kv, "NCCLSHIM_COMPRESS=", 18);
  assert_int_equal(parse1(kv, &cfg, err, sizeof err), -1);
  assert_true(strlen(err) < 300);
}

static void unknown_name(void **state) {
  (void)state;
  nsc_config cfg;
  char err[512];
  assert_int_equal(parse1("NCCLSHIM_COMPRES=fp16", &cfg, err, sizeof err), -1);
  assert_non_null(strstr(err, "unknown variable NCCLSHIM_COMPRES"));
  assert_int_equal(parse1("NCCLSHIM_=1", &cfg, err, sizeof err), -1);
  assert_int_equal(parse1("NCCLSHIM_NOEQUALS", &cfg, err, sizeof err), -1);
  /* Other prefixes are not ours. */
  assert_int_equal(parse1("NCCL_SHIM_X=1", &cfg, err, sizeof err), 0);
  assert_int_equal(parse1("ncclshim_compress=bf16", &cfg, err, sizeof err), 0);
  assert_int_equal(cfg.compress, NSC_COMPRESS_FP16);
}

static void no_partial_apply(void **state) {
  (void)state;
  nsc_config cfg;
  char err[512];
  char *env[] = {(char *)"NCCLSHIM_COMPRESS=bf16", (char *)"NCCLSHIM_MIN_BYTES=1", (char *)"NCCLSHIM_ACCUM_STEPS=x", NULL};
  assert_int_equal(nsc_config_parse(env, &cfg, err, sizeof err), -1);
  assert_int_equal(cfg.compress, NSC_COMPRESS_FP16);
  assert_int_equal(cfg.min_bytes, 65536);
}

static void hashes(void **state) {
  (void)state;
  nsc_config a, b;
  char err[512];
  assert_int_equal(parse1("NCCLSHIM_COMPRESS=fp16", &a, err, sizeof err), 0);
  assert_int_equal(parse1("NCCLSHIM_COMPRESS=bf16", &b, err, sizeof err), 0);
  int differing = 0;
  for (int i = 0; i < NSC_CFG_COUNT; i++) {
    int64_t ha = nsc_config_row_hash(&a, i), hb = nsc_config_row_hash(&b, i);
    assert_true(ha >= 0 && ha < (1ll << 62));
    if (ha != hb) {
      differing++;
      assert_int_equal(i, NSC_CFGI_compress);
    }
  }
  assert_int_equal(differing, 1);
  /* Settings that do not change the collectives are not hashed. */
  assert_int_equal(nsc_config_row_hash(&a, NSC_CFGI_log), 0);
  assert_int_equal(nsc_config_row_hash(&a, NSC_CFGI_disable), 0);
}

static void dump_and_markdown(void **state) {
  (void)state;
  nsc_config cfg;
  char err[512], *buf = NULL;
  size_t len = 0;
  assert_int_equal(parse1("NCCLSHIM_MIN_BYTES=1M", &cfg, err, sizeof err), 0);
  FILE *f = open_memstream(&buf, &len);
  nsc_config_dump(&cfg, f, "> ");
  fclose(f);
  assert_non_null(strstr(buf, "NCCLSHIM_MIN_BYTES"));
  assert_non_null(strstr(buf, "1048576"));
  assert_non_null(strstr(buf, "(environment)"));
  int lines = 0;
  for (char *p = buf; *p; p++) lines += *p == '\n';
  assert_int_equal(lines, NSC_CFG_COUNT);
  free(buf);
  f = open_memstream(&buf, &len);
  nsc_config_markdown(f);
  fclose(f);
  lines = 0;
  for (char *p = buf; *p; p++) lines += *p == '\n';
  assert_int_equal(lines, NSC_CFG_COUNT + 2);
  assert_non_null(strstr(buf, "| `NCCLSHIM_COMPRESS` | ENUM | `fp16` | off/fp16/bf16/int8/fp8/fp16s/int4 |"));
  free(buf);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(defaults),       cmocka_unit_test(good_values),      cmocka_unit_test(bad_values),
      cmocka_unit_test(very_long_value), cmocka_unit_test(unknown_name),    cmocka_unit_test(no_partial_apply),
      cmocka_unit_test(hashes),         cmocka_unit_test(dump_and_markdown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
