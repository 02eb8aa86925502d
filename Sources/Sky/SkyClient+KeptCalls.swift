import Foundation
import SkyProtocol

/// Kept calls whose job id the caller holds before the call ends (``ScanOptions/keepIfAbandoned``).
extension SkyClient {
    /// Runs `task` as a kept call whose job, if the broker keeps it, has the id `id`.
    ///
    /// A caller that may die mid-call stores `id` first (with the order it serves, say), and
    /// whoever finds it later reads the job by it: ``status(of:)``, ``result(of:as:coder:)``.
    /// The id names a job only once the broker kept the call (its caller left it; at the latest
    /// at its deadline at the broker). Until then, and for good if the caller got the result,
    /// ``status(of:)`` says ``JobStatus/unknown`` and ``result(of:as:coder:)`` throws
    /// ``SkyError/jobNotFound(_:)-enum.case``. As ``scan(_:options:coder:)`` with
    /// ``ScanOptions/keepIfAbandoned`` otherwise: at the deadline this call throws
    /// ``SkyError/keptAsJob(_:)`` with `id`.
    /// - Parameters:
    ///   - task: what to run, as for ``scan(_:options:coder:)``.
    ///   - id: a fresh id for this call (`JobID.random()`): a call whose id is in flight in
    ///     this client fails with ``SkyError/invalidTask(_:)``; one whose id is already a job's
    ///     runs, but is not kept (it ends `cancelled` or `deadlineExceeded`, saying so).
    ///   - options: as for any call; `keepIfAbandoned` is set.
    ///   - coder: how the task and result are encoded, as for ``scan(_:options:coder:)``.
    public nonisolated(nonsending) func scan<T: SkyTask>(
        _ task: T, keptAs id: JobID, options: ScanOptions? = nil, coder: some TaskCoder = .json
    ) async throws -> T.Result {
        try await scan(task, options: Self.kept(as: id, options ?? configuration.defaults), coder: coder)
    }

    /// ``scan(_:keptAs:options:coder:)`` for a task given as an encoded payload.
    public nonisolated(nonsending) func request(
        service: String, body: [UInt8], keptAs id: JobID, options: ScanOptions? = nil
    ) async throws -> [UInt8] {
        try await request(service: service, body: body, options: Self.kept(as: id, options ?? configuration.defaults))
    }

    private static func kept(as id: JobID, _ options: ScanOptions) -> ScanOptions {
        var options = options
        options.keepIfAbandoned = true
        options.keptAs = id
        return options
    }
}

extension JobID {
    /// A new id for a kept call (``SkyClient/scan(_:keptAs:options:coder:)``): the time now and
    /// 80 random bits, as the broker makes a job's.
    public static func random() -> JobID {
        var generator = SystemRandomNumberGenerator()
        return JobID(milliseconds: Int64(Date().timeIntervalSince1970 * 1000), random: &generator)
    }
}
