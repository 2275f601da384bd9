build-pip/obj/tests/cudadrv/test_cudadrv.o: tests/cudadrv/test_cudadrv.c \
 /root/.cache/ncclshim/torch-venv/lib/python3.11/site-packages/nvidia/cu13/include/cuda.h \
 compress/cast.h compress/cu_abi.h tests/cudadrv/cudadrv_hooks.h \
 tests/cudadrv/../tap.h
/root/.cache/ncclshim/torch-venv/lib/python3.11/site-packages/nvidia/cu13/include/cuda.h:
compress/cast.h:
compress/cu_abi.h:
tests/cudadrv/cudadrv_hooks.h:
tests/cudadrv/../tap.h:
