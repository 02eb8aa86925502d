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
    /// The broker takes packed messages (``WireFormat/packedFeature``): a header frame and a
    /// body frame instead of six or seven frames, the same fields (docs/protocol.md).
    public var takesPacked: Bool

    /// The line that carries ``maxFrameSize``.
    public static let maxFrameSizeName = "max-frame-size"
    /// The smallest `--max-frame-size` a broker takes: a body of at most this many bytes fits
    /// within any broker's limit, and needs no check.
    public static let smallestFrameLimit = 1024

    public init(takesTrace: Bool = false, maxFrameSize: Int? = nil, takesPacked: Bool = false) {
        self.takesTrace = takesTrace
        self.maxFrameSize = maxFrameSize
        self.takesPacked = takesPacked
    }

    /// Reads what a broker said, a line each (a FEATURES to a worker carries a line a frame);
    /// lines it does not know, or with a value that is not a whole number, are skipped (a later
    /// broker may say more).
    public init(lines: some Sequence<String>) {
        self.init()
        for text in lines {
            if text == TraceContext.feature {
                takesTrace = true
            } else if text == WireFormat.packedFeature {
                takesPacked = true
            } else if let equals = text.firstIndex(of: "="), text[..<equals] == Self.maxFrameSizeName,
                let value = Int(text[text.index(after: equals)...]), value > 0
            {
                maxFrameSize = value
            }
        }
    }

    /// Reads an answer to `mmi.features`: the lines of ``init(lines:)``, one per text line.
    public init(decoding body: [UInt8]) {
        self.init(lines: body.split(separator: UInt8(ascii: "\n")).map { String(decoding: $0, as: UTF8.self) })
    }

    /// What the broker says, a line each.
    public var lines: [String] {
        var lines: [String] = []
        if takesTrace { lines.append(TraceContext.feature) }
        if let maxFrameSize { lines.append("\(Self.maxFrameSizeName)=\(maxFrameSize)") }
        if takesPacked { lines.append(WireFormat.packedFeature) }
        return lines
    }

    /// The answer's body to `mmi.features`.
    public func encode() -> [UInt8] {
        Array(lines.joined(separator: "\n").utf8)
    }
}
