/* envcheck.c — ncclshim-envcheck: the shim's own judgement of an environment,
 * before a job starts. It is built from the shim's parser (config.c and
 * config.def, the one table), so it accepts exactly what the shim accepts and
 * says what the shim would say at its first collective, with every problem at
 * once instead of the first:
 *
 *   ncclshim-envcheck           check this process's environment: nothing
 *                               printed and exit 0 when the shim accepts it;
 *                               else one line per problem (a bad value, an
 *                               unknown NCCLSHIM_* name, a misspelt name of
 *                               ours with "did you mean") on stderr, exit 1
 *   ncclshim-envcheck --dump    every setting with its value and where it came
 *                               from (or INVALID and why), then the problems:
 *                               what NCCLSHIM_DUMP_CONFIG=1 prints; exit as above
 *
 * ncclshim-run runs it before every command it starts (--print included), and
 * `python -m ncclshim --check` runs it too: neither loads the shim library.
 * Must not: load libncclshim or NCCL, or read anything but the environment. */
#include <stdio.h>
#include <string.h>

#include "config.h"

extern char **environ;

static void report(void *ctx, const char *msg) {
  (void)ctx;
  fprintf(stderr, "ncclshim: %s\n", msg);
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "";
  if (argc > 2 || (*mode && strcmp(mode, "--dump"))) {
    fprintf(stderr, "usage: ncclshim-envcheck [--dump]\n");
    return 2;
  }
  if (!strcmp(mode, "--dump")) {
    nsc_config_dump_env(environ, stdout, "");
    return nsc_config_check(environ, NULL, NULL) ? 1 : 0;
  }
  return nsc_config_check(environ, report, NULL) ? 1 : 0;
}
