build-w/obj/tests/cudadrv/module.o: tests/cudadrv/module.c \
 compress/cast_impl.h compress/cast.h compress/cu_abi.h \
 tests/cudadrv/cudadrv.h /usr/local/cuda/include/cuda.h \
 tests/cudadrv/cudadrv_hooks.h compress/wire.h
compress/cast_impl.h:
compress/cast.h:
compress/cu_abi.h:
tests/cudadrv/cudadrv.h:
/usr/local/cuda/include/cuda.h:
tests/cudadrv/cudadrv_hooks.h:
compress/wire.h:
