build-w/obj/shim/backend/host_stream.o: shim/backend/host_stream.c \
 shim/backend/host_stream.h
shim/backend/host_stream.h:
