build-w/obj/compress/wire_ref.o: compress/wire_ref.c compress/wire.h \
 compress/cast.h compress/wire_bits.h compress/cast_bits.h
compress/wire.h:
compress/cast.h:
compress/wire_bits.h:
compress/cast_bits.h:
