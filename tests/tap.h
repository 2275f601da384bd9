/* tap.h — the one TAP-style check line of the C test programs that print
 * their own results (tests/cudadrv/test_cudadrv.c, tests/gpu/check_kernels.c):
 * "ok - what" or "not ok - what", counted in `failures` for the exit status.
 * Included once per program (everything here is static). */
#ifndef NSC_TESTS_TAP_H
#define NSC_TESTS_TAP_H

#include <stdarg.h>
#include <stdio.h>

static int failures; /* checks that failed so far */

static void check(int ok, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void check(int ok, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  printf("%s - ", ok ? "ok" : "not ok");
  vprintf(fmt, ap);
  printf("\n");
  va_end(ap);
  failures += !ok;
}

#endif
