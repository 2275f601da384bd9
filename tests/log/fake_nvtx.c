/* fake_nvtx.c — a stand-in libnvToolsExt.so.1 for tests/t/50-log.sh: it
 * implements the two NVTX calls the shim uses (nvtxRangeStartA, nvtxRangeEnd)
 * and, at unload, writes to $FAKE_NVTX_OUT.<pid> one line:
 *   started S ended E bad B shim S2
 * (B: ends of ids never started or already ended; S2: starts whose message
 * begins "ncclshim "). Must not: depend on anything but libc. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAXID (1 << 20)
static unsigned char open_ids[MAXID];
static uint64_t next_id = 1, started, ended, bad, shim;

__attribute__((visibility("default"))) uint64_t nvtxRangeStartA(const char *message) {
  uint64_t id = __atomic_fetch_add(&next_id, 1, __ATOMIC_RELAXED);
  __atomic_fetch_add(&started, 1, __ATOMIC_RELAXED);
  if (message && !strncmp(message, "ncclshim ", 9)) __atomic_fetch_add(&shim, 1, __ATOMIC_RELAXED);
  if (id < MAXID) open_ids[id] = 1;
  return id;
}

__attribute__((visibility("default"))) void nvtxRangeEnd(uint64_t id) {
  __atomic_fetch_add(&ended, 1, __ATOMIC_RELAXED);
  if (id == 0 || id >= MAXID || !open_ids[id]) __atomic_fetch_add(&bad, 1, __ATOMIC_RELAXED);
  else open_ids[id] = 0;
}

__attribute__((destructor)) static void report(void) {
  const char *out = getenv("FAKE_NVTX_OUT");
  if (!out) return;
  char path[4096];
  snprintf(path, sizeof path, "%s.%d", out, (int)getpid());
  FILE *f = fopen(path, "w");
  if (!f) return;
  fprintf(f, "started %llu ended %llu bad %llu shim %llu\n", (unsigned long long)started, (unsigned long long)ended,
          (unsigned long long)bad, (unsigned long long)shim);
  fclose(f);
}
