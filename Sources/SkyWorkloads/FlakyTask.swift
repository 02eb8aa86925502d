import SkyProtocol

/// Flaky: fails every N-th call on a worker (N set on the worker, `--flaky-every`), like an
/// unreliable downstream API; otherwise returns its input. For retry demos and error tests.
public struct FlakyTask: SkyTask, Hashable {
    public static let service = "sky.flaky"
    public typealias Result = FlakyTask

    public var value: Int

    public init(value: Int) {
        self.value = value
    }
}

/// The error `sky.flaky` throws on its failing calls.
public struct FlakyFailure: Error, CustomStringConvertible {
    public let call: Int
    public let every: Int

    public init(call: Int, every: Int) {
        self.call = call
        self.every = every
    }

    public var description: String {
        "simulated failure on call \(call) (this worker fails \(Self.which(every)) sky.flaky call)"
    }

    /// "every", "every 2nd", "every 3rd", "every 11th", "every 22nd": English ordinals.
    static func which(_ every: Int) -> String {
        guard every > 1 else { return "every" }
        let suffix =
            switch (every % 10, every % 100) {
            case (_, 11...13): "th"
            case (1, _): "st"
            case (2, _): "nd"
            case (3, _): "rd"
            default: "th"
            }
        return "every \(every)\(suffix)"
    }
}
