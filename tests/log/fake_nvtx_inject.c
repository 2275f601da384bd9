/* fake_nvtx_inject.c — a stand-in NVTX3 tool for tests/t/50-log.sh: the
 * library a profiler names in NVTX_INJECTION64_PATH. Its
 * InitializeInjectionNvtx2 takes the caller's export tables as NVTX3's
 * public headers define them (callbacks id 1, version info id 3), asks for
 * the core module's function table and installs fake_nvtx.c's counting
 * nvtxRangeStartA and nvtxRangeEnd in slots 5 and 7; the counts are written
 * at unload as fake_nvtx.c does. Returns 0 (not attached) when a table is
 * missing or too short. Must not: depend on anything but libc. */
#include <stddef.h>
#include <stdint.h>

typedef void (*fn)(void);
typedef struct {
  size_t struct_size;
  int (*get_module_function_table)(int module, fn ***table, unsigned *size);
} callbacks_t;
typedef struct {
  size_t struct_size;
  uint32_t version, reserved0;
  void (*set_injection_version)(uint32_t);
} version_t;

uint64_t nvtxRangeStartA(const char *message); /* fake_nvtx.c */
void nvtxRangeEnd(uint64_t id);

__attribute__((visibility("default"))) int InitializeInjectionNvtx2(const void *(*get_export_table)(uint32_t)) {
  const version_t *v = get_export_table(3);
  if (v && v->struct_size >= sizeof *v && v->set_injection_version) v->set_injection_version(3);
  const callbacks_t *c = get_export_table(1);
  fn **table = NULL;
  unsigned size = 0;
  if (!c || c->struct_size < sizeof *c || !c->get_module_function_table(1, &table, &size) || size < 8) return 0;
  if (!table[5] || !table[7]) return 0;
  *table[5] = (fn)nvtxRangeStartA;
  *table[7] = (fn)nvtxRangeEnd;
  return 1;
}
