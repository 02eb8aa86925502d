import SkyProtocol
import SkyTasks
import SkyWire
import Tracing

/// The workloads every skyworker can serve without user code: `skyworker` registers them (a
/// worker of one's own may too), not the worker kit, which knows no workload.
public enum BuiltInWorkloads {
    /// Service names by which the built-ins can be selected.
    public static let all = [
        ScanTask.service, EchoTask.service, SleepTask.service, FlakyTask.service, GatherTask.service,
    ]

    /// Registers the named built-in workloads on `system`.
    /// - Parameters:
    ///   - names: service names from ``all``.
    ///   - system: the worker's handlers, which gain the built-ins.
    ///   - flakyEvery: `sky.flaky` fails every this many calls (at least 1).
    ///   - inlineEcho: `sky.echo` is registered inline (``ScanSystem/registerRawInline(service:handler:)``):
    ///     a worker runs it on its I/O thread, with no task.
    /// - Throws: ``UnknownWorkload`` for a name that is not a built-in.
    public static func register(
        _ names: [String], on system: ScanSystem, flakyEvery: Int = 3, inlineEcho: Bool = false
    ) async throws {
        for name in names {
            switch name {
            case ScanTask.service:
                await system.register(ScanTask.self) { task in
                    // A child of the worker's span (ServiceContext.current): what a handler of
                    // one's own does to show its steps in a trace. Free without a tracer.
                    try withSpan("scan sector") { span in
                        span.attributes["sky.sector"] = task.sector
                        return try SectorScanner.scan(task)
                    }
                }
            case EchoTask.service where inlineEcho:
                await system.registerRawInline(service: EchoTask.service) { body in body }
            case EchoTask.service:
                // Echo returns its input bytes untouched: no decoding, no encoding.
                await system.registerRaw(service: EchoTask.service) { body in body }
            case SleepTask.service:
                await system.register(SleepTask.self) { task in
                    let duration = Duration.milliseconds(task.milliseconds).asSleep
                    if task.ignoresCancellation == true {
                        await SleepTask.sleepIgnoringCancellation(for: duration)
                    } else {
                        try await Task.sleep(for: duration)
                    }
                    return task
                }
            case FlakyTask.service:
                let every = max(1, flakyEvery)
                let calls = CallCounter()
                await system.register(FlakyTask.self) { task in
                    let call = await calls.next()
                    if call % every == 0 { throw FlakyFailure(call: call, every: every) }
                    return task
                }
            case GatherTask.service:
                await system.register(GatherTask.self) { task in
                    GatherTask.Result(count: task.results.count, tags: task.results.map(\.tag))
                }
            default:
                throw UnknownWorkload(name: name)
            }
        }
    }

    public struct UnknownWorkload: Error, CustomStringConvertible {
        public let name: String

        public init(name: String) {
            self.name = name
        }

        public var description: String {
            "unknown built-in workload \(name); choose from \(BuiltInWorkloads.all.joined(separator: ", "))"
        }
    }
}

/// Numbers the calls of a workload.
actor CallCounter {
    private var count = 0

    func next() -> Int {
        count += 1
        return count
    }
}
