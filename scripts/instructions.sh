#!/usr/bin/env bash
# Instructions per task, counted by callgrind: a figure beside the benchmark's timings
# that does not move with the machine's load, for judging a change whose timing is
# within noise. Runs the release benchmark (a copy without debug info: valgrind cannot
# read Swift's DWARF 5) under callgrind with instrumentation off except inside each
# timed region (Benchmarks/BenchSupport/instructions.c), one repetition per case, and
# prints each case's systems in instructions per task: every thread's instructions
# in the region, idle workers' searching included, divided by its tasks.
#
#   scripts/instructions.sh                         fork-join, submit, operation-throughput,
#                                                   serial-queue, dependency-chain; Spindle
#                                                   and each case's reference
#   scripts/instructions.sh --cases submit --systems spindle,dispatch --tasks 20000
#   scripts/instructions.sh --binary OLD_BENCH      the same, for another build
#   scripts/instructions.sh --atomics [--by-function N] ...
#                                                   also the atomic read-modify-writes per
#                                                   task (locked instructions and fences,
#                                                   scripts/atomics.py), and with
#                                                   --by-function the N functions that
#                                                   execute most of them
#
# Old against new: build each, copy its `bench`, and run this with --binary for each.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/deps.sh
spindle_ensure_deps valgrind
binary=""
atomics=()
args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --binary) binary=$2; shift 2 ;;
    --atomics) atomics=(--dump-instr=yes); shift ;;
    --by-function) by_function=$2; shift 2 ;;
    *) args+=("$1"); shift ;;
  esac
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
if [ -z "$binary" ]; then
  swift build -c release --package-path Benchmarks --product bench >&2
  binary="$(swift build -c release --package-path Benchmarks --show-bin-path)/bench"
fi
cp "$binary" "$work/bench"
strip --strip-debug "$work/bench"
[ ${#args[@]} -gt 0 ] || args=(--cases fork-join,submit,operation-throughput,serial-queue,dependency-chain
                                 --systems spindle --tasks 20000)
SPINDLE_BENCH_INSTRUCTIONS=1 valgrind --tool=callgrind --instr-atstart=no ${atomics[@]+"${atomics[@]}"} \
  --callgrind-out-file="$work/cg.out" "$work/bench" --reps 1 "${args[@]}" > "$work/bench.log" 2>&1 ||
  { cat "$work/bench.log"; exit 1; }
if [ ${#atomics[@]} -gt 0 ]; then
  python3 scripts/atomics.py "$work" --by-function "${by_function:-0}"
  exit
fi
python3 - "$work" <<'PY'
import glob, re, sys
counts = {}
for path in glob.glob(sys.argv[1] + "/cg.out*"):
    label = total = None
    for line in open(path, errors="replace"):
        if line.startswith("desc: Trigger: Client Request: "):
            label = line.split(": ", 3)[-1].strip()
        elif line.startswith(("summary:", "totals:")):
            total = int(line.split()[1])
    if label and total is not None and not label.startswith("warm-up") and label.count("/") == 2:
        counts[label] = total
if not counts:
    sys.exit("instructions: no timed region was counted (is the benchmark built with BenchSupport's marks?)")
print(f"{'case':24} {'system':16} {'instructions/task':>18}")
for label in sorted(counts):
    case, system, tasks = label.split("/")
    print(f"{case:24} {system:16} {counts[label] / int(tasks):18.0f}")
PY
