build-w/obj/shim/diag/diag.o: shim/diag/diag.c shim/diag/diag.h \
 shim/accum/accum.h shim/diag/diag_nvml.h shim/log/log.h \
 /usr/local/cuda/include/nccl.h /usr/local/cuda/include/cuda_runtime.h \
 /usr/local/cuda/include/crt/host_config.h \
 /usr/local/cuda/include/builtin_types.h \
 /usr/local/cuda/include/device_types.h \
 /usr/local/cuda/include/crt/host_defines.h \
 /usr/local/cuda/include/driver_types.h \
 /usr/local/cuda/include/vector_types.h \
 /usr/local/cuda/include/surface_types.h \
 /usr/local/cuda/include/texture_types.h \
 /usr/local/cuda/include/library_types.h \
 /usr/local/cuda/include/channel_descriptor.h \
 /usr/local/cuda/include/cuda_runtime_api.h \
 /usr/local/cuda/include/cuda_device_runtime_api.h \
 /usr/local/cuda/include/driver_functions.h \
 /usr/local/cuda/include/vector_functions.h \
 /usr/local/cuda/include/vector_functions.hpp \
 /usr/local/cuda/include/cuda_fp16.h /usr/local/cuda/include/nv/target \
 /usr/local/cuda/include/nv/detail/__target_macros \
 /usr/local/cuda/include/nv/detail/__preprocessor \
 /usr/local/cuda/include/cuda_fp16.hpp \
 /usr/local/cuda/include/cuda_bf16.h /usr/local/cuda/include/cuda_fp16.h \
 /usr/local/cuda/include/cuda_bf16.hpp shim/backend/backend.h \
 compress/cast.h compress/wire.h compress/cast.h shim/misc/config.h \
 shim/misc/config.def shim/policy.h
shim/diag/diag.h:
shim/accum/accum.h:
shim/diag/diag_nvml.h:
shim/log/log.h:
/usr/local/cuda/include/nccl.h:
/usr/local/cuda/include/cuda_runtime.h:
/usr/local/cuda/include/crt/host_config.h:
/usr/local/cuda/include/builtin_types.h:
/usr/local/cuda/include/device_types.h:
/usr/local/cuda/include/crt/host_defines.h:
/usr/local/cuda/include/driver_types.h:
/usr/local/cuda/include/vector_types.h:
/usr/local/cuda/include/surface_types.h:
/usr/local/cuda/include/texture_types.h:
/usr/local/cuda/include/library_types.h:
/usr/local/cuda/include/channel_descriptor.h:
/usr/local/cuda/include/cuda_runtime_api.h:
/usr/local/cuda/include/cuda_device_runtime_api.h:
/usr/local/cuda/include/driver_functions.h:
/usr/local/cuda/include/vector_functions.h:
/usr/local/cuda/include/vector_functions.hpp:
/usr/local/cuda/include/cuda_fp16.h:
/usr/local/cuda/include/nv/target:
/usr/local/cuda/include/nv/detail/__target_macros:
/usr/local/cuda/include/nv/detail/__preprocessor:
/usr/local/cuda/include/cuda_fp16.hpp:
/usr/local/cuda/include/cuda_bf16.h:
/usr/local/cuda/include/cuda_fp16.h:
/usr/local/cuda/include/cuda_bf16.hpp:
shim/backend/backend.h:
compress/cast.h:
compress/wire.h:
compress/cast.h:
shim/misc/config.h:
shim/misc/config.def:
shim/policy.h:
