# bench/model.mk — $(B)/bin/ncclshim_model: the cost model of every plan
# (issue 22), fronted by bench/ncclshim-model. Links the shim's pure planner
# objects (plan, two-phase layout, node map, settings, the wire formats): the model walks the
# plans the executor runs. No NCCL, MPI or GPU.
MODEL_BIN := $(B)/bin/ncclshim_model
MODEL_SHIM_OBJS := $(B)/obj/shim/plan/plan.o $(B)/obj/shim/plan/group.o $(B)/obj/shim/topo/topo.o \
  $(B)/obj/shim/config/config.o $(B)/obj/compress/formats.o $(B)/obj/shim/fabric/fabric.o
$(B)/obj/bench/model.o: EXTRA_CFLAGS := $(SHIM_INC)

$(MODEL_BIN): $(B)/obj/bench/model.o $(MODEL_SHIM_OBJS)
	@mkdir -p $(@D)
	$(CC) -o $@ $^ $(LDFLAGS_BASE) -lm

all: $(MODEL_BIN)
