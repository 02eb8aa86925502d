/// What the broker keeps of a job's progress: the last fraction and message its handler
/// reported, when, and its last log lines (at most ``maxLines`` and ``maxLinesBytes``; older
/// lines give way). Kept in memory while the job runs and written with its outcome, so that an
/// ended job shows what its last attempt said.
public struct JobProgress: Sendable, Equatable {
    public var fraction: Double?
    public var message: String?
    /// When the last report came (milliseconds since 1970, the broker's clock).
    public var updatedAt: Int64
    /// The last lines, oldest first.
    public private(set) var lines: [String] = []
    /// Bytes of UTF-8 in ``lines``.
    public private(set) var linesBytes = 0
    /// Lines that gave way to newer ones.
    public private(set) var droppedLines = 0

    public static let maxLines = 100
    public static let maxLinesBytes = 8 << 10

    public init(updatedAt: Int64) {
        self.updatedAt = updatedAt
    }

    /// Takes a report: a fraction or message it gives replaces the last, its lines are added.
    public mutating func apply(_ report: ProgressReport, at now: Int64) {
        updatedAt = now
        if let fraction = report.fraction { self.fraction = fraction }
        if let message = report.message { self.message = message }
        // Kept as the stored form keeps it (u32), whatever a peer says.
        droppedLines = min(droppedLines + min(report.droppedLines, Int(UInt32.max)), Int(UInt32.max))
        for line in report.lines { append(line) }
    }

    private mutating func append(_ line: String) {
        let dropped = Self.append(line, to: &lines, bytes: &linesBytes)
        droppedLines = min(droppedLines + dropped, Int(UInt32.max))
    }

    /// Adds `line` to `lines` (of `bytes` bytes of UTF-8), letting the oldest give way beyond
    /// ``maxLines`` and ``maxLinesBytes``; returns how many gave way. The worker's waiting
    /// lines and the broker's record keep the same bounds.
    public static func append(_ line: String, to lines: inout [String], bytes: inout Int) -> Int {
        lines.append(line)
        bytes += line.utf8.count
        var first = 0
        while lines.count - first > maxLines || bytes > maxLinesBytes {
            bytes -= lines[first].utf8.count
            first += 1
        }
        if first > 0 { lines.removeFirst(first) }
        return first
    }

    /// The stored form (the journal's): `[1][fraction u16][updated-at i64][dropped u32]`
    /// `[message-length u16][message][lines, each followed by a newline]`.
    public func encode() -> [UInt8] {
        var bytes: [UInt8] = [1]
        WireFormat.append(ProgressReport.wireFraction(fraction), to: &bytes)
        WireFormat.append(updatedAt, to: &bytes)
        WireFormat.append(UInt32(clamping: droppedLines), to: &bytes)
        let message = Array((message ?? "").utf8.prefix(ProgressReport.maxMessageBytes))
        WireFormat.append(UInt16(message.count), to: &bytes)
        bytes += message
        for line in lines {
            bytes += line.utf8
            bytes.append(UInt8(ascii: "\n"))
        }
        return bytes
    }

    /// Reads ``encode()``'s form; `nil` for bytes of another form (a later version's, or
    /// damaged): a job's progress is worth showing, not worth failing a read for.
    public init?(decoding bytes: [UInt8]) {
        guard bytes.count >= 17, bytes[0] == 1 else { return nil }
        func integer<T: FixedWidthInteger>(_ at: Int, _: T.Type) -> T {
            bytes[at..<at + MemoryLayout<T>.size].reduce(T(0)) { $0 << 8 | T($1) }
        }
        let fraction = integer(1, UInt16.self)
        updatedAt = integer(3, Int64.self)
        droppedLines = Int(integer(11, UInt32.self))
        let messageLength = Int(integer(15, UInt16.self))
        guard bytes.count >= 17 + messageLength else { return nil }
        if fraction <= 10_000 { self.fraction = Double(fraction) / 10_000 }
        if messageLength > 0 { message = String(decoding: bytes[17..<17 + messageLength], as: UTF8.self) }
        var split = bytes[(17 + messageLength)...].split(
            separator: UInt8(ascii: "\n"), omittingEmptySubsequences: false)
        if split.last?.isEmpty == true { split.removeLast() }
        for line in split.suffix(Self.maxLines) { append(String(decoding: line, as: UTF8.self)) }
    }
}
