#!/usr/bin/env bash
# Model-checks the engine's protocols that a Promela model covers (Tests/Models/*.pml)
# with Spin: every interleaving of the model's processes, no assertion may fail. Each
# model also names mutants (`-DMUTANT...` in its header comment), deliberate breaks of
# the protocol; for each, Spin must find a failing interleaving, so that a model that
# checks nothing does not pass. A model may name variants (`-DVARIANT...`), other
# configurations of its protocol, which must pass as the model does.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/deps.sh
spindle_ensure_deps spin
cc=$(command -v gcc || command -v clang)
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
status=0
check() { # model, defines, expect (ok|fails)
  local model="$1" defines="$2" expect="$3"
  # -w: pan.c is generated code. The largest model stores about 25 million states in
  # about 3 GB; -DCOLLAPSE would halve that, and slow every model by a third.
  (cd "$work" && rm -f pan* ./*.trail && spin $defines -a "$model" >/dev/null &&
     "$cc" -O2 -w -DSAFETY -o pan pan.c && ./pan -E >pan.out 2>&1) || true
  local errors
  errors=$(sed -n 's/.*errors: \([0-9]*\).*/\1/p;T;q' "$work/pan.out")
  local states
  states=$(sed -n 's/^ *\([0-9.e+]*\) states, stored.*/\1/p;T;q' "$work/pan.out")
  local name
  name="$(basename "$model")${defines:+ $defines}"
  if [ -z "$errors" ]; then
    echo "model-check: $name: spin did not run"; cat "$work/pan.out"; status=1
  elif [ "$expect" = ok ] && [ "$errors" -eq 0 ]; then
    echo "model-check: $name: no failing interleaving in $states states"
  elif [ "$expect" = fails ] && [ "$errors" -gt 0 ]; then
    echo "model-check: $name (mutant): failing interleaving found, as it must be"
  else
    echo "model-check: $name: expected $expect, spin reported $errors error(s)"
    grep -i "violated" "$work/pan.out" || true
    status=1
  fi
}
for model in Tests/Models/*.pml; do
  abs="$(pwd)/$model"
  check "$abs" "" ok
  # Variants (`-DVARIANT...`): other configurations of the protocol, which must pass too.
  for variant in $(grep -o -- '-DVARIANT[A-Z_]*' "$model" | sort -u); do
    check "$abs" "$variant" ok
  done
  for mutant in $(grep -o -- '-DMUTANT[A-Z_]*' "$model" | sort -u); do
    check "$abs" "$mutant" fails
  done
done
exit $status
