build-w/obj/shim/diag/diag_policy.o: shim/diag/diag_policy.c \
 shim/diag/diag_policy.h shim/diag/diag.h shim/accum/accum.h
shim/diag/diag_policy.h:
shim/diag/diag.h:
shim/accum/accum.h:
