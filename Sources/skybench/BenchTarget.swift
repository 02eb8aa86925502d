/// The two systems a run compares.
enum BenchSystem: String, Codable, Sendable, CaseIterable {
    /// skybroker, skyworker and SkyClient.
    case sky
    /// The plain C + libzmq programs in `bench/baseline`: the same message flow, no application work.
    case baseline
}

/// One running cluster of a system under test (a broker and its workers), measured from a client.
protocol BenchTarget: Sendable {
    var system: BenchSystem { get }

    /// One request in flight: `warmup` untimed, then `requests` timed round trips.
    func latency(payload: Int, requests: Int, warmup: Int) async throws -> Figures

    /// `inFlight` requests kept in flight; completions are counted for `measure` after `warmup`.
    func throughput(payload: Int, inFlight: Int, warmup: Duration, measure: Duration) async throws -> Figures

    /// Stops every process the target started.
    func stop() async
}

/// What one measurement found.
struct Figures: Codable, Sendable {
    /// Tasks completed in the measured phase.
    var tasks: Int
    /// Length of the measured phase.
    var seconds: Double
    /// Latency percentiles in microseconds (latency runs only).
    var p50: Double?
    var p99: Double?
    /// CPU seconds each process used during the measured phase, by role (client, broker, worker-1, ...).
    var cpuSeconds: [String: Double]
    /// Context switches of each process during the measured phase, by role.
    var switches: [String: Int] = [:]

    /// Tasks per second.
    var rate: Double { seconds > 0 ? Double(tasks) / seconds : 0 }

    /// Context switches per task, over every process involved (`nil` if none were read).
    var switchesPerTask: Double? {
        tasks > 0 && !switches.isEmpty ? Double(switches.values.reduce(0, +)) / Double(tasks) : nil
    }

    /// CPU microseconds per task, over every process involved.
    var cpuPerTask: Double { tasks > 0 ? cpuSeconds.values.reduce(0, +) / Double(tasks) * 1e6 : 0 }
}
