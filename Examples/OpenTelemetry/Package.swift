// swift-tools-version:6.2
import Foundation
import PackageDescription

/// A package found by path is named after its folder: whatever Sky's clone is called.
let sky = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
    .deletingLastPathComponent().lastPathComponent

/// Sky with OpenTelemetry: a worker and a client that export their spans (and metrics and
/// logs) over OTLP with swift-otel. A package of its own, so that Sky's own build stays lean
/// (swift-otel and its gRPC/HTTP stack take minutes to build). See docs/operations.md "Tracing".
let package = Package(
    name: "SkyOpenTelemetryExample",
    platforms: [.macOS(.v15)],
    dependencies: [
        .package(path: "../.."),
        .package(url: "https://github.com/swift-otel/swift-otel", from: "1.6.0"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle", from: "2.6.0"),
        .package(url: "https://github.com/apple/swift-log", from: "1.6.0"),
    ],
    targets: [
        .executableTarget(
            name: "TracedWorker",
            dependencies: [
                .product(name: "SkyWorkerKit", package: sky),
                .product(name: "OTel", package: "swift-otel"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "Logging", package: "swift-log"),
            ]),
        .executableTarget(
            name: "TracedClient",
            dependencies: [
                .product(name: "Sky", package: sky),
                .product(name: "SkyWorkloads", package: sky),
                .product(name: "OTel", package: "swift-otel"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "Logging", package: "swift-log"),
            ]),
    ]
)
