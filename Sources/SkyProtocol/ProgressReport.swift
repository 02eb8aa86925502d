/// What a handler said of its progress since its last report: how far it is (a fraction), what
/// it is doing (a short message), and new log lines. A worker sends one in a PROGRESS to a
/// broker that named ``feature`` in its FEATURES (docs/protocol.md); the broker keeps the last
/// of each with the job (``JobProgress``).
///
/// Bounded on both sides, so that a handler that reports in a loop, or a peer that sends
/// megabytes, costs a bounded amount: a message of at most ``maxMessageBytes``, lines of at
/// most ``maxLineBytes`` each, at most ``maxLinesBytes`` of them in one report.
public struct ProgressReport: Sendable, Equatable {
    /// How far the handler is, from 0 to 1; `nil` if this report does not say.
    public var fraction: Double?
    /// What it is doing; `nil` if this report does not say.
    public var message: String?
    /// New log lines, oldest first.
    public var lines: [String]
    /// Lines logged before these that the worker did not keep (a handler that logs faster than
    /// the worker sends: the newest lines are kept, within ``JobProgress``'s bounds).
    public var droppedLines: Int

    public init(fraction: Double? = nil, message: String? = nil, lines: [String] = [], droppedLines: Int = 0) {
        self.fraction = fraction
        self.message = message
        self.lines = lines
        self.droppedLines = droppedLines
    }

    /// Whether it says nothing.
    public var isEmpty: Bool { fraction == nil && message == nil && lines.isEmpty && droppedLines == 0 }

    /// The feature a broker names to workers in FEATURES when it takes PROGRESS.
    public static let feature = "progress"
    public static let maxMessageBytes = 1024
    public static let maxLineBytes = 1024
    /// The most bytes of lines in one PROGRESS (each followed by a newline on the wire).
    public static let maxLinesBytes = 16 << 10
    /// The fraction's wire value that says "not given".
    static let noFraction: UInt16 = 0xFFFF

    /// `text` made fit to keep and print: control characters (a newline among them, which
    /// would split a line; an escape, which would drive a terminal) become spaces, and the
    /// result is cut to `limit` bytes of UTF-8 on a character's boundary, with "…" where it
    /// was cut.
    public static func fitted(_ text: some StringProtocol, limit: Int) -> String {
        // Printable ASCII within the limit, as most lines are: kept as it is, without the walk
        // over its characters below.
        let utf8 = text.utf8
        if utf8.count <= limit, utf8.allSatisfy({ $0 >= 0x20 && $0 < 0x7F }) { return String(text) }
        var result = ""
        var bytes = 0
        let ellipsis = "…"
        for scalar in text.unicodeScalars {
            let kept: Unicode.Scalar = scalar.properties.generalCategory == .control ? " " : scalar
            let size = UTF8.width(kept)
            if bytes + size > limit {
                while bytes + ellipsis.utf8.count > limit, let last = result.unicodeScalars.last {
                    bytes -= UTF8.width(last)
                    result.unicodeScalars.removeLast()
                }
                result += ellipsis
                return result
            }
            result.unicodeScalars.append(kept)
            bytes += size
        }
        return result
    }

    /// The frames after the command's: `[fraction u16][dropped-lines u32]`, `[message]`,
    /// `[lines]`: the fraction in ten-thousandths (0xFFFF: not given), an empty message frame
    /// for none, the lines each followed by a newline.
    func encodeFields() -> [[UInt8]] {
        var counts: [UInt8] = []
        WireFormat.append(Self.wireFraction(fraction), to: &counts)
        WireFormat.append(UInt32(clamping: droppedLines), to: &counts)
        var lines: [UInt8] = []
        for line in self.lines {
            lines += Array(line.utf8)
            lines.append(UInt8(ascii: "\n"))
        }
        return [counts, Array((message ?? "").utf8), lines]
    }

    /// A fraction in ten-thousandths, ``noFraction`` for none.
    static func wireFraction(_ fraction: Double?) -> UInt16 {
        fraction.map { UInt16((min(max($0, 0), 1) * 10_000).rounded()) } ?? noFraction
    }

    /// Reads the frames ``encodeFields()`` writes, refusing what is over a bound (a peer that
    /// does not hold to them is told apart from one that reports a lot).
    static func decodeFields(_ fraction: ArraySlice<UInt8>, _ message: ArraySlice<UInt8>, _ lines: ArraySlice<UInt8>)
        throws(ProtocolError) -> ProgressReport
    {
        guard fraction.count == 6 else {
            throw .invalidValue(name: "progress", reason: "\(fraction.count) bytes, expected 6")
        }
        let value = fraction.prefix(2).reduce(UInt16(0)) { $0 << 8 | UInt16($1) }
        let dropped = fraction.suffix(4).reduce(UInt32(0)) { $0 << 8 | UInt32($1) }
        guard value <= 10_000 || value == noFraction else {
            throw .invalidValue(name: "progress", reason: "\(value) is over 10000 (ten-thousandths)")
        }
        guard message.count <= maxMessageBytes else {
            throw .invalidValue(name: "progress message", reason: "\(message.count) bytes, at most \(maxMessageBytes)")
        }
        guard lines.count <= maxLinesBytes else {
            throw .invalidValue(name: "log lines", reason: "\(lines.count) bytes, at most \(maxLinesBytes)")
        }
        var report = ProgressReport(droppedLines: Int(dropped))
        if value != noFraction { report.fraction = Double(value) / 10_000 }
        if !message.isEmpty {
            report.message = fitted(String(decoding: message, as: UTF8.self), limit: maxMessageBytes)
        }
        var split = lines.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: false)
        // Each line ends in a newline: what follows the last one is empty (a peer that left the
        // last newline out loses nothing).
        if split.last?.isEmpty == true { split.removeLast() }
        if let long = split.first(where: { $0.count > maxLineBytes }) {
            throw .invalidValue(name: "log line", reason: "\(long.count) bytes, at most \(maxLineBytes)")
        }
        report.lines = split.map { fitted(String(decoding: $0, as: UTF8.self), limit: maxLineBytes) }
        return report
    }
}
