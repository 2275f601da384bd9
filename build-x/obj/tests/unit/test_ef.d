build-w/obj/tests/unit/test_ef.o: tests/unit/test_ef.c shim/algo/ef.h \
 shim/backend/backend.h compress/cast.h compress/wire.h compress/cast.h
shim/algo/ef.h:
shim/backend/backend.h:
compress/cast.h:
compress/wire.h:
compress/cast.h:
