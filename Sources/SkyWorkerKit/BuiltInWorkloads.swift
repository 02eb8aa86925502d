import SkyProtocol
import SkyWorkloads

/// The workloads every skyworker can serve without user code.
public enum BuiltInWorkloads {
    /// Service names by which the built-ins can be selected.
    public static let all = [ScanTask.service, EchoTask.service, SleepTask.service]

    /// Registers the named built-in workloads on `system`.
    /// - Throws: ``UnknownWorkload`` for a name that is not a built-in.
    public static func register(_ names: [String], on system: ScanSystem) async throws {
        for name in names {
            switch name {
            case ScanTask.service:
                await system.register(ScanTask.self) { task in try SectorScanner.scan(task) }
            case EchoTask.service:
                // Echo returns its input bytes untouched: no decoding, no encoding.
                await system.register(service: EchoTask.service) { body in body }
            case SleepTask.service:
                await system.register(SleepTask.self) { task in
                    try await Task.sleep(for: .milliseconds(max(0, task.milliseconds)))
                    return task
                }
            default:
                throw UnknownWorkload(name: name)
            }
        }
    }

    public struct UnknownWorkload: Error, CustomStringConvertible {
        public let name: String
        public var description: String {
            "unknown built-in workload \(name); choose from \(BuiltInWorkloads.all.joined(separator: ", "))"
        }
    }
}
