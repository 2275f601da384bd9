# tests/ef.mk — $(B)/tests/test_ef_cuda: the two-phase kernels (encode with
# and without error feedback / stochastic rounding, decode, decode-and-sum)
# through the shim's CUDA backend on the CUDA driver test double (the real
# kernels on tests/simt), bit for bit against the host reference; run by
# tests/t/46-ef.sh.
TEST_EF_CUDA := $(B)/tests/test_ef_cuda
$(B)/obj/tests/unit/test_ef_cuda.o: EXTRA_CFLAGS := $(SHIM_INC) -Itests/cudadrv -I$(CUDA_INC)
$(TEST_EF_CUDA): $(B)/obj/tests/unit/test_ef_cuda.o $(B)/obj/shim/backend/backend_cuda.o \
                 $(B)/obj/shim/backend/backend_host.o $(B)/obj/shim/backend/host_stream.o $(COMPRESS_OBJS) $(CUDADRV_LIB)
	@mkdir -p $(@D)
	$(CC) -o $@ $(filter %.o,$^) -L$(CUDADRV_DIR) -l:libcuda.so.1 -Wl,-rpath,$(abspath $(CUDADRV_DIR)) \
	  $(LDFLAGS_BASE) -lpthread -ldl -lm
TEST_BINS += $(TEST_EF_CUDA)

# The same program for `make gpu-check`: linked by soname without a run path,
# so a GPU machine runs it on its real libcuda.so.1 (and check.sh on the
# double puts the double first on LD_LIBRARY_PATH).
GPU_EF_CUDA := $(B)/tests/gpu_ef_cuda
$(GPU_EF_CUDA): $(B)/obj/tests/unit/test_ef_cuda.o \
                $(B)/obj/shim/backend/backend_cuda.o $(B)/obj/shim/backend/backend_host.o \
                $(B)/obj/shim/backend/host_stream.o $(COMPRESS_OBJS) $(CUDADRV_LIB)
	@mkdir -p $(@D)
	$(CC) -o $@ $(filter %.o,$^) -L$(CUDADRV_DIR) -l:libcuda.so.1 $(LDFLAGS_BASE) -lpthread -ldl -lm
TEST_BINS += $(GPU_EF_CUDA)
gpu-check: $(GPU_EF_CUDA)

# The error-feedback slots (shim/ef/ef.h), cmocka, with a stand-in backend.
$(B)/obj/tests/unit/test_ef.o: EXTRA_CFLAGS := $(SHIM_INC)
$(B)/tests/test_ef: $(B)/obj/tests/unit/test_ef.o $(B)/obj/shim/ef/ef.o
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS_BASE) -o $@ $^ -lcmocka
TEST_BINS += $(B)/tests/test_ef

# Global memory accesses per element of every kernel (issue 34): the
# kernels on tests/simt through the CUDA backend on the driver double;
# run by tests/t/46-ef.sh.
KERNEL_ACCESS := $(B)/tests/kernel_access
$(B)/obj/tests/unit/kernel_access.o: EXTRA_CFLAGS := $(SHIM_INC) -Itests/cudadrv -I$(CUDA_INC)
$(B)/obj/tests/unit/kernel_access.o: tests/unit/kernel_access.def
$(KERNEL_ACCESS): $(B)/obj/tests/unit/kernel_access.o $(B)/obj/shim/backend/backend_cuda.o \
                  $(B)/obj/shim/backend/backend_host.o $(B)/obj/shim/backend/host_stream.o $(COMPRESS_OBJS) $(CUDADRV_LIB)
	@mkdir -p $(@D)
	$(CC) -o $@ $(filter %.o,$^) -L$(CUDADRV_DIR) -l:libcuda.so.1 -Wl,-rpath,$(abspath $(CUDADRV_DIR)) \
	  $(LDFLAGS_BASE) -lpthread -ldl -lm
TEST_BINS += $(KERNEL_ACCESS)
