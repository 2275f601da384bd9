# bench/allreduce_perf.mk — $(B)/bin/allreduce_perf and reduce_scatter_perf,
# the nccl-tests-style benchmarks (MPI programs on one harness), and the
# harness's self-test.
#
# Built with mpicc. With nvcc and libcudart present it is CUDA-capable
# (device buffers when a GPU is visible at run time, host buffers otherwise);
# without, host buffers only. Linked against the real libnccl.so when there
# is one, else the host NCCL; either way LD_LIBRARY_PATH picks the libnccl.so.2
# at run time (RUNPATH, not RPATH, so it can). The shim is never linked.

AP_BIN      := $(B)/bin/allreduce_perf
RS_BIN      := $(B)/bin/reduce_scatter_perf
AP_SELFTEST := $(B)/tests/perf_selftest
AP_SRCS     := bench/perf_bench.c bench/perf_args.c bench/perf_data.c bench/perf_mem.c bench/perf_out.c

AP_CUDART := $(firstword $(wildcard $(CUDA_HOME)/lib64/libcudart.so $(CUDA_HOME)/lib/libcudart.so))
ifneq ($(and $(HAVE_NVCC),$(AP_CUDART)),)
  AP_SRCS      += bench/perf_mem_cuda.c
  AP_CUDA_DEFS := -DPERF_HAVE_CUDA
  AP_CUDA_LIBS := -L$(dir $(AP_CUDART)) -Wl,-rpath,$(dir $(AP_CUDART)) -lcudart
endif

# The real libnccl: the toolkit's libnccl.so, or the versioned libnccl.so.2
# alone (PyTorch's nvidia-nccl wheel has no unversioned link).
AP_NCCL_SO := $(firstword $(wildcard $(NCCL_HOME)/lib64/libnccl.so $(NCCL_HOME)/lib/libnccl.so \
                                     $(NCCL_HOME)/lib64/libnccl.so.2 $(NCCL_HOME)/lib/libnccl.so.2))
ifneq ($(AP_NCCL_SO),)
  AP_NCCL_DEP  :=
  AP_NCCL_LIBS := -L$(dir $(AP_NCCL_SO)) -l:$(notdir $(AP_NCCL_SO))
else
  AP_NCCL_DEP  := $(HOSTNCCL_LIB)
  AP_NCCL_LIBS := -L$(dir $(HOSTNCCL_LIB)) -l:libnccl.so.2
endif

AP_OBJS := $(AP_SRCS:%.c=$(B)/obj/%.o)
AP_SELFTEST_OBJS := $(B)/obj/bench/perf_selftest.o $(B)/obj/bench/perf_data.o $(B)/obj/bench/perf_args.o

AP_MAINS := $(B)/obj/bench/allreduce_perf.o $(B)/obj/bench/reduce_scatter_perf.o

$(AP_OBJS) $(AP_MAINS) $(AP_SELFTEST_OBJS): CC_FOR := $(MPICC)
$(AP_OBJS) $(AP_MAINS) $(AP_SELFTEST_OBJS): EXTRA_CFLAGS := -Ibench $(SHIM_INC) $(NCCL_INC) $(AP_CUDA_DEFS)

# One harness (perf_bench.c), one small file per collective (as nccl-tests).
$(AP_BIN) $(RS_BIN): $(B)/bin/%: $(B)/obj/bench/%.o $(AP_OBJS) $(AP_NCCL_DEP)
	@mkdir -p $(@D)
	$(MPICC) -o $@ $< $(AP_OBJS) $(LDFLAGS_BASE) -Wl,--enable-new-dtags $(AP_NCCL_LIBS) $(AP_CUDA_LIBS) -ldl -lm

# Pure host code (generator, checker, parser): no MPI, NCCL or CUDA at run time.
$(AP_SELFTEST): $(AP_SELFTEST_OBJS)
	@mkdir -p $(@D)
	$(CC) -o $@ $(AP_SELFTEST_OBJS) $(LDFLAGS_BASE) -lcmocka -lm

all: $(AP_BIN) $(RS_BIN)
TEST_BINS += $(AP_SELFTEST)
