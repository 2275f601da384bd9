# bench/wire_error.mk — $(B)/bin/wire_error: each wire format's error on small
# values (1e-9..1e-2, decade by decade): fp16 against bf16 against fp16s.
WIRE_ERROR := $(B)/bin/wire_error
$(B)/obj/bench/wire_error.o: EXTRA_CFLAGS := -Icompress

$(WIRE_ERROR): $(B)/obj/bench/wire_error.o $(COMPRESS_OBJS)
	@mkdir -p $(@D)
	$(CC) -o $@ $^ $(LDFLAGS_BASE) -lpthread -lm -ldl

all: $(WIRE_ERROR)
