build-pip/obj/tests/cudadrv/stream.o: tests/cudadrv/stream.c \
 tests/cudadrv/cudadrv.h \
 /root/.cache/ncclshim/torch-venv/lib/python3.11/site-packages/nvidia/cu13/include/cuda.h \
 tests/cudadrv/cudadrv_hooks.h
tests/cudadrv/cudadrv.h:
/root/.cache/ncclshim/torch-venv/lib/python3.11/site-packages/nvidia/cu13/include/cuda.h:
tests/cudadrv/cudadrv_hooks.h:
