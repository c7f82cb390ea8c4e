#!/usr/bin/env bash
# The README's test command: installs what is missing, then runs the test suite.
# Extra arguments go to `swift test` (e.g. --filter DequeTests, --sanitize=thread).
# SPINDLE_STRESS=N scales the stress tests (default 1; nightly-style runs use 20+).
# The suite is XCTest; Swift Testing is turned off, so XCTest's summary closes the run.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/deps.sh
spindle_ensure_deps
exec swift test --disable-swift-testing "$@"
