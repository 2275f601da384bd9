#!/usr/bin/env bash
# 06-headers.sh — the build against both nccl.h (and cuda.h) we support: the
# main build uses the toolkit's (NCCL 2.28, CUDA 13.0); here the shim, the
# host NCCL and the CUDA driver double are built again from the headers of
# the wheels PyTorch 2.15 installs (nvidia/nccl: NCCL 2.30, nvidia/cu13:
# CUDA 13.2), without nvcc (kernels by NVRTC at run time), as on a pip-only
# machine (issue 24: NCCL 2.30's nccl.h makes ncclResetDebugInit an empty
# macro unless NCCL_OS_LINUX is defined, which stopped the build). Then the
# libraries so built run a two-phase all-reduce of the main build's test
# program: exact on every rank. (The double's own test program is built
# too, to compile against CUDA 13.2's cuda.h; it is run by 15-cudadrv, on
# the main build: without nvcc there is no fatbin for it to load.)
source "$(dirname "$0")/../lib.sh"
PY="$TORCH_VENV/bin/python"
W=$("$PY" -c 'import nvidia.nccl, os; print(os.path.dirname(list(nvidia.nccl.__path__)[0]))' 2>/dev/null)
if [ -z "$W" ] || [ ! -f "$W/nccl/include/nccl.h" ] || [ ! -f "$W/cu13/include/cuda.h" ]; then
  not_ok "the torch wheel's nvidia/nccl and nvidia/cu13 headers are not in $TORCH_VENV (make deps installs them)"
  exit 0
fi
ver() { sed -n 's/^#define NCCL_\(MAJOR\|MINOR\) \([0-9]*\).*/\2/p' "$1" | paste -sd.; }
check "the wheel's nccl.h is NCCL 2.30 (got $(ver "$W/nccl/include/nccl.h")), the toolkit's 2.28 (got $(ver "${NCCL_HOME:-/usr/local/cuda}/include/nccl.h"))" \
  test "$(ver "$W/nccl/include/nccl.h")" = 2.30 -a "$(ver "${NCCL_HOME:-/usr/local/cuda}/include/nccl.h")" = 2.28
BW="$TMPD/build-wheel"
check "make builds the shim, the host NCCL and the CUDA driver double against the wheels' nccl.h 2.30 and cuda.h 13.2, without nvcc" \
  make -C "$ROOT" --no-print-directory -j2 B="$BW" OPT=-O0 CUDA_HOME="$W/cu13" NCCL_HOME="$W/nccl" NVCC= \
    "$BW/lib/libncclshim.so" "$BW/lib/hostnccl/libnccl.so.2" "$BW/lib/cudadrv/libcuda.so.1" "$BW/tests/test_cudadrv"
check "the libraries built from the wheels' headers: a two-phase all-reduce on 3 ranks, exact on every rank" \
  with NCCLSHIM_COMPRESS=fp16 NCCLSHIM_ALGO=twophase NCCLSHIM_MIN_BYTES=0 NCCLSHIM_LOG=off NCCLSHIM_BANNER=0 \
    mpirun_checked -np 3 -x LD_LIBRARY_PATH="$BW/lib/hostnccl" -x LD_PRELOAD="$BW/lib/libncclshim.so" "$TBIN/shim_twophase" exact
