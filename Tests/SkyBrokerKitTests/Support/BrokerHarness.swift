import Foundation
import SkyWire
import SkyZMQ
import Testing

@testable import SkyBrokerKit
@testable import SkyProtocol

/// A small driver that feeds the machine and returns the actions of each input.
struct BrokerHarness {
    var machine: BrokerStateMachine
    /// The injected clock: tests move it by hand.
    var now = MonotonicInstant.now
    /// The delivery tag of the latest REQUEST of each request id to each worker, as a worker
    /// would remember it to echo in its REPLY.
    var tags: [String: DeliveryTag] = [:]
    /// Every action since ``keepsRecord`` was set (off by default: storms make millions).
    var recorded: [BrokerAction] = []
    var keepsRecord = false

    /// A machine whose events someone watches (all of them), so that tests see every event.
    /// The tick's work is measured on `workClock`: by default one that stands still, so that
    /// only the counts bound a tick (a test of the time bound passes a clock that moves).
    init(
        _ configuration: BrokerStateMachine.Configuration = .init(),
        workClock: @escaping @Sendable () -> MonotonicInstant = { MonotonicInstant(nanoseconds: 0) }
    ) {
        var configuration = configuration
        configuration.workClock = workClock
        machine = BrokerStateMachine(configuration: configuration)
        machine.eventSubscription([], subscribed: true)
    }

    /// The tag of the latest delivery of `id` to `worker`.
    func tag(_ id: RequestID, at worker: PeerID) -> DeliveryTag {
        // Tag 0 is never given: a reply with it names no delivery.
        tags["\(worker)/\(id)"] ?? DeliveryTag(number: 0)
    }

    mutating func record(_ actions: [BrokerAction]) -> [BrokerAction] {
        for case .sendToWorker(let peer, .request(let tag, let request)) in actions {
            tags["\(peer)/\(request.requestID)"] = tag
        }
        for case .sendToWorker(let peer, .packedRequest(let tag, let request)) in actions {
            tags["\(peer)/\(request.requestID)"] = tag
        }
        for case .sendTraced(let peer, let tag, let request, _) in actions {
            tags["\(peer)/\(request.requestID)"] = tag
        }
        if keepsRecord { recorded += actions }
        return actions
    }

    /// Moves time and ticks as the shell does: again at once while expiries are backlogged.
    mutating func advance(_ duration: Duration) -> [BrokerAction] {
        var actions = tickOnce(after: duration)
        while machine.hasExpiryBacklog { actions += tickOnce(after: .zero) }
        return actions
    }

    /// Moves time and ticks once: one slice of a backlog of expiries.
    mutating func tickOnce(after duration: Duration) -> [BrokerAction] {
        now = now + duration
        var actions: [BrokerAction] = []
        machine.tick(now: now, into: &actions)
        return record(actions)
    }

    mutating func client(_ peer: PeerID, _ frames: [[UInt8]]) -> [BrokerAction] {
        var actions: [BrokerAction] = []
        machine.clientMessage(from: peer, frames: frames, now: now, into: &actions)
        return record(actions)
    }

    mutating func worker(_ peer: PeerID, _ command: WorkerToBroker) -> [BrokerAction] {
        worker(peer, frames: command.encode())
    }

    mutating func worker(_ peer: PeerID, frames: [[UInt8]], key: String? = nil) -> [BrokerAction] {
        var actions: [BrokerAction] = []
        machine.workerMessage(from: peer, frames: frames, key: key, now: now, into: &actions)
        return record(actions)
    }

    mutating func request(
        _ client: PeerID, _ id: RequestID, service: String = "sky.scan", body: [UInt8] = [1], timeout: Duration? = nil,
        attempt: UInt32 = 1, noWorkersGrace: Duration? = nil, trace: [UInt8]? = nil, priority: Int8 = 0,
        keep: Bool = false, key: String? = nil, limit: UInt32 = 0
    ) -> [BrokerAction] {
        let milliseconds =
            timeout.map { UInt32($0.wholeMilliseconds) }
            ?? 0
        let header = RequestHeader(
            attempt: attempt, timeoutMilliseconds: milliseconds,
            noWorkersGraceMilliseconds: noWorkersGrace.map { UInt32($0.wholeMilliseconds) } ?? 0, priority: priority,
            keepIfAbandoned: keep)
        var request = TaskRequest(requestID: id, service: service, header: header, body: body, trace: trace)
        request.concurrencyKey = key
        request.concurrencyLimit = limit
        return self.client(client, ClientToBroker.request(request).encode())
    }

    mutating func cancel(_ client: PeerID, _ id: RequestID) -> [BrokerAction] {
        self.client(client, ClientToBroker.cancel(id).encode())
    }

    mutating func subscribe() -> [BrokerAction] {
        var actions: [BrokerAction] = []
        machine.subscriberJoined(now: now, into: &actions)
        return actions
    }

    mutating func ready(_ peer: PeerID, capacity: UInt32 = 1, services: [String] = ["sky.scan"]) -> [BrokerAction] {
        worker(peer, .ready(WorkerAnnouncement(name: "w-\(peer)", capacity: capacity, services: services)))
    }

    /// The worker's REPLY to its latest delivery of `id` (`client` only names whose it is).
    mutating func reply(
        _ peer: PeerID, client: PeerID, _ id: RequestID, status: ReplyStatus = .ok, body: [UInt8] = [42]
    ) -> [BrokerAction] {
        worker(peer, .reply(tag: tag(id, at: peer), TaskReply(requestID: id, status: status, body: body)))
    }
}

/// Actions without log lines, for exact comparisons.
func effects(_ actions: [BrokerAction]) -> [BrokerAction] {
    actions.filter { if case .log = $0 { false } else { true } }
}

/// The request ids dispatched to workers, in order.
func dispatched(_ actions: [BrokerAction]) -> [(PeerID, RequestID)] {
    actions.compactMap {
        if case .sendToWorker(let peer, .request(_, let request)) = $0 { (peer, request.requestID) } else { nil }
    }
}

func events(_ actions: [BrokerAction]) -> [SkyEvent] {
    actions.compactMap { if case .publish(let event) = $0 { event } else { nil } }
}

/// Request id `n` (tests number their requests).
func requestID(_ n: UInt64) -> RequestID { RequestID(high: 0, low: n) }
