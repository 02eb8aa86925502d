import ArgumentParser
import Foundation
import SkyZMQ

/// Range checks for command-line values, run in `validate()` so that a bad value ends the
/// program at parse time with one line naming the flag and its valid range, and exit code 64
/// (usage). Values out of range would otherwise trap later (`Duration` from 1e300 seconds, an
/// `Int` sum past `Int.max`) or make a process that serves nothing (a zero frame limit).
public enum FlagCheck {
    /// `value` is a finite number of seconds within `range`.
    public static func seconds(_ value: Double, _ flag: String, in range: ClosedRange<Double>) throws {
        guard value.isFinite, range.contains(value) else {
            throw ValidationError("\(flag) must be a number of seconds in \(format(range)), not \(value)")
        }
    }

    /// `value` is a finite number within `range`.
    public static func number(_ value: Double, _ flag: String, in range: ClosedRange<Double>) throws {
        guard value.isFinite, range.contains(value) else {
            throw ValidationError("\(flag) must be a number in \(format(range)), not \(value)")
        }
    }

    /// `value` is a whole number within `range`.
    public static func integer<Value: BinaryInteger>(_ value: Value, _ flag: String, in range: ClosedRange<Value>)
        throws
    {
        guard range.contains(value) else {
            // A range open above reads as such: "1...9223372036854775807" named a bound nobody means.
            let bounds =
                Int(exactly: range.upperBound) == Int.max
                ? "of at least \(range.lowerBound)"
                : "in \(range.lowerBound)...\(range.upperBound)"
            throw ValidationError("\(flag) must be a whole number \(bounds), not \(value)")
        }
    }

    /// A validated number of seconds as a `Duration` (to the millisecond).
    public static func duration(seconds: Double) -> Duration {
        .milliseconds(Int64((seconds * 1000).rounded()))
    }

    /// `value` is a ZeroMQ endpoint another process can reach: `tcp://HOST:PORT` (port 1–65535;
    /// `*` for host or port only when binding) or `ipc://PATH`. libzmq takes `inproc://NAME`
    /// too, but it joins sockets of one process only: a program bound or connected to it waits
    /// for a peer that can never come, silently.
    public static func endpoint(_ value: String, _ flag: String, binding: Bool = false) throws {
        if let problem = ZMQEndpoint.problem(value, binding: binding) {
            throw ValidationError("\(flag) \(ZMQEndpoint.advice(value, problem: problem, binding: binding))")
        }
        if value.hasPrefix("inproc://") {
            throw ValidationError(
                "\(flag) \(value): inproc:// joins sockets inside one process, and no other program can reach it;"
                    + " use ipc://PATH (this machine) or tcp://HOST:PORT")
        }
    }

    /// The endpoints of a flag that takes several separated by commas (an active broker and its
    /// standbys: `--broker A,B`).
    public static func endpoints(_ value: String) -> [String] {
        value.split(separator: ",", omittingEmptySubsequences: false).map(String.init)
    }

    /// Every endpoint of a comma-separated list connects (see ``endpoint(_:_:binding:)``), and
    /// none is given twice: the list names a broker and its standbys, and a repeated entry is a
    /// standby that is not there (most likely a typo for another host).
    public static func endpointList(_ value: String, _ flag: String) throws {
        var seen: Set<String> = []
        for endpoint in endpoints(value) {
            guard !endpoint.isEmpty else {
                throw ValidationError(
                    "\(flag) \(value) has an empty entry: give endpoints separated by single commas (tcp://HOST:PORT,tcp://HOST:PORT)"
                )
            }
            try self.endpoint(endpoint, flag)
            guard seen.insert(endpoint).inserted else {
                throw ValidationError(
                    "\(flag) \(value) names \(endpoint) twice: list each broker once (the active one and its standbys)")
            }
        }
    }

    /// The endpoints one process binds (each given as its flag and value) are pairwise apart:
    /// the same endpoint twice (or a `tcp://*:PORT` beside a host of that port) would fail on the
    /// second bind with "address already in use", which names no flag and suggests another
    /// process.
    public static func distinctEndpoints(_ endpoints: [(flag: String, value: String)]) throws {
        for (index, first) in endpoints.enumerated() {
            for second in endpoints[(index + 1)...] where ZMQEndpoint.sameBinding(first.value, second.value) {
                throw ValidationError(
                    "\(first.flag) and \(second.flag) are both \(second.value): each needs an endpoint of its own"
                        + " (another port, or another ipc:// path)")
            }
        }
    }

    private static func format(_ range: ClosedRange<Double>) -> String {
        func text(_ value: Double) -> String {
            value == value.rounded() && abs(value) < 1e15 ? String(Int64(value)) : String(value)
        }
        return "\(text(range.lowerBound))...\(text(range.upperBound))"
    }
}
