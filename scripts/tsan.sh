#!/usr/bin/env bash
# ThreadSanitizer over the pool's own tests at 8 threads and the C thread
# tests (two contexts on two host threads, kernels cut across 8 library
# threads among them): the library is built with
# -Zsanitizer=thread and a std rebuilt the same way (nightly, rust-src), the
# C test with gcc -fsanitize=thread, and both are linked against rustc's own
# TSan runtime (gcc's libtsan can be older than the instrumentation the
# nightly LLVM emits, e.g. it may lack __tsan_memset). A deliberate race,
# built the same way, must be reported first: that proves the sanitizer is
# live, so "0 reports" on the tests means something. `make tsan` runs it.
set -euo pipefail
cd "$(dirname "$0")/.."
TRIPLE=$(rustc -vV | sed -n 's/^host: //p')
rustup component add --toolchain nightly rust-src >/dev/null 2>&1 || true
OUT=target/tsan
RUSTFLAGS="-Zsanitizer=thread" cargo +nightly build -Zbuild-std --target "$TRIPLE" \
  --release --features test-hooks --lib --target-dir "$OUT"
LIB=$OUT/$TRIPLE/release/libarenagrad.a
RT=$(rustc +nightly --print sysroot)/lib/rustlib/$TRIPLE/lib/librustc-nightly_rt.tsan.a
[ -f "$RT" ] || { echo "tsan: no TSan runtime at $RT"; exit 1; }
link() { gcc "$@" -Wl,--whole-archive "$RT" -Wl,--no-whole-archive -lopenblas -lm -lpthread -ldl -lstdc++; }
mkdir -p build/tsan
printf '#include <pthread.h>\nstatic int shared;\nstatic void *bump(void *a) { (void)a; for (int i = 0; i < 100000; i++) shared++; return 0; }\nint main(void) { pthread_t t; pthread_create(&t, 0, bump, 0); bump(0); pthread_join(t, 0); return shared == 0; }\n' > build/tsan/race.c
gcc -O1 -g -fsanitize=thread -c build/tsan/race.c -o build/tsan/race.o
link build/tsan/race.o -o build/tsan/race
# (The race exits non-zero once reported: keep that out of pipefail.)
race_out=$(./build/tsan/race 2>&1 || true)
if grep -q "ThreadSanitizer: data race" <<<"$race_out"; then
  echo "tsan: a deliberate race is reported (the sanitizer is live)"
else
  echo "tsan: the deliberate race was NOT reported"; exit 1
fi
gcc -std=c11 -O1 -g -fsanitize=thread -Iinclude -Itests/c -c tests/c/test_threads.c -o build/tsan/test_threads.o
link build/tsan/test_threads.o "$LIB" -o build/tsan/test_threads
OPENBLAS_NUM_THREADS=1 TSAN_OPTIONS="halt_on_error=1 exitcode=66" ./build/tsan/test_threads
echo "tsan: test_threads ran with 0 ThreadSanitizer reports"
# The pool's unit tests at 8 threads (parallel-fors, slots, chunks, joins,
# panics, nested runs, four host threads at once).
AG_NUM_THREADS=8 OPENBLAS_NUM_THREADS=1 TSAN_OPTIONS="halt_on_error=1 exitcode=66" \
  RUSTFLAGS="-Zsanitizer=thread" cargo +nightly test -Zbuild-std --target "$TRIPLE" \
  --release --lib --target-dir "$OUT" -- pool::
echo "tsan: the pool's tests ran at 8 threads with 0 ThreadSanitizer reports"
