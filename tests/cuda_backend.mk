# tests/cuda_backend.mk — $(B)/tests/test_cuda_backend: the shim's CUDA
# backend (its objects, not the library) on the CUDA driver test double,
# linked against the double so its hooks resolve; run by
# tests/t/16-cuda-backend.sh.
TEST_CUDA_BACKEND := $(B)/tests/test_cuda_backend
$(B)/obj/tests/unit/test_cuda_backend.o: EXTRA_CFLAGS := $(SHIM_INC) -Itests/cudadrv -I$(CUDA_INC)
$(TEST_CUDA_BACKEND): $(B)/obj/tests/unit/test_cuda_backend.o $(B)/obj/shim/backend/backend_cuda.o \
                      $(B)/obj/shim/backend/backend_host.o $(B)/obj/shim/backend/host_stream.o $(B)/obj/shim/staging/block.o $(COMPRESS_OBJS) \
                      $(CUDADRV_LIB)
	@mkdir -p $(@D)
	$(CC) -o $@ $(filter %.o,$^) -L$(CUDADRV_DIR) -l:libcuda.so.1 -Wl,-rpath,$(abspath $(CUDADRV_DIR)) \
	  $(LDFLAGS_BASE) -lpthread -ldl -lm
TEST_BINS += $(TEST_CUDA_BACKEND)

# A libnvrtc.so.13 that cannot compile (tests/unit/nvrtc_stub.c).
NVRTC_STUB := $(B)/tests/stub/libnvrtc.so.13
$(NVRTC_STUB): tests/unit/nvrtc_stub.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS_BASE) -shared -fvisibility=hidden -Wl,-soname,libnvrtc.so.13 -o $@ $<
TEST_BINS += $(NVRTC_STUB)

# MPI programs over the host NCCL with the shim preloaded and the double
# linked (for its counters): a communicator's first all-reduces captured into
# a graph, fusion growth that must not wait, communicators ended with their
# exchanges in flight.
SHIM_CUDA_PROGS := $(B)/tests/shim_cuda_capture $(B)/tests/shim_cuda_grow $(B)/tests/shim_cuda_abort \
  $(B)/tests/shim_cuda_streams
SHIM_CUDA_OBJS := $(SHIM_CUDA_PROGS:$(B)/tests/%=$(B)/obj/tests/shim/%.o)
$(SHIM_CUDA_OBJS): CC_FOR := $(MPICC)
$(SHIM_CUDA_OBJS): EXTRA_CFLAGS := $(SHIM_INC) $(NCCL_INC) -Itests/shim -Itests/cudadrv
$(SHIM_CUDA_PROGS): $(B)/tests/%: $(B)/obj/tests/shim/%.o $(HOSTNCCL_LIB) $(CUDADRV_LIB)
	@mkdir -p $(@D)
	$(MPICC) -o $@ $< -L$(B)/lib/hostnccl -lnccl -L$(CUDADRV_DIR) -l:libcuda.so.1 \
	  -Wl,-rpath,$(abspath $(CUDADRV_DIR)) $(LDFLAGS_BASE) -lpthread -lm -ldl
TEST_BINS += $(SHIM_CUDA_PROGS)

# One thread driving several ranks (ncclCommInitAll, or under mpirun L ranks
# per process), device or host buffers: issue 23 defect 1, issue 37.
SHIM_ONETHREAD := $(B)/tests/shim_onethread
$(B)/obj/tests/shim/shim_onethread.o: CC_FOR := $(MPICC)
$(B)/obj/tests/shim/shim_onethread.o: EXTRA_CFLAGS := $(NCCL_INC)
$(SHIM_ONETHREAD): $(B)/obj/tests/shim/shim_onethread.o $(HOSTNCCL_LIB) $(CUDADRV_LIB)
	@mkdir -p $(@D)
	$(MPICC) -o $@ $< -L$(B)/lib/hostnccl -lnccl -Wl,-rpath,$(abspath $(CUDADRV_DIR)) $(LDFLAGS_BASE) -lpthread -ldl
TEST_BINS += $(SHIM_ONETHREAD)
