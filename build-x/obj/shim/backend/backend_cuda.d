build-w/obj/shim/backend/backend_cuda.o: shim/backend/backend_cuda.c \
 shim/backend/backend.h compress/cast.h compress/wire.h compress/cast.h \
 compress/cu_kernels.h compress/wire.h compress/cu_ctx.h \
 compress/cu_abi.h compress/cu_driver.h /usr/local/cuda/include/cuda.h
shim/backend/backend.h:
compress/cast.h:
compress/wire.h:
compress/cast.h:
compress/cu_kernels.h:
compress/wire.h:
compress/cu_ctx.h:
compress/cu_abi.h:
compress/cu_driver.h:
/usr/local/cuda/include/cuda.h:
