build-w/obj/compress/cu_ctx.o: compress/cu_ctx.c compress/cu_ctx.h \
 compress/cu_abi.h compress/cu_driver.h /usr/local/cuda/include/cuda.h \
 compress/cu_nvrtc.h
compress/cu_ctx.h:
compress/cu_abi.h:
compress/cu_driver.h:
/usr/local/cuda/include/cuda.h:
compress/cu_nvrtc.h:
