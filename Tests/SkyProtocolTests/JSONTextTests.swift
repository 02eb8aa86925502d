import Foundation
import Testing

@testable import SkyJSON
@testable import SkyProtocol

/// The broker's direct JSON and time writers give what Foundation's encoder and formatter give.
@Suite("JSON and time written without encoders")
struct JSONTextTests {
    @Test(arguments: [
        TaskInfo(requestID: "00ff", service: "sky.scan", deliveries: 2, worker: "0a0b", status: "deadlineExceeded"),
        TaskInfo(requestID: "1234", service: "a/b \"q\" \\ é", deliveries: 0),
        TaskInfo(requestID: "", service: "x", deliveries: 7, worker: "w"),
    ])
    func taskEventsAreTheCanonicalText(_ task: TaskInfo) {
        for kind in [EventKind.taskFailed, .taskRedispatched, .taskDispatched, .taskCompleted] {
            let event = SkyEvent(seq: 99, event: kind, time: "2026-11-23T01:02:03.004Z", task: task)
            #expect(String(decoding: event.jsonBytes(), as: UTF8.self) == event.jsonLine())
        }
    }

    @Test func otherEventsGoThroughTheEncoder() {
        let event = SkyEvent(seq: 1, event: .brokerHello, time: "t", workers: [], queued: 3, broker: "b")
        #expect(String(decoding: event.jsonBytes(), as: UTF8.self) == event.jsonLine())
    }

    @Test func errorBodiesDecodeBackWithEveryCharacter() throws {
        let message = "quote \" backslash \\ newline \n tab \t bell \u{7} nul \u{0} slash / é 𝄞"
        let body = RemoteErrorBody(type: "My.Error", message: message).encoded()
        #expect(
            try JSONDecoder().decode(RemoteErrorBody.self, from: Data(body))
                == .init(type: "My.Error", message: message))
    }

    @Test func timestampsMatchFoundationsFormatter() {
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        formatter.timeZone = TimeZone(identifier: "UTC")
        var random = SplitMix64(seed: 0x71)
        // 1970 to 2200, leap days and year ends among them, at whole milliseconds.
        var samples: [Int64] = [0, 951_782_400_000, 951_868_799_999, 1_735_689_599_999, 4_107_542_400_000]
        for _ in 0..<2000 { samples.append(Int64(random.next() % 7_258_118_400_000)) }
        for milliseconds in samples {
            let date = Date(timeIntervalSince1970: Double(milliseconds) / 1000)
            #expect(
                JSONText.timestamp(millisecondsSince1970: milliseconds) == formatter.string(from: date),
                "\(milliseconds)")
        }
    }

    /// The word-at-a-time search finds every byte that needs an escape (and, when asked, every
    /// byte above ASCII), wherever it sits and whatever surrounds it, and no other byte.
    @Test(arguments: [false, true])
    func everyByteThatNeedsAnEscapeIsFound(nonASCII: Bool) {
        let fillers: [UInt8] =
            nonASCII
            ? [UInt8(ascii: "a"), 0x7F, 0x21, 0x5D, 0x20] : [UInt8(ascii: "a"), 0x7F, 0x80, 0xFF, 0x21, 0x5D, 0x20]
        for filler in fillers {
            for length in [1, 7, 8, 9, 16, 17] {
                for position in 0..<length {
                    for byte in UInt8.min...UInt8.max {
                        var text = [UInt8](repeating: filler, count: length)
                        text[position] = byte
                        let special =
                            byte < 0x20 || byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "\\")
                            || (nonASCII && byte >= 0x80)
                        let (found, after) = text.withUnsafeBufferPointer {
                            (
                                JSONText.firstSpecial(in: $0, from: 0, nonASCII: nonASCII),
                                JSONText.firstSpecial(in: $0, from: position + 1, nonASCII: nonASCII)
                            )
                        }
                        let escape = text.withUnsafeBufferPointer { JSONText.needsEscape($0) }
                        if found != (special ? position : length) || after != length
                            || escape != (special && (byte < 0x80))
                        {
                            Issue.record("byte \(byte) at \(position) of \(length) among \(filler): \(found), \(after)")
                            return
                        }
                    }
                }
            }
        }
        #expect(!JSONText.needsEscape(UnsafeBufferPointer(start: nil, count: 0)))
    }
}
