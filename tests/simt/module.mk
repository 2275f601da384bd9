# tests/simt/ — compress/kernels.cu compiled for the CPU with g++ on a small
# CUDA execution model (fibers per thread, barriers, lockstep shuffles,
# faulting misaligned vector accesses), linked into the CUDA driver test
# double so that it runs the real kernels, not host references. Never part of
# the shim. -ffp-contract=off matches the fatbin's --fmad=false. Every scalar
# load and store of a kernel is alignment-checked too (a GPU faults on a
# misaligned access; here the process stops on a trap: SIGILL).
SIMT_SRCS := tests/simt/simt.cc tests/simt/kernels_host.cc
SIMT_OBJS := $(SIMT_SRCS:%.cc=$(B)/obj/%.o)
CXX ?= g++
SIMT_CXXFLAGS := -std=c++17 $(OPT) -g -fPIC $(WARN) $(SANFLAGS) -D_GNU_SOURCE -ffp-contract=off \
  -fno-exceptions -fno-rtti -fvisibility=hidden -Wno-unknown-pragmas -Itests/simt -Icompress

$(B)/obj/tests/simt/kernels_host.o: SIMT_CXXFLAGS += -fsanitize=alignment -fsanitize-undefined-trap-on-error

$(B)/obj/tests/simt/%.o: tests/simt/%.cc
	@mkdir -p $(@D)
	$(CXX) $(SIMT_CXXFLAGS) -MMD -MP -c $< -o $@

# The execution model's own test (its kernels, its faults); run by tests/t/15-cudadrv.sh.
TEST_SIMT := $(B)/tests/test_simt
$(TEST_SIMT): $(B)/obj/tests/simt/test_simt.o $(B)/obj/tests/simt/simt.o
	@mkdir -p $(@D)
	$(CXX) -o $@ $^ $(LDFLAGS_BASE) -lpthread
TEST_BINS += $(TEST_SIMT)
