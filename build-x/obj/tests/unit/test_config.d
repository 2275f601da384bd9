build-w/obj/tests/unit/test_config.o: tests/unit/test_config.c \
 shim/misc/config.h shim/misc/config.def
shim/misc/config.h:
shim/misc/config.def:
