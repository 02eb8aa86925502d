import Foundation
import Testing

@testable import SkyJSON
@testable import SkyProtocol

/// `CanonicalJSON.decode` reads the common shapes itself and gives the rest to Foundation;
/// either way the value, or the failure, is what Foundation's `JSONDecoder` gives.
@Suite("Canonical JSON decoding")
struct CanonicalJSONDecodingTests {
    /// Decoding `text` as `Value` gives Foundation's outcome (compared by Foundation's canonical
    /// bytes of the value), and the reader decoded it itself (`direct`) or left it to Foundation.
    func expectFoundationValue<Value: Codable>(
        _ type: Value.Type, _ text: [UInt8], direct: Bool = true, sourceLocation: SourceLocation = #_sourceLocation
    ) {
        let reference = Result { try CanonicalJSON.foundationEncode(CanonicalJSON.foundationDecode(type, from: text)) }
        let decoded = Result { try CanonicalJSON.foundationEncode(CanonicalJSON.decode(type, from: text)) }
        let shown = String(decoding: text, as: UTF8.self)
        switch (reference, decoded) {
        case (.success(let expected), .success(let actual)):
            #expect(
                String(decoding: actual, as: UTF8.self) == String(decoding: expected, as: UTF8.self), "\(shown)",
                sourceLocation: sourceLocation)
        case (.failure, .failure):
            break
        default:
            Issue.record("\(shown): Foundation \(reference), CanonicalJSON \(decoded)", sourceLocation: sourceLocation)
        }
        #expect(
            ((try? JSONByteReader.decode(type, from: text)) != nil) == direct, "\(shown)",
            sourceLocation: sourceLocation)
    }

    func expectFoundationValue<Value: Codable>(
        _ type: Value.Type, _ text: String, direct: Bool = true, sourceLocation: SourceLocation = #_sourceLocation
    ) {
        expectFoundationValue(type, Array(text.utf8), direct: direct, sourceLocation: sourceLocation)
    }

    @Test func whatTheWriterWritesIsReadDirectly() throws {
        for value in [Record.sample, Record.empty] {
            expectFoundationValue(Record.self, try CanonicalJSON.encode(value))
        }
        expectFoundationValue(Echo.self, try CanonicalJSON.encode(Echo(message: String(repeating: "a", count: 1024))))
        // `Float` is Foundation's to read (see below).
        expectFoundationValue(Everything.self, try CanonicalJSON.encode(Everything.sample), direct: false)
        expectFoundationValue(Everything.self, try CanonicalJSON.encode(Everything.empty), direct: false)
        expectFoundationValue(Choice.self, try CanonicalJSON.encode(Choice.pair(x: 1, y: "z")))
        expectFoundationValue(Choice.self, try CanonicalJSON.encode(Choice.none))
        expectFoundationValue(
            [Choice].self, try CanonicalJSON.encode([Choice.nested(Echo(message: "n"), [.none, .pair(x: -2, y: "")])]))
        expectFoundationValue([Color: Int].self, try CanonicalJSON.encode([Color.red: 1, .green: 2]))
        expectFoundationValue([Int: String].self, try CanonicalJSON.encode([3: "c", -10: "ten"]))
        expectFoundationValue(
            Integers.self,
            try CanonicalJSON.encode(Integers(a: .min, b: .max, c: .min, d: .max, e: .min, f: .max, g: .min, h: .max)))
        expectFoundationValue([Int?].self, "[null, 1, null]")
        expectFoundationValue(Int?.self, "null")
        expectFoundationValue(String.self, #""top""#)
        expectFoundationValue(Bool.self, " true ")
    }

    @Test func stringsAndNumbersReadAsFoundationReadsThem() {
        expectFoundationValue(Echo.self, #"{"message":"a\u00e9\ud83d\ude00 \" \\ \/ \b\f\n\r\t \u0000"}"#)
        expectFoundationValue(Echo.self, "{\"message\":\"é😀 plain\"}")
        expectFoundationValue(Echo.self, " \n\t{ \"message\" : \"spaced\" , \"other\" : [1, {\"x\": null}] }\r\n")
        let doubles = [
            "0", "-0", "1", "-1", "0.1", "1e-7", "1E+21", "2.5e-3", "123456789012345", "1234567890123456789",
            "9007199254740993", "1.7976931348623157e308", "5e-324", "0.30000000000000004", "-123.456e2",
            "100000000000000000000000000000",
        ]
        for number in doubles { expectFoundationValue([Double].self, "[\(number)]") }
        for number in ["0", "-1", "9223372036854775807", "-9223372036854775808", "42"] {
            expectFoundationValue([Int].self, "[\(number)]")
        }
        expectFoundationValue([UInt64].self, "[18446744073709551615]")
        expectFoundationValue(
            Integers.self, #"{"a":-128,"b":127,"c":-32768,"d":65535,"e":-1,"f":4294967295,"g":0,"h":1}"#)
    }

    /// What the reader does not take is Foundation's: its values where it has one, its errors
    /// where it has none.
    @Test func whatTheReaderDoesNotTakeIsFoundations() {
        let invalid = [
            "", " ", "{", "[1,2,]", "{\"message\":\"a\",}", "{\"message\" \"a\"}", "01", "[01]", "1.", ".5", "-",
            "[1e]", "tru", "nul", "{\"message\":\"a\"} x", "\"raw\tcontrol\"", "\"bad \\q escape\"", "\"\\u12\"",
            "{'message':'a'}", "[1 2]", "\u{FEFF}{}",
        ]
        for text in invalid { expectFoundationValue(Echo.self, text, direct: false) }
        expectFoundationValue([String].self, [0x5B, 0x22, 0xFF, 0xFE, 0x22, 0x5D], direct: false)
        expectFoundationValue([String].self, #"["\ud800"]"#, direct: false)
        expectFoundationValue([String].self, #"["\udc00x"]"#, direct: false)
        expectFoundationValue(Echo.self, #"{"message":"x","message":"y"}"#, direct: false)
        expectFoundationValue(Echo.self, #"{"m\u0065ssage":"x"}"#)
        expectFoundationValue(Echo.self, #"{"m\u0065ssage":"x","message":"y"}"#, direct: false)
        expectFoundationValue(Echo.self, #"{"message":1}"#, direct: false)
        expectFoundationValue(Echo.self, #"{}"#, direct: false)
        expectFoundationValue(Echo.self, #"[]"#, direct: false)
        expectFoundationValue([Int].self, "[1.0]", direct: false)
        expectFoundationValue([Int].self, "[1e2]", direct: false)
        expectFoundationValue([Int].self, "[-0]", direct: false)
        expectFoundationValue([Int].self, "[9223372036854775808]", direct: false)
        expectFoundationValue([UInt8].self, "[256]", direct: false)
        expectFoundationValue([UInt].self, "[-1]", direct: false)
        expectFoundationValue([Double].self, "[1e400]", direct: false)
        for quirk in ["0e1", "0E1", "0e+1", "0e0"] { expectFoundationValue([Double].self, "[\(quirk)]", direct: false) }
        for plain in ["-0e1", "0.0e1", "10e1"] { expectFoundationValue([Double].self, "[\(plain)]") }
        expectFoundationValue([Float].self, "[0.1]", direct: false)
        expectFoundationValue(Wide.self, #"{"value":5}"#, direct: false)
        expectFoundationValue(Holder.self, #"{"data":"AQID"}"#, direct: false)
        expectFoundationValue(Holder.self, #"{"url":"https://x/y"}"#, direct: false)
        expectFoundationValue(Holder.self, #"{"decimal":1.25}"#, direct: false)
        expectFoundationValue([Int].self, "[1, 2]", direct: true)
        let deep = String(repeating: "[", count: 300) + String(repeating: "]", count: 300)
        expectFoundationValue(Nested.self, deep, direct: false)
        expectFoundationValue(Lenient.self, #"{"count":"seven"}"#, direct: false)
        expectFoundationValue(Lenient.self, #"{"count":7}"#, direct: true)
    }

    @Test func largeObjectsAreReadThroughAnIndex() throws {
        var table: [String: Int] = [:]
        for index in 0..<500 { table["key\(index)"] = index }
        expectFoundationValue([String: Int].self, try CanonicalJSON.encode(table))
        var text = Array(try CanonicalJSON.encode(table).dropLast())
        text += Array(#","key7":0}"#.utf8)
        expectFoundationValue([String: Int].self, text, direct: false)
    }

    /// What clients and watchers read on every message (events, snapshots, error bodies) is
    /// read directly too.
    @Test func brokerMessagesAreReadDirectly() throws {
        let task = TaskInfo(requestID: "00ff", service: "sky.scan", deliveries: 2, worker: "0a0b", status: "failed")
        expectFoundationValue(
            SkyEvent.self,
            SkyEvent(seq: 9, event: .taskFailed, time: "2026-11-23T01:02:03.004Z", task: task).jsonBytes())
        let stats = BrokerStats(
            workers: 2, capacity: 8, queued: 0, inFlight: 4, completed: 40, completedPerSecond: 12.5, failed: 3)
        expectFoundationValue(
            SkyEvent.self,
            try CanonicalJSON.encode(SkyEvent(seq: 10, event: .brokerStats, time: "", workers: [], stats: stats)))
        let snapshot = ClusterSnapshot(
            seq: 10, workers: [], queued: ["sky.scan": 3], inFlight: 2, counters: BrokerCounters(), broker: "b")
        expectFoundationValue(ClusterSnapshot.self, try CanonicalJSON.encode(snapshot))
        expectFoundationValue(RemoteErrorBody.self, RemoteErrorBody(type: "Refused", message: "no \"x\"\n").encoded())
    }

    @Test func codingPathsAreTheValuesPlaces() throws {
        let seen = try CanonicalJSON.decode(PathReader.self, from: Array(#"{"outer":[{"inner":{"x":1}}]}"#.utf8))
        #expect(seen.paths == ["", "outer", "outer/Index 0/inner"])
    }

    /// What a worker returns is untrusted, and the broker reads failed replies' error bodies:
    /// 20,000 random mutations of valid documents (bytes flipped, dropped, or replaced by JSON's
    /// own punctuation, escapes and invalid UTF-8) never crash the reader, and each ends as
    /// Foundation's reading of it ends.
    @Test func mutatedDocumentsEndAsFoundationsReadingEnds() throws {
        var random = SplitMix(seed: 21)
        let seeds = try [
            CanonicalJSON.encode(Record.sample), CanonicalJSON.encode(Record.empty),
            RemoteErrorBody(type: "Refused", message: "no \"x\"\n\u{1}é").encoded(),
        ]
        let specials = Array(#"{}[]:,"\/ubfnrt0123456789-+.eE "#.utf8) + [0x00, 0x1F, 0x7F, 0x80, 0xC3, 0xFF]
        var direct = 0
        for round in 0..<20_000 {
            var text = seeds[round % seeds.count]
            for _ in 0..<Int.random(in: 1...3, using: &random) where !text.isEmpty {
                let place = Int.random(in: 0..<text.count, using: &random)
                switch random.next() % 3 {
                case 0: text[place] = specials.randomElement(using: &random)!
                case 1: text.remove(at: place)
                default: text.insert(specials.randomElement(using: &random)!, at: place)
                }
            }
            for type in [Record.self] as [Record.Type] {
                let reference = (try? CanonicalJSON.foundationDecode(type, from: text))
                    .map { try? CanonicalJSON.foundationEncode($0) }
                let decoded = (try? CanonicalJSON.decode(type, from: text)).map {
                    try? CanonicalJSON.foundationEncode($0)
                }
                if reference != decoded {
                    Issue.record(
                        "\(String(decoding: text, as: UTF8.self)): Foundation \(String(describing: reference)), CanonicalJSON \(String(describing: decoded))"
                    )
                    return
                }
            }
            let body = RemoteErrorBody(decoding: text)
            let reference = (try? CanonicalJSON.foundationDecode(RemoteErrorBody.self, from: text))
            if let reference, body != reference {
                Issue.record("\(String(decoding: text, as: UTF8.self)): \(body) against \(reference)")
                return
            }
            if (try? JSONByteReader.decode(RemoteErrorBody.self, from: text)) != nil { direct += 1 }
        }
        // Some mutations leave valid documents, which the reader reads itself.
        #expect(direct > 100, "\(direct)")
    }

    /// Random records written by Foundation in several styles (sorted or not, pretty or not,
    /// slashes escaped or not): the same values as Foundation reads, all read directly.
    @Test func randomRecordsReadAsFoundationReadsThem() throws {
        var random = SplitMix(seed: 7)
        let styles: [JSONEncoder.OutputFormatting] = [[], [.sortedKeys], [.prettyPrinted], [.withoutEscapingSlashes]]
        for round in 0..<500 {
            let record = Record.random(depth: 3, using: &random)
            let encoder = JSONEncoder()
            encoder.outputFormatting = styles[round % styles.count]
            expectFoundationValue(Record.self, Array(try encoder.encode(record)))
        }
    }
}

// MARK: Values

struct Record: Codable {
    var text: String
    var number: Double
    var integer: Int
    var flag: Bool
    var optional: String?
    var list: [Int64]
    var table: [String: Double]
    var children: [Record]
    var unsigned: UInt32?

    static let sample = Record(
        text: "a/b \"q\" é", number: -0.0, integer: .min, flag: true, optional: "o", list: [1, -2, .max],
        table: ["x": 1e21, "y": 0.1], children: [Record.empty], unsigned: 7)
    static let empty = Record(
        text: "", number: 0, integer: 0, flag: false, optional: nil, list: [], table: [:], children: [], unsigned: nil)

    static func random(depth: Int, using random: inout SplitMix) -> Record {
        func number() -> Double {
            let bits = Double(bitPattern: random.next())
            return Bool.random(using: &random)
                ? (bits.isFinite ? bits : 0) : Tree.numbers.randomElement(using: &random)!
        }
        func text() -> String {
            Tree.texts.randomElement(using: &random)! + (Bool.random(using: &random) ? "\u{2028}/" : "")
        }
        return Record(
            text: text(), number: number(), integer: Int.random(in: .min ... .max, using: &random),
            flag: Bool.random(using: &random), optional: Bool.random(using: &random) ? text() : nil,
            list: (0..<Int.random(in: 0..<4, using: &random)).map { _ in Int64.random(in: .min ... .max, using: &random)
            },
            table: Dictionary(
                (0..<Int.random(in: 0..<4, using: &random)).map { _ in
                    (Tree.keys.randomElement(using: &random)!, number())
                },
                uniquingKeysWith: { first, _ in first }),
            children: depth > 0
                ? (0..<Int.random(in: 0..<3, using: &random)).map { _ in .random(depth: depth - 1, using: &random) }
                : [],
            unsigned: Bool.random(using: &random) ? UInt32.random(in: 0 ... .max, using: &random) : nil)
    }
}

/// Arrays in arrays, as deep as the document goes.
struct Nested: Codable {
    var inner: [Nested]
    init(from decoder: any Decoder) throws {
        var container = try decoder.unkeyedContainer()
        var inner: [Nested] = []
        while !container.isAtEnd { inner.append(try container.decode(Nested.self)) }
        self.inner = inner
    }
    func encode(to encoder: any Encoder) throws {
        var container = encoder.unkeyedContainer()
        for element in inner { try container.encode(element) }
    }
}

/// Tries a type, catches the failure and tries another, as hand-written decoders do.
struct Lenient: Codable {
    var count: Int
    enum Keys: CodingKey { case count }
    init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: Keys.self)
        if let count = try? container.decode(Int.self, forKey: .count) {
            self.count = count
        } else {
            self.count = Int(try container.decode(String.self, forKey: .count).count)
        }
    }
    func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: Keys.self)
        try container.encode(count, forKey: .count)
    }
}

/// Records the coding paths its decoders report.
struct PathReader: Decodable {
    var paths: [String] = []
    struct Inner: Decodable {
        var path: String
        init(from decoder: any Decoder) throws {
            path = decoder.codingPath.map(\.stringValue).joined(separator: "/")
        }
    }
    struct Element: Decodable {
        var path: String
        enum Keys: CodingKey { case inner }
        init(from decoder: any Decoder) throws {
            path = try decoder.container(keyedBy: Keys.self).decode(Inner.self, forKey: .inner).path
        }
    }
    enum Keys: CodingKey { case outer }
    init(from decoder: any Decoder) throws {
        paths.append(decoder.codingPath.map(\.stringValue).joined(separator: "/"))
        let container = try decoder.container(keyedBy: Keys.self)
        let list = try container.nestedUnkeyedContainer(forKey: .outer)
        paths.append(list.codingPath.map(\.stringValue).joined(separator: "/"))
        paths += try container.decode([Element].self, forKey: .outer).map(\.path)
    }
}
