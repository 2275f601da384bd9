#!/usr/bin/env bash
# 20-hostnccl-bigcount.sh — the host NCCL with counts >= 2^31 elements (MPI
# counts are int: every message goes in slices): in-place int8 allreduce and
# bcast of 2^31+5 elements on 2 ranks, checked element by element.
# Needs 2 GiB per rank; most of its time is the VM faulting those pages in.
# Must not: run with more ranks (memory) or assert timings.
source "$(dirname "$0")/../lib.sh"
mpirun_host 2 "$TBIN/test_hostnccl_api" bigcount || not_ok "test_hostnccl_api bigcount exited $?"
