build-w/obj/shim/backend/backend_host.o: shim/backend/backend_host.c \
 shim/backend/backend.h compress/cast.h compress/wire.h compress/cast.h \
 shim/backend/host_stream.h
shim/backend/backend.h:
compress/cast.h:
compress/wire.h:
compress/cast.h:
shim/backend/host_stream.h:
