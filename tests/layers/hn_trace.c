/* hn_trace.c — the host NCCL's side of callpath.sh's trace: linked only into
 * its instrumented copy of the host NCCL; the first function of each call
 * into it from outside (this thread's depth in it going from 0 to 1) is told
 * to the instrumented shim (nsc_trace_nccl, tracer.c), which stops its trace
 * there or records it and goes on. */
#define _GNU_SOURCE
#include <dlfcn.h>

#define NOTRACE __attribute__((no_instrument_function))
static __thread int depth;
NOTRACE void __cyg_profile_func_enter(void *fn, void *site) {
  static void (*tell)(void *);
  (void)site;
  if (!tell) *(void **)&tell = dlsym(RTLD_DEFAULT, "nsc_trace_nccl");
  if (depth++ == 0 && tell) tell(fn);
}
NOTRACE void __cyg_profile_func_exit(void *fn, void *site) {
  (void)fn;
  (void)site;
  depth--;
}
