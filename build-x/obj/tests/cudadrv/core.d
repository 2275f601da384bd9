build-w/obj/tests/cudadrv/core.o: tests/cudadrv/core.c \
 tests/cudadrv/cudadrv.h /usr/local/cuda/include/cuda.h \
 tests/cudadrv/cudadrv_hooks.h
tests/cudadrv/cudadrv.h:
/usr/local/cuda/include/cuda.h:
tests/cudadrv/cudadrv_hooks.h:
