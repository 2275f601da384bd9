# bench/twophase_link.mk — $(B)/bin/twophase_link: fp32 two-phase over
# send/recv against the fp32 ring on the emulated link (an MPI program linked
# like allreduce_perf; the shim is never linked).
TL_BIN := $(B)/bin/twophase_link
$(B)/obj/bench/twophase_link.o: CC_FOR := $(MPICC)
$(B)/obj/bench/twophase_link.o: EXTRA_CFLAGS := $(NCCL_INC)
$(TL_BIN): $(B)/obj/bench/twophase_link.o $(AP_NCCL_DEP)
	@mkdir -p $(@D)
	$(MPICC) -o $@ $< $(LDFLAGS_BASE) -Wl,--enable-new-dtags $(AP_NCCL_LIBS)
all: $(TL_BIN)
