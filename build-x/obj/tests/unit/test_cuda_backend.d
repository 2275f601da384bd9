build-w/obj/tests/unit/test_cuda_backend.o: \
 tests/unit/test_cuda_backend.c /usr/local/cuda/include/cuda.h \
 shim/backend/backend.h compress/cast.h compress/wire.h compress/cast.h \
 tests/cudadrv/cudadrv_hooks.h shim/backend/staging.h \
 shim/backend/backend.h tests/cudadrv/tap_drv.h tests/cudadrv/../tap.h
/usr/local/cuda/include/cuda.h:
shim/backend/backend.h:
compress/cast.h:
compress/wire.h:
compress/cast.h:
tests/cudadrv/cudadrv_hooks.h:
shim/backend/staging.h:
shim/backend/backend.h:
tests/cudadrv/tap_drv.h:
tests/cudadrv/../tap.h:
