#!/usr/bin/env bash
# Builds and runs a new package that depends on Spindle by path, as a user's service
# would: it must need nothing beyond the Swift toolchain (no libnuma-dev: libnuma is
# looked up at run time), and an operation added to a queue must run.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)
source scripts/deps.sh
spindle_ensure_deps
# Nothing in the build may need libnuma's headers or link libnuma.
if grep -rn --include='*.c' --include='*.h' '#include <numa' Sources; then
  echo "check-dependent: the engine includes numa.h; building would need libnuma-dev" >&2; exit 1
fi
if grep -n 'linkedLibrary("numa")' Package.swift; then
  echo "check-dependent: Package.swift links libnuma; building would need libnuma-dev" >&2; exit 1
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
ln -s "$repo" "$work/spindle"
mkdir -p "$work/app/Sources/app"
cat > "$work/app/Package.swift" <<SWIFT
// swift-tools-version:6.1
import PackageDescription
let package = Package(
    name: "app",
    dependencies: [.package(path: "$work/spindle")],
    targets: [
        .executableTarget(name: "app", dependencies: [.product(name: "Spindle", package: "spindle")]),
        // Code that must not compile: the blocking forms from async code (noasync).
        .executableTarget(name: "misuse", dependencies: [.product(name: "Spindle", package: "spindle")]),
        // Nor the engine's test seams, which the C API does not export.
        .executableTarget(name: "seams", dependencies: [.product(name: "CSpindle", package: "spindle")]),
    ],
    swiftLanguageModes: [.v6]
)
SWIFT
mkdir -p "$work/app/Sources/misuse" "$work/app/Sources/seams"
printf 'import CSpindle\nspindle_test_limit_threads(0)\n' > "$work/app/Sources/seams/main.swift"
cat > "$work/app/Sources/misuse/main.swift" <<'SWIFT'
import Spindle

func handler(_ pool: ThreadPool) async throws -> Int {
    pool.run { 42 }                 // blocks a cooperative thread: 'try await pool.run' suspends
}
func stop(_ pool: ThreadPool) async throws {
    try pool.shutdown()             // blocks likewise: 'try await pool.shutdown()'
}
SWIFT
cat > "$work/app/Sources/app/main.swift" <<'SWIFT'
import Spindle

let queue = OperationQueue()
let op = BlockOperation { print("check-dependent: an operation ran on Spindle") }
queue.addOperation(op)
op.waitUntilFinished()
SWIFT
out=$(cd "$work/app" && swift run -c debug app 2>&1) || { echo "$out"; exit 1; }
# What the dependent resolves: Spindle's own dependencies and theirs, nothing of the
# benchmarks', the service benchmark's or the ServiceLifecycle trait's (Package.swift).
resolved() { python3 -c 'import json,sys; print(" ".join(sorted(p["identity"] for p in json.load(open(sys.argv[1]))["pins"])))' "$1"; }
pins=$(resolved "$work/app/Package.resolved")
[ "$pins" = "swift-log swift-metrics" ] || {
  echo "check-dependent: a dependent resolves: $pins (expected: swift-log swift-metrics)" >&2; exit 1; }
# With the trait, swift-service-lifecycle and its own dependencies come in too.
mkdir -p "$work/traited/Sources/traited"
cat > "$work/traited/Package.swift" <<SWIFT
// swift-tools-version:6.1
import PackageDescription
let package = Package(
    name: "traited",
    dependencies: [.package(path: "$work/spindle", traits: ["ServiceLifecycle"])],
    targets: [.executableTarget(name: "traited", dependencies: [
        .product(name: "Spindle", package: "spindle"), .product(name: "SpindleServiceLifecycle", package: "spindle")])],
    swiftLanguageModes: [.v6]
)
SWIFT
printf 'import SpindleServiceLifecycle\nimport Spindle\n_ = ThreadPoolService(ThreadPool.shared)\n' > "$work/traited/Sources/traited/main.swift"
traited=$(cd "$work/traited" && swift build 2>&1) || { echo "$traited"; exit 1; }
pins=$(resolved "$work/traited/Package.resolved")
[ "$pins" = "swift-async-algorithms swift-collections swift-log swift-metrics swift-service-lifecycle" ] || {
  echo "check-dependent: with the ServiceLifecycle trait a dependent resolves: $pins" >&2; exit 1; }
echo "check-dependent: a dependent resolves swift-log and swift-metrics only; with the ServiceLifecycle trait, swift-service-lifecycle too"
grep -q "an operation ran on Spindle" <<< "$out" || { echo "$out"; exit 1; }
# The blocking run and shutdown cannot be picked from async code by accident.
if misuse=$(cd "$work/app" && swift build --target misuse 2>&1); then
  echo "check-dependent: the blocking run and shutdown compiled in async code" >&2; exit 1
fi
# In async code the blocking forms are unavailable (noasync), so both calls resolve to
# the async overloads, and the compiler asks for the `await` they need.
for line in 4 7; do
  grep -q "misuse/main.swift:$line:.*expression is 'async' but is not marked with 'await'" <<< "$misuse" || {
    echo "$misuse"; echo "check-dependent: line $line did not resolve to the async overload" >&2; exit 1; }
done
if seams=$(cd "$work/app" && swift build --target seams 2>&1); then
  echo "check-dependent: a dependent can call the engine's test seams" >&2; exit 1
fi
grep -q "cannot find 'spindle_test_limit_threads' in scope" <<< "$seams" || {
  echo "$seams"; echo "check-dependent: the seams target failed for another reason" >&2; exit 1; }
echo "check-dependent: a package depending on Spindle builds and runs; blocking calls from async code and the test seams do not compile"
