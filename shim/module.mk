# shim/ — libncclshim.so: the interposer, its policy and its backends, linked
# with the host numeric core (compress/) and the embedded CUDA fatbin.
SHIM_SRCS := $(sort $(foreach d,$(SHIM_DIRS),$(wildcard $(d)/*.c)))
SHIM_OBJS := $(SHIM_SRCS:%.c=$(B)/obj/%.o)
SHIM_LIB  := $(B)/lib/libncclshim.so

# Thread-locals through TLS descriptors (x86-64; aarch64 uses them by
# default): a preloaded library's thread-local is then a load, not a call to
# __tls_get_addr, on every intercepted call (the forwarded path's cost).
SHIM_TLS := $(if $(filter x86_64,$(shell uname -m)),-mtls-dialect=gnu2)
$(SHIM_OBJS): EXTRA_CFLAGS := -fvisibility=hidden $(SHIM_TLS) $(SHIM_INC) -I$(B)/gen $(NCCL_INC)

$(SHIM_LIB): $(SHIM_OBJS) $(COMPRESS_OBJS) shim/ncclshim.map
	@mkdir -p $(@D)
	$(CC) -shared -o $@ $(SHIM_OBJS) $(COMPRESS_OBJS) -Wl,--version-script=shim/ncclshim.map \
	  -Wl,-z,defs -Wl,-z,noexecstack -Wl,-z,nodelete $(LDFLAGS_BASE) -ldl -lpthread -lm

all: $(SHIM_LIB)
