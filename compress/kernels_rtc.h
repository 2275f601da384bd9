/* kernels_rtc.h — the start of the kernels' source as NVRTC compiles it
 * (compress/module.mk appends cast_bits.h, wire_bits.h, cu_abi.h and kernels.cu with their
 * #include lines removed): NVRTC has no C library headers, so the fixed-width
 * types those files take from <stdint.h> are declared here, with the sizes
 * the CUDA ABI gives them on 64-bit Linux.
 *
 * Must not: be included by C code, or declare anything but these types. */
typedef signed char int8_t;
typedef unsigned char uint8_t;
typedef short int16_t;
typedef unsigned short uint16_t;
typedef int int32_t;
typedef unsigned int uint32_t;
typedef long long int64_t;
typedef unsigned long long uint64_t;
typedef unsigned long long uintptr_t;
