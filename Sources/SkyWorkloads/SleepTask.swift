import SkyProtocol

/// Sleep: holds a worker slot for the given time without using CPU, then returns it. For
/// failure drills (a task a worker is holding when it dies) and for demos of queueing.
public struct SleepTask: SkyTask, Hashable {
    public static let service = "sky.sleep"
    public typealias Result = SleepTask

    public var milliseconds: Int
    /// Makes otherwise equal sleeps distinct (and lets a test tell its tasks apart).
    public var tag: Int

    public init(milliseconds: Int, tag: Int = 0) {
        self.milliseconds = milliseconds
        self.tag = tag
    }
}
