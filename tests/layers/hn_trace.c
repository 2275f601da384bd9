/* hn_trace.c — the host NCCL's side of callpath.sh's trace: linked only into
 * its instrumented copy of the host NCCL; every function entered there is
 * told to the instrumented shim (nsc_trace_nccl, tracer.c), which stops its
 * trace at the first. */
#define _GNU_SOURCE
#include <dlfcn.h>

#define NOTRACE __attribute__((no_instrument_function))
NOTRACE void __cyg_profile_func_enter(void *fn, void *site) {
  static void (*tell)(void *);
  (void)site;
  if (!tell) *(void **)&tell = dlsym(RTLD_DEFAULT, "nsc_trace_nccl");
  if (tell) tell(fn);
}
NOTRACE void __cyg_profile_func_exit(void *fn, void *site) {
  (void)fn;
  (void)site;
}
