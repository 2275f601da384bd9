/* diag_nvml.c — see diag_nvml.h: NVML loaded and read by the log's writer
 * thread, samples kept per device, a step's busy time from them.
 *
 * Only what the diagnosis uses of NVML is declared here, in our own words,
 * after NVML's header (nvml.h): nvmlReturn_t is an int (0 success,
 * 3 not supported, 6 not found); nvmlDevice_t an opaque pointer;
 * NVML_GPU_UTILIZATION_SAMPLES is 1 (percent of the sample period during
 * which one or more kernels was executing); a sample is a 64-bit timestamp
 * (µs) and an 8-byte value union whose member is told by nvmlValueType_t
 * (0 double, 1 unsigned int, 2 unsigned long, 3 unsigned long long, 4 signed
 * long long, 5 signed int); nvmlUtilization_t is {gpu, memory} percent.
 * From the CUDA driver: cuDeviceGetPCIBusId(char *, int, CUdevice) and
 * cuThreadExchangeStreamCaptureMode (relaxed = 2, so that the writer's query
 * can never invalidate another thread's capture).
 *
 * Must not: run on a calling thread (nsc_nvml_poll is the writer's), hold
 * nv_lock across an NVML call, or fail anything: every problem becomes the
 * device's reason. */
#include "diag_nvml.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cu_ctx.h"

enum { NV_OK = 0, NV_NOT_SUPPORTED = 3, NV_NOT_FOUND = 6 };
enum { NV_GPU_UTILIZATION_SAMPLES = 1 };
enum { NV_DOUBLE = 0, NV_UINT = 1, NV_ULONG = 2, NV_ULLONG = 3, NV_SLLONG = 4, NV_SINT = 5 };
typedef struct {
  unsigned long long ts;
  union {
    double d;
    unsigned int ui;
    unsigned long ul;
    unsigned long long ull;
    long long sll;
    int si;
  } v;
} nv_sample;
typedef struct {
  unsigned int gpu, memory;
} nv_util;
_Static_assert(sizeof(nv_sample) == 16, "NVML's nvmlSample_t is 16 bytes");

static struct {
  int (*init)(void);
  const char *(*err)(int);
  int (*by_bus)(const char *, void **);
  int (*samples)(void *, int, unsigned long long, int *, unsigned int *, nv_sample *);
  int (*rates)(void *, nv_util *);
  int (*bus_id)(char *, int, int);           /* cuDeviceGetPCIBusId */
  int (*capmode)(int *);                     /* cuThreadExchangeStreamCaptureMode */
} nv;

typedef struct {
  int state;              /* 0 not opened, 1 open, -1 failed (why) */
  void *h;
  int rates;              /* samples not supported: one utilisation reading per poll */
  unsigned long long last;
  nsc_nvml_sample *s;     /* kept samples, time order (nv_lock) */
  size_t n;
  char why[192];
} nv_dev;

static uint64_t want[(NSC_NVML_MAXDEV + 63) / 64];
static int lib_state;     /* 0 not tried, 1 loaded, -1 failed (lib_why) */
static char lib_why[256];
static nv_dev devs[NSC_NVML_MAXDEV];
static pthread_mutex_t nv_lock = PTHREAD_MUTEX_INITIALIZER;

int nsc_nvml_want(int dev) {
  if (dev < 0 || dev >= NSC_NVML_MAXDEV) return 0;
  int none = 1;
  for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) none &= !__atomic_load_n(&want[i], __ATOMIC_RELAXED);
  uint64_t old = __atomic_fetch_or(&want[dev / 64], 1ull << (dev % 64), __ATOMIC_RELEASE);
  return none && !(old & (1ull << (dev % 64)));
}

int nsc_nvml_wanted(void) {
  for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
    if (__atomic_load_n(&want[i], __ATOMIC_ACQUIRE)) return 1;
  return 0;
}

static uint64_t wall_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_REALTIME, &t);
  return (uint64_t)t.tv_sec * 1000000ull + (uint64_t)t.tv_nsec / 1000;
}

static void set_why(char *dst, size_t len, const char *fmt, const char *a, const char *b) {
  pthread_mutex_lock(&nv_lock);
  snprintf(dst, len, fmt, a, b);
  pthread_mutex_unlock(&nv_lock);
}

static const char *errstr(int r) {
  const char *s = nv.err ? nv.err(r) : NULL;
  return s ? s : "an NVML error";
}

/* Writer: the library and the driver's two functions, once. */
static int load_once(void) {
  void *h = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char *e = dlerror();
    set_why(lib_why, sizeof lib_why, "NVML not available: %s%s", e ? e : "libnvidia-ml.so.1 not found", "");
    return -1;
  }
  *(void **)&nv.init = dlsym(h, "nvmlInit_v2");
  *(void **)&nv.err = dlsym(h, "nvmlErrorString");
  *(void **)&nv.by_bus = dlsym(h, "nvmlDeviceGetHandleByPciBusId_v2");
  *(void **)&nv.samples = dlsym(h, "nvmlDeviceGetSamples");
  *(void **)&nv.rates = dlsym(h, "nvmlDeviceGetUtilizationRates");
  const char *miss = !nv.init ? "nvmlInit_v2" : !nv.by_bus ? "nvmlDeviceGetHandleByPciBusId_v2"
                   : !nv.samples && !nv.rates ? "nvmlDeviceGetSamples and nvmlDeviceGetUtilizationRates" : NULL;
  if (miss) {
    set_why(lib_why, sizeof lib_why, "NVML not usable: libnvidia-ml.so.1 has no %s%s", miss, "");
    return -1;
  }
  void *cu = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (cu) {
    *(void **)&nv.bus_id = dlsym(cu, "cuDeviceGetPCIBusId");
    *(void **)&nv.capmode = dlsym(cu, "cuThreadExchangeStreamCaptureMode");
  }
  if (!nv.bus_id) {
    set_why(lib_why, sizeof lib_why, "NVML not usable: the CUDA driver has no cuDeviceGetPCIBusId%s%s", "", "");
    return -1;
  }
  int r = nv.init();
  if (r != NV_OK) {
    set_why(lib_why, sizeof lib_why, "NVML not usable: nvmlInit_v2 failed (%s)%s", errstr(r), "");
    return -1;
  }
  return 1;
}

static int load(void) {
  int st = __atomic_load_n(&lib_state, __ATOMIC_ACQUIRE);
  if (st) return st;
  st = load_once(); /* the reason is written before the state says -1 */
  __atomic_store_n(&lib_state, st, __ATOMIC_RELEASE);
  return st;
}

/* -1 (d->why written) or 1. */
static int open_once(nv_dev *d, int i) {
  char bus[32] = "";
  int mode = 2; /* relaxed, for this thread, around the driver's query */
  if (nv.capmode) nv.capmode(&mode);
  int cr = nv.bus_id(bus, (int)sizeof bus, i);
  if (nv.capmode) nv.capmode(&mode);
  if (cr) {
    set_why(d->why, sizeof d->why, "NVML not usable: cuDeviceGetPCIBusId failed for this device%s%s", "", "");
    return -1;
  }
  int r = nv.by_bus(bus, &d->h);
  if (r != NV_OK) {
    set_why(d->why, sizeof d->why, "NVML not usable: nvmlDeviceGetHandleByPciBusId_v2(%s) failed (%s)", bus, errstr(r));
    return -1;
  }
  nsc_nvml_sample *s = malloc(NSC_NVML_KEEP * sizeof *s);
  if (!s) {
    set_why(d->why, sizeof d->why, "NVML: out of memory for the samples%s%s", "", "");
    return -1;
  }
  pthread_mutex_lock(&nv_lock);
  d->s = s;
  d->n = 0;
  pthread_mutex_unlock(&nv_lock);
  d->rates = !nv.samples;
  return 1;
}

static void open_dev(int i) {
  nv_dev *d = &devs[i];
  __atomic_store_n(&d->state, open_once(d, i), __ATOMIC_RELEASE);
}

static uint32_t pct_of(const nv_sample *s, int type) {
  double v;
  switch (type) {
  case NV_DOUBLE: v = s->v.d; break;
  case NV_UINT: v = s->v.ui; break;
  case NV_ULONG: v = (double)s->v.ul; break;
  case NV_ULLONG: v = (double)s->v.ull; break;
  case NV_SLLONG: v = (double)s->v.sll; break;
  case NV_SINT: v = s->v.si; break;
  default: v = 0; break;
  }
  return v < 0 ? 0 : v > 100 ? 100 : (uint32_t)(v + 0.5);
}

/* Keep batch (any order) after the last kept sample; the oldest half leaves when full. */
static void keep(nv_dev *d, nsc_nvml_sample *b, size_t n) {
  for (size_t i = 1; i < n; i++) /* insertion sort: NVML's order is not promised */
    for (size_t j = i; j > 0 && b[j - 1].ts_us > b[j].ts_us; j--) {
      nsc_nvml_sample t = b[j];
      b[j] = b[j - 1];
      b[j - 1] = t;
    }
  pthread_mutex_lock(&nv_lock);
  for (size_t i = 0; i < n; i++) {
    if (d->n && b[i].ts_us <= d->s[d->n - 1].ts_us) continue;
    if (d->n == NSC_NVML_KEEP) {
      memmove(d->s, d->s + NSC_NVML_KEEP / 2, (NSC_NVML_KEEP / 2) * sizeof *d->s);
      d->n = NSC_NVML_KEEP / 2;
    }
    d->s[d->n++] = b[i];
  }
  pthread_mutex_unlock(&nv_lock);
}

#define BATCH 256

static void read_dev(nv_dev *d) {
  nsc_nvml_sample b[BATCH];
  if (!d->rates) {
    for (int round = 0; round < 16; round++) { /* at most 16 full batches a poll */
      nv_sample raw[BATCH];
      unsigned int cnt = BATCH;
      int type = NV_UINT;
      int r = nv.samples(d->h, NV_GPU_UTILIZATION_SAMPLES, d->last, &type, &cnt, raw);
      if (r == NV_NOT_FOUND) return; /* nothing newer */
      if (r == NV_NOT_SUPPORTED && nv.rates && !d->last) {
        d->rates = 1;
        break;
      }
      if (r != NV_OK) {
        set_why(d->why, sizeof d->why, "NVML: nvmlDeviceGetSamples failed (%s)%s", errstr(r), "");
        __atomic_store_n(&d->state, -1, __ATOMIC_RELEASE);
        return;
      }
      size_t n = 0;
      for (unsigned i = 0; i < cnt && i < BATCH; i++) {
        if (raw[i].ts <= d->last && d->last) continue;
        b[n++] = (nsc_nvml_sample){raw[i].ts, pct_of(&raw[i], type)};
      }
      for (unsigned i = 0; i < cnt && i < BATCH; i++)
        if (raw[i].ts > d->last) d->last = raw[i].ts;
      keep(d, b, n);
      if (cnt < BATCH) return;
    }
    if (!d->rates) return;
  }
  /* Fallback: one reading per poll, NVML's utilisation over its last sample
   * period, taken as the share of the whole time since the previous poll. */
  nv_util u;
  int r = nv.rates(d->h, &u);
  if (r != NV_OK) {
    set_why(d->why, sizeof d->why, "NVML: nvmlDeviceGetUtilizationRates failed (%s)%s", errstr(r), "");
    __atomic_store_n(&d->state, -1, __ATOMIC_RELEASE);
    return;
  }
  b[0] = (nsc_nvml_sample){wall_us(), u.gpu > 100 ? 100 : u.gpu};
  keep(d, b, 1);
}

void nsc_nvml_poll(void) {
  if (!nsc_nvml_wanted() || load() < 0) return;
  for (int i = 0; i < NSC_NVML_MAXDEV; i++) {
    if (!(__atomic_load_n(&want[i / 64], __ATOMIC_ACQUIRE) & (1ull << (i % 64)))) continue;
    if (devs[i].state == 0) open_dev(i);
    if (devs[i].state == 1) read_dev(&devs[i]);
  }
}

int nsc_nvml_map(const nsc_nvml_sample *s, size_t n, uint64_t a, uint64_t b, uint64_t max_gap, uint64_t *busy_ns) {
  *busy_ns = 0;
  if (!n) return 0;
  if (s[0].ts_us > a) return -1;
  if (s[n - 1].ts_us < b) return 0;
  size_t lo = 0, hi = n; /* the first sample at or after a */
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (s[mid].ts_us < a) lo = mid + 1;
    else hi = mid;
  }
  uint64_t busy = 0;
  for (size_t i = lo > 0 ? lo : 1; i < n && s[i - 1].ts_us < b; i++) {
    uint64_t from = s[i - 1].ts_us > a ? s[i - 1].ts_us : a, to = s[i].ts_us < b ? s[i].ts_us : b;
    if (s[i].ts_us - s[i - 1].ts_us > max_gap) return -1;
    if (to > from) busy += (to - from) * 10ull * s[i].pct; /* µs * pct/100 in ns */
  }
  *busy_ns = busy;
  return 1;
}

int nsc_nvml_busy(int dev, uint64_t a_us, uint64_t b_us, uint64_t *busy_ns) {
  *busy_ns = 0;
  if (dev < 0 || dev >= NSC_NVML_MAXDEV || __atomic_load_n(&lib_state, __ATOMIC_ACQUIRE) < 0) return -1;
  pthread_mutex_lock(&nv_lock);
  int rc = devs[dev].s ? nsc_nvml_map(devs[dev].s, devs[dev].n, a_us, b_us, NSC_NVML_MAX_GAP_US, busy_ns) : 0;
  pthread_mutex_unlock(&nv_lock);
  if (rc == 0 && __atomic_load_n(&devs[dev].state, __ATOMIC_RELAXED) < 0) rc = -1;
  return rc;
}

const char *nsc_nvml_why(int dev) {
  if (__atomic_load_n(&lib_state, __ATOMIC_RELAXED) < 0) return lib_why;
  if (dev >= 0 && dev < NSC_NVML_MAXDEV && __atomic_load_n(&devs[dev].state, __ATOMIC_RELAXED) < 0) return devs[dev].why;
  if (!__atomic_load_n(&lib_state, __ATOMIC_RELAXED)) return "NVML was not read (no writer round since the device's first timed call)";
  return "no NVML samples covered the steps";
}
