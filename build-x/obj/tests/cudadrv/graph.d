build-w/obj/tests/cudadrv/graph.o: tests/cudadrv/graph.c \
 tests/cudadrv/cudadrv.h /usr/local/cuda/include/cuda.h \
 tests/cudadrv/cudadrv_hooks.h
tests/cudadrv/cudadrv.h:
/usr/local/cuda/include/cuda.h:
tests/cudadrv/cudadrv_hooks.h:
