build-w/obj/tests/unit/test_ef_cuda.o: tests/unit/test_ef_cuda.c \
 /usr/local/cuda/include/cuda.h shim/backend/backend.h compress/cast.h \
 compress/wire.h compress/cast.h tests/cudadrv/tap_drv.h \
 tests/cudadrv/../tap.h
/usr/local/cuda/include/cuda.h:
shim/backend/backend.h:
compress/cast.h:
compress/wire.h:
compress/cast.h:
tests/cudadrv/tap_drv.h:
tests/cudadrv/../tap.h:
