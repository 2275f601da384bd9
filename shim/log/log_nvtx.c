/* log_nvtx.c — NVTX ranges around the shim's work on each logged call, so
 * Nsight Systems shows it next to NCCL's kernels, when the program already
 * has libnvToolsExt.so.1 loaded (found with RTLD_NOLOAD at activation; never
 * loaded by us). Otherwise every function here is a test and a return.
 *
 * A range runs from the record's start (the call) to its commit (its work
 * enqueued), which for a grouped or nonblocking call happens at a later group
 * end or completion query, possibly on another thread: so the ranges are
 * nvtxRangeStartA/nvtxRangeEnd (process-wide), not the per-thread push/pop
 * stack, whose pops would pair with the wrong pushes. Needs NCCLSHIM_LOG !=
 * off (or a trace file): with logging off no record exists. */
#include <dlfcn.h>
#include <stdio.h>

#include "core.h"
#include "log_int.h"
#include "policy.h"

typedef uint64_t (*range_start_fn)(const char *message);
typedef void (*range_end_fn)(uint64_t id);

static range_start_fn range_start;
static range_end_fn range_end;

void nsc_nvtx_init(void) {
  void *h = dlopen("libnvToolsExt.so.1", RTLD_NOLOAD | RTLD_LAZY);
  if (!h) return; /* the handle is kept: the library stays loaded while we hold pointers into it */
  range_start_fn s = (range_start_fn)dlsym(h, "nvtxRangeStartA");
  range_end_fn e = (range_end_fn)dlsym(h, "nvtxRangeEnd");
  if (s && e) {
    range_end = e;
    range_start = s;
  }
}

void nsc_nvtx_start(nsc_rec *r) {
  if (!range_start) return;
  char name[128];
  snprintf(name, sizeof name, "ncclshim %s%s %s %s %llu B", nsc_log_coll(r),
           r->kind & NSC_KIND_TWOPHASE ? " twophase" : "", nsc_action_name((nsc_action)r->action),
           nsc_dtype_name((ncclDataType_t)r->dtype), (unsigned long long)r->logical_bytes);
  r->nvtx_id = range_start(name);
  r->nvtx_open = 1;
}

void nsc_nvtx_end(nsc_rec *r) {
  if (!r->nvtx_open) return;
  r->nvtx_open = 0;
  if (range_end) range_end(r->nvtx_id);
}
