build-w/obj/compress/cu_kernels.o: compress/cu_kernels.c \
 compress/cu_kernels.h compress/cast.h compress/wire.h compress/cu_ctx.h \
 compress/cu_abi.h compress/cu_driver.h /usr/local/cuda/include/cuda.h
compress/cu_kernels.h:
compress/cast.h:
compress/wire.h:
compress/cu_ctx.h:
compress/cu_abi.h:
compress/cu_driver.h:
/usr/local/cuda/include/cuda.h:
