# bench/cast_perf.mk — $(B)/bin/cast_perf: host cast throughput vs memcpy
# (every implementation the CPU has, 1..N threads, PASS/FAIL vs the goals).
CAST_PERF := $(B)/bin/cast_perf
$(B)/obj/bench/cast_perf.o: EXTRA_CFLAGS := -Icompress

$(CAST_PERF): $(B)/obj/bench/cast_perf.o $(COMPRESS_OBJS)
	@mkdir -p $(@D)
	$(CC) -o $@ $^ $(LDFLAGS_BASE) -lpthread -lm -ldl

all: $(CAST_PERF)
