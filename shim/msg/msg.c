/* msg.c — formatting of the shim's stderr lines (one write per line, so lines
 * of several ranks and threads do not interleave mid-line). */
#include "msg.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

void nsc_msg(const char *level, const char *fmt, ...) {
  char host[64] = "?", line[1024];
  gethostname(host, sizeof host - 1);
  int n = snprintf(line, sizeof line, "ncclshim[%s:%d] %s ", host, (int)getpid(), level);
  va_list ap;
  va_start(ap, fmt);
  if (n > 0 && (size_t)n < sizeof line) n += vsnprintf(line + n, sizeof line - n, fmt, ap);
  va_end(ap);
  if (n < 0) return;
  if ((size_t)n >= sizeof line - 1) n = sizeof line - 2;
  line[n++] = '\n';
  ssize_t w = write(2, line, (size_t)n);
  (void)w;
}
