import Foundation
import SkyZMQ

/// The report as the tables `skybench` prints.
extension Report {
    /// Throughput at this many in flight must reach 0.6 × the baseline's.
    static let throughputTarget = (inFlight: 256, ratio: 0.6)
    static let latencyTarget = 1.3
    static let cpuTarget = 2.0
    static let memoryTarget = 300.0
    /// Context switches per task over all processes (an absolute count; the baseline makes about 0.8).
    static let switchesTarget = 1.2
    /// The typed path's CPU per task against the raw request path's.
    static let typedTarget = 1.3

    /// Says that the baseline's messages carried more frames than its plain form.
    static func extraFramesNote(_ frames: Int) -> String {
        "The baseline's messages carry \(frames) extra frame(s) each (--baseline-extra-frames)"
            + (frames == 4 ? ": as many as Sky's protocol" : "")
    }

    func table() -> String {
        var out: [String] = []
        let s = settings
        out.append(
            "Sky vs plain libzmq: sky.echo over \(s.transport) loopback, \(s.capacity) credits per worker, "
                + "handlers on the workers' \(s.workerHandlers.place), calls on the client's \(s.clientCallers.place), "
                + (s.pinned ? "every process pinned to CPU 0" : "free-running on \(machine.cores) cores"))
        out.append(
            "\(s.rounds) round(s), "
                + (s.baseline ? "Sky and the baseline alternating; " : "") + "medians (min-max over rounds)")
        out.append("\(machine.cpu), \(machine.cores) cores, \(machine.kernel), libzmq \(machine.libzmq)")
        out.append(
            "Sky's I/O threads scheduled \(s.skyScheduling.rawValue) (\(ZMQEventLoop.Scheduling.environmentVariable))"
                + (s.baseline
                    ? ", the baseline's threads \(s.baselineScheduling.rawValue) (--baseline-scheduling)" : ""))
        if s.baseline, s.baselineExtraFrames > 0 {
            out.append(Self.extraFramesNote(s.baselineExtraFrames))
        }
        out.append("")
        out += latencyTable()
        out.append("")
        out += throughputTable()
        out.append("")
        out += cpuTable()
        out.append("")
        out += switchesTable()
        out.append("")
        out += typedTable()
        if s.baseline {
            out.append("")
            out += targets()
        }
        if let memory = queueMemory {
            out.append("")
            out.append(
                "Broker memory with \(memory.queued.formatted()) queued requests (\(memory.payload) B payload): heap "
                    + "\(Self.number(memory.heapBytesPerRequest)) B per request, \(Self.number(memory.overheadBytesPerRequest)) B "
                    + "beyond the payload (target <= \(Int(Self.memoryTarget))), resident \(Self.number(memory.residentBytesPerRequest)) B"
            )
        }
        if !scanScaling.isEmpty {
            out.append("")
            out += scanTable()
        }
        return out.joined(separator: "\n")
    }

    private func latencyTable() -> [String] {
        var rows = [["workers", "payload", "Sky p50", "baseline p50", "ratio", "Sky p99", "baseline p99", "ratio"]]
        for workers in settings.workerCounts {
            for payload in settings.payloads {
                let point = Point.latency(workers: workers, payload: payload)
                let p50 = compared(at: point, \.p50)
                let p99 = compared(at: point, \.p99)
                rows.append([
                    "\(workers)", Self.bytes(payload), Self.spread(p50.sky), Self.spread(p50.baseline),
                    Self.ratio(p50.sky, p50.baseline), Self.spread(p99.sky), Self.spread(p99.baseline),
                    Self.ratio(p99.sky, p99.baseline),
                ])
            }
        }
        return ["Latency, one request in flight (microseconds)"] + Self.columns(rows)
    }

    private func throughputTable() -> [String] {
        var rows = [["workers", "payload", "in flight", "Sky", "baseline", "Sky / baseline"]]
        for workers in settings.workerCounts {
            for payload in settings.payloads {
                for inFlight in settings.inFlight {
                    let rate = compared(
                        at: .throughput(workers: workers, payload: payload, inFlight: inFlight), \.rate)
                    rows.append([
                        "\(workers)", Self.bytes(payload), "\(inFlight)", Self.spread(rate.sky),
                        Self.spread(rate.baseline), Self.ratio(rate.sky, rate.baseline),
                    ])
                }
            }
        }
        return ["Throughput (tasks per second)"] + Self.columns(rows)
    }

    /// The phases CPU per task is shown for: one in flight, and the most in flight.
    private func cpuPhases(workers: Int, payload: Int) -> [(point: Point, name: String)] {
        var phases = [(Point.latency(workers: workers, payload: payload), "latency")]
        if let most = settings.inFlight.max() {
            phases.append((.throughput(workers: workers, payload: payload, inFlight: most), "\(most) in flight"))
        }
        return phases
    }

    private func cpuTable() -> [String] {
        ["CPU time per task, all processes together (microseconds)"]
            + perTaskTable(\.cpuPerTask, byRole: cpuByRole)
    }

    /// Counts, which do not move with the machine's mood as timings do.
    private func switchesTable() -> [String] {
        ["Context switches per task, all processes together (voluntary + involuntary, every thread)"]
            + perTaskTable(\.switchesPerTask, byRole: switchesByRole)
    }

    /// Per-task figures at each latency and throughput phase: both systems, their ratio, and
    /// each system's figure split by process.
    private func perTaskTable(
        _ figure: (Figures) -> Double?, byRole: (BenchSystem, Point) -> [(role: String, perTask: Double)]
    ) -> [String] {
        var rows = [
            ["workers", "payload", "phase", "Sky", "baseline", "ratio", "Sky by process", "baseline by process"]
        ]
        for workers in settings.workerCounts {
            for payload in settings.payloads {
                for (point, name) in cpuPhases(workers: workers, payload: payload) {
                    let both = compared(at: point, figure)
                    let split = [BenchSystem.sky, .baseline].map { system in
                        byRole(system, point).map { "\($0.role) \(Self.number($0.perTask))" }.joined(separator: ", ")
                    }
                    rows.append(
                        [
                            "\(workers)", Self.bytes(payload), name, Self.spread(both.sky), Self.spread(both.baseline),
                            Self.ratio(both.sky, both.baseline),
                        ] + split)
                }
            }
        }
        return Self.columns(rows)
    }

    /// Sky's typed path against its raw request path at the same point: what Codable costs.
    private func typedTable() -> [String] {
        let most = settings.inFlight.max() ?? Self.throughputTarget.inFlight
        var rows = [
            [
                "workers", "payload", "raw tasks/s", "typed tasks/s", "raw CPU/task", "typed CPU/task", "ratio",
                "typed client CPU/task",
            ]
        ]
        for workers in settings.workerCounts {
            for payload in settings.payloads {
                let raw = Point.throughput(workers: workers, payload: payload, inFlight: most)
                let typed = Point.typedThroughput(workers: workers, payload: payload, inFlight: most)
                let rawCPU = spread(.sky, at: raw, \.cpuPerTask)
                let typedCPU = spread(.sky, at: typed, \.cpuPerTask)
                let client = cpuByRole(.sky, at: typed).first { $0.role == "client" }.map { Self.number($0.perTask) }
                rows.append([
                    "\(workers)", Self.bytes(payload), Self.spread(spread(.sky, at: raw, \.rate)),
                    Self.spread(spread(.sky, at: typed, \.rate)), Self.spread(rawCPU), Self.spread(typedCPU),
                    Self.ratio(typedCPU, rawCPU), client ?? "-",
                ])
            }
        }
        return [
            "Sky's typed path (scan of a Codable EchoTask, JSON) against raw requests, \(most) in flight (CPU in microseconds)"
        ]
            + Self.columns(rows)
    }

    private func targets() -> [String] {
        var lines = ["Targets (ratio of medians; met or not)"]
        let shapes = settings.workerCounts.flatMap { workers in settings.payloads.map { (workers, $0) } }
        let most = settings.inFlight.max() ?? Self.throughputTarget.inFlight
        /// One line: the ratio at `point` of each shape, and whether it `holds`.
        func check(
            _ name: String, _ point: (Int, Int) -> Point, _ figure: (Figures) -> Double?, holds: (Double) -> Bool
        ) {
            let parts = shapes.map { workers, payload -> String in
                let label = "\(workers)w/\(Self.bytes(payload))"
                let (sky, base) = compared(at: point(workers, payload), figure)
                guard let sky, let base, base.median > 0 else { return "\(label) n/a" }
                let ratio = sky.median / base.median
                return "\(label) \(String(format: "%.2f", ratio)) \(holds(ratio) ? "met" : "NOT met")"
            }
            lines.append("- \(name): " + parts.joined(separator: "; "))
        }
        let loaded = { (workers: Int, payload: Int) in
            Point.throughput(workers: workers, payload: payload, inFlight: most)
        }
        check("throughput at \(most) in flight >= \(Self.throughputTarget.ratio) x baseline", loaded, \.rate) {
            $0 >= Self.throughputTarget.ratio
        }
        check("p50 latency <= \(Self.latencyTarget) x baseline", Point.latency, \.p50) { $0 <= Self.latencyTarget }
        check("CPU per task at \(most) in flight <= \(Self.cpuTarget) x baseline", loaded, \.cpuPerTask) {
            $0 <= Self.cpuTarget
        }
        let typedParts = shapes.map { workers, payload -> String in
            let label = "\(workers)w/\(Self.bytes(payload))"
            let raw = spread(.sky, at: loaded(workers, payload), \.cpuPerTask)
            let typed = spread(
                .sky, at: .typedThroughput(workers: workers, payload: payload, inFlight: most), \.cpuPerTask)
            guard let raw, let typed, raw.median > 0 else { return "\(label) n/a" }
            let ratio = typed.median / raw.median
            return "\(label) \(String(format: "%.2f", ratio)) \(ratio <= Self.typedTarget ? "met" : "NOT met")"
        }
        lines.append(
            "- typed scan CPU per task <= \(Self.typedTarget) x the raw request path: "
                + typedParts.joined(separator: "; "))
        let switchParts = shapes.map { workers, payload -> String in
            let label = "\(workers)w/\(Self.bytes(payload))"
            guard let sky = spread(.sky, at: loaded(workers, payload), \.switchesPerTask) else { return "\(label) n/a" }
            let holds = sky.median <= Self.switchesTarget
            return "\(label) \(String(format: "%.2f", sky.median)) \(holds ? "met" : "NOT met")"
        }
        lines.append(
            "- context switches per task at \(most) in flight <= \(Self.switchesTarget), all processes: "
                + switchParts.joined(separator: "; "))
        if let memory = queueMemory {
            let overhead = memory.overheadBytesPerRequest
            lines.append(
                "- broker memory per queued request beyond the payload <= \(Int(Self.memoryTarget)) B: "
                    + "\(Self.number(overhead)) B \(overhead <= Self.memoryTarget ? "met" : "NOT met")")
        }
        return lines
    }

    private func scanTable() -> [String] {
        var rows = [["workers", "capacity each", "sky.scan tasks/s", "vs 1 x 1"]]
        let shapes = Array(Set(scanScaling.map { [$0.workers, $0.capacity] })).sorted {
            ($0[0] * 1000 + $0[1]) < ($1[0] * 1000 + $1[1])
        }
        let rate = { (shape: [Int]) in
            Spread(scanScaling.filter { $0.workers == shape[0] && $0.capacity == shape[1] }.map(\.tasksPerSecond))
        }
        let single = rate([1, 1])
        for shape in shapes {
            let spread = rate(shape)
            rows.append(["\(shape[0])", "\(shape[1])", Self.spread(spread), Self.ratio(spread, single)])
        }
        return ["sky.scan (CPU-bound, ~2 ms each) spread over workers; free-running, 64 in flight"] + Self.columns(rows)
    }

    // MARK: Formatting

    static func number(_ value: Double) -> String {
        if value >= 10_000 { return String(format: "%.1fk", value / 1000) }
        if value >= 100 { return String(format: "%.0f", value) }
        if value >= 10 { return String(format: "%.1f", value) }
        return String(format: "%.2f", value)
    }

    static func spread(_ spread: Spread?) -> String {
        guard let spread else { return "-" }
        if spread.min == spread.max { return number(spread.median) }
        return "\(number(spread.median)) (\(number(spread.min))-\(number(spread.max)))"
    }

    static func ratio(_ sky: Spread?, _ base: Spread?) -> String {
        guard let sky, let base, base.median > 0 else { return "-" }
        return String(format: "%.2f", sky.median / base.median)
    }

    static func bytes(_ count: Int) -> String {
        count >= 1024 && count.isMultiple(of: 1024) ? "\(count / 1024) KiB" : "\(count) B"
    }

    /// Rows as left-aligned columns two spaces apart.
    static func columns(_ rows: [[String]]) -> [String] {
        // Written with explicit types: the chained closures took the type checker seven seconds.
        let columnCount: Int = rows.map(\.count).max() ?? 0
        var widths = [Int](repeating: 0, count: columnCount)
        for row in rows {
            for (index, cell) in row.enumerated() { widths[index] = max(widths[index], cell.count) }
        }
        return rows.map { (row: [String]) -> String in
            var cells: [String] = []
            for (index, cell) in row.enumerated() {
                let last = index == row.count - 1
                cells.append(last ? cell : cell.padding(toLength: widths[index], withPad: " ", startingAt: 0))
            }
            return cells.joined(separator: "  ")
        }
    }
}
