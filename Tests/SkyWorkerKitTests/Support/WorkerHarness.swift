import Logging
import SkyProtocol
import SkyWire
import SkyZMQ
import Testing

@testable import SkyWorkerKit

/// The worker's state machine and its clock, driven one input at a time: each input returns
/// the actions it must produce, logs left out. Liveness 3 × 1 s, reconnect backoff 1 s without
/// jitter, drain grace 5 s.
struct WorkerHarness {
    typealias Action = WorkerStateMachine.Action
    typealias Key = WorkerStateMachine.TaskKey

    var machine: WorkerStateMachine
    var now = MonotonicInstant.now

    init(capacity: UInt32 = 2, takesTrace: Bool = false, endpoints: Int = 1) {
        var liveness = BrokerLiveness.Configuration()
        liveness.jitter = 0
        machine = WorkerStateMachine(
            configuration: .init(
                announcement: WorkerAnnouncement(name: "w", capacity: capacity, services: ["echo"]),
                liveness: liveness, drainGrace: .seconds(5), takesTrace: takesTrace, endpointCount: endpoints),
            now: now, seed: 7)
    }

    private static func withoutLogs(_ actions: [Action]) -> [Action] {
        actions.filter { if case .log = $0 { false } else { true } }
    }

    mutating func start() -> [Action] {
        var actions: [Action] = []
        machine.start(now: now, into: &actions)
        return Self.withoutLogs(actions)
    }

    mutating func receive(_ command: BrokerToWorker, generation: Int? = nil) -> [Action] {
        receive(frames: command.encode(), generation: generation)
    }

    mutating func receive(frames: [[UInt8]], generation: Int? = nil) -> [Action] {
        var actions: [Action] = []
        machine.received(frames, generation: generation ?? machine.generation, now: now, into: &actions)
        return Self.withoutLogs(actions)
    }

    mutating func advance(_ duration: Duration) -> [Action] {
        now = now + duration
        var actions: [Action] = []
        machine.tick(now: now, into: &actions)
        return Self.withoutLogs(actions)
    }

    /// - Parameter connection: the connection the task came on; the current one by default.
    mutating func finished(_ key: Key, _ reply: TaskReply, connection: Int? = nil) -> [Action] {
        var actions: [Action] = []
        machine.taskFinished(key, reply: reply, connection: connection ?? machine.generation, now: now, into: &actions)
        return Self.withoutLogs(actions)
    }

    mutating func progress(_ key: Key, _ report: ProgressReport) -> [Action] {
        var actions: [Action] = []
        machine.progress(key, report, into: &actions)
        return Self.withoutLogs(actions)
    }

    mutating func stop() -> [Action] {
        var actions: [Action] = []
        machine.stop(now: now, into: &actions)
        return Self.withoutLogs(actions)
    }

    mutating func cancel() -> [Action] {
        var actions: [Action] = []
        machine.cancel(now: now, into: &actions)
        return Self.withoutLogs(actions)
    }

    mutating func transport(_ kind: ZMQMonitorEvent.Kind, value: Int32 = 0, generation: Int? = nil) -> [Action] {
        var actions: [Action] = []
        machine.transport(
            ZMQMonitorEvent(kind: kind, value: value, endpoint: "tcp://b:5557"),
            generation: generation ?? machine.generation, now: now, into: &actions)
        return Self.withoutLogs(actions)
    }

    mutating func connectFailed(generation: Int) -> [Action] {
        var actions: [Action] = []
        machine.connectFailed("no such host", generation: generation, now: now, into: &actions)
        return Self.withoutLogs(actions)
    }
}
