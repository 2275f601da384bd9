# tests/shim_unit.mk — cmocka unit tests of the shim's pure parts, linked
# against the shim's own objects (no NCCL, no MPI, no GPU), and the
# libFuzzer target for the configuration parser (clang only).
UNIT_CFLAGS := $(SHIM_INC) $(NCCL_INC)
SHIM_PURE_OBJS := $(B)/obj/shim/config/config.o $(B)/obj/shim/plan/plan.o $(B)/obj/shim/plan/group.o $(B)/obj/shim/topo/topo.o $(B)/obj/shim/real.o

$(B)/obj/tests/unit/test_config.o $(B)/obj/tests/unit/test_core.o: EXTRA_CFLAGS := $(UNIT_CFLAGS)

$(B)/tests/test_config: $(B)/obj/tests/unit/test_config.o $(SHIM_PURE_OBJS)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS_BASE) -o $@ $^ -lcmocka -lpthread

$(B)/tests/test_core: $(B)/obj/tests/unit/test_core.o $(SHIM_PURE_OBJS)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS_BASE) -o $@ $^ -lcmocka -lpthread -ldl

TEST_BINS += $(B)/tests/test_config $(B)/tests/test_core

# libFuzzer: `make fuzz-config FUZZ_SECONDS=600` for a long run; the test
# suite runs a short one (tests/t/05-unit.sh).
FUZZ_SECONDS ?= 20
$(B)/tests/fuzz_config: tests/unit/fuzz_config.c shim/config/config.c shim/config/config.h shim/config/config.def
	@mkdir -p $(@D)
	clang -std=gnu11 -g -O1 -D_GNU_SOURCE -fsanitize=fuzzer,address,undefined $(SHIM_INC) -o $@ tests/unit/fuzz_config.c shim/config/config.c -lpthread

.PHONY: fuzz-config
fuzz-config: $(B)/tests/fuzz_config
	mkdir -p $(B)/fuzz-corpus && $(B)/tests/fuzz_config -max_total_time=$(FUZZ_SECONDS) $(B)/fuzz-corpus

# The two-phase plan and algorithm choice (shim/plan/tp_plan.h).
$(B)/obj/tests/unit/test_algo.o: EXTRA_CFLAGS := $(UNIT_CFLAGS)
$(B)/tests/test_algo: $(B)/obj/tests/unit/test_algo.o $(SHIM_PURE_OBJS)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS_BASE) -o $@ $^ -lcmocka -lpthread -ldl
TEST_BINS += $(B)/tests/test_algo

# The plans (shim/plan/plan.h): algorithms and steps over node maps.
$(B)/obj/tests/unit/test_plan.o: EXTRA_CFLAGS := $(UNIT_CFLAGS)
$(B)/tests/test_plan: $(B)/obj/tests/unit/test_plan.o $(SHIM_PURE_OBJS)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS_BASE) -o $@ $^ -lcmocka -lpthread -ldl
TEST_BINS += $(B)/tests/test_plan

# The host backend's side stream (shim/backend/host_stream.c).
$(B)/obj/tests/unit/test_host_stream.o: EXTRA_CFLAGS := $(UNIT_CFLAGS)
$(B)/tests/test_host_stream: $(B)/obj/tests/unit/test_host_stream.o $(B)/obj/shim/backend/backend_host.o \
                             $(B)/obj/shim/backend/host_stream.o $(COMPRESS_OBJS)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS_BASE) -o $@ $^ -lcmocka -lpthread -lm -ldl
TEST_BINS += $(B)/tests/test_host_stream

# A communicator's staging block (shim/staging/staging.h, block.c) on a counting backend.
$(B)/obj/tests/unit/test_staging.o: EXTRA_CFLAGS := $(UNIT_CFLAGS)
$(B)/tests/test_staging: $(B)/obj/tests/unit/test_staging.o $(B)/obj/shim/staging/block.o
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS_BASE) -o $@ $^ -lcmocka -lpthread
TEST_BINS += $(B)/tests/test_staging

# The node map (shim/topo/topo.h): built from node keys, described.
$(B)/obj/tests/unit/test_topo.o: EXTRA_CFLAGS := $(UNIT_CFLAGS)
$(B)/tests/test_topo: $(B)/obj/tests/unit/test_topo.o $(B)/obj/shim/topo/topo.o
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS_BASE) -o $@ $^ -lcmocka
TEST_BINS += $(B)/tests/test_topo

# The fabric learner (shim/fabric/fabric.h): the fit and its agreement.
$(B)/obj/tests/unit/test_fabric.o: EXTRA_CFLAGS := $(UNIT_CFLAGS)
$(B)/tests/test_fabric: $(B)/obj/tests/unit/test_fabric.o $(B)/obj/shim/fabric/fabric.o
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS_BASE) -o $@ $^ -lcmocka
TEST_BINS += $(B)/tests/test_fabric
