import CSkySystem
import Foundation

extension ZMQEventLoop {
    /// How the kernel schedules a loop's thread.
    ///
    /// An I/O thread is woken for every message that arrives and for every post from another
    /// thread. Under Linux's default policy a woken thread preempts the one running on its CPU,
    /// so a loaded machine switches at every message: the thread that posted a call is
    /// interrupted before it posts the next, and the loop takes one call per wake-up instead of
    /// a burst. Under `SCHED_BATCH` the woken loop does not preempt: it runs when the running
    /// thread sleeps or its time slice ends, and takes everything that came meanwhile at once.
    /// libzmq's own threads start from the loop's thread (with its first socket) and inherit the
    /// policy. On an idle CPU it runs at once, as before. The cost is at most a time slice of the
    /// scheduler (a few milliseconds) of extra delay while the CPU is saturated by other work.
    /// It takes fewer context switches and less CPU a task on a loaded CPU (measured:
    /// docs/performance-history.md, "the I/O threads under SCHED_BATCH").
    public enum Scheduling: String, Sendable, Equatable, Codable {
        /// `SCHED_BATCH`: the default.
        case batch
        /// The kernel's default policy (`SCHED_OTHER`).
        case normal

        /// The environment variable that chooses the policy of every Sky loop in a process:
        /// `batch` (the default) or `normal`.
        public static let environmentVariable = "SKY_IO_THREAD_SCHEDULING"

        /// What ``environmentVariable`` asks for: `batch` when it is unset, or set to a value
        /// other than `normal`.
        public static var fromEnvironment: Scheduling {
            ProcessInfo.processInfo.environment[environmentVariable].flatMap(Scheduling.init(rawValue:)) ?? .batch
        }

        /// Puts the calling thread under this policy; `false` where the kernel refused (a
        /// sandbox that filters the system call): the thread keeps the policy it had.
        func apply() -> Bool {
            sky_set_batch_scheduling(self == .batch ? 1 : 0) == 0
        }
    }
}
