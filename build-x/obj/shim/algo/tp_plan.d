build-w/obj/shim/algo/tp_plan.o: shim/algo/tp_plan.c shim/algo/tp_plan.h \
 shim/misc/config.h shim/misc/config.def compress/wire.h compress/cast.h
shim/algo/tp_plan.h:
shim/misc/config.h:
shim/misc/config.def:
compress/wire.h:
compress/cast.h:
