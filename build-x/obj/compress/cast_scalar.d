build-w/obj/compress/cast_scalar.o: compress/cast_scalar.c \
 compress/cast_bits.h compress/cast_impl.h compress/cast.h
compress/cast_bits.h:
compress/cast_impl.h:
compress/cast.h:
