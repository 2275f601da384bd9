# tests/hostnccl/ — the NCCL API on host memory over Open MPI (libnccl.so.2).
HOSTNCCL_SRCS := $(sort $(wildcard tests/hostnccl/*.c))
HOSTNCCL_OBJS := $(HOSTNCCL_SRCS:%.c=$(B)/obj/%.o)
HOSTNCCL_LIB  := $(B)/lib/hostnccl/libnccl.so.2
