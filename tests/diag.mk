# tests/diag.mk — the cmocka unit test of the diagnosis (tests/unit/test_diag.c):
# the step detector, the per-step accounting and the verdict rules, linked with
# the shim's own pure objects (no NCCL, MPI or GPU at run time); run by
# tests/t/55-diag.sh.
TEST_DIAG := $(B)/tests/test_diag
TEST_DIAG_OBJS := $(B)/obj/tests/unit/test_diag.o $(B)/obj/shim/diag/diag.o $(B)/obj/shim/diag/diag_nvml.o \
  $(B)/obj/shim/diag/diag_policy.o \
  $(B)/obj/shim/accum/accum.o

$(B)/obj/tests/unit/test_diag.o: EXTRA_CFLAGS := $(SHIM_INC) $(NCCL_INC)

$(TEST_DIAG): $(TEST_DIAG_OBJS)
	@mkdir -p $(@D)
	$(CC) -o $@ $^ $(LDFLAGS_BASE) -lcmocka -ldl -lpthread

TEST_BINS += $(TEST_DIAG)
