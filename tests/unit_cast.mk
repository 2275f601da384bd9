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
# its bandwidth vs a device-to-device copy, through the shim's CUDA backend. It
# dlopens libcuda.so.1 like the shim (no CUDA runtime), so it runs on a GPU,
# on the driver test double (tests/t/15-cudadrv.sh) and without a driver (the
# host fallback, tests/t/10-cast.sh). Built always: without nvcc the kernels
# come from NVRTC at run time; `make gpu-kernels-check`, part of gpu-check.
CHECK_KERNELS := $(B)/tests/check_kernels
.PHONY: gpu-kernels-check
$(B)/obj/tests/gpu/check_kernels.o: EXTRA_CFLAGS := $(SHIM_INC) $(NCCL_INC)
$(CHECK_KERNELS): $(B)/obj/tests/gpu/check_kernels.o $(B)/obj/shim/backend/backend_cuda.o \
                  $(B)/obj/shim/backend/backend_host.o $(B)/obj/shim/backend/host_stream.o $(COMPRESS_OBJS)
	@mkdir -p $(@D)
	$(CC) -o $@ $^ $(LDFLAGS_BASE) -lpthread -lm -ldl
TEST_BINS += $(CHECK_KERNELS)
gpu-kernels-check: $(CHECK_KERNELS)
gpu-check: gpu-kernels-check

# The wire formats of the two-phase collectives (compress/wire.h).
TEST_WIRE := $(B)/tests/test_wire
$(B)/obj/tests/unit/test_wire.o: EXTRA_CFLAGS := -Icompress -ffp-contract=off
$(TEST_WIRE): $(B)/obj/tests/unit/test_wire.o $(COMPRESS_OBJS)
	@mkdir -p $(@D)
	$(CC) -o $@ $^ $(LDFLAGS_BASE) -lcmocka -lpthread -lm -ldl
TEST_BINS += $(TEST_WIRE)
