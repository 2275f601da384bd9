build-w/obj/tests/unit/test_algo.o: tests/unit/test_algo.c \
 shim/misc/config.h shim/misc/config.def shim/algo/tp_plan.h \
 compress/wire.h compress/cast.h
shim/misc/config.h:
shim/misc/config.def:
shim/algo/tp_plan.h:
compress/wire.h:
compress/cast.h:
