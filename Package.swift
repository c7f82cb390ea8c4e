// swift-tools-version:6.1
//
// Spindle: a pthread-level work-stealing pool in C (`CSpindle`) with a Swift façade
// (`Spindle`) that gives it the semantics of Foundation's Operation / OperationQueue.
import PackageDescription

let package = Package(
    name: "Spindle",
    products: [
        .library(name: "Spindle", targets: ["Spindle"]),
        .executable(name: "bench", targets: ["bench"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.8.2"),
        .package(url: "https://github.com/HdrHistogram/hdrhistogram-swift", from: "0.2.0"),
        // `swift package generate-documentation --target Spindle` (DocC catalog in
        // Sources/Spindle/Spindle.docc).
        .package(url: "https://github.com/apple/swift-docc-plugin", from: "1.5.0"),
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
            dependencies: ["CSpindle"]
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
            ],
            path: "Benchmarks/bench"
        ),
        .testTarget(
            name: "SpindleTests",
            dependencies: ["Spindle", "CSpindle"],
            exclude: ["Fixtures"]
        ),
    ],
    swiftLanguageModes: [.v6],
    cLanguageStandard: .c11
)
