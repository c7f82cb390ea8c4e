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
  for f in "$src"/*.c; do
    "$cc" "${flags[@]}" -c "$f" -o /dev/null
    if [ "$cc" = clang ]; then
      "$cc" "${flags[@]}" -fsanitize=thread -c "$f" -o /dev/null
      "$cc" "${flags[@]}" -fsanitize=address -c "$f" -o /dev/null
    fi
  done
  # The benchmark's C helpers (not part of the library), to the same standard.
  for f in Benchmarks/BenchSupport/*.c; do
    "$cc" "${flags[@]}" -IBenchmarks/BenchSupport/include -c "$f" -o /dev/null
  done
  echo "check-c: $cc clean (-Wall -Wextra -Werror)"
done
