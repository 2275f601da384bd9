# bench/ddp_step.mk — $(B)/bin/ddp_step, DDP's reducer emulated on MPI ranks
# (host buffers) with inputs exact by construction: the arithmetic proof of
# the shim's K-step accumulation (tests/t/40-accum.sh). Real PyTorch runs
# (tests/torch/, bench/ratios.sh torch, the demo) do the measuring.
#
# Built with mpicc against nccl.h and linked like allreduce_perf: against the
# real libnccl.so when there is one, else the host NCCL, with RUNPATH so that
# LD_LIBRARY_PATH picks the libnccl.so.2 at run time (tests use
# $(B)/lib/hostnccl). The shim is never linked (ncclshim_get_stats is found
# with dlsym). Sizes are parsed by perf_parse_size (bench/perf_args.c).

DDP_BIN  := $(B)/bin/ddp_step
DDP_SRCS := bench/ddp_step.c bench/ddp_opts.c bench/ddp_model.c bench/ddp_comm.c
DDP_OBJS := $(DDP_SRCS:%.c=$(B)/obj/%.o)
# perf_parse_size lives in perf_args.c, which needs perf_data.c's type tables.
DDP_SHARED_OBJS := $(B)/obj/bench/perf_args.o $(B)/obj/bench/perf_data.o

# The libnccl to link: allreduce_perf.mk's choice (real libnccl.so, else the
# host NCCL), so both benchmarks always link the same one.
DDP_NCCL_DEP  := $(AP_NCCL_DEP)
DDP_NCCL_LIBS := $(AP_NCCL_LIBS)
ifeq ($(DDP_NCCL_LIBS),)
  $(error bench/ddp_step.mk: AP_NCCL_LIBS from bench/allreduce_perf.mk is not set)
endif

$(DDP_OBJS): CC_FOR := $(MPICC)
$(DDP_OBJS): EXTRA_CFLAGS := -Ibench $(SHIM_INC) $(NCCL_INC)

$(DDP_BIN): $(DDP_OBJS) $(DDP_SHARED_OBJS) $(DDP_NCCL_DEP)
	@mkdir -p $(@D)
	$(MPICC) -o $@ $(DDP_OBJS) $(DDP_SHARED_OBJS) $(LDFLAGS_BASE) -Wl,--enable-new-dtags \
	  $(DDP_NCCL_LIBS) -ldl -lm

all: $(DDP_BIN)
TEST_BINS += $(DDP_BIN)
