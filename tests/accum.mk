# tests/accum.mk — the cmocka unit test of the accumulation state machine and
# of the policy's accumulable() predicate (tests/unit/test_accum.c), linked
# with the shim's own pure objects (no NCCL, MPI or GPU at run time); run by
# tests/t/40-accum.sh.
TEST_ACCUM := $(B)/tests/test_accum
TEST_ACCUM_OBJS := $(B)/obj/tests/unit/test_accum.o $(B)/obj/shim/accum/accum.o $(B)/obj/shim/plan/plan.o $(B)/obj/shim/plan/group.o $(B)/obj/shim/topo/topo.o \
  $(B)/obj/shim/config/config.o

$(B)/obj/tests/unit/test_accum.o: EXTRA_CFLAGS := $(SHIM_INC) $(NCCL_INC)

$(TEST_ACCUM): $(TEST_ACCUM_OBJS)
	@mkdir -p $(@D)
	$(CC) -o $@ $^ $(LDFLAGS_BASE) -lcmocka

TEST_BINS += $(TEST_ACCUM)
