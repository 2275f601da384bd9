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
  assert_non_null(strstr(err, "unknown variable NCCLSHIM_COMPRES: did you mean NCCLSHIM_COMPRESS?"));
  assert_non_null(strstr(err, "NCCLSHIM_DUMP_CONFIG=1"));
  assert_int_equal(parse1("NCCLSHIM_LOGFILE=x", &cfg, err, sizeof err), -1);
  assert_non_null(strstr(err, "did you mean NCCLSHIM_LOG_FILE?"));
  assert_int_equal(parse1("NCCLSHIM_CHECK_CONFIG=0", &cfg, err, sizeof err), -1);
  assert_null(strstr(err, "did you mean")); /* nothing near: no guess */
  assert_int_equal(parse1("NCCLSHIM_=1", &cfg, err, sizeof err), -1);
  assert_int_equal(parse1("NCCLSHIM_NOEQUALS", &cfg, err, sizeof err), -1);
}

/* Our names misspelt are refused like unknown ones, with the row they meant;
 * NCCL's own names and everything else are never taken for ours. */
static void misspelt_names(void **state) {
  (void)state;
  nsc_config cfg;
  char err[512];
  static const char *const cases[][2] = {
      {"NCCL_SHIM_COMPRESS=int8", "NCCLSHIM_COMPRESS"}, {"ncclshim_compress=bf16", "NCCLSHIM_COMPRESS"},
      {"Ncclshim_Log=calls", "NCCLSHIM_LOG"},          {"NCCLSHM_COMPRESS=bf16", "NCCLSHIM_COMPRESS"},
      {"NCLSHIM_MIN_BYTES=1", "NCCLSHIM_MIN_BYTES"},    {"NCCLSHIMCOMPRESS=x", "NCCLSHIM_COMPRESS"},
      {"NCCLSIHM_DISABLE=1", "NCCLSHIM_DISABLE"},       {"nccl_shim_accum_steps=4", "NCCLSHIM_ACCUM_STEPS"},
  };
  for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
    assert_int_equal(parse1(cases[k][0], &cfg, err, sizeof err), -1);
    assert_non_null(strstr(err, "misspelt variable"));
    char want[96];
    snprintf(want, sizeof want, "did you mean %s?", cases[k][1]);
    if (!strstr(err, want)) fail_msg("%s: %s", cases[k][0], err);
    assert_int_equal(cfg.compress, NSC_COMPRESS_FP16); /* nothing applied */
  }
  static const char *const others[] = {
      "NCCL_SHM_DISABLE=1", "NCCL_SHM_USE_CUDA_MEMCPY=1", "NCCL_DEBUG=INFO", "NCCL_IB_HCA=mlx5", "NCCL_P2P_DISABLE=1",
      "NCCL_SOCKET_IFNAME=eth0", "NCCL_ALGO=Ring", "NCCL_PROTO=Simple", "NCCL_BUFFSIZE=4194304", "NCCL_NET=Socket",
      "NCCL_COLLNET_ENABLE=0", "NCCL_LAUNCH_MODE=GROUP", "NCCL_HOSTID=a", "NCCL_SHARP_DISABLE=1", "PATH=/bin",
      "LD_PRELOAD=x.so", "SHIM_COMPRESS=1", "NCCL=1", "HOSTNCCL_LINK_GBPS=1", "TORCH_NCCL_ASYNC_ERROR_HANDLING=1",
  };
  for (size_t k = 0; k < sizeof others / sizeof *others; k++)
    if (parse1(others[k], &cfg, err, sizeof err)) fail_msg("%s taken for ours: %s", others[k], err);
  /* Every row, in lower case and spelt NCCL_SHIM_*: refused, naming itself. */
  for (int i = 0; i < NSC_CFG_COUNT; i++) {
    const char *name = nsc_config_row_at(i)->env;
    char kv[128], want[96];
    size_t n = strlen(name);
    for (size_t c = 0; c < n; c++) kv[c] = (char)(name[c] >= 'A' && name[c] <= 'Z' ? name[c] + 32 : name[c]);
    snprintf(kv + n, sizeof kv - n, "=1");
    snprintf(want, sizeof want, "did you mean %s?", name);
    assert_int_equal(parse1(kv, &cfg, err, sizeof err), -1);
    if (!strstr(err, want)) fail_msg("%s: %s", kv, err);
    snprintf(kv, sizeof kv, "NCCL_SHIM_%s=1", name + 9);
    assert_int_equal(parse1(kv, &cfg, err, sizeof err), -1);
    if (!strstr(err, want)) fail_msg("%s: %s", kv, err);
  }
}

/* nsc_config_check's reporter: one-line messages, counted. */
static void count(void *n, const char *msg) {
  assert_true(msg[0] && !strchr(msg, '\n'));
  (*(int *)n)++;
}

/* A value one edit from a choice names it; every problem is counted. */
static void check_all(void **state) {
  (void)state;
  nsc_config cfg;
  char err[512];
  assert_int_equal(parse1("NCCLSHIM_COMPRESS=fp61", &cfg, err, sizeof err), -1);
  assert_non_null(strstr(err, "(did you mean fp16?)"));
  assert_int_equal(parse1("NCCLSHIM_COMPRESS=int5", &cfg, err, sizeof err), -1);
  assert_non_null(strstr(err, "(did you mean int8 or int4?)"));
  assert_int_equal(parse1("NCCLSHIM_COMPRESS=zstd", &cfg, err, sizeof err), -1);
  assert_null(strstr(err, "did you mean"));
  char *env[] = {(char *)"NCCLSHIM_COMPRESS=int5", (char *)"NCCLSHIM_FOO=1", (char *)"NCCL_SHIM_LOG=calls",
                 (char *)"NCCLSHIM_MIN_BYTES=4K", (char *)"NCCL_DEBUG=INFO", NULL};
  assert_int_equal(nsc_config_check(env, NULL, NULL), 1); /* without a reporter: stops at the first */
  int n = 0;
  assert_int_equal(nsc_config_check(env, count, &n), 3);
  assert_int_equal(n, 3);
  char *good[] = {(char *)"NCCLSHIM_COMPRESS=int8", (char *)"NCCL_DEBUG=INFO", NULL};
  assert_int_equal(nsc_config_check(good, count, &n), 0);
  assert_int_equal(n, 3);
  /* DISABLE and DUMP_CONFIG are read whatever else is wrong */
  char *flags[] = {(char *)"NCCLSHIM_FOO=1", (char *)"NCCLSHIM_DUMP_CONFIG=yes", (char *)"NCCLSHIM_DISABLE=x", NULL};
  assert_int_equal(nsc_config_flag(flags, NSC_CFGI_dump_config), 1);
  assert_int_equal(nsc_config_flag(flags, NSC_CFGI_disable), 0);
  assert_int_equal(nsc_config_flag(flags, NSC_CFGI_compress), 0); /* not a BOOL row */
  /* The dump of a bad environment shows every row and every problem. */
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  nsc_config_dump_env(env, f, "> ");
  fclose(f);
  int lines = 0;
  for (char *p = buf; *p; p++) lines += *p == '\n';
  assert_int_equal(lines, NSC_CFG_COUNT + 2);
  assert_non_null(strstr(buf, "> NCCLSHIM_COMPRESS              INVALID: NCCLSHIM_COMPRESS='int5' is invalid"));
  assert_non_null(strstr(buf, "> NCCLSHIM_MIN_BYTES           = 4096         (environment)"));
  assert_non_null(strstr(buf, "> unknown variable NCCLSHIM_FOO"));
  assert_non_null(strstr(buf, "> misspelt variable NCCL_SHIM_LOG: did you mean NCCLSHIM_LOG?"));
  free(buf);
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
      cmocka_unit_test(misspelt_names), cmocka_unit_test(check_all),
      cmocka_unit_test(hashes),         cmocka_unit_test(dump_and_markdown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
