# shim/ — libncclshim.so: the interposer, its policy and its backends, linked
# with the host numeric core (compress/) and the embedded CUDA fatbin.
SHIM_SRCS := $(sort $(foreach d,$(SHIM_DIRS),$(wildcard $(d)/*.c)))
SHIM_OBJS := $(SHIM_SRCS:%.c=$(B)/obj/%.o)
SHIM_LIB  := $(B)/lib/libncclshim.so

$(SHIM_OBJS): EXTRA_CFLAGS := -fvisibility=hidden $(SHIM_INC) -Icompress -I$(B)/gen $(NCCL_INC)

$(SHIM_LIB): $(SHIM_OBJS) $(COMPRESS_OBJS) shim/ncclshim.map
	@mkdir -p $(@D)
	$(CC) -shared -o $@ $(SHIM_OBJS) $(COMPRESS_OBJS) -Wl,--version-script=shim/ncclshim.map \
	  -Wl,-z,defs -Wl,-z,noexecstack -Wl,-z,nodelete $(LDFLAGS_BASE) -ldl -lpthread -lm

all: $(SHIM_LIB)
