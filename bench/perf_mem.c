/* perf_mem.c — the host implementation of perf_mem.h and the choice between
 * it and the CUDA one (perf_mem_cuda.c, only in CUDA builds).
 *
 * The host table is what runs against the host NCCL (tests/hostnccl), which
 * reduces plain host memory; its "stream" is NULL and there is nothing to
 * wait for because the host NCCL completes each call before returning.
 *
 * Must not: print or exit. */
#include "perf_mem.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int host_alloc(void **p, size_t bytes) {
  /* Page-aligned like cudaMalloc's 256 B or better; never a NULL for 0 B. */
  return posix_memalign(p, 4096, bytes ? bytes : 1) == 0 ? 0 : -1;
}

static void host_release(void *p) { free(p); }

static int host_copy(void *dst, const void *src, size_t bytes) {
  if (bytes) memcpy(dst, src, bytes);
  return 0;
}

static int host_sync(void) { return 0; }

static void host_describe(char *buf, size_t len, int *device) {
  snprintf(buf, len, "[host] host memory");
  *device = -1;
}

static void host_close(void) {}

static const perf_mem_t host_table = {
  .name = "host", .stream = NULL, .alloc = host_alloc, .release = host_release,
  .upload = host_copy, .download = host_copy, .sync = host_sync,
  .describe = host_describe, .close = host_close,
};

static unsigned long long read_ull(const char *path, const char *key) {
  FILE *f = fopen(path, "r");
  if (!f) return 0;
  char line[256];
  unsigned long long v = 0;
  size_t kl = key ? strlen(key) : 0;
  while (fgets(line, sizeof line, f))
    if (!key || !strncmp(line, key, kl)) {
      char *end;
      v = strtoull(line + kl, &end, 10);
      if (end == line + kl) v = 0; /* "max": no limit */
      else if (key) v *= 1024;     /* meminfo counts kB */
      break;
    }
  fclose(f);
  return v;
}

unsigned long long perf_mem_host_available(void) {
  unsigned long long avail = read_ull("/proc/meminfo", "MemAvailable:");
  unsigned long long max = read_ull("/sys/fs/cgroup/memory.max", NULL);
  unsigned long long cur = read_ull("/sys/fs/cgroup/memory.current", NULL);
  if (max) {
    unsigned long long left = max > cur ? max - cur : 1;
    if (!avail || left < avail) avail = left;
  }
  return avail;
}

int perf_mem_open(perf_mem_t *m, int local_rank, char *err, size_t errlen) {
  const char *want = getenv("ALLREDUCE_PERF_MEM");
  if (!want || !*want) want = "auto";
  if (strcmp(want, "host") != 0 && strcmp(want, "cuda") != 0 && strcmp(want, "auto") != 0) {
    snprintf(err, errlen, "ALLREDUCE_PERF_MEM=%s: expected auto, host or cuda", want);
    return -1;
  }
  *m = host_table;
  if (strcmp(want, "host") == 0) return 0;
#ifdef PERF_HAVE_CUDA
  int rc = perf_mem_cuda_open(m, local_rank, err, errlen);
  if (rc == 1 && strcmp(want, "auto") == 0) {
    *m = host_table;
    return 0;
  }
  return rc == 0 ? 0 : -1;
#else
  (void)local_rank;
  if (strcmp(want, "cuda") == 0) {
    snprintf(err, errlen, "ALLREDUCE_PERF_MEM=cuda: this allreduce_perf was built without CUDA");
    return -1;
  }
  return 0;
#endif
}
