/* tracer.c — the call trace of one intercepted call, for callpath.sh:
 * linked only into an instrumented copy of the shim
 * (-finstrument-functions), never into the library users get.
 *
 * Armed at the TRACE_CALL-th entry (default 4) of the exported hook named by
 * TRACE_HOOK (default ncclAllReduce), it records every instrumented function
 * entered on that thread, and stops at the first function of the real NCCL
 * (callpath.sh instruments the host NCCL with a tracer of its own that calls
 * nsc_trace_nccl at each call into it from outside) or, with
 * TRACE_TO=return, records that first function of each call into NCCL and
 * goes on until the hook returns. At exit it writes "object offset name"
 * lines to TRACE_FILE.%pid.
 *
 * Must not: allocate or lock while recording (a fixed buffer), or touch
 * anything of the shim's. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define NOTRACE __attribute__((no_instrument_function))
enum { MAX = 1 << 16 };
static void *seen[MAX];
static int nseen, armed, done, hook_depth, to_return;
static __thread int depth, mine; /* this thread's call depth; the armed thread */
static long entries;
static void *hook_fn;

NOTRACE static void dump(void) {
  const char *f = getenv("TRACE_FILE");
  if (!f || !nseen) return;
  char path[4096];
  snprintf(path, sizeof path, "%s.%d", f, (int)getpid());
  FILE *o = fopen(path, "w");
  if (!o) return;
  for (int i = 0; i < nseen; i++) {
    Dl_info d;
    if (dladdr(seen[i], &d) && d.dli_fname)
      fprintf(o, "%s 0x%lx %s\n", d.dli_fname, (unsigned long)((char *)seen[i] - (char *)d.dli_fbase),
              d.dli_sname ? d.dli_sname : "?");
  }
  fclose(o);
}

NOTRACE static void *self_base(void) {
  Dl_info d;
  return dladdr((void *)dump, &d) ? d.dli_fbase : NULL;
}

NOTRACE void __cyg_profile_func_enter(void *fn, void *site) {
  (void)site;
  if (done) return;
  static __thread int busy;
  if (busy) return;
  busy = 1;
  if (!hook_fn) {
    const char *h = getenv("TRACE_HOOK");
    hook_fn = dlsym(RTLD_DEFAULT, h && *h ? h : "ncclAllReduce");
    const char *to = getenv("TRACE_TO");
    to_return = to && !strcmp(to, "return");
    if (!getenv("TRACE_FILE")) done = 1;
    else atexit(dump);
  }
  depth++;
  if (!armed && fn == hook_fn) {
    const char *k = getenv("TRACE_CALL");
    if (++entries == (k ? atol(k) : 4)) armed = 1, mine = 1, hook_depth = depth;
  }
  if (armed && mine) {
    Dl_info d;
    if (dladdr(fn, &d) && d.dli_fbase != self_base()) { /* another object: the real NCCL */
      if (nseen < MAX) seen[nseen++] = fn;
      if (!to_return) armed = 0, done = 1;
    } else if (nseen < MAX) {
      seen[nseen++] = fn;
    }
  }
  busy = 0;
}

/* The real NCCL entered a function of its own (exported for callpath.sh's
 * instrumented host NCCL). */
__attribute__((visibility("default"))) NOTRACE void nsc_trace_nccl(void *fn) {
  if (armed && mine) {
    if (nseen < MAX) seen[nseen++] = fn;
    if (!to_return) armed = 0, done = 1;
  }
}

NOTRACE void __cyg_profile_func_exit(void *fn, void *site) {
  (void)fn;
  (void)site;
  if (armed && mine && depth == hook_depth) armed = 0, done = 1; /* the hook returned without calling NCCL */
  depth--;
}
