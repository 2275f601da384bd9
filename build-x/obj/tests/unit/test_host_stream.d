build-w/obj/tests/unit/test_host_stream.o: tests/unit/test_host_stream.c \
 shim/backend/backend.h compress/cast.h compress/wire.h compress/cast.h \
 shim/backend/host_stream.h
shim/backend/backend.h:
compress/cast.h:
compress/wire.h:
compress/cast.h:
shim/backend/host_stream.h:
