/// What a broker says of itself in its answer to `mmi.features`: one line each, a name or a
/// `name=value`. A client asks once per connection; lines it does not know, it ignores.
public struct BrokerFeatures: Sendable, Equatable {
    /// The broker takes the REQUEST's trace frame (``TraceContext/feature``).
    public var takesTrace: Bool
    /// The largest frame the broker accepts (`skybroker --max-frame-size`). libzmq closes the
    /// connection of a peer that sends a larger one, before the broker sees the message, so the
    /// sender must check first: a client fails such a task with `requestTooLarge` instead of
    /// losing its connection (and every call on it) each time it sends it. `nil`: a broker that
    /// does not say.
    public var maxFrameSize: Int?

    /// The line that carries ``maxFrameSize``.
    public static let maxFrameSizeName = "max-frame-size"
    /// The smallest `--max-frame-size` a broker takes: a body of at most this many bytes fits
    /// within any broker's limit, and needs no check.
    public static let smallestFrameLimit = 1024

    public init(takesTrace: Bool = false, maxFrameSize: Int? = nil) {
        self.takesTrace = takesTrace
        self.maxFrameSize = maxFrameSize
    }

    /// Reads an answer to `mmi.features`; lines it does not know, or with a value that is not a
    /// whole number, are skipped (a later broker may say more).
    public init(decoding body: [UInt8]) {
        self.init()
        for line in body.split(separator: UInt8(ascii: "\n")) {
            let text = String(decoding: line, as: UTF8.self)
            if text == TraceContext.feature {
                takesTrace = true
            } else if let equals = text.firstIndex(of: "="), text[..<equals] == Self.maxFrameSizeName,
                let value = Int(text[text.index(after: equals)...]), value > 0
            {
                maxFrameSize = value
            }
        }
    }

    /// The answer's body.
    public func encode() -> [UInt8] {
        var lines: [String] = []
        if takesTrace { lines.append(TraceContext.feature) }
        if let maxFrameSize { lines.append("\(Self.maxFrameSizeName)=\(maxFrameSize)") }
        return Array(lines.joined(separator: "\n").utf8)
    }
}
