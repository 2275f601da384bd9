build-w/obj/tests/gpu/check_kernels.o: tests/gpu/check_kernels.c \
 /usr/local/cuda/include/cuda.h shim/backend/backend.h compress/cast.h \
 compress/wire.h compress/cast.h tests/gpu/../tap.h
/usr/local/cuda/include/cuda.h:
shim/backend/backend.h:
compress/cast.h:
compress/wire.h:
compress/cast.h:
tests/gpu/../tap.h:
