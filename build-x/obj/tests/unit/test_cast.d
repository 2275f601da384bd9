build-w/obj/tests/unit/test_cast.o: tests/unit/test_cast.c \
 compress/cast.h compress/cast_impl.h compress/cast.h \
 tests/unit/cast_ref2.h
compress/cast.h:
compress/cast_impl.h:
compress/cast.h:
tests/unit/cast_ref2.h:
