# compress/ — host casts (scalar reference + vectorised paths chosen at run
# time) and, when nvcc is present, the CUDA kernels as an embedded fatbin.
COMPRESS_SRCS := $(sort $(wildcard compress/*.c))
COMPRESS_OBJS := $(COMPRESS_SRCS:%.c=$(B)/obj/%.o)
$(COMPRESS_OBJS): EXTRA_CFLAGS := -fvisibility=hidden -Icompress
