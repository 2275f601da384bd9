/* fuzz_config.c — libFuzzer target for the configuration parser: the input is
 * split at newlines into environment entries (most prefixed NCCLSHIM_ so the
 * interesting paths are reached). The parser must never crash, read out of
 * bounds, or return success with an error message, or fail without one; the
 * checker (nsc_config_check) must find a problem exactly when the parser
 * fails, each a one-line message; the dump of any environment must not crash. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"

static void one_line(void *ctx, const char *msg) {
  (void)ctx;
  if (!msg[0] || strchr(msg, '\n')) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *buf = malloc(size + 1);
  if (!buf) return 0;
  memcpy(buf, data, size);
  buf[size] = '\0';
  char *env[17];
  int n = 0;
  for (char *p = buf; p && n < 16;) {
    char *nl = strchr(p, '\n');
    if (nl) *nl = '\0';
    env[n++] = p;
    p = nl ? nl + 1 : NULL;
  }
  env[n] = NULL;
  /* Entries starting with '@' get the prefix, so the fuzzer need not find it. */
  char *owned[16] = {0};
  for (int i = 0; i < n; i++)
    if (env[i][0] == '@') {
      size_t len = strlen(env[i]);
      owned[i] = malloc(len + 9);
      if (!owned[i]) continue;
      memcpy(owned[i], "NCCLSHIM_", 9);
      memcpy(owned[i] + 9, env[i] + 1, len);
      env[i] = owned[i];
    }
  static nsc_config cfg;
  char err[512];
  int rc = nsc_config_parse(env, &cfg, err, sizeof err);
  if (rc == 0 && err[0]) abort();
  if (rc != 0 && (!err[0] || strchr(err, '\n'))) abort();
  if ((nsc_config_check(env, one_line, NULL) > 0) != (rc != 0)) abort();
  static FILE *null;
  if (!null) null = fopen("/dev/null", "w");
  if (null) nsc_config_dump_env(env, null, "");
  for (int i = 0; i < n; i++) free(owned[i]);
  free(buf);
  return 0;
}
