# bench/log_overhead.mk — $(B)/bin/log_overhead: ns per call the shim and its
# log add to an 8-byte all-reduce (no preload vs LOG=off/summary/calls, side
# by side). Linked against the host NCCL (MPI program, 1 rank, run without
# mpirun); the shim is never linked, it comes through LD_PRELOAD.
LOG_OVERHEAD := $(B)/bin/log_overhead

$(B)/obj/bench/log_overhead.o: CC_FOR := $(MPICC)
$(B)/obj/bench/log_overhead.o: EXTRA_CFLAGS := $(NCCL_INC)

$(LOG_OVERHEAD): $(B)/obj/bench/log_overhead.o $(HOSTNCCL_LIB)
	@mkdir -p $(@D)
	$(MPICC) -o $@ $< -L$(dir $(HOSTNCCL_LIB)) -l:libnccl.so.2 $(LDFLAGS_BASE)

all: $(LOG_OVERHEAD)
