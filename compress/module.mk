# compress/ — host casts (scalar reference + vectorised paths chosen at run
# time) and the CUDA kernels: as an embedded fatbin when nvcc is present, and
# always as source for NVRTC at run time (compress/fatbin.S -> nsc_fatbin,
# nsc_fatbin_size, nsc_kernels_src), plus the driver-API loader, the NVRTC
# loader and the launchers (compress/cu_*.c) that the CUDA backend uses.
#
# Without nvcc (pip PyTorch, no toolkit) the library still compresses on GPU:
# the kernels are compiled at a device's first use by the libnvrtc.so.13 that
# the PyTorch wheel brings (compress/cu_nvrtc.c); cuda.h then comes from the
# wheel too (Makefile).
COMPRESS_SRCS := $(sort $(wildcard compress/*.c))
COMPRESS_OBJS := $(COMPRESS_SRCS:%.c=$(B)/obj/%.o)
$(COMPRESS_OBJS): EXTRA_CFLAGS := -fvisibility=hidden -Icompress
# Wire formats: no fused multiply-add (bit-identity between the reference,
# the vectorised path and the GPU), and -O3 so the block loops vectorise.
$(filter $(B)/obj/compress/wire%,$(COMPRESS_OBJS)): EXTRA_CFLAGS += -ffp-contract=off -O3
# The driver-API files take cuda.h for its types only (libcuda is dlopen'ed).
$(filter $(B)/obj/compress/cu_%,$(COMPRESS_OBJS)): EXTRA_CFLAGS += -I$(CUDA_INC)

# Kernels: SASS for the architectures we target plus PTX for newer ones.
KERNELS_FATBIN := $(B)/obj/compress/kernels.fatbin
NVCC_GENCODE := -gencode arch=compute_75,code=sm_75 -gencode arch=compute_80,code=sm_80 \
  -gencode arch=compute_86,code=sm_86 -gencode arch=compute_89,code=sm_89 \
  -gencode arch=compute_90,code=[sm_90,compute_90]
NVCC_FLAGS := -O3 -std=c++17 --fmad=false -Icompress -Xptxas=-Werror -Werror all-warnings

# kernels.mode records how the fatbin was made (nvcc and flags, or none), so
# a build that finds nvcc after one that did not (or the reverse) remakes it.
KERNELS_MODE := $(if $(HAVE_NVCC),$(NVCC) $(NVCC_GENCODE) $(NVCC_FLAGS),none)
KERNELS_MODE_FILE := $(B)/obj/compress/kernels.mode
$(shell mkdir -p $(B)/obj/compress && { [ "$$(cat $(KERNELS_MODE_FILE) 2>/dev/null)" = "$(KERNELS_MODE)" ] || echo "$(KERNELS_MODE)" > $(KERNELS_MODE_FILE); })

# KERNELS_FROM=FILE: another build's fatbin of this tree, copied where it was
# made the same way (its kernels.mode) from sources no newer than it: the
# sanitizer builds take the plain build's (device code takes no host
# sanitizer; nvcc takes half a minute a build).
KERNELS_SRCS := compress/kernels.cu compress/cast_bits.h compress/wire_bits.h compress/cu_abi.h compress/formats.h
ifeq ($(HAVE_NVCC),1)
$(KERNELS_FATBIN): $(KERNELS_SRCS) $(KERNELS_MODE_FILE)
	@mkdir -p $(@D)
	@if [ -n "$(KERNELS_FROM)" ] && [ -s "$(KERNELS_FROM)" ] && \
	    [ "$$(cat $(dir $(KERNELS_FROM))kernels.mode 2>/dev/null)" = "$(KERNELS_MODE)" ] && \
	    [ -z "$$(find $(KERNELS_SRCS) -newer $(KERNELS_FROM))" ]; then \
	  echo "cp $(KERNELS_FROM) $@"; cp $(KERNELS_FROM) $@; \
	else \
	  echo "$(NVCC) -fatbin $(NVCC_GENCODE) $(NVCC_FLAGS) -o $@ $<"; \
	  $(NVCC) -fatbin $(NVCC_GENCODE) $(NVCC_FLAGS) -o $@ $<; \
	fi
else
$(info compress: nvcc not found: no fatbin; the CUDA kernels will be compiled at run time by NVRTC (libnvrtc.so.13 from pip PyTorch))
$(KERNELS_FATBIN): $(KERNELS_MODE_FILE)
	@mkdir -p $(@D)
	@: > $@
endif

# The kernels' source as one file for NVRTC: a prelude with the fixed-width
# types, then the four headers and kernels.cu without their #include lines.
KERNELS_RTC := $(B)/obj/compress/kernels_rtc.cu
$(KERNELS_RTC): compress/kernels_rtc.h compress/formats.h compress/cast_bits.h compress/wire_bits.h compress/cu_abi.h compress/kernels.cu
	@mkdir -p $(@D)
	{ cat compress/kernels_rtc.h; sed '/^\#include/d' compress/formats.h compress/cast_bits.h compress/wire_bits.h compress/cu_abi.h compress/kernels.cu; } > $@

$(B)/obj/compress/fatbin.o: compress/fatbin.S $(KERNELS_FATBIN) $(KERNELS_RTC)
	@mkdir -p $(@D)
	$(CC) -c -DNSC_FATBIN='"$(KERNELS_FATBIN)"' -DNSC_KERNELS_RTC='"$(KERNELS_RTC)"' -o $@ $<

COMPRESS_OBJS += $(B)/obj/compress/fatbin.o
