/// A multipart message with all its frames in one buffer: one allocation however many frames,
/// where an array of arrays costs one per frame and one for the list.
///
/// Received messages and the messages on the hot paths (REQUEST, REPLY) are built this way, and
/// decoded through views of the buffer (`ArraySlice`s, which share it). ``dropFirst()`` (a
/// ROUTER's routing-id frame) shares the buffer too.
///
/// Layout: `[n][end of frame 0] … [end of frame n-1][frame bytes]`, each number an `Int` in
/// native byte order (the buffer never leaves the process), the ends counted from the start of
/// the frame bytes.
public struct Frames: Sendable {
    private var storage: [UInt8]
    /// The first frame this value shows (after ``dropFirst()``).
    private var first: Int

    /// Frames given as arrays (tests, and messages off the hot paths).
    public init(_ frames: [[UInt8]]) {
        var writer = Writer(frames: frames.count, bytes: frames.reduce(0) { $0 + $1.count })
        for frame in frames { writer.append(frame) }
        self = writer.finish()
    }

    fileprivate init(storage: [UInt8]) {
        self.storage = storage
        first = 0
    }

    /// How many frames this value shows.
    public var count: Int { total - first }

    public var isEmpty: Bool { count == 0 }

    /// Bytes of all frames shown.
    public var byteCount: Int {
        guard count > 0 else { return 0 }
        return end(of: total - 1) - (first == 0 ? 0 : end(of: first - 1))
    }

    /// Frame `index` (counted from the first shown), as a view of the buffer.
    public subscript(index: Int) -> ArraySlice<UInt8> {
        precondition(index >= 0 && index < count, "frame \(index) of \(count)")
        let frame = first + index
        let start = frame == 0 ? 0 : end(of: frame - 1)
        let base = dataStart
        return storage[(base + start)..<(base + end(of: frame))]
    }

    /// The frames after the first, sharing the buffer.
    public func dropFirst() -> Frames {
        var rest = self
        rest.first = min(first + 1, total)
        return rest
    }

    /// Each frame as an array (copies; for code off the hot paths).
    public var arrays: [[UInt8]] { (0..<count).map { Array(self[$0]) } }

    /// Calls `body` with each frame's bytes in order (for sending without copies) until it
    /// returns `false`.
    public func forEachFrame(_ body: (UnsafeRawBufferPointer, _ isLast: Bool) -> Bool) {
        let shown = count
        guard shown > 0 else { return }
        let base = dataStart
        var start = first == 0 ? 0 : end(of: first - 1)
        storage.withUnsafeBytes { raw in
            for index in 0..<shown {
                let stop = end(of: first + index)
                let frame = UnsafeRawBufferPointer(rebasing: raw[(base + start)..<(base + stop)])
                guard body(frame, index == shown - 1) else { return }
                start = stop
            }
        }
    }

    private var total: Int { word(0) }
    private var dataStart: Int { Self.wordSize * (1 + total) }
    private static let wordSize = MemoryLayout<Int>.size
    private func end(of frame: Int) -> Int { word(1 + frame) }

    private func word(_ index: Int) -> Int {
        storage.withUnsafeBytes { $0.loadUnaligned(fromByteOffset: Self.wordSize * index, as: Int.self) }
    }

    /// Builds frames in one buffer of the size given up front.
    public struct Writer {
        private var storage: [UInt8]
        private let frames: Int
        private var written = 0

        /// - Parameters:
        ///   - frames: exactly how many frames will be appended.
        ///   - bytes: their total size (a guess only costs a regrowth).
        public init(frames: Int, bytes: Int) {
            self.frames = frames
            storage = []
            storage.reserveCapacity(Frames.wordSize * (1 + frames) + bytes)
            storage.append(contentsOf: repeatElement(0, count: Frames.wordSize * (1 + frames)))
            set(word: 0, to: frames)
        }

        public mutating func append(_ frame: [UInt8]) {
            storage.append(contentsOf: frame)
            endFrame()
        }

        public mutating func append(_ frame: ArraySlice<UInt8>) {
            storage.append(contentsOf: frame)
            endFrame()
        }

        public mutating func append(_ frame: UnsafeRawBufferPointer) {
            storage.append(contentsOf: frame)
            endFrame()
        }

        /// A frame of the string's UTF-8 bytes.
        public mutating func append(utf8 text: String) {
            var text = text
            text.withUTF8 { storage.append(contentsOf: $0) }
            endFrame()
        }

        /// A request id's 16-byte frame.
        public mutating func append(_ id: RequestID) {
            put(id.high)
            put(id.low)
            endFrame()
        }

        /// A one-byte frame.
        public mutating func append(byte: UInt8) {
            storage.append(byte)
            endFrame()
        }

        /// A frame of one big-endian number.
        public mutating func append(bigEndian value: UInt32) {
            put(value)
            endFrame()
        }

        /// A frame of two or three big-endian numbers (a request header).
        public mutating func append(bigEndian first: UInt32, _ second: UInt32, _ third: UInt32? = nil) {
            put(first)
            put(second)
            if let third { put(third) }
            endFrame()
        }

        public mutating func append(bigEndian value: UInt64) {
            put(value)
            endFrame()
        }

        /// The frames; every announced frame must have been appended.
        public consuming func finish() -> Frames {
            precondition(written == frames, "\(written) of \(frames) frames written")
            return Frames(storage: storage)
        }

        private mutating func put(_ value: UInt32) {
            withUnsafeBytes(of: value.bigEndian) { storage.append(contentsOf: $0) }
        }

        private mutating func put(_ value: UInt64) {
            withUnsafeBytes(of: value.bigEndian) { storage.append(contentsOf: $0) }
        }

        private mutating func endFrame() {
            precondition(written < frames, "more than \(frames) frames")
            written += 1
            set(word: written, to: storage.count - Frames.wordSize * (1 + frames))
        }

        private mutating func set(word index: Int, to value: Int) {
            storage.withUnsafeMutableBytes {
                $0.storeBytes(of: value, toByteOffset: Frames.wordSize * index, as: Int.self)
            }
        }
    }
}

extension Frames: Equatable {
    /// Equal when they show the same frames, however they are stored.
    public static func == (lhs: Frames, rhs: Frames) -> Bool {
        guard lhs.count == rhs.count else { return false }
        for index in 0..<lhs.count where lhs[index] != rhs[index] { return false }
        return true
    }
}
