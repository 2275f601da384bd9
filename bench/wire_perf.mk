# bench/wire_perf.mk — $(B)/bin/wire_perf: host wire-format (two-phase) throughput vs memcpy
# (encode, decode, decode_sum; fast path and scalar reference).
WIRE_PERF := $(B)/bin/wire_perf
$(B)/obj/bench/wire_perf.o: EXTRA_CFLAGS := -Icompress

$(WIRE_PERF): $(B)/obj/bench/wire_perf.o $(COMPRESS_OBJS)
	@mkdir -p $(@D)
	$(CC) -o $@ $^ $(LDFLAGS_BASE) -lpthread -lm -ldl

all: $(WIRE_PERF)
