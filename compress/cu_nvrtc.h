/* cu_nvrtc.h — the CUDA kernels compiled at run time by NVRTC, for builds
 * made without nvcc (pip PyTorch brings libnvrtc.so.13 but no toolkit) and
 * for a fatbin the driver rejects.
 *
 * The source is kernels.cu with its two headers inlined (nsc_kernels_src,
 * compress/module.mk). libnvrtc is dlopen'ed: by soname, else next to a
 * loaded CUDA wheel library (site-packages/nvidia/cu13/lib, cuda_nvrtc/lib).
 * A device whose architecture NVRTC compiles to SASS gets a CUBIN (no JIT,
 * runs on any driver of that CUDA major version); a newer one PTX for the
 * highest architecture NVRTC knows, which the driver compiles.
 *
 * Must not: link libnvrtc, exit, or print. Not for the hook path of a
 * captured call (a compilation takes about a second, once per device). */
#ifndef NSC_CU_NVRTC_H
#define NSC_CU_NVRTC_H

#include <stddef.h>

/* A loadable image for a device of compute capability major.minor: *image is
 * malloc'ed (free it after cuModuleLoadData). desc says what it is ("NVRTC
 * 13.2, sm_90 CUBIN"); on failure -1 and why says what failed. */
int nsc_nvrtc_image(int major, int minor, void **image, char *desc, size_t dlen, char *why,
                    size_t wlen);

#endif
