build-pip/obj/tests/shim/shim_twophase.o: tests/shim/shim_twophase.c \
 shim/ncclshim.h tests/shim/tpcheck.h tests/shim/testmpi.h \
 /usr/lib/x86_64-linux-gnu/openmpi/include/mpi.h \
 /usr/lib/x86_64-linux-gnu/openmpi/include/mpi_portable_platform.h \
 /root/.cache/ncclshim/torch-venv/lib/python3.11/site-packages/nvidia/nccl/include/nccl.h \
 /root/.cache/ncclshim/torch-venv/lib/python3.11/site-packages/nvidia/cu13/include/cuda_runtime.h \
 /root/.cache/ncclshim/torch-venv/lib/python3.11/site-packages/nvidia/cu13/include/builtin_types.h \
 /root/.cache/ncclshim/torch-venv/lib/python3.11/site-packages/nvidia/cu13/include/device_types.h \
 /root/.cache/ncclshim/torch-venv/lib/python3.11/site-packages/nvidia/cu13/include/driver_types.h \
 /root/.cache/ncclshim/torch-venv/lib/python3.11/site-packages/nvidia/cu13/include/vector_types.h \
 /root/.cache/ncclshim/torch-venv/lib/python3.11/site-packages/nvidia/cu13/include/surface_types.h \
 /root/.cache/ncclshim/torch-venv/lib/python3.11/site-packages/nvidia/cu13/include/texture_types.h \
 /root/.cache/ncclshim/torch-venv/lib/python3.11/site-packages/nvidia/cu13/include/library_types.h \
 /root/.cache/ncclshim/torch-venv/lib/python3.11/site-packages/nvidia/cu13/include/channel_descriptor.h \
 /root/.cache/ncclshim/torch-venv/lib/python3.11/site-packages/nvidia/cu13/include/cuda_runtime_api.h \
 /root/.cache/ncclshim/torch-venv/lib/python3.11/site-packages/nvidia/cu13/include/cuda_device_runtime_api.h \
 /root/.cache/ncclshim/torch-venv/lib/python3.11/site-packages/nvidia/cu13/include/driver_functions.h \
 /root/.cache/ncclshim/torch-venv/lib/python3.11/site-packages/nvidia/cu13/include/vector_functions.h \
 /root/.cache/ncclshim/torch-venv/lib/python3.11/site-packages/nvidia/cu13/include/vector_functions.hpp \
 /root/.cache/ncclshim/torch-venv/lib/python3.11/site-packages/nvidia/cu13/include/cuda_fp16.h \
 /root/.cache/ncclshim/torch-venv/lib/python3.11/site-packages/nvidia/cu13/include/nv/target \
 /root/.cache/ncclshim/torch-venv/lib/python3.11/site-packages/nvidia/cu13/include/nv/detail/__target_macros \
 /root/.cache/ncclshim/torch-venv/lib/python3.11/site-packages/nvidia/cu13/include/nv/detail/__preprocessor \
 /root/.cache/ncclshim/torch-venv/lib/python3.11/site-packages/nvidia/cu13/include/cuda_fp16.hpp \
 /root/.cache/ncclshim/torch-venv/lib/python3.11/site-packages/nvidia/cu13/include/cuda_bf16.h \
 /root/.cache/ncclshim/torch-venv/lib/python3.11/site-packages/nvidia/cu13/include/cuda_fp16.h \
 /root/.cache/ncclshim/torch-venv/lib/python3.11/site-packages/nvidia/cu13/include/cuda_bf16.hpp \
 tests/shim/devmirror.h \
 /root/.cache/ncclshim/torch-venv/lib/python3.11/site-packages/nvidia/cu13/include/cuda.h
shim/ncclshim.h:
tests/shim/tpcheck.h:
tests/shim/testmpi.h:
/usr/lib/x86_64-linux-gnu/openmpi/include/mpi.h:
/usr/lib/x86_64-linux-gnu/openmpi/include/mpi_portable_platform.h:
/root/.cache/ncclshim/torch-venv/lib/python3.11/site-packages/nvidia/nccl/include/nccl.h:
/root/.cache/ncclshim/torch-venv/lib/python3.11/site-packages/nvidia/cu13/include/cuda_runtime.h:
/root/.cache/ncclshim/torch-venv/lib/python3.11/site-packages/nvidia/cu13/include/builtin_types.h:
/root/.cache/ncclshim/torch-venv/lib/python3.11/site-packages/nvidia/cu13/include/device_types.h:
/root/.cache/ncclshim/torch-venv/lib/python3.11/site-packages/nvidia/cu13/include/driver_types.h:
/root/.cache/ncclshim/torch-venv/lib/python3.11/site-packages/nvidia/cu13/include/vector_types.h:
/root/.cache/ncclshim/torch-venv/lib/python3.11/site-packages/nvidia/cu13/include/surface_types.h:
/root/.cache/ncclshim/torch-venv/lib/python3.11/site-packages/nvidia/cu13/include/texture_types.h:
/root/.cache/ncclshim/torch-venv/lib/python3.11/site-packages/nvidia/cu13/include/library_types.h:
/root/.cache/ncclshim/torch-venv/lib/python3.11/site-packages/nvidia/cu13/include/channel_descriptor.h:
/root/.cache/ncclshim/torch-venv/lib/python3.11/site-packages/nvidia/cu13/include/cuda_runtime_api.h:
/root/.cache/ncclshim/torch-venv/lib/python3.11/site-packages/nvidia/cu13/include/cuda_device_runtime_api.h:
/root/.cache/ncclshim/torch-venv/lib/python3.11/site-packages/nvidia/cu13/include/driver_functions.h:
/root/.cache/ncclshim/torch-venv/lib/python3.11/site-packages/nvidia/cu13/include/vector_functions.h:
/root/.cache/ncclshim/torch-venv/lib/python3.11/site-packages/nvidia/cu13/include/vector_functions.hpp:
/root/.cache/ncclshim/torch-venv/lib/python3.11/site-packages/nvidia/cu13/include/cuda_fp16.h:
/root/.cache/ncclshim/torch-venv/lib/python3.11/site-packages/nvidia/cu13/include/nv/target:
/root/.cache/ncclshim/torch-venv/lib/python3.11/site-packages/nvidia/cu13/include/nv/detail/__target_macros:
/root/.cache/ncclshim/torch-venv/lib/python3.11/site-packages/nvidia/cu13/include/nv/detail/__preprocessor:
/root/.cache/ncclshim/torch-venv/lib/python3.11/site-packages/nvidia/cu13/include/cuda_fp16.hpp:
/root/.cache/ncclshim/torch-venv/lib/python3.11/site-packages/nvidia/cu13/include/cuda_bf16.h:
/root/.cache/ncclshim/torch-venv/lib/python3.11/site-packages/nvidia/cu13/include/cuda_fp16.h:
/root/.cache/ncclshim/torch-venv/lib/python3.11/site-packages/nvidia/cu13/include/cuda_bf16.hpp:
tests/shim/devmirror.h:
/root/.cache/ncclshim/torch-venv/lib/python3.11/site-packages/nvidia/cu13/include/cuda.h:
