# ncclshim top-level build.
#
#   make            build the shim, the host NCCL (test substrate) and the benchmarks
#   make demo       install what is missing, build, run the 4-rank demo
#   make test       install what is missing, build, run every test (ends "N passed, N failed")
#   make test-san   only the sanitizer runs: ASan+UBSan, TSan, memcheck (part of `make test`)
#   make test-frameworks  installs transformers, Lightning and DeepSpeed into the torch venv and runs
#                   unmodified accelerate, Trainer, Lightning and DeepSpeed scripts under
#                   ncclshim-run --emulate (tests/frameworks/run.sh; about 7.5 minutes, not part of `make test`)
#   make deps       apt-get only what is missing
#   make env-doc    regenerate docs/environment.md's table from shim/config/config.def, and the
#                   formats' table (docs/collectives.md) and env/ncclshim/formats.py from compress/formats.h
#   make gpu-check  on a machine with a GPU (pip PyTorch, toolkit optional): driver, kernels and
#                   their bandwidth, PyTorch's NCCL with and without the shim, DDP (tests/gpu/check.sh)
#   make gpu-bench  right after gpu-check: all-reduces and a DDP step with and without the shim, 2 ranks
#                   sharing the GPU (quick; GPU_BENCH_MODE=full: every format and preset, 2 and 4 ranks),
#                   one table with the goals (tests/gpu/bench.sh)
#   make gpu-run    the one command for a GPU machine: build, gpu-check, quick gpu-bench, one summary
#                   file ($(B)/gpu-summary.txt); about 5.5 minutes on an H200 (tests/gpu/run.sh)
#
# Each directory contributes a module.mk; this file holds only what they share.

NVCC_PATH := $(shell command -v nvcc 2>/dev/null)
ifeq ($(origin CUDA_HOME),undefined)
  ifneq ($(NVCC_PATH),)
    CUDA_HOME := $(patsubst %/bin/nvcc,%,$(realpath $(NVCC_PATH)))
  else
    CUDA_HOME := /usr/local/cuda
  endif
endif
NCCL_HOME ?= $(CUDA_HOME)
# GPU images often carry NCCL as PyTorch's pip wheel (nvidia-nccl-*), not in
# the toolkit: use the wheel's headers when the toolkit has none.
ifeq ($(wildcard $(NCCL_HOME)/include/nccl.h),)
  PY_NCCL := $(shell python3 -c 'import nvidia.nccl; print(list(nvidia.nccl.__path__)[0])' 2>/dev/null)
  ifneq ($(wildcard $(PY_NCCL)/include/nccl.h),)
    NCCL_HOME := $(PY_NCCL)
  endif
endif
NVCC ?= $(if $(NVCC_PATH),$(NVCC_PATH),$(wildcard $(CUDA_HOME)/bin/nvcc))
# cuda.h (types and prototypes only: libcuda is dlopen'ed): the toolkit's, else
# the one pip PyTorch's CUDA wheels bring (nvidia/cu13/include, or the CUDA 12
# wheels' nvidia/cuda_runtime/include).
CUDA_INC ?= $(CUDA_HOME)/include
ifeq ($(wildcard $(CUDA_INC)/cuda.h),)
  PY_CUDA_INC := $(shell python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, d, "include") for p in nvidia.__path__ for d in ("cu13", "cuda_runtime")))' 2>/dev/null)
  ifneq ($(firstword $(wildcard $(addsuffix /cuda.h,$(PY_CUDA_INC)))),)
    CUDA_INC := $(patsubst %/cuda.h,%,$(firstword $(wildcard $(addsuffix /cuda.h,$(PY_CUDA_INC)))))
  endif
endif

# B: build directory; SAN=1 builds everything with ASan+UBSan into build-san.
SAN ?=
ifeq ($(SAN),1)
  # A B inherited from the environment (tests/run.sh exports one) must not
  # put sanitizer objects into the normal build; only `make B=... SAN=1` may.
  ifneq ($(origin B),command line)
    B := build-san
  endif
  SANFLAGS := -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
else
  B ?= build
  SANFLAGS :=
endif

CC      ?= gcc
MPICC   ?= mpicc
OPT     ?= -O2
WARN    := -Wall -Wextra -Werror
CFLAGS_BASE := -std=gnu11 $(OPT) -g -fPIC $(WARN) $(SANFLAGS) -D_GNU_SOURCE
NCCL_INC := -I$(NCCL_HOME)/include -I$(CUDA_INC)
# The shim's folders, one concern each (shim/module.mk).
SHIM_DIRS := shim shim/accum shim/agree shim/backend shim/coll shim/config shim/diag shim/ef shim/exec shim/fabric shim/hooks shim/log shim/msg shim/plan shim/queue shim/staging shim/topo
# compress/: config.h names the formats of compress/formats.h
SHIM_INC := $(addprefix -I,$(SHIM_DIRS)) -Icompress
LDFLAGS_BASE := $(SANFLAGS)

HAVE_NVCC := $(if $(NVCC),1,)
HAVE_NCCL_H := $(if $(wildcard $(NCCL_HOME)/include/nccl.h),1,)

.PHONY: all deps demo test test-san test-frameworks test-build env-doc gpu-check gpu-bench gpu-run clean
all:

# Fragments: the shim and its numeric core first (others name SHIM_LIB), then
# the host NCCL and the CUDA driver test double, the benchmarks (bench/*.mk),
# the tests (tests/*.mk), env/.
include compress/module.mk
include shim/module.mk
include tests/hostnccl/module.mk
include tests/simt/module.mk
include tests/cudadrv/module.mk
include $(sort $(wildcard bench/*.mk))
include $(sort $(wildcard tests/*.mk))
-include env/module.mk

# One compile rule for every C object; a module sets CC_FOR and EXTRA_CFLAGS
# on its own objects as target-specific variables.
CC_FOR ?= $(CC)
$(B)/obj/%.o: %.c
	@mkdir -p $(@D)
	$(CC_FOR) $(CFLAGS_BASE) $(EXTRA_CFLAGS) -MMD -MP -c $< -o $@

-include $(shell find $(B)/obj -name '*.d' 2>/dev/null)

deps:
	@./tests/install-deps.sh

# The two commands of the README. Dependencies are installed first, then the
# build runs in a sub-make (so a fresh machine gets mpicc before it is used).
test: deps
	@$(MAKE) --no-print-directory -j2 test-build
	@B=$(B) ./tests/run.sh

# Only the sanitizer part of the suite (it builds build-san/ itself).
test-san: deps
	@$(MAKE) --no-print-directory -j2 test-build
	@B=$(B) ./tests/run.sh 90-sanitizers

# Not part of `make test`: it downloads three frameworks once (cached in the venv).
test-frameworks: deps
	@./tests/install-deps.sh --frameworks
	@$(MAKE) --no-print-directory -j2 all
	@B=$(B) ./tests/frameworks/run.sh

demo: deps
	@$(MAKE) --no-print-directory -j2 all
	@B=$(B) DEMO_GBPS=$(DEMO_GBPS) ./bench/demo.sh

DEMO_GBPS ?= 1

# docs/environment.md's table, generated from shim/config/config.def.
$(B)/bin/ncclshim-envdoc: shim/tools/envdoc.c $(B)/obj/shim/config/config.o $(B)/obj/compress/formats.o
	@mkdir -p $(@D)
	$(CC) $(CFLAGS_BASE) $(SHIM_INC) -o $@ $^ -lpthread
env-doc: $(B)/bin/ncclshim-envdoc
	@$< > $(B)/env-table.md
	@python3 tests/splice.py docs/environment.md env-table $(B)/env-table.md
	@$< --formats > $(B)/formats-table.md
	@python3 tests/splice.py docs/collectives.md formats-table $(B)/formats-table.md
	@$< --formats-py > env/ncclshim/formats.py
	@echo "docs/environment.md, docs/collectives.md's formats, env/ncclshim/formats.py: regenerated"
TEST_BINS += $(B)/bin/ncclshim-envdoc

# The shim's parser as a program: ncclshim-run and `python -m ncclshim --check`
# check an environment with it before a job starts (shim/tools/envcheck.c).
$(B)/bin/ncclshim-envcheck: shim/tools/envcheck.c $(B)/obj/shim/config/config.o $(B)/obj/compress/formats.o
	@mkdir -p $(@D)
	$(CC) $(CFLAGS_BASE) $(SHIM_INC) -o $@ $^ -lpthread
all: $(B)/bin/ncclshim-envcheck

# Needs a GPU, its driver and a real libnccl (see tests/gpu/check.sh). Only
# the shim and the kernel checker are required here: GPU machines may have no
# Open MPI, and check.sh builds the MPI benchmark only where mpicc exists.
gpu-check: $(SHIM_LIB)
	@B=$(B) ./tests/gpu/check.sh

# The GPU numbers (tests/gpu/bench.sh): the shim, the host NCCL (for
# --emulate) and PyTorch; quick: about 70 s on one GPU, GPU_BENCH_MODE=full
# 5 to 6 minutes (estimated).
gpu-bench: $(SHIM_LIB) $(B)/bin/ncclshim-envdoc
	@B=$(B) ./tests/gpu/bench.sh

# Build, gpu-check and the quick gpu-bench, one summary ($(B)/gpu-summary.txt).
gpu-run:
	@B=$(B) ./tests/gpu/run.sh

clean:
	rm -rf build build-san

# Everything the test scripts run (fragments and this file add to TEST_BINS).
test-build: all $(TEST_BINS)

.SECONDARY:
