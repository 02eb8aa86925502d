import Foundation
import Testing

@testable import SkyJSON
@testable import SkyProtocol

/// `CanonicalJSON` writes its own bytes for the common shapes and gives the rest to Foundation;
/// either way the bytes (and the errors) are those of Foundation's `JSONEncoder` with sorted keys
/// and unescaped slashes, which coalescing, the journal and other languages' readers rely on.
@Suite("Canonical JSON")
struct CanonicalJSONTests {
    /// `value`'s canonical bytes are Foundation's, and the direct writer produced them (`direct`)
    /// or left them to Foundation.
    func expectFoundationBytes<Value: Encodable>(
        _ value: Value, direct: Bool = true, sourceLocation: SourceLocation = #_sourceLocation
    ) throws {
        let reference = try CanonicalJSON.foundationEncode(value)
        let written = try CanonicalJSON.encode(value)
        #expect(
            String(decoding: written, as: UTF8.self) == String(decoding: reference, as: UTF8.self),
            sourceLocation: sourceLocation)
        #expect((try JSONByteWriter.encode(value) != nil) == direct, sourceLocation: sourceLocation)
    }

    @Test func synthesizedStructsAreWrittenDirectly() throws {
        try expectFoundationBytes(Echo(message: "hello"))
        try expectFoundationBytes(Echo(message: String(repeating: "a", count: 1024)))
        try expectFoundationBytes(Everything.sample)
        try expectFoundationBytes(Everything.empty)
        try expectFoundationBytes([Everything.sample, Everything.empty])
        try expectFoundationBytes(["b": Everything.sample, "a": Everything.empty])
    }

    @Test func scalarsAtTheTopLevel() throws {
        try expectFoundationBytes("a/b \"q\"")
        try expectFoundationBytes(42)
        try expectFoundationBytes(-0.0)
        try expectFoundationBytes(true)
        try expectFoundationBytes(Int?.none)
        try expectFoundationBytes(Int?.some(3))
        try expectFoundationBytes([Int?.none, 1])
        try expectFoundationBytes(Date(timeIntervalSinceReferenceDate: 1.5))
        try expectFoundationBytes(UUID(uuidString: "E621E1F8-C36C-495A-93FC-0C247A3E6E5F")!)
    }

    @Test func numbersAreFoundationsText() throws {
        let doubles: [Double] = [
            1, 0.1, 1e-5, 1e20, 1e21, 1e16, 1e15, 1.2345678901234568e+20, -0.0, .leastNonzeroMagnitude,
            .greatestFiniteMagnitude, -.greatestFiniteMagnitude, 0.3, 2.5, 100, 1e-7, 0.0001,
            9_007_199_254_740_992, 4_503_599_627_370_496.5, 1e17, -1.5, 123_456.789,
        ]
        try expectFoundationBytes(doubles)
        let floats: [Float] = [
            0.1, 1, 1e-5, 3.4e38, 16_777_216, 1e10, 8_388_608.5, 1e8, 1e7, -0.0, .leastNonzeroMagnitude,
        ]
        try expectFoundationBytes(floats)
        try expectFoundationBytes([Int.min, Int.max, 0, -1])
        try expectFoundationBytes([UInt64.max, 0])
        try expectFoundationBytes(Integers(a: .min, b: .max, c: .min, d: .max, e: .min, f: .max, g: .min, h: .max))
    }

    @Test func stringsAreEscapedAsFoundationEscapesThem() throws {
        try expectFoundationBytes(["q\"b\\s/\n\r\t\u{08}\u{0C}\u{01}\u{1F}\u{7F}\u{2028}é😀", "", "plain"])
        try expectFoundationBytes(Echo(message: "line\nbreak and a \"quote\" and é"))
    }

    @Test func keysAreOrderedByTheirBytes() throws {
        var keys: [String: Int] = [:]
        for (index, key) in [
            "a10", "a2", "B", "a", "_x", "A", "b", "aa", "a1", "a01", "Z", "1", "10", "9", "-", " ", "a-b", "a_b", "ab",
        ]
        .enumerated() {
            keys[key] = index
        }
        try expectFoundationBytes(keys)
        try expectFoundationBytes([3: "c", 10: "ten", 1: "one", -4: "minus"])
        try expectFoundationBytes(Unordered(zebra: 1, apple: [2, 3], mango: Echo(message: "m"), apricot: nil))
    }

    @Test func enumsClassesAndWrappers() throws {
        try expectFoundationBytes(Choice.pair(x: 1, y: "z"))
        try expectFoundationBytes(Choice.none)
        try expectFoundationBytes(Choice.nested(Echo(message: "n"), [Choice.none, .pair(x: 2, y: "w")]))
        try expectFoundationBytes(Color.green)
        try expectFoundationBytes([Color.red: 1])
        try expectFoundationBytes(Subclass(base: 1, extra: "e"))
        try expectFoundationBytes(["k": Silent()])
        try expectFoundationBytes([Silent()])
        try expectFoundationBytes([String: Int]())
        try expectFoundationBytes([Int]())
        try expectFoundationBytes([[Int]](repeating: [], count: 2))
        try expectFoundationBytes(NestedInOrder())
    }

    /// Shapes the writer cannot write as Foundation would go to Foundation whole.
    @Test func whatTheWriterCannotWriteIsFoundations() throws {
        try expectFoundationBytes(Data([1, 2, 3]), direct: false)
        try expectFoundationBytes(Holder(data: Data([9]), url: nil, decimal: nil), direct: false)
        try expectFoundationBytes(Holder(data: nil, url: URL(string: "https://x/y")!, decimal: nil), direct: false)
        try expectFoundationBytes(Holder(data: nil, url: nil, decimal: Decimal(string: "1.25")!), direct: false)
        try expectFoundationBytes(["é": 1, "e": 2], direct: false)
        try expectFoundationBytes(["a\"b": 1], direct: false)
        try expectFoundationBytes(Subclass(base: 1, extra: "e", underSuper: true), direct: false)
        try expectFoundationBytes(Interleaved(), direct: false)
        try expectFoundationBytes(DuplicateKey(), direct: false)
        try expectFoundationBytes(Swallowing(), direct: false)
        #expect(try JSONByteWriter.encode([Int128(5)]) == nil && JSONByteWriter.encode(Wide(value: 5)) == nil)
        #expect((try? CanonicalJSON.encode([Int128(5)])) == (try? CanonicalJSON.foundationEncode([Int128(5)])))
        try expectFoundationBytes(Echo(message: "kept"), direct: true)
    }

    @Test func foundationsErrorsStayFoundations() throws {
        #expect(throws: EncodingError.self) { try CanonicalJSON.encode(Double.nan) }
        #expect(throws: EncodingError.self) { try CanonicalJSON.encode([1, Double.infinity]) }
        #expect(throws: EncodingError.self) { try CanonicalJSON.encode(Silent()) }
        #expect(throws: Refusal.self) { try CanonicalJSON.encode([Refusing()]) }
    }

    @Test func codingPathsAreTheValuesPlaces() throws {
        let seen = PathRecorder.Seen()
        _ = try CanonicalJSON.encode(["outer": [PathRecorder(seen: seen)]])
        #expect(seen.paths == ["outer/Index 0", "outer/Index 0/inner"])
    }

    /// Thousands of random trees of objects, arrays and scalars, written through every kind of
    /// container call, with keys in random order: the same bytes as Foundation, all written
    /// directly.
    @Test func randomTreesGiveFoundationsBytes() throws {
        var random = SplitMix(seed: 14)
        for _ in 0..<2000 {
            let tree = Tree.random(depth: 4, using: &random)
            try expectFoundationBytes(tree)
        }
    }
}

// MARK: Values

struct Echo: Codable {
    var message: String
}

struct Wide: Codable {
    var value: UInt128
}

struct Integers: Codable {
    var a: Int8, b: Int8, c: Int16, d: UInt16, e: Int32, f: UInt32, g: Int64, h: UInt64
}

struct Unordered: Codable {
    var zebra: Int
    var apple: [Int]
    var mango: Echo
    var apricot: String?
}

struct Everything: Codable {
    var text: String
    var count: Int
    var ratio: Double
    var small: Float
    var flag: Bool
    var maybe: String?
    var list: [Int]
    var table: [String: [Double]]
    var when: Date
    var id: UUID
    var inner: Unordered?

    static let sample = Everything(
        text: "sample/text", count: -7, ratio: 0.25, small: 1.5, flag: true, maybe: "here", list: [3, 1, 2],
        table: ["z": [1, 2.5], "a": []], when: Date(timeIntervalSinceReferenceDate: 86_400.25),
        id: UUID(uuidString: "E621E1F8-C36C-495A-93FC-0C247A3E6E5F")!,
        inner: Unordered(zebra: 0, apple: [], mango: Echo(message: ""), apricot: "x"))
    static let empty = Everything(
        text: "", count: 0, ratio: 0, small: 0, flag: false, maybe: nil, list: [], table: [:],
        when: Date(timeIntervalSinceReferenceDate: 0), id: UUID(uuidString: "00000000-0000-0000-0000-000000000000")!,
        inner: nil)
}

enum Choice: Codable {
    case pair(x: Int, y: String)
    case none
    indirect case nested(Echo, [Choice])
}

enum Color: String, Codable, CodingKeyRepresentable {
    case red, green
}

class Base: Encodable {
    let base: Int
    init(base: Int) { self.base = base }
}

/// Encodes its superclass's members into the same object (the container is asked for twice),
/// or (`underSuper`) under "super", through `superEncoder()`.
final class Subclass: Base {
    let extra: String
    let underSuper: Bool
    init(base: Int, extra: String, underSuper: Bool = false) {
        self.extra = extra
        self.underSuper = underSuper
        super.init(base: base)
    }
    enum Keys: CodingKey { case extra }
    override func encode(to encoder: any Encoder) throws {
        if !underSuper { try super.encode(to: encoder) }
        var container = encoder.container(keyedBy: Keys.self)
        try container.encode(extra, forKey: .extra)
        if underSuper { try super.encode(to: container.superEncoder()) }
    }
}

/// Encodes nothing at all.
struct Silent: Encodable {
    func encode(to encoder: any Encoder) throws {}
}

struct Holder: Codable {
    var data: Data?
    var url: URL?
    var decimal: Decimal?
}

struct AnyKey: CodingKey {
    let stringValue: String
    init(_ string: String) { stringValue = string }
    init?(stringValue: String) { self.stringValue = stringValue }
    var intValue: Int? { nil }
    init?(intValue: Int) { nil }
}

/// Nested containers used in nesting order: each finished before its parent goes on.
struct NestedInOrder: Encodable {
    func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: AnyKey.self)
        try container.encode(1, forKey: AnyKey("z"))
        var inner = container.nestedContainer(keyedBy: AnyKey.self, forKey: AnyKey("m"))
        try inner.encode("b", forKey: AnyKey("b"))
        var list = inner.nestedUnkeyedContainer(forKey: AnyKey("a"))
        try list.encode(1)
        var deeper = list.nestedContainer(keyedBy: AnyKey.self)
        try deeper.encodeNil(forKey: AnyKey("n"))
        let empty = list.nestedUnkeyedContainer()
        _ = empty.count
        try container.encode(true, forKey: AnyKey("a"))
    }
}

/// Writes into a nested container after its parent went on: Foundation's tree takes that.
struct Interleaved: Encodable {
    func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: AnyKey.self)
        var inner = container.nestedContainer(keyedBy: AnyKey.self, forKey: AnyKey("inner"))
        try container.encode(1, forKey: AnyKey("after"))
        try inner.encode(2, forKey: AnyKey("late"))
    }
}

struct DuplicateKey: Encodable {
    func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: AnyKey.self)
        try container.encode(2, forKey: AnyKey("b"))
        try container.encode(1, forKey: AnyKey("a"))
        try container.encode(3, forKey: AnyKey("b"))
    }
}

/// Catches the writer's give-up error and goes on: the writer remembers it gave up.
struct Swallowing: Encodable {
    func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: AnyKey.self)
        try? container.encode(Data([1]), forKey: AnyKey("data"))
        try container.encode(1, forKey: AnyKey("after"))
    }
}

struct Refusal: Error {}

struct Refusing: Encodable {
    func encode(to encoder: any Encoder) throws { throw Refusal() }
}

/// Records the coding paths its encoder and its container report.
struct PathRecorder: Encodable {
    final class Seen: @unchecked Sendable {  // written and read by one test on one thread
        var paths: [String] = []
    }
    let seen: Seen
    func encode(to encoder: any Encoder) throws {
        seen.paths.append(encoder.codingPath.map(\.stringValue).joined(separator: "/"))
        var container = encoder.container(keyedBy: AnyKey.self)
        var inner = container.nestedContainer(keyedBy: AnyKey.self, forKey: AnyKey("inner"))
        seen.paths.append(inner.codingPath.map(\.stringValue).joined(separator: "/"))
        try inner.encode(1, forKey: AnyKey("x"))
    }
}

// MARK: Random trees

struct SplitMix: RandomNumberGenerator {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

/// A JSON value, encoded through a different container call for each kind of node.
indirect enum Tree: Encodable {
    case text(String), integer(Int), number(Double), flag(Bool), null
    case object([(String, Tree)])
    case array([Tree])
    /// Members written through `nestedContainer(keyedBy:forKey:)`.
    case nestedObjects([(String, [(String, Tree)])])
    /// Elements written through `nestedUnkeyedContainer()`.
    case nestedArrays([[Tree]])
    /// A value passed on through a single-value container.
    case wrapped(Tree)

    static let keys = ["a", "b", "aa", "B", "_", "a1", "a10", "z9", "Z", " ", "-", "ab", "a/b", "id", "message"]
    static let texts = ["", "x", "a/b", "quote \" here", "tab\tand\nline", "é😀", "\u{01}\u{1F}\u{7F}", "back\\slash"]
    static let numbers: [Double] = [0, -0.0, 1, 0.1, 1e-7, 1e21, 2.5, -3.75, 1e15, 1e16, .leastNonzeroMagnitude]

    static func random(depth: Int, using random: inout SplitMix) -> Tree {
        let kind = Int.random(in: 0..<(depth > 0 ? 10 : 5), using: &random)
        switch kind {
        case 0: return .text(texts.randomElement(using: &random)!)
        case 1:
            return .integer(Int.random(in: Int.min...Int.max, using: &random) >> Int.random(in: 0..<64, using: &random))
        case 2:
            if Bool.random(using: &random) { return .number(numbers.randomElement(using: &random)!) }
            let bits = Double(bitPattern: random.next())
            return .number(bits.isFinite ? bits : 1)
        case 3: return .flag(Bool.random(using: &random))
        case 4: return .null
        case 5: return .object(members(depth: depth, using: &random))
        case 6:
            return .array(
                (0..<Int.random(in: 0..<4, using: &random)).map { _ in .random(depth: depth - 1, using: &random) })
        case 7:
            let outer = keys.shuffled(using: &random).prefix(Int.random(in: 0..<3, using: &random))
            return .nestedObjects(outer.map { ($0, members(depth: depth, using: &random)) })
        case 8:
            return .nestedArrays(
                (0..<Int.random(in: 0..<3, using: &random)).map { _ in
                    (0..<Int.random(in: 0..<3, using: &random)).map { _ in .random(depth: depth - 1, using: &random) }
                })
        default: return .wrapped(.random(depth: depth - 1, using: &random))
        }
    }

    static func members(depth: Int, using random: inout SplitMix) -> [(String, Tree)] {
        keys.shuffled(using: &random).prefix(Int.random(in: 0..<5, using: &random))
            .map { ($0, .random(depth: depth - 1, using: &random)) }
    }

    func encode(to encoder: any Encoder) throws {
        switch self {
        case .text(let text):
            var container = encoder.singleValueContainer()
            try container.encode(text)
        case .integer(let integer):
            var container = encoder.singleValueContainer()
            try container.encode(integer)
        case .number(let number):
            var container = encoder.singleValueContainer()
            try container.encode(number)
        case .flag(let flag):
            var container = encoder.singleValueContainer()
            try container.encode(flag)
        case .null:
            var container = encoder.singleValueContainer()
            try container.encodeNil()
        case .object(let members):
            var container = encoder.container(keyedBy: AnyKey.self)
            for (key, value) in members { try container.encode(value, forKey: AnyKey(key)) }
        case .array(let elements):
            var container = encoder.unkeyedContainer()
            for element in elements { try container.encode(element) }
        case .nestedObjects(let objects):
            var container = encoder.container(keyedBy: AnyKey.self)
            for (key, members) in objects {
                var nested = container.nestedContainer(keyedBy: AnyKey.self, forKey: AnyKey(key))
                for (member, value) in members { try nested.encode(value, forKey: AnyKey(member)) }
            }
        case .nestedArrays(let arrays):
            var container = encoder.unkeyedContainer()
            for elements in arrays {
                var nested = container.nestedUnkeyedContainer()
                for element in elements { try nested.encode(element) }
            }
        case .wrapped(let inner):
            var container = encoder.singleValueContainer()
            try container.encode(inner)
        }
    }
}
