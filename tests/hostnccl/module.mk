# tests/hostnccl/ — the NCCL API on host memory over Open MPI (libnccl.so.2),
# a test and emulation substrate for machines without a GPU, and its tests.
HOSTNCCL_SRCS := $(filter-out tests/hostnccl/test_%.c,$(sort $(wildcard tests/hostnccl/*.c)))
HOSTNCCL_OBJS := $(HOSTNCCL_SRCS:%.c=$(B)/obj/%.o)
HOSTNCCL_LIB  := $(B)/lib/hostnccl/libnccl.so.2

# -ffp-contract=off: every reduction result is rounded as written (no fused
# multiply-add), so results match the documented order bit for bit.
$(HOSTNCCL_OBJS): CC_FOR := $(MPICC)
$(HOSTNCCL_OBJS): EXTRA_CFLAGS := -fvisibility=hidden -ffp-contract=off -Itests/hostnccl $(NCCL_INC)

$(HOSTNCCL_LIB): $(HOSTNCCL_OBJS) tests/hostnccl/hostnccl.map
	@mkdir -p $(@D)
	$(MPICC) -shared -o $@ $(HOSTNCCL_OBJS) -Wl,-soname,libnccl.so.2 \
	  -Wl,--version-script=tests/hostnccl/hostnccl.map -Wl,-z,defs -Wl,-z,noexecstack \
	  $(LDFLAGS_BASE) -lpthread -lm -ldl
	ln -sf libnccl.so.2 $(@D)/libnccl.so

all: $(HOSTNCCL_LIB)

# Test programs: MPI programs linked against the host NCCL (-L... -lnccl, found
# at run time through LD_LIBRARY_PATH like the real one), and the numeric unit
# test linked with numeric.o directly (cmocka, no MPI).
HOSTNCCL_TEST_MPI := $(B)/tests/test_hostnccl_coll $(B)/tests/test_hostnccl_api
HOSTNCCL_TEST_OBJS := $(patsubst %.c,$(B)/obj/%.o,$(wildcard tests/hostnccl/test_*.c))
$(HOSTNCCL_TEST_OBJS): CC_FOR := $(MPICC)
$(HOSTNCCL_TEST_OBJS): EXTRA_CFLAGS := -Itests/hostnccl $(NCCL_INC)

$(HOSTNCCL_TEST_MPI): $(B)/tests/%: $(B)/obj/tests/hostnccl/%.o $(HOSTNCCL_LIB)
	@mkdir -p $(@D)
	$(MPICC) -o $@ $< -L$(B)/lib/hostnccl -lnccl $(LDFLAGS_BASE) -lpthread -lm -ldl

$(B)/tests/test_hostnccl_numeric: $(B)/obj/tests/hostnccl/test_hostnccl_numeric.o $(B)/obj/tests/hostnccl/numeric.o
	@mkdir -p $(@D)
	$(MPICC) -o $@ $^ $(LDFLAGS_BASE) -lcmocka -lm

TEST_BINS += $(HOSTNCCL_TEST_MPI) $(B)/tests/test_hostnccl_numeric

# The nccl.h the host NCCL is built against (tests/t/20-hostnccl.sh checks
# that every entry point it declares is exported).
.PHONY: print-nccl-header
print-nccl-header:
	@echo $(NCCL_HOME)/include/nccl.h
