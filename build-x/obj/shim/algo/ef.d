build-w/obj/shim/algo/ef.o: shim/algo/ef.c shim/algo/ef.h \
 shim/backend/backend.h compress/cast.h compress/wire.h compress/cast.h
shim/algo/ef.h:
shim/backend/backend.h:
compress/cast.h:
compress/wire.h:
compress/cast.h:
