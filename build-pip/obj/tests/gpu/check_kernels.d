build-pip/obj/tests/gpu/check_kernels.o: tests/gpu/check_kernels.c \
 /root/.cache/ncclshim/torch-venv/lib/python3.11/site-packages/nvidia/cu13/include/cuda.h \
 shim/backend/backend.h compress/cast.h compress/wire.h compress/cast.h \
 tests/gpu/../tap.h
/root/.cache/ncclshim/torch-venv/lib/python3.11/site-packages/nvidia/cu13/include/cuda.h:
shim/backend/backend.h:
compress/cast.h:
compress/wire.h:
compress/cast.h:
tests/gpu/../tap.h:
