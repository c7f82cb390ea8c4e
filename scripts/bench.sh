#!/usr/bin/env bash
# The README's benchmark command: installs what is missing, then builds in release mode
# and runs the benchmark. Arguments go to `bench` (try --help, --quick, --format json).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/deps.sh
spindle_ensure_deps
# The fork-join case's peers, rayon and oneTBB (left out where they cannot be built).
scripts/bench-peers.sh
export SPINDLE_BENCH_PEERS="$(pwd)/Benchmarks/.build/peers"
# The benchmark is a package of its own (Benchmarks/Package.swift), so that packages
# depending on Spindle never resolve its peers.
exec swift run -c release --package-path Benchmarks bench "$@"
