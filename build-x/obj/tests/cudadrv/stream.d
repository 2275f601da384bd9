build-w/obj/tests/cudadrv/stream.o: tests/cudadrv/stream.c \
 tests/cudadrv/cudadrv.h /usr/local/cuda/include/cuda.h \
 tests/cudadrv/cudadrv_hooks.h
tests/cudadrv/cudadrv.h:
/usr/local/cuda/include/cuda.h:
tests/cudadrv/cudadrv_hooks.h:
