import Foundation
import SkyJSON
import SkyWire

/// The one-byte outcome of a task, as carried in every reply.
public enum ReplyStatus: UInt8, Sendable, CaseIterable, CustomStringConvertible {
    /// The handler returned; the body is its result.
    case ok = 0
    /// The handler threw; the body names the error type and message.
    case handlerError = 1
    /// The worker does not serve the service, or the broker has no such internal service.
    case unknownService = 2
    /// The worker could not decode the task payload.
    case invalidPayload = 3
    /// The broker's queue is full.
    case overloaded = 4
    /// No connected worker serves the service, and none joined within the no-workers grace (or
    /// before the request's deadline or the broker's maximum wait, when one came first).
    case noWorkers = 5
    /// The workers holding the task died more often than the broker's delivery limit allows.
    case workerLost = 6
    /// The task's deadline passed before it could run or finish.
    case deadlineExceeded = 7
    /// The broker is shutting down and did not run the task.
    case brokerShuttingDown = 8
    /// The task was cancelled.
    case cancelled = 9
    /// Something unexpected failed inside the broker or worker.
    case internalError = 10
    /// The request reached the broker's workers endpoint: the client is pointed at the wrong
    /// port. The body names the endpoint clients should use.
    case wrongEndpoint = 11
    /// The broker could not record a job durably (no journal, disk full, journal failing, a
    /// PostgreSQL store out of reach), or its journal is over `--journal-max-bytes`; this submit
    /// recorded nothing, unless a PostgreSQL connection broke during the COMMIT (the outcome is
    /// then unknown: the same idempotency key finds the job if it was). Task traffic goes on.
    case journalUnavailable = 12
    /// The broker's journal had not confirmed a job within the wait its submission asked for
    /// (``JobSubmission/confirmWithinMilliseconds``): the job may still be recorded, and then
    /// runs. The same submit with the same idempotency key is answered with the job if it was.
    /// Sent only for a submission of version 2 that asked for it.
    case journalUnconfirmed = 13
    /// The caller went away from a call that asked to be kept
    /// (``RequestHeader/keepIfAbandoned``), and the broker recorded it as a durable job whose id
    /// is the request id: its result is read with `mmi.jobs.status` or `mmi.jobs.wait`. Sent
    /// only to a client whose REQUEST asked for it.
    case keptAsJob = 14

    public var description: String {
        switch self {
        case .ok: "ok"
        case .handlerError: "handlerError"
        case .unknownService: "unknownService"
        case .invalidPayload: "invalidPayload"
        case .overloaded: "overloaded"
        case .noWorkers: "noWorkers"
        case .workerLost: "workerLost"
        case .deadlineExceeded: "deadlineExceeded"
        case .brokerShuttingDown: "brokerShuttingDown"
        case .cancelled: "cancelled"
        case .internalError: "internalError"
        case .wrongEndpoint: "wrongEndpoint"
        case .journalUnavailable: "journalUnavailable"
        case .journalUnconfirmed: "journalUnconfirmed"
        case .keptAsJob: "keptAsJob"
        }
    }

    /// A one-byte status frame's byte.
    static func byte(of frame: ArraySlice<UInt8>) throws(ProtocolError) -> UInt8 {
        guard frame.count == 1 else { throw .invalidField(name: "status", expectedLength: 1, actual: frame.count) }
        return frame[frame.startIndex]
    }

    /// A received reply's status and body. A status this edition does not know is a failure
    /// (docs/protocol.md: statuses are only ever added, and a receiver treats one it does not
    /// know as a failure): it is read as ``internalError`` with its number and the body's
    /// message in the body, where dropping the reply as malformed left its call unanswered.
    static func received(_ byte: UInt8, body: ArraySlice<UInt8>) -> (ReplyStatus, ArraySlice<UInt8>) {
        if let status = ReplyStatus(rawValue: byte) { return (status, body) }
        let sent = RemoteErrorBody(decoding: Array(body))
        let said = sent.message.isEmpty ? "" : ": \(sent.type): \(sent.message)"
        let message = "a reply with status \(byte), which this receiver does not know (sent by a newer peer?)\(said)"
        return (.internalError, RemoteErrorBody(type: unknownStatusType, message: message).encoded()[...])
    }

    /// A received reply whose status is `byte` (read as ``received(_:body:)`` says) and whose
    /// body is frame `index` of `frames`, shared with the message, not copied.
    static func reply(
        _ requestID: RequestID, attempt: UInt32 = 1, byte: UInt8, body index: Int, of frames: Frames
    ) -> TaskReply {
        guard let status = ReplyStatus(rawValue: byte) else {
            let (status, body) = received(byte, body: frames[index])
            return TaskReply(requestID: requestID, attempt: attempt, status: status, bodyBytes: body)
        }
        let (array, range) = frames.arrayAndRange(index)
        return TaskReply(requestID: requestID, attempt: attempt, status: status, bodyIn: array, range: range)
    }

    /// The error type of a reply whose status the receiver did not know (``received(_:body:)``).
    public static let unknownStatusType = "unknownStatus"

    /// Whether a worker may send this status. The others are the broker's own (about queues,
    /// workers, the journal, the endpoint): from a worker they would make a client act on
    /// something that did not happen (`wrongEndpoint` stops Sky's client).
    public var isWorkersToSend: Bool {
        switch self {
        case .ok, .handlerError, .unknownService, .invalidPayload, .overloaded, .deadlineExceeded, .cancelled,
            .internalError:
            true
        case .noWorkers, .workerLost, .brokerShuttingDown, .wrongEndpoint, .journalUnavailable, .journalUnconfirmed,
            .keptAsJob:
            false
        }
    }
}

/// The body of every failure reply: `{"type": "...", "message": "..."}` in UTF-8 JSON.
public struct RemoteErrorBody: Codable, Sendable, Equatable {
    /// The Swift type of a handler's error, or the kind of failure for broker-made replies.
    public var type: String
    /// A sentence for humans.
    public var message: String
    /// For a call refused because its service's rate limit would have made it wait past its
    /// deadline (type ``rateLimitedType``, status `overloaded`): how long it would have waited.
    /// Absent otherwise.
    public var retryAfterMs: Int64?

    /// The type of an `overloaded` the broker answers to a call that its service's rate limit
    /// would have made wait past its deadline.
    public static let rateLimitedType = "rateLimited"
    /// The type of an `invalidPayload` the broker answers to a kept call whose request id is
    /// already a job's, or another client's kept call's in flight: the id names one piece of
    /// work.
    public static let idInUseType = "idInUse"
    /// The type of an `invalidPayload` the broker answers to work of a service rate-limited per
    /// key, taken from a payload field (``KeyScope/field``), whose payload gives no key: the
    /// work was not run.
    public static let keyMissingType = "keyMissing"

    /// The type of a `handlerError` a worker makes itself: the handler's result was larger
    /// than the broker takes (its `max-frame-size`), so it was not sent.
    public static let resultTooLargeType = "ResultTooLarge"

    public init(type: String, message: String, retryAfterMs: Int64? = nil) {
        self.type = type
        self.message = message
        self.retryAfterMs = retryAfterMs
    }

    /// `{"message":"…","type":"…"}`, written directly: the broker makes one for every failure it
    /// answers, possibly 100,000 in one deadline storm, so no encoder is built per body.
    public func encoded() -> [UInt8] {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(type.utf8.count + message.utf8.count + 24)
        bytes.append(UInt8(ascii: "{"))
        JSONText.appendMember("message", message, first: true, to: &bytes)
        if let retryAfterMs { bytes += Array(",\"retryAfterMs\":\(retryAfterMs)".utf8) }
        JSONText.appendMember("type", type, to: &bytes)
        bytes.append(UInt8(ascii: "}"))
        return bytes
    }

    /// Decodes a failure body; a body that is not such JSON becomes its text as the message.
    public init(decoding body: [UInt8]) {
        if let decoded = try? CanonicalJSON.decode(RemoteErrorBody.self, from: body) {
            self = decoded
        } else {
            self.init(type: "unknown", message: String(decoding: body, as: UTF8.self))
        }
    }
}
