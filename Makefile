# Deltafin build. `make` builds build/deltafin; `make test` runs every test (normal and sanitizer
# builds); `make demo` synthesises a small model and generates from it.
CC      ?= cc
CSTD    := -std=c11 -D_GNU_SOURCE
WARN    := -Wall -Wextra -Werror -Wshadow -Wvla
# -ffp-contract=off: floating-point results must not depend on what the compiler chose to fuse.
FPFLAGS := -ffp-contract=off -fno-fast-math
CFLAGS  ?= -O2 -g
LIBS    := -ljansson -lpcre2-8 -lcurl -lmicrohttpd -luring -lm -lpthread
INC     := -Isrc

SRC      := $(shell find src -name '*.c' ! -name main.c | sort)
TEST_SRC := $(wildcard tests/unit/test_*.c)
HELPER_SRC := $(wildcard tests/helpers/*.c)
BENCH_SRC:= $(wildcard bench/*.c)
TOOL_SRC := $(wildcard tools/*/*.c)

# Three build flavours share the rules below: release (build/), ASan+UBSan (build-asan/) and the
# release build with the CUDA backend (build-cuda/: `make cuda`, needs nvcc; K3_DEV picks the device).
B ?= build
ifeq ($(B),build-asan)
  CFLAGS := -O1 -g -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
endif
NVCC      ?= nvcc
CUDA_HOME ?= /usr/local/cuda
ifeq ($(B),build-cuda)
  CSTD   += -DDF_CUDA
  CU_OBJ := $(patsubst %.cu,$(B)/obj/%.o,$(shell find src -name '*.cu' | sort))
  LIBS   += -L$(CUDA_HOME)/lib64 -lcudart_static -ldl -lrt -lstdc++
endif
# --fmad=false: as -ffp-contract=off, the GPU must not fuse what the CPU kernels do not.
# Machine code for Ampere (sm_80), Ada (sm_89) and Hopper (sm_90), and PTX for later GPUs.
NVFLAGS := -std=c++17 -O3 --fmad=false -gencode=arch=compute_80,code=sm_80 -gencode=arch=compute_89,code=sm_89 \
           -gencode=arch=compute_90,code=[sm_90,compute_90] -Xcompiler -Wall,-Wextra,-Werror -DDF_CUDA

OBJ      := $(SRC:%.c=$(B)/obj/%.o) $(CU_OBJ)
DEPS     := $(OBJ:.o=.d) $(B)/obj/src/main.d
TESTS    := $(TEST_SRC:tests/unit/%.c=$(B)/tests/%)
HELPERS  := $(HELPER_SRC:tests/helpers/%.c=$(B)/tests/helpers/%)
BENCHES  := $(BENCH_SRC:bench/%.c=$(B)/bench/%)
TOOLS    := $(TOOL_SRC:tools/%.c=$(B)/tools/%)

.PHONY: all asan cuda test demo clean deps check-layers
all: $(B)/deltafin $(TESTS) $(HELPERS) $(BENCHES) $(TOOLS)

$(B)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CSTD) $(WARN) $(FPFLAGS) $(CFLAGS) $(INC) -MMD -MP -c $< -o $@

$(B)/obj/%.o: %.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(NVFLAGS) $(INC) -MMD -MP -c $< -o $@

$(B)/libdeltafin.a: $(OBJ)
	@rm -f $@
	ar rcs $@ $^

$(B)/deltafin: $(B)/obj/src/main.o $(B)/libdeltafin.a
	$(CC) $(CFLAGS) -o $@ $^ $(LIBS)

$(B)/tests/%: tests/unit/%.c tests/unit/check.h $(B)/libdeltafin.a
	@mkdir -p $(dir $@)
	$(CC) $(CSTD) $(WARN) $(FPFLAGS) $(CFLAGS) $(INC) -Itests/unit -o $@ $< $(B)/libdeltafin.a $(LIBS)

# programs the Node tests run (not tests themselves)
$(B)/tests/helpers/%: tests/helpers/%.c tests/unit/check.h $(B)/libdeltafin.a
	@mkdir -p $(dir $@)
	$(CC) $(CSTD) $(WARN) $(FPFLAGS) $(CFLAGS) $(INC) -Itests/unit -o $@ $< $(B)/libdeltafin.a $(LIBS)

# (benchmarks may use the tests' fixtures: scratch vocabularies, random-weight-like picks)
$(B)/bench/%: bench/%.c $(B)/libdeltafin.a
	@mkdir -p $(dir $@)
	$(CC) $(CSTD) $(WARN) $(FPFLAGS) $(CFLAGS) $(INC) -Itests/unit -o $@ $< $(B)/libdeltafin.a $(LIBS)

# The data tools (tools/*/): training the tokenizer and encoding the training data (tools/corpus/README.md).
$(B)/tools/%: tools/%.c tools/jsonl.h $(B)/libdeltafin.a
	@mkdir -p $(dir $@)
	$(CC) $(CSTD) $(WARN) $(FPFLAGS) $(CFLAGS) $(INC) -Itools -o $@ $< $(B)/libdeltafin.a $(LIBS)

asan:
	$(MAKE) B=build-asan all

cuda:
	$(MAKE) B=build-cuda all

deps:
	bash scripts/install-deps.sh

JOBS ?= $(shell nproc)

# The folders' include order, and where the environment is read and the process may exit.
check-layers:
	bash scripts/check_layers.sh

test: deps check-layers
	$(MAKE) -j$(JOBS) all
	$(MAKE) -j$(JOBS) asan
	bash tests/run.sh

demo: deps
	$(MAKE) -j$(JOBS) all
	bash scripts/demo.sh

clean:
	rm -rf build build-asan build-cuda

-include $(DEPS)
