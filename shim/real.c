/* real.c — finding the program's NCCL at run time (see real.h for the order).
 *
 * The shim has no DT_NEEDED on libnccl: linking it would let a different
 * libnccl.so.2 win over the one the program loaded, and dlopen without
 * RTLD_NOLOAD could do the same, so neither is ever done here. */
#include "real.h"

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

nsc_real_t nsc_real;

static void *open_loaded(const char *soname) { return dlopen(soname, RTLD_NOLOAD | RTLD_LAZY); }

/* The three places, in order, for one function. */
static void *find(const nsc_dl_ops *ops, const char *name, const char **how) {
  char pname[64];
  snprintf(pname, sizeof pname, "pnccl%s", name);
  void *h = ops->open_loaded("libnccl.so.2");
  void *f = h ? ops->sym(h, pname) : NULL;
  if (f) { *how = "pncclAllReduce from the loaded libnccl.so.2"; return f; }
  if ((f = ops->sym(ops->next, pname))) { *how = "pncclAllReduce via RTLD_NEXT"; return f; }
  char nname[64];
  snprintf(nname, sizeof nname, "nccl%s", name);
  if ((f = ops->sym(ops->next, nname))) { *how = "ncclAllReduce via RTLD_NEXT"; return f; }
  return NULL;
}

int nsc_real_resolve_with(const nsc_dl_ops *ops, nsc_real_t *out, char *err, size_t errlen) {
  memset(out, 0, sizeof *out);
  const char *how = NULL;
#define X(name, args)                                                   \
  {                                                                     \
    const char *h_ = NULL;                                              \
    *(void **)&out->name = find(ops, #name, &h_);                       \
    if (!strcmp(#name, "AllReduce")) how = h_;                          \
  }
  NSC_REAL_LIST(X)
#undef X
  {
    const char *h_ = NULL;
    *(void **)&out->GetLastError = find(ops, "GetLastError", &h_);
  }
  if (!out->AllReduce) {
    snprintf(err, errlen,
             "no NCCL library found in this process (neither libnccl.so.2 nor pncclAllReduce/ncclAllReduce "
             "after the shim); a program that links NCCL statically cannot be interposed");
    return -1;
  }
  out->how = how;
  return 0;
}

static void *next_sym(void *h, const char *name) { return dlsym(h, name); }

void nsc_real_resolve_last_error(void) {
  nsc_dl_ops ops = {open_loaded, next_sym, RTLD_NEXT};
  const char *h = NULL;
  void *f = find(&ops, "GetLastError", &h);
  __atomic_store_n((void **)&nsc_real.GetLastError, f, __ATOMIC_RELEASE);
}

int nsc_real_resolve(char *err, size_t errlen) {
  nsc_dl_ops ops = {open_loaded, next_sym, RTLD_NEXT};
  return nsc_real_resolve_with(&ops, &nsc_real, err, errlen);
}
