/* kernels_host.cc — compress/kernels.cu itself, compiled for the CPU on the
 * execution model of simt.h, and the table simt_kernels.h exports: each
 * kernel of cu_abi.h's NSC_KERNEL_NAMES with the parameter layout its own
 * signature has (every parameter at its alignment, as a CUDA parameter
 * buffer) and a caller that unpacks cuLaunchKernel-style arguments into it.
 *
 * The layout comes from the compiled signature, not from a hand-written
 * table, so a launcher and a kernel that disagree on a parameter's type are
 * seen by the double (its per-kernel contract names the sizes it expects).
 *
 * Must not: define kernels of its own or change kernels.cu's behaviour: the
 * only host-specific code in kernels.cu is behind !__CUDA_ARCH__ (the fp16
 * conversion instructions and the vector-access check). */
#include "simt.h"

#include "kernels.cu"

#include <utility>

#include "simt_kernels.h"

namespace {

template <typename... A> constexpr simt_kernel layout(const char *name, void (*)(A...)) {
  static_assert(sizeof...(A) <= SIMT_MAXP, "more parameters than simt_kernel holds");
  simt_kernel k{};
  k.name = name;
  uint32_t o = 0;
  int i = 0;
  ((o = (uint32_t)((o + alignof(A) - 1) / alignof(A) * alignof(A)), k.off[i] = o, k.size[i] = sizeof(A),
    o += (uint32_t)sizeof(A), i++),
   ...);
  k.np = i;
  k.total = o;
  return k;
}

template <typename... A, size_t... I>
void invoke(void (*f)(A...), void *const *args, std::index_sequence<I...>) {
  f(*static_cast<A *>(args[I])...);
}

template <typename... A> struct caller {
  template <void (*F)(A...)> static void run(void *const *args) {
    invoke(F, args, std::index_sequence_for<A...>{});
  }
};
template <typename... A> caller<A...> caller_of(void (*)(A...));

#define SIMT_ENTRY(n)                                                                                   \
  [] {                                                                                                  \
    simt_kernel k = layout("nsc_k_" #n, nsc_k_##n);                                                     \
    k.call = &decltype(caller_of(nsc_k_##n))::template run<nsc_k_##n>;                                  \
    return k;                                                                                           \
  }(),
const simt_kernel table[] = {NSC_KERNEL_NAMES(SIMT_ENTRY)};

}  // namespace

extern "C" const simt_kernel *simt_kernel_find(const char *name) {
  for (const simt_kernel &k : table)
    if (!strcmp(k.name, name)) return &k;
  return NULL;
}
