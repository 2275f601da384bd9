build-w/obj/compress/cast_avx2.o: compress/cast_avx2.c \
 compress/cast_bits.h compress/cast_impl.h compress/cast.h
compress/cast_bits.h:
compress/cast_impl.h:
compress/cast.h:
