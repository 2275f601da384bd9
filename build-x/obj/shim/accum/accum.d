build-x/obj/shim/accum/accum.o: shim/accum/accum.c shim/accum/accum.h
shim/accum/accum.h:
