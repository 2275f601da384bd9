build-w/obj/compress/wire.o: compress/wire.c compress/wire.h \
 compress/cast.h compress/wire_bits.h compress/cast_bits.h
compress/wire.h:
compress/cast.h:
compress/wire_bits.h:
compress/cast_bits.h:
