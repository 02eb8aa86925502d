import Foundation
import SkyProtocol

/// A durable job: recorded by the broker, run until it ends, its outcome kept for its retention.
///
/// Any process can get one from an id (``SkyClient/job(_:as:)``) and wait for its result.
public struct Job<T: SkyTask>: Sendable {
    public let id: JobID
    let client: SkyClient

    /// Waits for the job to end and returns its result (from any process, any time within the
    /// retention).
    /// - Throws: the job's failure as ``SkyError`` (``SkyError/cancelled(_:)`` if cancelled;
    ///   ``SkyError/jobNotFound(_:)-enum.case`` if the broker knows no such job).
    public var value: T.Result {
        get async throws { try await client.result(of: id, as: T.Result.self) }
    }

    public func status() async throws -> JobStatus { try await client.status(of: id) }

    /// Cancels the job if it has not ended (a running handler is cancelled as for `scan`).
    @discardableResult
    public func cancel() async throws -> JobStatus { try await client.cancel(job: id) }
}

/// Where a job stands.
public enum JobStatus: Sendable, Equatable, CustomStringConvertible {
    case queued
    /// Waiting for its start time (a delay, a not-before time, or the backoff before a retry).
    case scheduled(notBefore: Date)
    case running(attempt: Int, worker: String)
    case succeeded(attempt: Int)
    case failed(SkyError, attempt: Int)
    case cancelled
    /// The broker knows no such job: never submitted there, or its retention has passed.
    case unknown

    public var isFinished: Bool {
        switch self {
        case .succeeded, .failed, .cancelled: true
        default: false
        }
    }

    init(_ report: JobReport) {
        let attempt = Int(report.attempt)
        switch report.state {
        case .queued: self = .queued
        case .scheduled:
            self = .scheduled(notBefore: Date(timeIntervalSince1970: Double(report.notBeforeMilliseconds) / 1000))
        case .running: self = .running(attempt: attempt, worker: report.worker)
        case .succeeded: self = .succeeded(attempt: attempt)
        case .failed:
            self = .failed(
                SkyError(
                    failure: TaskReply(
                        requestID: RequestID(high: 0, low: 0), status: report.outcomeStatus, body: report.outcome),
                    service: report.service), attempt: attempt)
        case .cancelled: self = .cancelled
        case .unknown: self = .unknown
        }
    }

    public var description: String {
        switch self {
        case .queued: "queued"
        case .scheduled(let date): "scheduled for \(date)"
        case .running(let attempt, let worker) where worker.isEmpty: "running (attempt \(attempt))"
        case .running(let attempt, let worker): "running (attempt \(attempt), worker \(worker))"
        case .succeeded(let attempt): "succeeded (attempt \(attempt))"
        case .failed(let error, let attempt): "failed (attempt \(attempt)): \(error)"
        case .cancelled: "cancelled"
        case .unknown: "unknown"
        }
    }
}
