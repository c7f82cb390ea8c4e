// swift-tools-version:6.1
//
// The benchmark: Spindle against Dispatch, Foundation's OperationQueue, TaskGroup and
// NIOThreadPool, in one run, as ratios (`swift run -c release bench` from this folder;
// `scripts/bench.sh` from the repository's root). A package of its own, so that a
// package depending on Spindle never resolves swift-nio, ArgumentParser or HdrHistogram.
import Foundation
import PackageDescription

/// Spindle is this repository, one level up; SwiftPM names a path dependency after its
/// directory, whatever the checkout is called.
let spindleDirectory = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()

let package = Package(
    name: "SpindleBenchmarks",
    dependencies: [
        .package(path: spindleDirectory.path),
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.8.2"),
        .package(url: "https://github.com/apple/swift-metrics", from: "2.13.0"),
        .package(url: "https://github.com/HdrHistogram/hdrhistogram-swift", from: "0.2.0"),
        // The benchmark's peer, NIOThreadPool.
        .package(url: "https://github.com/apple/swift-nio", from: "2.101.2"),
    ],
    targets: [
        // C helpers for the benchmark only: the bare futex hand-off that
        // `qos-under-load` reports beside Spindle (BenchSupport/handoff.c), and the heap
        // merge in the harness's pause between systems (heap.c).
        .target(
            name: "BenchSupport",
            dependencies: [.product(name: "CSpindle", package: spindleDirectory.lastPathComponent)],
            path: "BenchSupport",
            cSettings: [.define("_GNU_SOURCE")],
            linkerSettings: [.linkedLibrary("pthread")]
        ),
        .executableTarget(
            name: "bench",
            dependencies: [
                .product(name: "Spindle", package: spindleDirectory.lastPathComponent),
                "BenchSupport",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Histogram", package: "hdrhistogram-swift"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "CoreMetrics", package: "swift-metrics"),
            ],
            path: "bench"
        ),
        // scripts/soak.sh: everything at once for a while; nothing lost, run twice or
        // leaked.
        .executableTarget(
            name: "soak",
            dependencies: [
                .product(name: "Spindle", package: spindleDirectory.lastPathComponent),
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ],
            path: "soak"
        ),
    ],
    swiftLanguageModes: [.v6],
    cLanguageStandard: .c11
)
