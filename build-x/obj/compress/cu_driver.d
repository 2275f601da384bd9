build-w/obj/compress/cu_driver.o: compress/cu_driver.c \
 compress/cu_driver.h /usr/local/cuda/include/cuda.h
compress/cu_driver.h:
/usr/local/cuda/include/cuda.h:
