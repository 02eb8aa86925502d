import Foundation

/// Where in a run a measurement was taken: the same point is measured for both systems.
struct Point: Hashable, Sendable {
    var kind: Sample.Kind
    var workers: Int
    var payload: Int
    /// Requests in flight (1 for latency).
    var inFlight: Int

    static func latency(workers: Int, payload: Int) -> Point {
        Point(kind: .latency, workers: workers, payload: payload, inFlight: 1)
    }

    static func throughput(workers: Int, payload: Int, inFlight: Int) -> Point {
        Point(kind: .throughput, workers: workers, payload: payload, inFlight: inFlight)
    }

    static func typedThroughput(workers: Int, payload: Int, inFlight: Int) -> Point {
        Point(kind: .typedThroughput, workers: workers, payload: payload, inFlight: inFlight)
    }
}

/// One measurement of one system in one round.
struct Sample: Codable, Sendable {
    enum Kind: String, Codable, Sendable {
        case latency
        case throughput
        /// Throughput of Sky's typed path: `scan` of a small Codable struct, JSON both ways.
        case typedThroughput
    }

    var round: Int
    var system: BenchSystem
    var kind: Kind
    var workers: Int
    var payload: Int
    /// Requests in flight (1 for latency).
    var inFlight: Int
    var figures: Figures

    var point: Point { Point(kind: kind, workers: workers, payload: payload, inFlight: inFlight) }
}

/// sky.scan tasks per second for one shape of cluster in one round.
struct ScanScalingSample: Codable, Sendable {
    var round: Int
    var workers: Int
    var capacity: Int
    var tasksPerSecond: Double
}

/// The broker's memory before and after requests were queued.
struct QueueMemoryResult: Codable, Sendable {
    var queued: Int
    var payload: Int
    var heapBytesPerRequest: Double
    var residentBytesPerRequest: Double
    /// Heap per request beyond the payload itself: what the 300-byte target is about.
    var overheadBytesPerRequest: Double { heapBytesPerRequest - Double(payload) }
}

/// Everything a run measured, as `--json` writes it.
struct Report: Codable, Sendable {
    var machine: Machine
    var settings: BenchSettings
    var samples: [Sample] = []
    var scanScaling: [ScanScalingSample] = []
    var queueMemory: QueueMemoryResult?
}

/// Median, minimum and maximum of a set of figures.
struct Spread: Codable, Sendable {
    var median: Double
    var min: Double
    var max: Double

    init?(_ values: [Double]) {
        guard !values.isEmpty else { return nil }
        let sorted = values.sorted()
        let middle = sorted.count / 2
        median = sorted.count.isMultiple(of: 2) ? (sorted[middle - 1] + sorted[middle]) / 2 : sorted[middle]
        min = sorted[0]
        max = sorted[sorted.count - 1]
    }
}

extension Report {
    /// The samples of one system at one point, over all rounds.
    private func samples(_ system: BenchSystem, at point: Point) -> [Sample] {
        samples.filter { $0.system == system && $0.point == point }
    }

    /// One figure of one system at one point, over all rounds.
    func spread(_ system: BenchSystem, at point: Point, _ figure: (Figures) -> Double?) -> Spread? {
        Spread(samples(system, at: point).compactMap { figure($0.figures) })
    }

    /// One figure of Sky and of the baseline at one point.
    func compared(at point: Point, _ figure: (Figures) -> Double?) -> (sky: Spread?, baseline: Spread?) {
        (spread(.sky, at: point, figure), spread(.baseline, at: point, figure))
    }

    /// Median CPU microseconds per task of each role at one point.
    func cpuByRole(_ system: BenchSystem, at point: Point) -> [(role: String, perTask: Double)] {
        perTaskByRole(system, at: point) { $0.cpuSeconds.mapValues { $0 * 1e6 } }
    }

    /// Median context switches per task of each role at one point.
    func switchesByRole(_ system: BenchSystem, at point: Point) -> [(role: String, perTask: Double)] {
        perTaskByRole(system, at: point) { $0.switches.mapValues(Double.init) }
    }

    /// Median per task of each role at one point, of a figure measured per role.
    private func perTaskByRole(
        _ system: BenchSystem, at point: Point, _ byRole: (Figures) -> [String: Double]
    ) -> [(role: String, perTask: Double)] {
        let matching = samples(system, at: point)
        let roles = Set(matching.flatMap { byRole($0.figures).keys }).sorted {
            Self.roleOrder($0) < Self.roleOrder($1)
        }
        return roles.compactMap { role in
            Spread(
                matching.compactMap { sample in
                    byRole(sample.figures)[role].map { $0 / Double(max(1, sample.figures.tasks)) }
                }
            )
            .map { (role, $0.median) }
        }
    }

    private static func roleOrder(_ role: String) -> String {
        switch role {
        case "client": "0"
        case "broker": "1"
        default: "2" + role
        }
    }
}
