build-pip/obj/compress/cu_nvrtc.o: compress/cu_nvrtc.c \
 compress/cu_driver.h \
 /root/.cache/ncclshim/torch-venv/lib/python3.11/site-packages/nvidia/cu13/include/cuda.h \
 compress/cu_nvrtc.h
compress/cu_driver.h:
/root/.cache/ncclshim/torch-venv/lib/python3.11/site-packages/nvidia/cu13/include/cuda.h:
compress/cu_nvrtc.h:
