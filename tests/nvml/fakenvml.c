/* fakenvml.c — an NVML TEST DOUBLE: libnvidia-ml.so.1 with the few entry
 * points the shim's diagnosis uses (shim/diag/diag_nvml.c), put on
 * LD_LIBRARY_PATH by tests that run the CUDA backend on tests/cudadrv. Never
 * part of the shim.
 *
 * Devices are the CUDA double's, found by the PCI bus id it reports
 * (cuDeviceGetPCIBusId: "0000:0N:00.0" for device N-1, N = 1..8). GPU
 * utilisation samples are taken, as NVML's are, every FAKENVML_PERIOD_US
 * (default 100000) on the wall clock (CLOCK_REALTIME, µs since the epoch):
 * sample k has timestamp k * period and reports the share of the period that
 * ended there; the last FAKENVML_HISTORY (default 100) samples are kept, as
 * the driver's buffer is. Scripted by the environment:
 *   FAKENVML_UTIL=P        every sample says P percent (default 0)
 *   FAKENVML_FAIL=init     nvmlInit_v2 fails (NVML_ERROR_DRIVER_NOT_LOADED)
 *   FAKENVML_FAIL=perm     the device handle is refused (NVML_ERROR_NO_PERMISSION)
 *   FAKENVML_FAIL=samples  nvmlDeviceGetSamples is not supported (the caller
 *                          falls back to nvmlDeviceGetUtilizationRates)
 *   FAKENVML_LOG=FILE      appends one line per handle asked for ("handle BUSID")
 * Must not: be linked into the shim or anything shipped. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define FN_EXPORT __attribute__((visibility("default")))

/* The values NVML defines (nvml.h), only those used here. */
enum { OK = 0, E_INVALID = 2, E_NOT_SUPPORTED = 3, E_NO_PERMISSION = 4, E_NOT_FOUND = 6, E_INSUFFICIENT = 7,
       E_DRIVER = 9, E_UNINIT = 1 };
enum { SAMPLES_GPU_UTIL = 1 };
enum { VALUE_UINT = 1 };
typedef struct {
  unsigned long long ts;
  union { double d; unsigned int ui; unsigned long ul; unsigned long long ull; long long sll; } v;
} fake_sample;
typedef struct { unsigned int gpu, memory; } fake_util;
typedef struct { int index; } fake_dev;

static fake_dev devs[8] = {{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}};
static int inited;

static long envl(const char *n, long def) {
  const char *e = getenv(n);
  return e && *e ? strtol(e, NULL, 10) : def;
}
static int fail_is(const char *what) {
  const char *e = getenv("FAKENVML_FAIL");
  return e && !strcmp(e, what);
}
static unsigned long long now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_REALTIME, &t);
  return (unsigned long long)t.tv_sec * 1000000ull + (unsigned long long)t.tv_nsec / 1000;
}

FN_EXPORT int nvmlInit_v2(void) {
  if (fail_is("init")) return E_DRIVER;
  inited = 1;
  return OK;
}
FN_EXPORT int nvmlShutdown(void) {
  inited = 0;
  return OK;
}
FN_EXPORT const char *nvmlErrorString(int r) {
  switch (r) {
  case OK: return "Success";
  case E_UNINIT: return "Uninitialized";
  case E_INVALID: return "Invalid Argument";
  case E_NOT_SUPPORTED: return "Not Supported";
  case E_NO_PERMISSION: return "Insufficient Permissions";
  case E_NOT_FOUND: return "Not Found";
  case E_INSUFFICIENT: return "Insufficient Size";
  case E_DRIVER: return "Driver Not Loaded";
  default: return "Unknown Error";
  }
}

FN_EXPORT int nvmlDeviceGetHandleByPciBusId_v2(const char *bus, fake_dev **out) {
  if (!inited) return E_UNINIT;
  if (!bus || !out) return E_INVALID;
  const char *log = getenv("FAKENVML_LOG");
  FILE *f = log ? fopen(log, "a") : NULL;
  if (f) {
    fprintf(f, "handle %s\n", bus);
    fclose(f);
  }
  unsigned dom, b, d, fn;
  if (sscanf(bus, "%x:%x:%x.%x", &dom, &b, &d, &fn) != 4 || dom || d || fn || b < 1 || b > 8) return E_NOT_FOUND;
  if (fail_is("perm")) return E_NO_PERMISSION;
  *out = &devs[b - 1];
  return OK;
}

FN_EXPORT int nvmlDeviceGetSamples(fake_dev *dev, int type, unsigned long long last, int *vtype, unsigned int *count,
                                   fake_sample *out) {
  if (!inited) return E_UNINIT;
  if (!dev || !vtype || !count) return E_INVALID;
  if (fail_is("samples") || type != SAMPLES_GPU_UTIL) return E_NOT_SUPPORTED;
  unsigned long long period = (unsigned long long)envl("FAKENVML_PERIOD_US", 100000), hist = (unsigned long long)envl("FAKENVML_HISTORY", 100);
  unsigned long long k1 = now_us() / period, k0 = k1 >= hist ? k1 - hist + 1 : 0;
  if (last / period + 1 > k0) k0 = last / period + 1;
  *vtype = VALUE_UINT;
  if (!out) {
    *count = (unsigned)hist;
    return OK;
  }
  if (k0 > k1) {
    *count = 0;
    return E_NOT_FOUND;
  }
  if (k1 - k0 + 1 > *count) k0 = k1 - *count + 1; /* the newest that fit */
  unsigned n = 0;
  for (unsigned long long k = k0; k <= k1; k++, n++) {
    out[n].ts = k * period;
    out[n].v.ull = 0;
    out[n].v.ui = (unsigned)envl("FAKENVML_UTIL", 0);
  }
  *count = n;
  return OK;
}

FN_EXPORT int nvmlDeviceGetUtilizationRates(fake_dev *dev, fake_util *u) {
  if (!inited) return E_UNINIT;
  if (!dev || !u) return E_INVALID;
  u->gpu = (unsigned)envl("FAKENVML_UTIL", 0);
  u->memory = 0;
  return OK;
}
