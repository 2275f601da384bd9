# tests/shim.mk — MPI test programs that exercise the shim over the host NCCL
# (linked against it; the shim comes in through LD_PRELOAD at run time).
SHIMTEST_PROGS := $(B)/tests/shim_abort $(B)/tests/exittest $(B)/tests/shimtest $(B)/tests/shim_twophase $(B)/tests/shim_half $(B)/tests/shim_ef $(B)/tests/shimfault $(B)/tests/shimfault_args $(B)/tests/shimfault_life $(B)/tests/shim_threads $(B)/tests/accumtest $(B)/tests/diagtest $(B)/tests/shim_launches
SHIMTEST_OBJS := $(SHIMTEST_PROGS:$(B)/tests/%=$(B)/obj/tests/shim/%.o)
$(SHIMTEST_OBJS): CC_FOR := $(MPICC)
$(SHIMTEST_OBJS): EXTRA_CFLAGS := $(SHIM_INC) $(NCCL_INC)

$(SHIMTEST_PROGS): $(B)/tests/%: $(B)/obj/tests/shim/%.o $(HOSTNCCL_LIB)
	@mkdir -p $(@D)
	$(MPICC) -o $@ $< -L$(B)/lib/hostnccl -lnccl $(LDFLAGS_BASE) -lpthread -lm -ldl

TEST_BINS += $(SHIMTEST_PROGS)
