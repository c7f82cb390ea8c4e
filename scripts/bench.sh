#!/usr/bin/env bash
# The README's benchmark command: installs what is missing, then builds in release mode
# and runs the benchmark. Arguments go to `bench` (try --help, --quick, --format json).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/deps.sh
spindle_ensure_deps
# The benchmark is a package of its own (Benchmarks/Package.swift), so that packages
# depending on Spindle never resolve its peers.
exec swift run -c release --package-path Benchmarks bench "$@"
