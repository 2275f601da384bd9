/* envdoc.c — prints the environment table from shim/config/config.def
 * (`make env-doc` splices it between the env-table markers of docs/environment.md). */
#include <stdio.h>

#include "config.h"

int main(void) {
  nsc_config_markdown(stdout);
  return 0;
}
