build-pip/obj/tests/cudadrv/module.o: tests/cudadrv/module.c \
 compress/cast_impl.h compress/cast.h compress/cu_abi.h \
 tests/cudadrv/cudadrv.h \
 /root/.cache/ncclshim/torch-venv/lib/python3.11/site-packages/nvidia/cu13/include/cuda.h \
 tests/cudadrv/cudadrv_hooks.h compress/wire.h
compress/cast_impl.h:
compress/cast.h:
compress/cu_abi.h:
tests/cudadrv/cudadrv.h:
/root/.cache/ncclshim/torch-venv/lib/python3.11/site-packages/nvidia/cu13/include/cuda.h:
tests/cudadrv/cudadrv_hooks.h:
compress/wire.h:
