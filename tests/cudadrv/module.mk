# tests/cudadrv/ — the CUDA driver TEST DOUBLE: libcuda.so.1 on host memory
# (devices, contexts, streams on worker threads, events, capture, memory the
# host cannot touch, modules and the shim's kernels run on the host), put on
# LD_LIBRARY_PATH by tests that run the CUDA backend without a GPU; and its
# unit test. Never part of the shim (see tests/README.md).
CUDADRV_SRCS := $(filter-out tests/cudadrv/test_%.c tests/cudadrv/nccl_%.c,$(sort $(wildcard tests/cudadrv/*.c)))
CUDADRV_OBJS := $(CUDADRV_SRCS:%.c=$(B)/obj/%.o)
CUDADRV_DIR  := $(B)/lib/cudadrv
CUDADRV_LIB  := $(CUDADRV_DIR)/libcuda.so.1

$(CUDADRV_OBJS): EXTRA_CFLAGS := -fvisibility=hidden -Itests/cudadrv -Itests/simt -Icompress -I$(CUDA_HOME)/include

# Kernels run as compress/kernels.cu compiled for the CPU (tests/simt); the
# wire reference gives the double the formats' buffer sizes.
CUDADRV_REFS := $(SIMT_OBJS) $(B)/obj/compress/wire_ref.o $(B)/obj/compress/cast_scalar.o
$(CUDADRV_LIB): $(CUDADRV_OBJS) $(CUDADRV_REFS) tests/cudadrv/cudadrv.map
	@mkdir -p $(@D)
	$(CC) -shared -o $@ $(CUDADRV_OBJS) $(CUDADRV_REFS) -Wl,-soname,libcuda.so.1 \
	  -Wl,--version-script=tests/cudadrv/cudadrv.map -Wl,-z,defs -Wl,-z,noexecstack \
	  $(LDFLAGS_BASE) -lpthread -ldl -lm

# The unit test links the double directly (its hooks too) and loads the
# shim's fatbin from compress/fatbin.o.
TEST_CUDADRV := $(B)/tests/test_cudadrv
$(B)/obj/tests/cudadrv/test_cudadrv.o: EXTRA_CFLAGS := -Itests/cudadrv -Icompress -I$(CUDA_HOME)/include
CUDADRV_TEST_DEPS := $(B)/obj/tests/cudadrv/test_cudadrv.o $(B)/obj/compress/fatbin.o \
  $(filter $(B)/obj/compress/cast%,$(COMPRESS_OBJS))
$(TEST_CUDADRV): $(CUDADRV_TEST_DEPS) $(CUDADRV_LIB)
	@mkdir -p $(@D)
	$(CC) -o $@ $(filter %.o,$^) -L$(CUDADRV_DIR) -l:libcuda.so.1 -Wl,-rpath,'$$ORIGIN/../lib/cudadrv' $(LDFLAGS_BASE) -lpthread -ldl -lm

TEST_BINS += $(CUDADRV_LIB) $(TEST_CUDADRV)

# The host NCCL in stream order on the double (an MPI program).
CUDADRV_NCCL_TEST := $(B)/tests/cudadrv_nccl_streams
$(B)/obj/tests/cudadrv/nccl_streams.o: CC_FOR := $(MPICC)
$(B)/obj/tests/cudadrv/nccl_streams.o: EXTRA_CFLAGS := -Itests/cudadrv $(NCCL_INC)
$(CUDADRV_NCCL_TEST): $(B)/obj/tests/cudadrv/nccl_streams.o $(CUDADRV_LIB) $(HOSTNCCL_LIB)
	@mkdir -p $(@D)
	$(MPICC) -o $@ $< -L$(CUDADRV_DIR) -l:libcuda.so.1 -Wl,-rpath,'$$ORIGIN/../lib/cudadrv' \
	  -L$(B)/lib/hostnccl -lnccl $(LDFLAGS_BASE) -lpthread
TEST_BINS += $(CUDADRV_NCCL_TEST)
