build-w/obj/shim/misc/config.o: shim/misc/config.c shim/misc/config.h \
 shim/misc/config.def
shim/misc/config.h:
shim/misc/config.def:
