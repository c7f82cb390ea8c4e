#!/usr/bin/env bash
# The README's test command: installs what is missing, model-checks the protocols that
# have a Promela model (scripts/model-check.sh), compares Spindle's OperationQueue with
# Foundation's on the scenarios of Tests/FoundationDiff (scripts/foundation-diff.sh), then
# runs the test suite. With extra arguments, which go to `swift test` (e.g. --filter
# DequeTests, --sanitize=thread), the first two are left out: they do not change with
# them.
# SPINDLE_STRESS=N scales the stress tests (default 1; nightly-style runs use 20+).
# The suite is XCTest; Swift Testing is turned off, so XCTest's summary closes the run.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/deps.sh
spindle_ensure_deps
if [ $# -eq 0 ]; then
  scripts/model-check.sh
  scripts/foundation-diff.sh
fi
# The ServiceLifecycle trait builds SpindleServiceLifecycle and its tests (Package.swift).
exec swift test --disable-swift-testing --traits ServiceLifecycle "$@"
