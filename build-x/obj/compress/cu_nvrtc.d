build-w/obj/compress/cu_nvrtc.o: compress/cu_nvrtc.c compress/cu_driver.h \
 /usr/local/cuda/include/cuda.h compress/cu_nvrtc.h
compress/cu_driver.h:
/usr/local/cuda/include/cuda.h:
compress/cu_nvrtc.h:
