// swift-tools-version:6.1
//
// The service benchmark: a Hummingbird 2 server whose heavy endpoint's CPU work runs
// inline, on Task.detached, on NIOThreadPool, or on Spindle (async offload, an
// OperationQueue, or with admission control), chosen by a flag. Driven by
// scripts/service-bench.sh with wrk. Its own package, so that Spindle's users never
// fetch Hummingbird.
//
// It also holds the documentation's examples that need a server framework (Examples/):
// each target compiles a README or article example verbatim, with the few types the
// example leaves to the reader; scripts/check-examples.sh builds them and checks that
// every example in the documents is one of them.
import Foundation
import PackageDescription

/// Spindle is this repository, two levels up; SwiftPM names a path dependency after its
/// directory, whatever the checkout is called.
let spindleDirectory = URL(fileURLWithPath: #filePath)
    .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

let spindle = spindleDirectory.lastPathComponent

var hummingbird: [Target.Dependency] { [.product(name: "Hummingbird", package: "hummingbird")] }
var serviceLifecycle: [Target.Dependency] {
    [.product(name: "ServiceLifecycle", package: "swift-service-lifecycle")]
}
var log: [Target.Dependency] { [.product(name: "Logging", package: "swift-log")] }
var metrics: [Target.Dependency] { [.product(name: "Metrics", package: "swift-metrics")] }
var prometheus: [Target.Dependency] { [.product(name: "Prometheus", package: "swift-prometheus")] }

/// One executable target per example (an example with `@main` or top-level code needs a
/// module of its own), in Examples/<name>.
let examples: [Target] = [
    ("ReadmeThumbnails", hummingbird + serviceLifecycle + log + metrics),
    ("AdmissionControl", hummingbird),
    ("GracefulShutdown", hummingbird + serviceLifecycle + log),
    ("ServerIntegration", hummingbird + serviceLifecycle + log + metrics),
    ("Observability", log + metrics + prometheus),
    ("OffloadingHummingbird", hummingbird),
    ("OffloadingVapor", [.product(name: "Vapor", package: "vapor")]),
].map { name, frameworks in
    .executableTarget(
        name: "Example\(name)",
        dependencies: [.product(name: "Spindle", package: spindle),
                       .product(name: "SpindleServiceLifecycle", package: spindle)] + frameworks,
        path: "Examples/\(name)")
}
let package = Package(
    name: "ServiceBench",
    dependencies: [
        .package(path: spindleDirectory.path, traits: ["ServiceLifecycle"]),
        .package(url: "https://github.com/hummingbird-project/hummingbird", from: "2.28.1"),
        .package(url: "https://github.com/apple/swift-nio", from: "2.101.2"),
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.8.2"),
        // The documentation's examples only.
        .package(url: "https://github.com/swift-server/swift-service-lifecycle", from: "2.13.0"),
        .package(url: "https://github.com/swift-server/swift-prometheus", from: "2.4.1"),
        .package(url: "https://github.com/apple/swift-log", from: "1.16.2"),
        .package(url: "https://github.com/apple/swift-metrics", from: "2.13.0"),
        .package(url: "https://github.com/vapor/vapor", from: "4.122.3"),
    ],
    targets: [
        .executableTarget(
            name: "ServiceBench",
            dependencies: [
                .product(name: "Spindle", package: spindle),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ]
        ),
    ] + examples,
    swiftLanguageModes: [.v6]
)
