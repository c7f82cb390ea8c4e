#!/usr/bin/env bash
# The test suite against an optimized build, the code a user's release build runs.
# The optimizer inlines across Spindle's files, ends references at their last use rather
# than at the end of their scope, and drops what it can prove unused; code that keeps an
# object alive only by the accident of a debug build's lifetimes, or reads memory it
# does not own through an unsafe pointer, can pass in debug and fail here.
#
# The tests reach into the engine through its test seams (SPINDLE_TESTING in C, DEBUG
# in Swift), which a plain release build leaves out; both are defined here, so the
# seams are compiled into the optimized build as they are into a debug one.
# `-enable-testing` lets `@testable import` see internal symbols. The build goes to its
# own scratch path, beside the debug one; with a sanitizer (`--sanitize=thread`, with
# SPINDLE_TSAN=1 as for the debug build), to one of that sanitizer's. Arguments go to
# scripts/test.sh (e.g. --filter).
set -euo pipefail
cd "$(dirname "$0")/.."
scratch=.build-optimized
for arg in "$@"; do
  case "$arg" in
    --sanitize=*) scratch=".build-optimized-${arg#--sanitize=}" ;;
  esac
done
exec scripts/test.sh -c release -Xswiftc -enable-testing -Xswiftc -DDEBUG -Xcc -DSPINDLE_TESTING \
  --scratch-path "$scratch" "$@"
