build-w/obj/bench/cast_perf.o: bench/cast_perf.c bench/bench_median.h \
 compress/cast.h compress/cast_impl.h compress/cast.h
bench/bench_median.h:
compress/cast.h:
compress/cast_impl.h:
compress/cast.h:
