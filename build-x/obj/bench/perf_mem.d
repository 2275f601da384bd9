build-w/obj/bench/perf_mem.o: bench/perf_mem.c bench/perf_mem.h
bench/perf_mem.h:
