import SkyWire
import Testing

@testable import SkyProtocol

@Suite("Progress: PROGRESS on the wire, its bounds, and what the broker keeps of a job")
struct ProgressCodecTests {
    static let id = RequestID(high: 1, low: 2)

    @Test func aProgressRoundTripsWithItsFractionMessageAndLines() throws {
        let report = ProgressReport(fraction: 0.4, message: "resized", lines: ["one", "", "three"], droppedLines: 7)
        let frames = WorkerToBroker.progress(tag: [9, 9], Self.id, report).encode()
        #expect(frames.count == 7)
        #expect(frames[1] == [0x0A])
        #expect(frames[4] == [0x0F, 0xA0, 0, 0, 0, 7], "4,000 ten-thousandths, 7 lines dropped")
        #expect(frames[6] == Array("one\n\nthree\n".utf8))
        #expect(try WorkerToBroker.decode(frames) == .progress(tag: [9, 9], Self.id, report))
    }

    @Test func aReportThatSaysNothingOfAFieldLeavesItOut() throws {
        let frames = WorkerToBroker.progress(tag: [1], Self.id, ProgressReport(lines: ["x"])).encode()
        #expect(frames[4] == [0xFF, 0xFF, 0, 0, 0, 0] && frames[5].isEmpty)
        guard case .progress(_, _, let report) = try WorkerToBroker.decode(frames) else {
            Issue.record("not a PROGRESS")
            return
        }
        #expect(report.fraction == nil && report.message == nil && report.lines == ["x"])
    }

    /// What a hostile or careless worker sends over a bound is refused as malformed (the
    /// broker counts it and serves on); a last line without its newline is still a line.
    @Test func overTheBoundsIsMalformed() throws {
        func frames(fraction: [UInt8] = [0, 0, 0, 0, 0, 0], message: Int = 0, lines: [UInt8] = []) -> [[UInt8]] {
            [
                WireFormat.workerSignature, [0x0A], [1], Self.id.frame, fraction,
                [UInt8](repeating: 65, count: message), lines,
            ]
        }
        #expect(throws: ProtocolError.self) { try WorkerToBroker.decode(frames(fraction: [0x27, 0x11, 0, 0, 0, 0])) }
        #expect(throws: ProtocolError.self) { try WorkerToBroker.decode(frames(fraction: [0, 1])) }
        #expect(throws: ProtocolError.self) { try WorkerToBroker.decode(frames(message: 1025)) }
        #expect(throws: ProtocolError.self) { try WorkerToBroker.decode(frames(message: 10 << 20)) }
        #expect(throws: ProtocolError.self) {
            try WorkerToBroker.decode(frames(lines: [UInt8](repeating: 10, count: (16 << 10) + 1)))
        }
        #expect(throws: Never.self) {
            try WorkerToBroker.decode(frames(lines: [UInt8](repeating: 10, count: 16 << 10)))
        }
        #expect(throws: ProtocolError.self) {
            try WorkerToBroker.decode(frames(lines: [UInt8](repeating: 65, count: 1025) + [10]))
        }
        #expect(throws: Never.self) {
            try WorkerToBroker.decode(frames(lines: [UInt8](repeating: 65, count: 1024) + [10]))
        }
        #expect(throws: ProtocolError.self) { try WorkerToBroker.decode(Array(frames().prefix(6))) }
        #expect(throws: Never.self) {
            try WorkerToBroker.decode(frames(fraction: [0x27, 0x10, 0, 0, 0, 0], message: 1024))
        }
        guard case .progress(_, _, let report) = try WorkerToBroker.decode(frames(lines: Array("a\nb".utf8))) else {
            Issue.record("not a PROGRESS")
            return
        }
        #expect(report.lines == ["a", "b"] && report.fraction == 0)
    }

    /// Control characters (an escape that would drive a terminal, a newline that would split
    /// a line) become spaces; a long text is cut on a character's boundary, with "…".
    @Test func textIsFittedToKeepAndPrint() {
        #expect(ProgressReport.fitted("a\u{1B}[31mred\nline", limit: 100) == "a [31mred line")
        let cut = ProgressReport.fitted(String(repeating: "é", count: 600), limit: 1024)
        #expect(cut.utf8.count <= 1024 && cut.hasSuffix("…") && cut.hasPrefix("éé"))
        #expect(ProgressReport.fitted(String(repeating: "x", count: 10 << 20), limit: 1024).utf8.count <= 1024)
        #expect(ProgressReport.fitted("short", limit: 1024) == "short")
    }

    /// The broker keeps the last message and fraction and the newest lines within 100 lines
    /// and 8 KiB; its stored form reads back the same.
    @Test func aJobKeepsTheNewestLinesWithinItsBoundsAndItsStoredFormReadsBack() throws {
        var progress = JobProgress(updatedAt: 1)
        progress.apply(ProgressReport(fraction: 0.25, message: "first"), at: 2)
        progress.apply(ProgressReport(lines: (0..<150).map { "line \($0)" }, droppedLines: 3), at: 3)
        #expect(progress.fraction == 0.25 && progress.message == "first" && progress.updatedAt == 3)
        #expect(progress.lines.count == 100 && progress.lines.first == "line 50" && progress.droppedLines == 53)
        progress.apply(ProgressReport(fraction: 1), at: 4)
        #expect(progress.fraction == 1 && progress.message == "first", "a report that says no message keeps the last")
        let read = try #require(JobProgress(decoding: progress.encode()))
        #expect(read == progress)

        var wide = JobProgress(updatedAt: 0)
        wide.apply(ProgressReport(lines: (0..<20).map { _ in String(repeating: "w", count: 1000) }), at: 0)
        #expect(wide.linesBytes <= JobProgress.maxLinesBytes && wide.lines.count == 8 && wide.droppedLines == 12)
        #expect(JobProgress(decoding: [2, 0]) == nil && JobProgress(decoding: []) == nil)

        // What a peer says it dropped is kept as the stored form keeps it, before and after.
        var counted = JobProgress(updatedAt: 0)
        counted.apply(ProgressReport(droppedLines: Int(UInt32.max)), at: 0)
        counted.apply(ProgressReport(droppedLines: Int(UInt32.max)), at: 0)
        #expect(counted.droppedLines == Int(UInt32.max))
        #expect(JobProgress(decoding: counted.encode())?.droppedLines == Int(UInt32.max))
    }
}
