#!/usr/bin/env bash
# Compiles the C engine (and the benchmark's C helpers) standalone with every warning an
# error, with gcc and clang, including the engine's ThreadSanitizer and AddressSanitizer code paths. SwiftPM
# builds the same files; this keeps them clean under -Wall -Wextra without putting
# unsafe flags in Package.swift.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/deps.sh
spindle_ensure_deps
src=Sources/CSpindle
flags=(-std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes -O2 -I"$src/include" -I"$src")
for cc in gcc clang; do
  command -v "$cc" >/dev/null || continue
  # Release builds (no test seams) and debug builds (SPINDLE_TESTING: seams.c).
  for f in "$src"/*.c; do
    "$cc" "${flags[@]}" -c "$f" -o /dev/null
    "$cc" "${flags[@]}" -DSPINDLE_TESTING -c "$f" -o /dev/null
    if [ "$cc" = clang ]; then
      "$cc" "${flags[@]}" -DSPINDLE_TESTING -fsanitize=thread -c "$f" -o /dev/null
      "$cc" "${flags[@]}" -DSPINDLE_TESTING -fsanitize=address -c "$f" -o /dev/null
    fi
  done
  # The tests' C target, to the same standard.
  "$cc" "${flags[@]}" -DSPINDLE_TESTING -ITests/CSpindleTesting/include -c Tests/CSpindleTesting/testing.c -o /dev/null
  # Release builds read no test state: no engine object refers to a spindle_test_ symbol.
  if [ "$cc" = gcc ]; then
    obj=$(mktemp)
    for f in "$src"/*.c; do
      "$cc" "${flags[@]}" -c "$f" -o "$obj"
      syms=$(nm "$obj")
      if grep -q 'spindle_test_' <<< "$syms"; then
        echo "check-c: $f refers to a test seam in a release build:"; grep 'spindle_test_' <<< "$syms"; rm -f "$obj"; exit 1
      fi
    done
    rm -f "$obj"
  fi
  # The benchmark's C helpers (not part of the library), to the same standard.
  for f in Benchmarks/BenchSupport/*.c; do
    "$cc" "${flags[@]}" -IBenchmarks/BenchSupport/include -c "$f" -o /dev/null
  done
  echo "check-c: $cc clean (-Wall -Wextra -Werror)"
done
