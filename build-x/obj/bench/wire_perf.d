build-w/obj/bench/wire_perf.o: bench/wire_perf.c bench/bench_median.h \
 compress/wire.h compress/cast.h
bench/bench_median.h:
compress/wire.h:
compress/cast.h:
