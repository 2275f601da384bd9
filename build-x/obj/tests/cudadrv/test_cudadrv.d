build-w/obj/tests/cudadrv/test_cudadrv.o: tests/cudadrv/test_cudadrv.c \
 /usr/local/cuda/include/cuda.h compress/cast.h compress/cu_abi.h \
 tests/cudadrv/cudadrv_hooks.h tests/cudadrv/../tap.h
/usr/local/cuda/include/cuda.h:
compress/cast.h:
compress/cu_abi.h:
tests/cudadrv/cudadrv_hooks.h:
tests/cudadrv/../tap.h:
