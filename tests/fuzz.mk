# tests/fuzz.mk — the differential fuzzer of the collectives every rank
# issues (tests/fuzz/README.md): the MPI program, its short run in
# `make test` (tests/t/45-fuzz.sh) and the long run:
#   make fuzz-collectives FUZZ_SECONDS=600 [FUZZ_FIRST_SEED=1]
FUZZ_COLL := $(B)/tests/fuzz_coll
$(B)/obj/tests/fuzz/fuzz_coll.o: CC_FOR := $(MPICC)
$(B)/obj/tests/fuzz/fuzz_coll.o: EXTRA_CFLAGS := $(SHIM_INC) $(NCCL_INC)

$(FUZZ_COLL): $(B)/obj/tests/fuzz/fuzz_coll.o $(HOSTNCCL_LIB)
	@mkdir -p $(@D)
	$(MPICC) -o $@ $< -L$(B)/lib/hostnccl -lnccl $(LDFLAGS_BASE) -lpthread -lm -ldl

TEST_BINS += $(FUZZ_COLL)

FUZZ_SECONDS ?= 600
FUZZ_FIRST_SEED ?= 1
.PHONY: fuzz-collectives
fuzz-collectives: test-build
	@B=$(B) tests/fuzz/fuzz.sh --seconds $(FUZZ_SECONDS) --first $(FUZZ_FIRST_SEED)
