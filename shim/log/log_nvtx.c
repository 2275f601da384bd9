/* log_nvtx.c — NVTX ranges around the shim's work on each logged call, so
 * Nsight Systems shows it next to NCCL's kernels. Two ways in, found at
 * activation (never loading a library the program or its tool did not ask
 * for):
 *   - NVTX2: the program already has libnvToolsExt.so.1 loaded (RTLD_NOLOAD);
 *   - NVTX3 (header-only, what pip PyTorch uses): a tool names its injection
 *     library in NVTX_INJECTION64_PATH (or pre-injects
 *     InitializeInjectionNvtx2Preinject). The shim is then one more NVTX3
 *     instance, following the protocol of NVTX3's public headers: it calls
 *     the injection's InitializeInjectionNvtx2 with its export-table getter,
 *     and the tool fills in the core module's RangeStartA and RangeEnd slots.
 * Otherwise every function here is a test and a return.
 *
 * A range runs from the record's start (the call) to its commit (its work
 * enqueued), which for a grouped or nonblocking call happens at a later group
 * end or completion query, possibly on another thread: so the ranges are
 * nvtxRangeStartA/nvtxRangeEnd (process-wide), not the per-thread push/pop
 * stack, whose pops would pair with the wrong pushes. Needs NCCLSHIM_LOG !=
 * off (or a trace file): with logging off no record exists. */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "names.h"
#include "log_int.h"
#include "policy.h"

typedef uint64_t (*range_start_fn)(const char *message);
typedef void (*range_end_fn)(uint64_t id);

static range_start_fn range_start;
static range_end_fn range_end;

/* ---- NVTX3's injection protocol (ids and layouts of its public headers) ---- */
enum { ETID_CALLBACKS = 1, ETID_VERSIONINFO = 3, CB_MODULE_CORE = 1 };
enum { CBID_CORE_RANGE_START_A = 5, CBID_CORE_RANGE_END = 7, CBID_CORE_SIZE = 16 };
#define NVTX_API_VERSION 3

typedef void (*nvtx_fn)(void);
static nvtx_fn core_slot[CBID_CORE_SIZE];        /* what the tool installs */
static nvtx_fn *core_table[CBID_CORE_SIZE + 1];  /* [id] = &core_slot[id]; [0] and the last stay NULL */

static int get_module_table(int module, nvtx_fn ***out_table, unsigned *out_size) {
  if (module != CB_MODULE_CORE) return 0; /* the shim makes core calls only */
  for (int i = 1; i < CBID_CORE_SIZE; i++) core_table[i] = &core_slot[i];
  if (out_table) *out_table = core_table;
  if (out_size) *out_size = CBID_CORE_SIZE;
  return 1;
}
static void set_injection_version(uint32_t v) { (void)v; }

static const struct {
  size_t struct_size;
  int (*get_module_function_table)(int, nvtx_fn ***, unsigned *);
} callbacks = {sizeof callbacks, get_module_table};
static const struct {
  size_t struct_size;
  uint32_t version, reserved0;
  void (*set_injection_version)(uint32_t);
} version_info = {sizeof version_info, NVTX_API_VERSION, 0, set_injection_version};

static const void *get_export_table(uint32_t id) {
  return id == ETID_CALLBACKS ? (const void *)&callbacks : id == ETID_VERSIONINFO ? (const void *)&version_info : NULL;
}

typedef int (*nvtx_inject_fn)(const void *(*get_export_table)(uint32_t));

/* The tool's initialiser: the library NVTX_INJECTION64_PATH names (loaded
 * only because the tool asked for it), else a pre-injected one. */
static nvtx_inject_fn injection(void) {
  const char *path = getenv("NVTX_INJECTION64_PATH");
  if (path && *path) {
    void *h = dlopen(path, RTLD_LAZY);
    nvtx_inject_fn f = h ? (nvtx_inject_fn)dlsym(h, "InitializeInjectionNvtx2") : NULL;
    if (f) return f; /* the handle is kept: the tool stays loaded */
  }
  return (nvtx_inject_fn)dlsym(RTLD_DEFAULT, "InitializeInjectionNvtx2Preinject");
}

void nsc_nvtx_init(void) {
  void *h = dlopen("libnvToolsExt.so.1", RTLD_NOLOAD | RTLD_LAZY);
  if (h) { /* the handle is kept: the library stays loaded while we hold pointers into it */
    range_start_fn s = (range_start_fn)dlsym(h, "nvtxRangeStartA");
    range_end_fn e = (range_end_fn)dlsym(h, "nvtxRangeEnd");
    if (s && e) {
      range_end = e;
      range_start = s;
      return;
    }
  }
  nvtx_inject_fn init = injection();
  if (!init || !init(get_export_table)) return;
  if (core_slot[CBID_CORE_RANGE_START_A] && core_slot[CBID_CORE_RANGE_END]) {
    range_end = (range_end_fn)core_slot[CBID_CORE_RANGE_END];
    range_start = (range_start_fn)core_slot[CBID_CORE_RANGE_START_A];
  }
}

void nsc_nvtx_start(nsc_rec *r) {
  if (!range_start) return;
  char name[128];
  snprintf(name, sizeof name, "ncclshim %s %s %s %s %llu B", nsc_log_coll(r), nsc_log_algo(r),
           nsc_action_name(r->action),
           nsc_dtype_name((ncclDataType_t)r->dtype), (unsigned long long)r->logical_bytes);
  r->nvtx_id = range_start(name);
  r->nvtx_open = 1;
}

void nsc_nvtx_end(nsc_rec *r) {
  if (!r->nvtx_open) return;
  r->nvtx_open = 0;
  if (range_end) range_end(r->nvtx_id);
}
