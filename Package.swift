// swift-tools-version:6.2
//
// Spindle: a pthread-level work-stealing pool in C (`CSpindle`) with a Swift façade
// (`Spindle`) that gives it the semantics of Foundation's Operation / OperationQueue.
//
// What a package that depends on Spindle resolves: swift-log and swift-metrics, and
// nothing else (scripts/check-dependent.sh checks its Package.resolved).
// - The benchmark and its peers (swift-nio, ArgumentParser, HdrHistogram) are a
//   package of their own in Benchmarks/, and the service benchmark (Hummingbird) one in
//   Benchmarks/Service: a dependent never resolves them.
// - `SpindleServiceLifecycle` needs swift-service-lifecycle, behind the
//   `ServiceLifecycle` trait: SwiftPM resolves a dependency only when a use of it is
//   enabled, so a dependent that does not ask for the trait never fetches it. One that
//   does writes `.package(url: "…/spindle", from: "0.1.0", traits: ["ServiceLifecycle"])`.
// - The DocC plugin is used by no target, and SwiftPM does not resolve it for
//   dependents either.
import PackageDescription

let package = Package(
    name: "Spindle",
    products: [
        .library(name: "Spindle", targets: ["Spindle"]),
        // A Service for swift-service-lifecycle's ServiceGroup (trait `ServiceLifecycle`).
        .library(name: "SpindleServiceLifecycle", targets: ["SpindleServiceLifecycle"]),
        // The engine's C API (Sources/CSpindle/include/spindle.h), for C code and for
        // the benchmark's C helpers.
        .library(name: "CSpindle", targets: ["CSpindle"]),
    ],
    traits: [
        .trait(name: "ServiceLifecycle",
               description: "SpindleServiceLifecycle's ThreadPoolService, which depends on swift-service-lifecycle"),
    ],
    dependencies: [
        // The ecosystem's logging API: Spindle's few notes go to a swift-log Logger.
        .package(url: "https://github.com/apple/swift-log", from: "1.16.2"),
        // The ecosystem's metrics API (PoolMetrics).
        .package(url: "https://github.com/apple/swift-metrics", from: "2.13.0"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle", from: "2.13.0"),
        // `swift package generate-documentation --target Spindle` (DocC catalog in
        // Sources/Spindle/Spindle.docc).
        .package(url: "https://github.com/swiftlang/swift-docc-plugin", from: "1.5.0"),
    ],
    targets: [
        // The engine. C11; `_GNU_SOURCE` for sched_getaffinity, pthread_setname_np and
        // the futex syscall. libnuma is looked up at run time (Sources/CSpindle/numa.c),
        // so building needs nothing beyond the toolchain. No unsafe flags, so the package
        // stays usable as a dependency: `scripts/check-c.sh` compiles the same sources
        // with -Wall -Wextra -Werror.
        // Debug builds also define SPINDLE_TESTING: the engine's test seams (seams.c),
        // which release builds compile away.
        .target(
            name: "CSpindle",
            cSettings: [.define("_GNU_SOURCE"), .define("SPINDLE_TESTING", .when(configuration: .debug))],
            linkerSettings: [.linkedLibrary("pthread"), .linkedLibrary("dl")]
        ),
        .target(
            name: "Spindle",
            dependencies: [
                "CSpindle",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "CoreMetrics", package: "swift-metrics"),
            ],
            // Every unsafe construct is marked `unsafe` (or its type `@unsafe`/`@safe`),
            // each with a `// safety:` note naming what keeps it sound: the compiler
            // shows a new one instead of letting it pass unseen.
            swiftSettings: [.strictMemorySafety()]
        ),
        .target(
            name: "SpindleServiceLifecycle",
            dependencies: [
                "Spindle",
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle",
                         condition: .when(traits: ["ServiceLifecycle"])),
            ],
            swiftSettings: [.strictMemorySafety()]
        ),
        // The tests' access to the engine's internals and seams (spindle_testing.h). Part
        // of no product, so a dependent never builds it.
        .target(
            name: "CSpindleTesting",
            dependencies: ["CSpindle"],
            path: "Tests/CSpindleTesting",
            cSettings: [.define("_GNU_SOURCE"), .define("SPINDLE_TESTING", .when(configuration: .debug)),
                        .headerSearchPath("../../Sources/CSpindle")]
        ),
        .testTarget(
            name: "SpindleTests",
            dependencies: [
                "Spindle", "CSpindle", "CSpindleTesting", "SpindleServiceLifecycle",
                .product(name: "ServiceLifecycleTestKit", package: "swift-service-lifecycle",
                         condition: .when(traits: ["ServiceLifecycle"])),
                .product(name: "MetricsTestKit", package: "swift-metrics"),
                .product(name: "Logging", package: "swift-log"),
            ],
            exclude: ["Fixtures"]
        ),
    ],
    swiftLanguageModes: [.v6],
    cLanguageStandard: .c11
)
