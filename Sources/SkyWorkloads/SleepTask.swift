import Dispatch
import SkyProtocol
import SkyWire

/// Sleep: holds a worker slot for the given time without using CPU, then returns it. For
/// failure drills (a task a worker is holding when it dies) and for demos of queueing.
public struct SleepTask: SkyTask, Hashable {
    public static let service = "sky.sleep"
    public typealias Result = SleepTask

    public var milliseconds: Int
    /// Makes otherwise equal sleeps distinct (and lets a test tell its tasks apart).
    public var tag: Int
    /// The handler sleeps through its cancellation, as one that swallows the
    /// `CancellationError` of `try? await Task.sleep(…)` does: a drill for stuck handlers.
    /// Absent (`nil`) in JSON unless set.
    public var ignoresCancellation: Bool?

    public init(milliseconds: Int, tag: Int = 0, ignoresCancellation: Bool? = nil) {
        self.milliseconds = milliseconds
        self.tag = tag
        self.ignoresCancellation = ignoresCancellation
    }
}

extension SleepTask {
    /// Waits `duration` on a timer that cancellation does not reach, holding no thread.
    public static func sleepIgnoringCancellation(for duration: Duration) async {
        let nanoseconds = duration.asSleep.wholeNanoseconds
        await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
            DispatchQueue.global().asyncAfter(deadline: .now() + .nanoseconds(Int(nanoseconds))) { done.resume() }
        }
    }
}
