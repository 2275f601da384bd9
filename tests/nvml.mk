# tests/nvml.mk — the NVML TEST DOUBLE (tests/nvml/fakenvml.c): a
# libnvidia-ml.so.1 whose utilisation samples the environment scripts, put on
# LD_LIBRARY_PATH by tests/t/55-diag.sh. Never part of the shim.
FAKENVML_DIR := $(B)/lib/fakenvml
FAKENVML_LIB := $(FAKENVML_DIR)/libnvidia-ml.so.1
$(FAKENVML_LIB): tests/nvml/fakenvml.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS_BASE) -shared -fvisibility=hidden -Wl,-soname,libnvidia-ml.so.1 -o $@ $<
TEST_BINS += $(FAKENVML_LIB)
