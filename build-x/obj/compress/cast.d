build-w/obj/compress/cast.o: compress/cast.c compress/cast_impl.h \
 compress/cast.h
compress/cast_impl.h:
compress/cast.h:
