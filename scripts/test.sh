#!/usr/bin/env bash
# The README's test command: installs what is missing, model-checks the protocols that
# have a Promela model (scripts/model-check.sh), then runs the test suite. With extra
# arguments, which go to `swift test` (e.g. --filter DequeTests, --sanitize=thread), the
# model check is left out: it does not change with them.
# SPINDLE_STRESS=N scales the stress tests (default 1; nightly-style runs use 20+).
# The suite is XCTest; Swift Testing is turned off, so XCTest's summary closes the run.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/deps.sh
spindle_ensure_deps
if [ $# -eq 0 ]; then scripts/model-check.sh; fi
exec swift test --disable-swift-testing "$@"
