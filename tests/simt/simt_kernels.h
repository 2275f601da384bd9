/* simt_kernels.h — the C interface of the kernels of compress/kernels.cu
 * compiled for the CPU (tests/simt): find a kernel by name, read the
 * parameter layout its compiled signature has, launch it on a grid of
 * fibers. Used by the CUDA driver test double (tests/cudadrv/module.c).
 *
 * Must not: translate pointers (arguments are host addresses here: the
 * caller maps device pointers to its host views first) or run anything
 * concurrently within one launch. */
#ifndef NSC_SIMT_KERNELS_H
#define NSC_SIMT_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SIMT_MAXP 8

/* One kernel: its parameters' offsets and sizes as the compiler laid out its
 * signature (each at its own alignment, as a CUDA parameter buffer), and a
 * caller that runs it for the current thread with args[i] pointing at
 * parameter i (cuLaunchKernel's convention). */
typedef struct simt_kernel_ {
  const char *name;
  int np;
  uint32_t off[SIMT_MAXP], size[SIMT_MAXP];
  uint32_t total; /* bytes of the parameter buffer */
  void (*call)(void *const *args);
} simt_kernel;

/* Kernel `name` (e.g. "nsc_k_to_f16"), or NULL. */
const simt_kernel *simt_kernel_find(const char *name);

/* Runs k on grid x block threads (x dimension only), blocks one after
 * another, on the calling thread. Returns NULL, or a message saying why the
 * launch faulted (misaligned vector access, barrier deadlock, bad shuffle
 * mask, bad launch), valid until the thread's next launch; a faulted launch
 * stops at the faulting block, as a kernel the GPU aborts. */
const char *simt_launch(const simt_kernel *k, unsigned grid, unsigned block, void *const *args);

/* Process-wide counts since start, for tests that must see a path taken. */
typedef struct {
  uint64_t launches, blocks, barriers, shuffles;
  uint64_t vec_accesses; /* vector loads and stores (NSC_LD_VEC/NSC_ST_VEC) */
  uint64_t faults;
  /* Global memory as the kernels' own accessors report it (kernels.cu: gld,
   * gst, ld_vec, st_vec): loads and stores, vector or not, and their bytes. */
  uint64_t loads, stores, load_bytes, store_bytes;
} simt_counts;
void simt_get_counts(simt_counts *out);

#ifdef __cplusplus
}
#endif
#endif
