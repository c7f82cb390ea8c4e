#!/usr/bin/env bash
# Model-checks the engine's protocols that a Promela model covers (Tests/Models/*.pml)
# with Spin: every interleaving of the model's processes, no assertion may fail. Each
# model also names mutants (`-DMUTANT...` in its header comment), deliberate breaks of
# the protocol; for each, Spin must find a failing interleaving, so that a model that
# checks nothing does not pass. A model may name variants (`-DVARIANT...`), other
# configurations of its protocol, which must pass as the model does.
#
# Each check is one single-threaded pan run, most of it the C compiler's time on pan.c,
# so the checks run side by side, one per CPU (SPINDLE_MODEL_JOBS to choose); results
# print in the models' order. Two of the largest models at once stay within a few GB.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/deps.sh
spindle_ensure_deps spin
cc=$(command -v gcc || command -v clang)
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
check() { # model, defines, expect (ok|fails), directory of its own; prints the verdict
  local model="$1" defines="$2" expect="$3" dir="$4"
  mkdir -p "$dir"
  # -w: pan.c is generated code. The largest model stores about 25 million states in
  # about 3 GB; -DCOLLAPSE would halve that, and slow every model by a third.
  (cd "$dir" && spin $defines -a "$model" >/dev/null &&
     "$cc" -O2 -w -DSAFETY -o pan pan.c && ./pan -E >pan.out 2>&1) || true
  local errors
  errors=$(sed -n 's/.*errors: \([0-9]*\).*/\1/p;T;q' "$dir/pan.out" 2>/dev/null)
  local states
  states=$(sed -n 's/^ *\([0-9.e+]*\) states, stored.*/\1/p;T;q' "$dir/pan.out" 2>/dev/null)
  local name
  name="$(basename "$model")${defines:+ $defines}"
  if [ -z "$errors" ]; then
    echo "model-check: $name: spin did not run"; cat "$dir/pan.out" 2>/dev/null
  elif [ "$expect" = ok ] && [ "$errors" -eq 0 ]; then
    echo "model-check: $name: no failing interleaving in $states states"; return 0
  elif [ "$expect" = fails ] && [ "$errors" -gt 0 ]; then
    echo "model-check: $name (mutant): failing interleaving found, as it must be"; return 0
  else
    echo "model-check: $name: expected $expect, spin reported $errors error(s)"
    grep -i "violated" "$dir/pan.out" || true
  fi
  return 1
}
# The checks, one line each: model (a path inside the repository, without spaces, as the
# checkout's own path may have), defines (or -), expect.
repo="$(pwd)"
checks=()
for model in Tests/Models/*.pml; do
  checks+=("$model - ok")
  # Variants (`-DVARIANT...`): other configurations of the protocol, which must pass too.
  for variant in $(grep -o -- '-DVARIANT[A-Z_]*' "$model" | sort -u); do
    checks+=("$model $variant ok")
  done
  for mutant in $(grep -o -- '-DMUTANT[A-Z_]*' "$model" | sort -u); do
    checks+=("$model $mutant fails")
  done
done
jobs=${SPINDLE_MODEL_JOBS:-$(nproc 2>/dev/null || echo 1)}
[[ "$jobs" =~ ^[1-9][0-9]*$ ]] || { echo "model-check: SPINDLE_MODEL_JOBS must be a positive number" >&2; exit 2; }
# Check i writes its verdict to $work/i.out and its status to $work/i.status.
run() {
  local i="$1" model defines expect rc=0
  read -r model defines expect <<< "${checks[$i]}"
  [ "$defines" = - ] && defines=""
  check "$repo/$model" "$defines" "$expect" "$work/$i" > "$work/$i.out" 2>&1 || rc=$?
  echo "$rc" > "$work/$i.status"
  rm -rf "${work:?}/$i"
}
running=0
for i in "${!checks[@]}"; do
  if [ "$running" -ge "$jobs" ]; then wait -n || true; running=$((running - 1)); fi
  run "$i" &
  running=$((running + 1))
done
wait
status=0
for i in "${!checks[@]}"; do
  cat "$work/$i.out"
  [ "$(cat "$work/$i.status" 2>/dev/null)" = 0 ] || status=1
done
exit $status
