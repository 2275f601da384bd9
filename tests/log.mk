# tests/log.mk — programs for tests/t/50-log.sh: logtest (a known all-reduce
# workload; MPI, linked against the host NCCL, the shim comes by LD_PRELOAD),
# a stand-in libnvToolsExt.so.1 that counts the shim's NVTX ranges, and
# test_log_unit (the log against a fake device backend).
LOGTEST   := $(B)/tests/logtest
FAKE_NVTX := $(B)/tests/log/libnvToolsExt.so.1

$(B)/obj/tests/log/logtest.o: CC_FOR := $(MPICC)
$(B)/obj/tests/log/logtest.o: EXTRA_CFLAGS := $(NCCL_INC)

$(LOGTEST): $(B)/obj/tests/log/logtest.o $(HOSTNCCL_LIB)
	@mkdir -p $(@D)
	$(MPICC) -o $@ $< -L$(B)/lib/hostnccl -lnccl $(LDFLAGS_BASE) -ldl

$(FAKE_NVTX): $(B)/obj/tests/log/fake_nvtx.o
	@mkdir -p $(@D)
	$(CC) -shared -o $@ $< -Wl,-soname,libnvToolsExt.so.1 $(LDFLAGS_BASE)

# The same counters as an NVTX3 tool (NVTX_INJECTION64_PATH), for pip PyTorch's way.
FAKE_NVTX_INJECT := $(B)/tests/log/libfake_nvtx_inject.so
$(FAKE_NVTX_INJECT): $(B)/obj/tests/log/fake_nvtx_inject.o $(B)/obj/tests/log/fake_nvtx.o
	@mkdir -p $(@D)
	$(CC) -shared -o $@ $^ $(LDFLAGS_BASE)

TEST_BINS += $(LOGTEST) $(FAKE_NVTX) $(FAKE_NVTX_INJECT)

# The log's hot path against a fake device backend (cmocka, no NCCL/MPI/GPU):
# the log's own objects plus stubs in the test for what they call elsewhere.
TEST_LOG_UNIT := $(B)/tests/test_log_unit
TEST_LOG_UNIT_OBJS := $(B)/obj/tests/log/test_log_unit.o \
  $(addprefix $(B)/obj/shim/log/,log_rec.o log_fmt.o log_out.o log_trace.o log_nvtx.o log_writer.o) \
  $(addprefix $(B)/obj/shim/diag/,diag.o diag_nvml.o diag_policy.o) $(B)/obj/shim/accum/accum.o \
  $(B)/obj/compress/formats.o
$(B)/obj/tests/log/test_log_unit.o: EXTRA_CFLAGS := $(SHIM_INC) $(NCCL_INC)

$(TEST_LOG_UNIT): $(TEST_LOG_UNIT_OBJS)
	@mkdir -p $(@D)
	$(CC) -o $@ $^ $(LDFLAGS_BASE) -lcmocka -ldl -lpthread

TEST_BINS += $(TEST_LOG_UNIT)
