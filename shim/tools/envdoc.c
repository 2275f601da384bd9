/* envdoc.c — prints the README's environment table from shim/config.def
 * (`make env-doc` splices it between the env-table markers of README.md). */
#include <stdio.h>

#include "config.h"

int main(void) {
  nsc_config_markdown(stdout);
  return 0;
}
