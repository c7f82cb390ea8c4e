// swift-tools-version:6.1
//
// The service benchmark: a Hummingbird 2 server whose heavy endpoint's CPU work runs
// inline, on Task.detached, on NIOThreadPool, or on Spindle (async offload, an
// OperationQueue, or with admission control), chosen by a flag. Driven by
// scripts/service-bench.sh with wrk. Its own package, so that Spindle's users never
// fetch Hummingbird.
import Foundation
import PackageDescription

/// Spindle is this repository, two levels up; SwiftPM names a path dependency after its
/// directory, whatever the checkout is called.
let spindleDirectory = URL(fileURLWithPath: #filePath)
    .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

let package = Package(
    name: "ServiceBench",
    dependencies: [
        .package(path: spindleDirectory.path),
        .package(url: "https://github.com/hummingbird-project/hummingbird", from: "2.28.1"),
        .package(url: "https://github.com/apple/swift-nio", from: "2.101.2"),
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.8.2"),
    ],
    targets: [
        .executableTarget(
            name: "ServiceBench",
            dependencies: [
                .product(name: "Spindle", package: spindleDirectory.lastPathComponent),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ]
        ),
    ],
    swiftLanguageModes: [.v6]
)
