#!/usr/bin/env bash
# Fuzzes the engine's readers of outside input with libFuzzer (the toolchain's clang,
# -fsanitize=fuzzer,address,undefined): the CPU-list parser, whole sysfs topology trees,
# and the container CPU-limit reader (Tests/Fuzz; seeds in Tests/Fuzz/corpus). Each
# target checks the reader's promises on every input and aborts on a broken one.
#
#   scripts/fuzz.sh              a short pass (CI): FUZZ_RUNS executions per target
#                                (default 20000)
#   scripts/fuzz.sh --long       10^7 executions per target
#   scripts/fuzz.sh --runs N     N executions per target
#   FUZZ_TARGETS="cgroup cpulist" scripts/fuzz.sh --long    some of the targets only
#
# What a run finds goes to a scratch corpus, never into Tests/Fuzz/corpus; a crash
# leaves its input in the working directory printed at the end (crash-*), to add to the
# seeds once fixed.
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${FUZZ_RUNS:-20000}
case "${1:-}" in
  --long) runs=10000000 ;;
  --runs) runs=$2 ;;
  "") ;;
  *) echo "usage: scripts/fuzz.sh [--long | --runs N]" >&2; exit 2 ;;
esac
cc=$(command -v clang || true)
[ -n "$cc" ] && grep -q swiftlang < <("$cc" --version) || cc=$(dirname "$(readlink -f "$(command -v swift)")")/clang
work=$(mktemp -d /tmp/spindle-fuzz.XXXXXX)
src=Sources/CSpindle
flags=(-std=c11 -D_GNU_SOURCE -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined
       -I"$src/include" -I"$src" -ITests/Fuzz)
engine=()
for f in "$src"/*.c; do engine+=("$f"); done
without_topology=()
for f in "${engine[@]}"; do [ "$(basename "$f")" = topology_discovery.c ] || without_topology+=("$f"); done
build() { # name, sources...
  local name=$1; shift
  "$cc" "${flags[@]}" "$@" -o "$work/$name" -lpthread -ldl -lm 2> "$work/$name.build.log" ||
    { cat "$work/$name.build.log"; exit 1; }
}
build fuzz_cpulist Tests/Fuzz/fuzz_cpulist.c "${without_topology[@]}"
build fuzz_topology Tests/Fuzz/fuzz_topology.c "${engine[@]}"
build fuzz_cgroup Tests/Fuzz/fuzz_cgroup.c "${engine[@]}"
status=0
for target in ${FUZZ_TARGETS:-cpulist topology cgroup}; do
  mkdir -p "$work/corpus-$target"
  cp Tests/Fuzz/corpus/"$target"/* "$work/corpus-$target"/
  start=$(date +%s)
  # -timeout: an input that takes 10 s is a hang. Logs only on failure.
  if (cd "$work" && ./fuzz_$target -runs="$runs" -timeout=10 -max_len=8192 -print_final_stats=1 \
        "corpus-$target" > "$work/$target.log" 2>&1); then
    execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$work/$target.log" | grep -o '[0-9]*$' || echo "?")
    cov=$(grep -o 'cov: [0-9]*' "$work/$target.log" | tail -1 | grep -o '[0-9]*' || echo "?")
    echo "fuzz: $target: $execs executions in $(( $(date +%s) - start )) s, $cov coverage points, no failure"
  else
    status=1
    echo "fuzz: $target FAILED (input and log in $work):"
    grep -m 20 -E "broken promise|ERROR|SUMMARY|Test unit written|parse_list says" "$work/$target.log" || true
  fi
done
[ $status -eq 0 ] && rm -rf "$work"
exit $status
