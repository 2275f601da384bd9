build-w/obj/shim/backend/staging.o: shim/backend/staging.c \
 shim/backend/staging.h shim/backend/backend.h compress/cast.h \
 compress/wire.h compress/cast.h
shim/backend/staging.h:
shim/backend/backend.h:
compress/cast.h:
compress/wire.h:
compress/cast.h:
