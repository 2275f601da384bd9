build-w/obj/tests/unit/test_wire.o: tests/unit/test_wire.c \
 compress/wire.h compress/cast.h compress/wire_bits.h \
 compress/cast_bits.h
compress/wire.h:
compress/cast.h:
compress/wire_bits.h:
compress/cast_bits.h:
