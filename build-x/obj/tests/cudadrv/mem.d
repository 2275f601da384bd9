build-w/obj/tests/cudadrv/mem.o: tests/cudadrv/mem.c \
 tests/cudadrv/cudadrv.h /usr/local/cuda/include/cuda.h \
 tests/cudadrv/cudadrv_hooks.h
tests/cudadrv/cudadrv.h:
/usr/local/cuda/include/cuda.h:
tests/cudadrv/cudadrv_hooks.h:
