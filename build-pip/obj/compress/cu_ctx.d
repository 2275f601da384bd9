build-pip/obj/compress/cu_ctx.o: compress/cu_ctx.c compress/cu_ctx.h \
 compress/cu_abi.h compress/cu_driver.h \
 /root/.cache/ncclshim/torch-venv/lib/python3.11/site-packages/nvidia/cu13/include/cuda.h \
 compress/cu_nvrtc.h
compress/cu_ctx.h:
compress/cu_abi.h:
compress/cu_driver.h:
/root/.cache/ncclshim/torch-venv/lib/python3.11/site-packages/nvidia/cu13/include/cuda.h:
compress/cu_nvrtc.h:
