import SkyProtocol
import SkyWire

extension BrokerStateMachine {
    /// How often a lasting shortage of file descriptors is logged again, and how long
    /// descriptors must stay free for it to be over.
    static let descriptorWarningInterval = Duration.seconds(10)

    /// The process ran out of file descriptors at `since` (see
    /// ``descriptorsChecked(exhausted:limit:now:into:)``).
    struct DescriptorShortage: Sendable, Equatable {
        var since: Instant
        /// When it was last logged.
        var warned: Instant
        /// Since when descriptors have been free again, if they are.
        var freeSince: Instant?
    }

    /// At each tick the shell tries to open a file: `exhausted` when the process has no file
    /// descriptor left (`EMFILE`, or `ENFILE` for the whole system), under a soft limit of
    /// `limit`.
    ///
    /// Every connection a peer opens takes one descriptor, and without one libzmq cannot accept the
    /// next connection: new clients and workers wait with no answer, and libzmq 4.3.4 retries the
    /// accept in a busy loop that takes a whole core (docs/operations.md, "Sizing"). Nothing
    /// reaches the broker's sockets to tell it, so this probe is how the operator learns of it: one
    /// warning when it starts, again every ``descriptorWarningInterval`` while it lasts, and one
    /// line when descriptors have stayed free that long.
    package mutating func descriptorsChecked(
        exhausted: Bool, limit: Int, now: Instant, into actions: inout [BrokerAction]
    ) {
        guard var shortage = descriptorShortage else {
            guard exhausted else { return }
            descriptorShortage = DescriptorShortage(since: now, warned: now)
            actions.append(
                descriptorWarning("the broker has no file descriptor left", limit: limit, since: now, now: now))
            return
        }
        if exhausted {
            shortage.freeSince = nil
            if now - shortage.warned >= Self.descriptorWarningInterval {
                shortage.warned = now
                actions.append(
                    descriptorWarning(
                        "the broker still has no file descriptor left", limit: limit, since: shortage.since, now: now))
            }
            descriptorShortage = shortage
            return
        }
        // Over only once descriptors stayed free for a while: libzmq takes the next waiting
        // connection as soon as one closes, so free and exhausted alternate while the peers last.
        let free = shortage.freeSince ?? now
        guard now - free >= Self.descriptorWarningInterval else {
            shortage.freeSince = free
            descriptorShortage = shortage
            return
        }
        descriptorShortage = nil
        actions.append(
            .log(
                .info, "file descriptors are free again; new connections are accepted",
                ["seconds": Self.seconds(free - shortage.since), "limit": "\(limit)"]))
    }

    private func descriptorWarning(_ message: String, limit: Int, since: Instant, now: Instant) -> BrokerAction {
        .log(
            .warning,
            "\(message): no new client or worker can connect until connections close, and libzmq retries the accept"
                + " in a loop that takes a core. Raise the limit (ulimit -n; LimitNOFILE= in the systemd unit) or find"
                + " who holds the connections (ss -tn state established)",
            ["limit": "\(limit)", "seconds": Self.seconds(now - since)])
    }

    private static func seconds(_ duration: Duration) -> String {
        String(Double(duration.wholeMilliseconds) / 1000)
    }
}
