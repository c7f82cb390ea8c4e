#!/usr/bin/env bash
# Every Swift example in the README and the DocC articles compiles (scripts/check-examples.py
# says which code each one is): the snippets in Snippets/ with the package, the examples
# that need a server framework with the service benchmark's package (Benchmarks/Service).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/deps.sh
spindle_ensure_deps
python3 scripts/check-examples.py
# `swift build` compiles the package's snippets; the trait builds SpindleServiceLifecycle.
swift build --traits ServiceLifecycle
# Release, as scripts/service-bench.sh builds it, so the two share Hummingbird's build.
swift build -c release --package-path Benchmarks/Service
echo "examples compile"
