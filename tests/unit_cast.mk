# tests/unit_cast.mk — the host cast unit tests (cmocka) and the GPU kernel
# checker, both run by tests/t/10-cast.sh (the checker only proves the host
# fallback there unless a GPU is present).
TEST_CAST := $(B)/tests/test_cast
$(B)/obj/tests/unit/test_cast.o: EXTRA_CFLAGS := -Icompress -Itests/unit

$(TEST_CAST): $(B)/obj/tests/unit/test_cast.o $(COMPRESS_OBJS)
	@mkdir -p $(@D)
	$(CC) -o $@ $^ $(LDFLAGS_BASE) -lcmocka -lpthread -lm -ldl

TEST_BINS += $(TEST_CAST)

# tests/gpu/check_kernels: every kernel bit for bit against the host casts and
# its bandwidth vs cudaMemcpy, through the shim's CUDA backend (built when
# nvcc and libcudart are present; `make gpu-kernels-check`, part of gpu-check).
CHECK_KERNELS := $(B)/tests/check_kernels
CK_CUDART := $(firstword $(wildcard $(CUDA_HOME)/lib64/libcudart.so $(CUDA_HOME)/lib/libcudart.so))
.PHONY: gpu-kernels-check
ifneq ($(and $(HAVE_NVCC),$(CK_CUDART)),)
$(B)/obj/tests/gpu/check_kernels.o: EXTRA_CFLAGS := $(SHIM_INC) -Icompress $(NCCL_INC)
$(CHECK_KERNELS): $(B)/obj/tests/gpu/check_kernels.o $(B)/obj/shim/backend/backend_cuda.o \
                  $(B)/obj/shim/backend/backend_host.o $(COMPRESS_OBJS)
	@mkdir -p $(@D)
	$(CC) -o $@ $^ $(LDFLAGS_BASE) -L$(dir $(CK_CUDART)) -Wl,-rpath,$(dir $(CK_CUDART)) \
	  -lcudart -lpthread -lm -ldl
TEST_BINS += $(CHECK_KERNELS)
gpu-kernels-check: $(CHECK_KERNELS)
else
gpu-kernels-check:
	@echo "gpu-kernels-check: needs nvcc and libcudart, not built"
endif
gpu-check: gpu-kernels-check

# The wire formats of the two-phase collectives (compress/wire.h).
TEST_WIRE := $(B)/tests/test_wire
$(B)/obj/tests/unit/test_wire.o: EXTRA_CFLAGS := -Icompress -ffp-contract=off
$(TEST_WIRE): $(B)/obj/tests/unit/test_wire.o $(COMPRESS_OBJS)
	@mkdir -p $(@D)
	$(CC) -o $@ $^ $(LDFLAGS_BASE) -lcmocka -lpthread -lm -ldl
TEST_BINS += $(TEST_WIRE)
