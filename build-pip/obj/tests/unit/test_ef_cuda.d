build-pip/obj/tests/unit/test_ef_cuda.o: tests/unit/test_ef_cuda.c \
 /root/.cache/ncclshim/torch-venv/lib/python3.11/site-packages/nvidia/cu13/include/cuda.h \
 shim/backend/backend.h compress/cast.h compress/wire.h compress/cast.h \
 tests/cudadrv/tap_drv.h tests/cudadrv/../tap.h
/root/.cache/ncclshim/torch-venv/lib/python3.11/site-packages/nvidia/cu13/include/cuda.h:
shim/backend/backend.h:
compress/cast.h:
compress/wire.h:
compress/cast.h:
tests/cudadrv/tap_drv.h:
tests/cudadrv/../tap.h:
