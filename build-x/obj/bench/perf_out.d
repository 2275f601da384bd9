build-w/obj/bench/perf_out.o: bench/perf_out.c bench/perf_out.h \
 bench/perf_args.h shim/ncclshim.h
bench/perf_out.h:
bench/perf_args.h:
shim/ncclshim.h:
