// swift-tools-version:6.1
//
// Spindle: a pthread-level work-stealing pool in C (`CSpindle`) with a Swift façade
// (`Spindle`) that gives it the semantics of Foundation's Operation / OperationQueue.
import PackageDescription

let package = Package(
    name: "Spindle",
    products: [
        .library(name: "Spindle", targets: ["Spindle"]),
        // A Service for swift-service-lifecycle's ServiceGroup, in a product of its own so
        // that the core library carries no dependency.
        .library(name: "SpindleServiceLifecycle", targets: ["SpindleServiceLifecycle"]),
        .executable(name: "bench", targets: ["bench"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.8.2"),
        // The ecosystem's logging API: Spindle's few notes go to a swift-log Logger.
        .package(url: "https://github.com/apple/swift-log", from: "1.16.2"),
        // The ecosystem's metrics API (PoolMetrics).
        .package(url: "https://github.com/apple/swift-metrics", from: "2.13.0"),
        .package(url: "https://github.com/HdrHistogram/hdrhistogram-swift", from: "0.2.0"),
        // `swift package generate-documentation --target Spindle` (DocC catalog in
        // Sources/Spindle/Spindle.docc).
        .package(url: "https://github.com/apple/swift-docc-plugin", from: "1.5.0"),
        // The benchmark's peer, NIOThreadPool. Only the bench target uses it, so a package
        // that depends on Spindle does not fetch or build swift-nio.
        .package(url: "https://github.com/apple/swift-nio", from: "2.101.2"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle", from: "2.13.0"),
    ],
    targets: [
        // The engine. C11; `_GNU_SOURCE` for sched_getaffinity, pthread_setname_np and
        // the futex syscall. libnuma is looked up at run time (Sources/CSpindle/numa.c),
        // so building needs nothing beyond the toolchain. No unsafe flags, so the package
        // stays usable as a dependency: `scripts/check-c.sh` compiles the same sources
        // with -Wall -Wextra -Werror.
        .target(
            name: "CSpindle",
            cSettings: [.define("_GNU_SOURCE")],
            linkerSettings: [.linkedLibrary("pthread"), .linkedLibrary("dl")]
        ),
        .target(
            name: "Spindle",
            dependencies: [
                "CSpindle",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "CoreMetrics", package: "swift-metrics"),
            ]
        ),
        .target(
            name: "SpindleServiceLifecycle",
            dependencies: [
                "Spindle",
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ]
        ),
        // C helpers for the benchmark only: the bare futex hand-off that
        // `qos-under-load` reports beside Spindle (Benchmarks/BenchSupport/handoff.c),
        // and the heap merge in the harness's pause between systems (heap.c).
        .target(
            name: "BenchSupport",
            dependencies: ["CSpindle"],
            path: "Benchmarks/BenchSupport",
            cSettings: [.define("_GNU_SOURCE")],
            linkerSettings: [.linkedLibrary("pthread")]
        ),
        .executableTarget(
            name: "bench",
            dependencies: [
                "Spindle",
                "BenchSupport",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Histogram", package: "hdrhistogram-swift"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "CoreMetrics", package: "swift-metrics"),
            ],
            path: "Benchmarks/bench"
        ),
        .testTarget(
            name: "SpindleTests",
            dependencies: [
                "Spindle", "CSpindle", "SpindleServiceLifecycle",
                .product(name: "ServiceLifecycleTestKit", package: "swift-service-lifecycle"),
                .product(name: "MetricsTestKit", package: "swift-metrics"),
                .product(name: "Logging", package: "swift-log"),
            ],
            exclude: ["Fixtures"]
        ),
    ],
    swiftLanguageModes: [.v6],
    cLanguageStandard: .c11
)
