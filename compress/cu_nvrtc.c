/* cu_nvrtc.c — see cu_nvrtc.h. NVRTC's C API is declared here by hand (its
 * header is not needed to build): every function returns an int, 0 on
 * success, and a program is an opaque pointer.
 *
 * Must not: link libnvrtc, unload it (a compiled program may be loaded again
 * in another context), exit, or print. */
#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cu_driver.h"
#include "cu_nvrtc.h"

typedef struct {
  int (*Version)(int *, int *);
  int (*GetNumSupportedArchs)(int *);
  int (*GetSupportedArchs)(int *);
  int (*CreateProgram)(void **, const char *, const char *, int, const char *const *,
                       const char *const *);
  int (*CompileProgram)(void *, int, const char *const *);
  int (*GetProgramLogSize)(void *, size_t *);
  int (*GetProgramLog)(void *, char *);
  int (*GetPTXSize)(void *, size_t *);
  int (*GetPTX)(void *, char *);
  int (*GetCUBINSize)(void *, size_t *);
  int (*GetCUBIN)(void *, char *);
  int (*DestroyProgram)(void **);
} nvrtc_api;

static nvrtc_api nv;
static int nv_ok;
static char nv_why[200];
static pthread_once_t nv_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t nv_lock = PTHREAD_MUTEX_INITIALIZER; /* one compilation at a time */

static const char *const sonames[] = {"libnvrtc.so.13", "libnvrtc.so.12"};
/* Where CUDA's pip wheels put libnvrtc, relative to site-packages/nvidia/. */
static const char *const wheel_paths[] = {"cu13/lib/libnvrtc.so.13", "cuda_nvrtc/lib/libnvrtc.so.12",
                                          "cu12/lib/libnvrtc.so.12"};

/* dl_iterate_phdr callback: the first loaded object under .../nvidia/ that
 * has a libnvrtc beside it in the wheel layout. */
static int find_in_wheels(struct dl_phdr_info *info, size_t size, void *arg) {
  (void)size;
  void **h = arg;
  const char *name = info->dlpi_name, *at = name ? strstr(name, "/nvidia/") : NULL;
  if (!at) return 0;
  for (size_t i = 0; i < sizeof wheel_paths / sizeof wheel_paths[0]; i++) {
    char path[4096];
    int n = snprintf(path, sizeof path, "%.*s/nvidia/%s", (int)(at - name), name, wheel_paths[i]);
    if (n > 0 && (size_t)n < sizeof path && (*h = dlopen(path, RTLD_NOW | RTLD_LOCAL))) return 1;
  }
  return 0;
}

static void load(void) {
  void *h = NULL;
  for (size_t i = 0; !h && i < sizeof sonames / sizeof sonames[0]; i++)
    h = dlopen(sonames[i], RTLD_NOW | RTLD_LOCAL);
  if (!h) dl_iterate_phdr(find_in_wheels, &h);
  if (!h) {
    snprintf(nv_why, sizeof nv_why,
             "no libnvrtc.so.13/.12 (neither on the library path nor in a loaded CUDA wheel)");
    return;
  }
#define SYM(f)                                                                           \
  if (!(*(void **)&nv.f = dlsym(h, "nvrtc" #f))) {                                       \
    snprintf(nv_why, sizeof nv_why, "libnvrtc lacks nvrtc" #f);                           \
    return;                                                                              \
  }
  SYM(Version) SYM(GetNumSupportedArchs) SYM(GetSupportedArchs) SYM(CreateProgram)
  SYM(CompileProgram) SYM(GetProgramLogSize) SYM(GetProgramLog) SYM(GetPTXSize) SYM(GetPTX)
  SYM(GetCUBINSize) SYM(GetCUBIN) SYM(DestroyProgram)
#undef SYM
  nv_ok = 1;
}

/* The architecture to compile for: cc itself when NVRTC has it (*sass = 1),
 * else the highest one below it (PTX, which the driver compiles further). */
static int pick_arch(int cc, int *sass) {
  int n = 0, best = 0;
  if (nv.GetNumSupportedArchs(&n) || n <= 0 || n > 256) return 0;
  int archs[256];
  if (nv.GetSupportedArchs(archs)) return 0;
  for (int i = 0; i < n; i++)
    if (archs[i] <= cc && archs[i] > best) best = archs[i];
  *sass = best == cc;
  return best;
}

/* Copies the compiler's log (its first line) into why. */
static void log_into(void *prog, char *why, size_t wlen, int rc) {
  size_t n = 0;
  char *log = NULL;
  if (!nv.GetProgramLogSize(prog, &n) && n && (log = malloc(n + 1)) && !nv.GetProgramLog(prog, log)) {
    log[n] = '\0';
    char *nl = strchr(log, '\n');
    if (nl) *nl = '\0';
  }
  snprintf(why, wlen, "NVRTC compilation failed (%d): %s", rc, log ? log : "no log");
  free(log);
}

/* Images already compiled, per compute capability, for the process: every
 * context of a device (and every device of one kind) compiles once. Under
 * nv_lock. */
#define NV_CACHE 8
static struct {
  int cc;
  void *image;
  size_t size;
  char desc[80];
} cache[NV_CACHE];
static int ncache;

/* A copy of the cached image for cc (the caller frees it), or 0. */
static int cached(int cc, void **image, char *desc, size_t dlen) {
  for (int i = 0; i < ncache; i++)
    if (cache[i].cc == cc && (*image = malloc(cache[i].size))) {
      memcpy(*image, cache[i].image, cache[i].size);
      snprintf(desc, dlen, "%s", cache[i].desc);
      return 1;
    }
  return 0;
}

static void remember(int cc, const void *image, size_t size, const char *desc) {
  void *copy;
  if (ncache == NV_CACHE || !(copy = malloc(size))) return;
  memcpy(copy, image, size);
  cache[ncache].cc = cc;
  cache[ncache].image = copy;
  cache[ncache].size = size;
  snprintf(cache[ncache].desc, sizeof cache[ncache].desc, "%s", desc);
  ncache++;
}

int nsc_nvrtc_image(int major, int minor, void **image, char *desc, size_t dlen, char *why,
                    size_t wlen) {
  *image = NULL;
  pthread_once(&nv_once, load);
  if (!nv_ok) {
    snprintf(why, wlen, "%s", nv_why);
    return -1;
  }
  int vmaj = 0, vmin = 0, sass = 0, arch = pick_arch(major * 10 + minor, &sass);
  nv.Version(&vmaj, &vmin);
  if (!arch) {
    snprintf(why, wlen, "NVRTC %d.%d cannot compile for compute capability %d.%d", vmaj, vmin,
             major, minor);
    return -1;
  }
  char opt_arch[40];
  snprintf(opt_arch, sizeof opt_arch, "--gpu-architecture=%s_%d", sass ? "sm" : "compute", arch);
  /* --fmad=false as the fatbin (compress/module.mk): no a*b+c contracted into
   * an FMA, so results stay those of the host reference and of tests/simt. */
  const char *opts[] = {opt_arch, "-std=c++17", "--fmad=false"};
  pthread_mutex_lock(&nv_lock);
  void *prog = NULL;
  if (cached(major * 10 + minor, image, desc, dlen)) goto out;
  int rc = nv.CreateProgram(&prog, nsc_kernels_src, "ncclshim_kernels.cu", 0, NULL, NULL);
  if (rc) {
    snprintf(why, wlen, "nvrtcCreateProgram failed (%d)", rc);
    goto out;
  }
  if ((rc = nv.CompileProgram(prog, (int)(sizeof opts / sizeof opts[0]), opts))) {
    log_into(prog, why, wlen, rc);
    goto out;
  }
  size_t n = 0;
  rc = sass ? nv.GetCUBINSize(prog, &n) : nv.GetPTXSize(prog, &n);
  if (!rc && !(*image = malloc(n ? n : 1))) rc = -1;
  if (!rc) rc = sass ? nv.GetCUBIN(prog, *image) : nv.GetPTX(prog, *image);
  if (rc) {
    free(*image);
    *image = NULL;
    snprintf(why, wlen, "NVRTC: could not read the compiled %s (%d)", sass ? "CUBIN" : "PTX", rc);
    goto out;
  }
  snprintf(desc, dlen, "NVRTC %d.%d, %s_%d %s", vmaj, vmin, sass ? "sm" : "compute", arch,
           sass ? "CUBIN" : "PTX");
  remember(major * 10 + minor, *image, n, desc);
out:
  if (prog) nv.DestroyProgram(&prog);
  pthread_mutex_unlock(&nv_lock);
  return *image ? 0 : -1;
}
