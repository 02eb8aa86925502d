// swift-tools-version:6.1
import PackageDescription

/// Sky: a distributed worker system for Swift on ZeroMQ.
///
/// Layout: libraries live in `Sources/`, the broker's entry point in `Broker/`,
/// the worker's in `Workers/`. libzmq comes from the system (Debian's `libzmq3-dev`).
let strictSettings: [SwiftSetting] = [
    .enableUpcomingFeature("ExistentialAny"),
    .enableUpcomingFeature("MemberImportVisibility"),
]

let package = Package(
    name: "Sky",
    platforms: [.macOS(.v15)],
    products: [
        .library(name: "Sky", targets: ["Sky"]),
        .library(name: "SkyWorkerKit", targets: ["SkyWorkerKit"]),
        .library(name: "SkyWorkerCLI", targets: ["SkyWorkerCLI"]),
        .library(name: "SkyBrokerKit", targets: ["SkyBrokerKit"]),
        .library(name: "SkyWorkloads", targets: ["SkyWorkloads"]),
        .library(name: "SkyProtocol", targets: ["SkyProtocol"]),
        .library(name: "SkyZMQ", targets: ["SkyZMQ"]),
        .executable(name: "skybroker", targets: ["skybroker"]),
        .executable(name: "skyworker", targets: ["skyworker"]),
        .executable(name: "skyscan", targets: ["skyscan"]),
        .executable(name: "skywatch", targets: ["skywatch"]),
        .executable(name: "skyctl", targets: ["skyctl"]),
        .executable(name: "skyweb", targets: ["skyweb"]),
        .executable(name: "sky-example-worker", targets: ["ExampleWorker"]),
        .executable(name: "skybench", targets: ["skybench"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.5.0"),
        .package(url: "https://github.com/apple/swift-log", from: "1.6.0"),
        .package(url: "https://github.com/apple/swift-collections", from: "1.1.0"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle", from: "2.6.0"),
        .package(url: "https://github.com/HdrHistogram/hdrhistogram-swift", from: "0.1.0"),
        // Metrics: the libraries emit through swift-metrics only; the executables export them.
        .package(url: "https://github.com/apple/swift-metrics", from: "2.4.1"),
        .package(url: "https://github.com/swift-server/swift-prometheus", from: "2.0.0"),
        .package(url: "https://github.com/swhitty/FlyingFox", from: "0.27.1"),
        // Tracing: the libraries start spans and carry their context; the application picks
        // the tracer (swift-otel, for example: docs/operations.md).
        .package(url: "https://github.com/apple/swift-distributed-tracing", from: "1.7.3"),
        // Documentation: `swift package generate-documentation` (ops/sky docs). A command
        // plugin only: nothing of it is linked into a product.
        .package(url: "https://github.com/swiftlang/swift-docc-plugin", from: "1.4.0"),
    ],
    targets: [
        // libzmq from the system. No pkgConfig: zmq.h is on the default include path and the
        // module map links zmq; pkg-config's private requirements only add a build warning.
        .systemLibrary(name: "CZMQ", path: "Sources/CZMQ"),
        // SQLite from the system (Debian: libsqlite3-dev), for the broker's journal of durable
        // jobs; only SkyJournal imports it.
        .systemLibrary(name: "CSQLite", path: "Sources/CSQLite", providers: [.apt(["libsqlite3-dev"])]),
        .target(
            name: "SkyJournal",
            dependencies: ["CSQLite", "CSkySystem"],
            swiftSettings: strictSettings
        ),
        // libpq from the system (Debian: libpq-dev), for the job store on PostgreSQL; only
        // SkyPostgres imports it.
        .systemLibrary(
            name: "CLibPQ", path: "Sources/CLibPQ", pkgConfig: "libpq", providers: [.apt(["libpq-dev"])]),
        .target(
            name: "SkyPostgres",
            dependencies: ["CLibPQ", "SkyJournal"],
            swiftSettings: strictSettings
        ),
        // libxcrypt from the system (Debian: libcrypt-dev, which libc6-dev depends on), for the
        // bcrypt hashes of skyweb's --auth-file; only skyweb imports it.
        .systemLibrary(name: "CCrypt", path: "Sources/CCrypt", providers: [.apt(["libcrypt-dev"])]),
        // glibc facts Swift's Glibc module does not expose (heap in use, eventfd, thread names).
        .target(name: "CSkySystem", path: "Sources/CSkySystem"),
        // What crosses a link, below both the transport and the protocol: multipart messages
        // (`Frames`) and what a socket's monitor says, which the pure client and worker machines
        // read without importing the transport.
        .target(
            name: "SkyWire",
            dependencies: ["CSkySystem", .product(name: "HeapModule", package: "swift-collections")],
            swiftSettings: strictSettings
        ),
        .target(
            name: "SkyZMQ",
            dependencies: ["CZMQ", "CSkySystem", "SkyWire"],
            swiftSettings: strictSettings
        ),
        // The canonical JSON codec (task payloads, events, tool output): the same bytes and
        // errors as Foundation's coders, which cost a typed call more than the 1.3 × a raw
        // request allows (docs/performance.md); a module of its own, tested against them.
        .target(
            name: "SkyJSON",
            swiftSettings: strictSettings
        ),
        .target(
            name: "SkyProtocol",
            dependencies: ["SkyJSON", "SkyWire"],
            swiftSettings: strictSettings
        ),
        .target(
            name: "SkyTracing",
            dependencies: [
                "SkyProtocol",
                .product(name: "Tracing", package: "swift-distributed-tracing"),
                .product(name: "Instrumentation", package: "swift-distributed-tracing"),
            ],
            swiftSettings: strictSettings
        ),
        .target(
            name: "SkyWorkloads",
            dependencies: [
                "SkyWire", "SkyProtocol", "SkyTasks", .product(name: "Tracing", package: "swift-distributed-tracing"),
            ],
            swiftSettings: strictSettings
        ),
        .target(
            name: "SkyBrokerKit",
            dependencies: [
                "SkyWire", "SkyTracing",
                .product(name: "Tracing", package: "swift-distributed-tracing"),
                .product(name: "Instrumentation", package: "swift-distributed-tracing"),
                "SkyZMQ", "SkyProtocol", "SkyJSON", "SkyJournal", "SkyPostgres", "CSkySystem",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "CoreMetrics", package: "swift-metrics"),
                .product(name: "DequeModule", package: "swift-collections"),
                .product(name: "HeapModule", package: "swift-collections"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            swiftSettings: strictSettings
        ),
        .target(
            name: "SkyTasks",
            dependencies: [
                "SkyProtocol",
                .product(name: "DequeModule", package: "swift-collections"),
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: strictSettings
        ),
        .target(
            name: "SkyWorkerKit",
            dependencies: [
                "SkyWire", "SkyTracing",
                .product(name: "Tracing", package: "swift-distributed-tracing"),
                .product(name: "Instrumentation", package: "swift-distributed-tracing"),
                "SkyZMQ", "SkyProtocol", "SkyJSON", "SkyTasks",
                .product(name: "DequeModule", package: "swift-collections"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "CoreMetrics", package: "swift-metrics"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            swiftSettings: strictSettings
        ),
        .target(
            name: "Sky",
            dependencies: [
                "SkyWire", "SkyTracing",
                .product(name: "Tracing", package: "swift-distributed-tracing"),
                .product(name: "Instrumentation", package: "swift-distributed-tracing"),
                "SkyZMQ", "SkyProtocol", "SkyTasks",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "CoreMetrics", package: "swift-metrics"),
                .product(name: "HeapModule", package: "swift-collections"),
            ],
            swiftSettings: strictSettings
        ),
        .target(
            name: "SkyCLISupport",
            dependencies: [
                "CSkySystem",
                .product(name: "Tracing", package: "swift-distributed-tracing"),
                .product(name: "Instrumentation", package: "swift-distributed-tracing"),
                .product(name: "InMemoryTracing", package: "swift-distributed-tracing"),
                "SkyZMQ",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "CoreMetrics", package: "swift-metrics"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "FlyingFox", package: "FlyingFox"),
                .product(name: "FlyingSocks", package: "FlyingFox"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "UnixSignals", package: "swift-service-lifecycle"),
            ],
            swiftSettings: strictSettings
        ),
        // skyworker's flags and process setup for a worker of one's own (WorkerOptions): a
        // product apart, so that SkyWorkerKit alone pulls in no ArgumentParser, HTTP server or
        // Prometheus.
        .target(
            name: "SkyWorkerCLI",
            dependencies: [
                "SkyWire", "SkyWorkerKit", "SkyCLISupport", "SkyProtocol",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "UnixSignals", package: "swift-service-lifecycle"),
            ],
            swiftSettings: strictSettings
        ),
        .executableTarget(
            name: "skybroker",
            dependencies: [
                "SkyWire", "SkyBrokerKit", "SkyCLISupport", "SkyProtocol", "SkyZMQ", "SkyPostgres",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
            ],
            path: "Broker",
            swiftSettings: strictSettings
        ),
        .executableTarget(
            name: "skyworker",
            dependencies: [
                "SkyWorkerCLI", "SkyWorkerKit", "SkyWorkloads", "SkyCLISupport",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ],
            path: "Workers",
            swiftSettings: strictSettings
        ),
        .executableTarget(
            name: "skyscan",
            dependencies: [
                "SkyWire", "Sky", "SkyWorkloads", "SkyCLISupport", "SkyJSON",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Histogram", package: "hdrhistogram-swift"),
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: strictSettings
        ),
        .executableTarget(
            name: "skywatch",
            dependencies: [
                "Sky", "SkyProtocol", "SkyJSON", "SkyCLISupport",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "UnixSignals", package: "swift-service-lifecycle"),
            ],
            swiftSettings: strictSettings
        ),
        // The web dashboard: a watcher that serves one self-contained page (docs/operations.md).
        .executableTarget(
            name: "skyweb",
            dependencies: [
                "Sky", "SkyProtocol", "SkyJSON", "SkyCLISupport", "CCrypt",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "UnixSignals", package: "swift-service-lifecycle"),
                .product(name: "FlyingFox", package: "FlyingFox"),
                .product(name: "FlyingSocks", package: "FlyingFox"),
            ],
            swiftSettings: strictSettings
        ),
        // Operator commands over the client protocol: durable jobs.
        .executableTarget(
            name: "skyctl",
            dependencies: [
                "Sky", "SkyProtocol", "SkyCLISupport",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ],
            swiftSettings: strictSettings
        ),
        // docs/worker.md's example (the README quotes its heart): a worker with a custom typed service.
        .executableTarget(
            name: "ExampleWorker",
            dependencies: ["SkyWorkerCLI"],
            swiftSettings: strictSettings
        ),
        // The benchmark: Sky against a plain-libzmq baseline (bench/baseline) in the same run.
        // A separate executable, never run by the test suite beyond one smoke test.
        .executableTarget(
            name: "skybench",
            dependencies: [
                "SkyWire", "Sky", "SkyProtocol", "SkyWorkloads", "SkyWorkerKit", "SkyTestSupport", "CSkySystem",
                "SkyCLISupport",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Histogram", package: "hdrhistogram-swift"),
                .product(name: "UnixSignals", package: "swift-service-lifecycle"),
            ],
            swiftSettings: strictSettings
        ),
        // Helpers the test targets (and the benchmark) share: clocks, waiting, child processes.
        .target(
            name: "SkyTestSupport",
            dependencies: ["SkyZMQ", "CSkySystem"],
            swiftSettings: strictSettings
        ),
        .testTarget(
            name: "SkyZMQTests",
            dependencies: ["SkyWire", "SkyZMQ", "SkyProtocol", "SkyTestSupport"],
            swiftSettings: strictSettings
        ),
        .testTarget(
            name: "SkyProtocolTests",
            dependencies: ["SkyWire", "SkyProtocol", "SkyJSON"],
            swiftSettings: strictSettings
        ),
        .testTarget(
            name: "SkyBrokerKitTests",
            dependencies: ["SkyWire", "SkyBrokerKit", "SkyProtocol", "SkyZMQ"],
            swiftSettings: strictSettings
        ),
        .testTarget(
            name: "SkyClientTests",
            dependencies: [
                "SkyWire", "Sky", "SkyProtocol", "SkyZMQ", "SkyWorkerKit", "SkyWorkloads", "SkyTestSupport",
                .product(name: "MetricsTestKit", package: "swift-metrics"),
            ],
            swiftSettings: strictSettings
        ),
        .testTarget(
            name: "SkyJournalTests",
            dependencies: ["SkyJournal", "SkyPostgres", "SkyTestSupport", "SkyZMQ"],
            swiftSettings: strictSettings
        ),
        .testTarget(
            name: "SkyWorkerKitTests",
            dependencies: ["SkyWire", "SkyWorkerKit", "SkyProtocol", "SkyTasks", "SkyZMQ"],
            swiftSettings: strictSettings
        ),
        .testTarget(
            name: "SkyWorkloadsTests",
            dependencies: ["SkyWorkloads", "SkyWorkerKit", "SkyProtocol", "SkyZMQ", "SkyTestSupport"],
            swiftSettings: strictSettings
        ),
        .testTarget(
            name: "IntegrationTests",
            dependencies: [
                "SkyWire", "Sky", "SkyWorkloads", "SkyWorkerKit", "SkyBrokerKit", "SkyZMQ", "SkyProtocol",
                "SkyTestSupport",
                "skybroker", "skyworker", "skyscan", "skywatch", "skyctl", "skyweb", "ExampleWorker", "skybench",
                "SkyTracing",
                .product(name: "Tracing", package: "swift-distributed-tracing"),
                .product(name: "InMemoryTracing", package: "swift-distributed-tracing"),
                .product(name: "FlyingFox", package: "FlyingFox"),
            ],
            swiftSettings: strictSettings
        ),
    ]
)
