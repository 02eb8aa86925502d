import SkyProtocol
import SkyWire
import SkyZMQ

@testable import Sky

// The client's machines append each input's actions to the shell's list for a whole wake-up of
// the I/O thread. These forms return one input's actions, so that a test reads as one line per
// input and the actions it must produce.

/// What one input of `machine` appended.
private func collecting<Machine, Action>(
    _ machine: inout Machine, _ input: (inout Machine, inout [Action]) -> Void
) -> [Action] {
    var actions: [Action] = []
    input(&machine, &actions)
    return actions
}

extension RequestTable {
    /// Starts a call with random bits made from `waiter`; ``RequestTable/requestID(of:)`` tells
    /// the id the table made of them.
    mutating func start(_ call: Call, waiter: WaiterID, now: Duration) -> [Action] {
        let random = RequestID(high: waiter, low: waiter << 32)
        return collecting(&self) { $0.start(call, random: random, waiter: waiter, now: now, into: &$1) }
    }

    mutating func received(_ reply: TaskReply, now: Duration) -> [Action] {
        collecting(&self) { $0.received(reply, now: now, into: &$1) }
    }

    mutating func expire(now: Duration) -> [Action] {
        collecting(&self) { $0.expire(now: now, into: &$1) }
    }

    mutating func abandon(_ waiter: WaiterID) -> [Action] {
        collecting(&self) { $0.abandon(waiter, into: &$1) }
    }

    mutating func connectionUp(now: Duration) -> [Action] {
        collecting(&self) { $0.connectionUp(now: now, into: &$1) }
    }

    mutating func closeAll() -> [Action] {
        collecting(&self) { $0.closeAll(into: &$1) }
    }
}

extension ClientStateMachine {
    mutating func start(_ call: RequestTable.Call, waiter: WaiterID, now: Duration) -> [Action] {
        collecting(&self) { $0.start(call, waiter: waiter, now: now, into: &$1) }
    }

    mutating func abandon(_ waiter: WaiterID) -> [Action] {
        collecting(&self) { $0.abandon(waiter, into: &$1) }
    }

    mutating func waitForConnection(_ waiter: WaiterID) -> [Action] {
        collecting(&self) { $0.waitForConnection(waiter, into: &$1) }
    }

    mutating func waitForFeatures(_ waiter: WaiterID, by deadline: Duration? = nil, now: Duration) -> [Action] {
        collecting(&self) { $0.waitForFeatures(waiter, by: deadline, now: now, into: &$1) }
    }

    mutating func received(_ frames: [[UInt8]], socket: Int, now: Duration) -> [Action] {
        collecting(&self) { $0.received(frames, socket: socket, now: now, into: &$1) }
    }

    mutating func monitor(_ event: ZMQMonitorEvent, socket: Int, now: Duration) -> [Action] {
        collecting(&self) { $0.monitor(event, socket: socket, now: now, into: &$1) }
    }

    func openFailed(socket: Int, error: String) -> [Action] {
        var actions: [Action] = []
        openFailed(socket: socket, error: error, into: &actions)
        return actions
    }

    mutating func expire(now: Duration) -> [Action] {
        collecting(&self) { $0.expire(now: now, into: &$1) }
    }

    mutating func close() -> [Action] {
        collecting(&self) { $0.close(into: &$1) }
    }
}
