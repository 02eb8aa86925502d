import Foundation
import SkyZMQ

/// What a run measures and how; written into the JSON report beside the figures.
struct BenchSettings: Codable, Sendable {
    var rounds: Int
    var workerCounts: [Int]
    var payloads: [Int]
    var inFlight: [Int]
    /// Credits per worker: the skyworker's `--capacity`, and the baseline worker's READY credits.
    var capacity: Int
    /// Where the skyworkers run their handlers (`skyworker --handlers`).
    var workerHandlers: WorkerPlacement = .pool
    /// Where the measuring calls run (``CallerPlacement``).
    var clientCallers: CallerPlacement = .pool
    var latencyRequests: Int
    var latencyWarmup: Int
    var warmupSeconds: Double
    var measureSeconds: Double
    var transport: Transport
    /// Every process of the latency and throughput runs on CPU 0.
    var pinned: Bool
    var baseline: Bool
    var queueMemoryRequests: Int
    var scanScaling: Bool
    var scanTasks: Int
    /// Small frames the baseline client adds to every message (`--baseline-extra-frames`).
    var baselineExtraFrames = 0
    /// The kernel's policy for Sky's I/O threads (``ZMQEventLoop/Scheduling``, from the
    /// environment the Sky processes inherit).
    var skyScheduling: ZMQEventLoop.Scheduling = .fromEnvironment
    /// The kernel's policy for every thread of the baseline's processes (`--baseline-scheduling`).
    var baselineScheduling: ZMQEventLoop.Scheduling = .normal
}

/// The machine a run measured on.
struct Machine: Codable, Sendable {
    var cores: Int
    var cpu: String
    var kernel: String
    var libzmq: String
    var compiler: String?
    var date: String

    static func current(compiler: String?) -> Machine {
        let cpuInfo = (try? String(contentsOfFile: "/proc/cpuinfo", encoding: .utf8)) ?? ""
        let model =
            cpuInfo.split(separator: "\n").first { $0.hasPrefix("model name") }
            .flatMap { $0.split(separator: ":", maxSplits: 1).last }
            .map { $0.trimmingCharacters(in: .whitespaces) } ?? "unknown"
        var name = utsname()
        uname(&name)
        let release = withUnsafeBytes(of: &name.release) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
        return Machine(
            cores: ProcessInfo.processInfo.activeProcessorCount, cpu: model, kernel: "Linux \(release)",
            libzmq: ZMQContext.version, compiler: compiler,
            date: ISO8601DateFormatter().string(from: Date()))
    }
}
