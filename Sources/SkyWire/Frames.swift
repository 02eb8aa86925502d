/// A multipart message with its small frames in one buffer: one allocation however many
/// frames, where an array of arrays costs one per frame and one for the list.
///
/// Received messages and the messages on the hot paths (REQUEST, REPLY) are built this way, and
/// decoded through views of the buffer (`ArraySlice`s, which share it). ``dropFirst()`` (a
/// ROUTER's routing-id frame) shares the buffer too. A frame of ``largeFrame`` bytes or more
/// (a big task or result) is kept as an array of its own instead, by reference: it is never
/// copied into the buffer, and `Array(frames[i])` of it is that array again, not a copy.
///
/// Layout of the buffer: `[n]` then, per frame, `[start][end]` (offsets from the end of this
/// header; a large frame has `start` = -1 - its index among the large ones), then the small
/// frames' bytes. Numbers are `Int`s in native byte order: the buffer never leaves the process.
public struct Frames: Sendable {
    /// Frames of at least this many bytes are kept as arrays of their own.
    public static let largeFrame = 1024
    /// At most this many bytes after the last frame in a buffer used again
    /// (``init(copying:smallBytes:pool:frame:)``).
    @usableFromInline static let spareTail = 256

    @usableFromInline var storage: [UInt8]
    @usableFromInline var large: [[UInt8]]
    /// The first frame this value shows (after ``dropFirst()``).
    @usableFromInline var first = 0

    /// Frames given as arrays (tests, and messages off the hot paths).
    public init(_ frames: [[UInt8]]) {
        var writer = Writer(frames: frames.count, bytes: frames.reduce(0) { $0 + Self.inlineSize($1.count) })
        for frame in frames { writer.append(frame) }
        self = writer.finish()
    }

    /// Frames copied from memory the caller owns (a received message's libzmq frames), in one
    /// pass: one allocation and one copy per small frame, the offsets stored as it goes. The
    /// ``Writer``, which appends frame by frame to a growing array, checks and grows on every
    /// append.
    /// - Parameters:
    ///   - count: how many frames.
    ///   - smallBytes: the bytes the small frames take (the sum of ``inlineSize(_:)``); the frames
    ///     must not hold more.
    ///   - frame: frame `index`'s bytes, asked once per frame (inlinable, so that the receive
    ///     loop's closure is inlined, not called through a context per frame).
    @inlinable public init(copying count: Int, smallBytes: Int, frame: (_ index: Int) -> UnsafeRawBufferPointer) {
        var large: [[UInt8]] = []
        let storage = ByteArray.written(capacity: Self.headerSize(frames: count) + smallBytes) { raw in
            Self.write(count, smallBytes: smallBytes, into: raw, large: &large, frame: frame)
        }
        self.init(storage: storage, large: large)
    }

    /// ``init(copying:smallBytes:frame:)`` into a buffer of `pool`'s if it has one (a message
    /// the I/O thread's handler is done with), else into a new one; the result is tracked, to go
    /// back to `pool` once the handler is done with it. Without a pool, that initialiser.
    @inlinable public init(
        copying count: Int, smallBytes: Int, pool: inout FrameBufferPool?,
        frame: (_ index: Int) -> UnsafeRawBufferPointer
    ) {
        let size = Self.headerSize(frames: count) + smallBytes
        guard pool != nil, var storage = pool!.take(size) else {
            self.init(copying: count, smallBytes: smallBytes, frame: frame)
            pool?.track(storage)
            return
        }
        // Grown to the message if it is shorter; if it is longer, cut only by more than
        // ``spareTail`` bytes: the views never show the bytes after the last frame, and
        // resizing a buffer to each message's size cost more than the allocation it saves.
        if storage.count < size {
            storage.append(contentsOf: repeatElement(0, count: size - storage.count))
        } else if storage.count > size + Self.spareTail {
            storage.removeLast(storage.count - size)
        }
        var large: [[UInt8]] = []
        // A buffer that another holder still shares is copied here, on write, as any array is.
        _ = storage.withUnsafeMutableBytes { raw in
            Self.write(count, smallBytes: smallBytes, into: raw, large: &large, frame: frame)
        }
        self.init(storage: storage, large: large)
        pool!.track(storage)
    }

    /// Writes the layout (header, then the small frames' bytes) into `raw`, which has room for
    /// it; returns how many bytes it wrote. Large frames go to `large`.
    @inlinable static func write(
        _ count: Int, smallBytes: Int, into raw: UnsafeMutableRawBufferPointer, large: inout [[UInt8]],
        frame: (_ index: Int) -> UnsafeRawBufferPointer
    ) -> Int {
        let header = headerSize(frames: count)
        raw.storeBytes(of: count, toByteOffset: 0, as: Int.self)
        var end = 0
        for index in 0..<count {
            let bytes = frame(index)
            let bounds: (start: Int, end: Int)
            if bytes.count >= largeFrame {
                large.append(Array(bytes))
                bounds = (-large.count, 0)
            } else {
                precondition(end + bytes.count <= smallBytes, "frames hold more than \(smallBytes) small bytes")
                if let source = bytes.baseAddress, bytes.count > 0 {
                    (raw.baseAddress! + header + end).copyMemory(from: source, byteCount: bytes.count)
                }
                bounds = (end, end + bytes.count)
                end = bounds.end
            }
            raw.storeBytes(of: bounds.start, toByteOffset: wordSize * startWord(index), as: Int.self)
            raw.storeBytes(of: bounds.end, toByteOffset: wordSize * (startWord(index) + 1), as: Int.self)
        }
        return header + end
    }

    @usableFromInline init(storage: [UInt8], large: [[UInt8]]) {
        self.storage = storage
        self.large = large
    }

    /// The bytes a frame of `count` bytes takes in the shared buffer: all of them, or none for a
    /// large frame (writers size the buffer with it).
    @inlinable public static func inlineSize(_ count: Int) -> Int { count >= largeFrame ? 0 : count }

    /// How many frames this value shows.
    @inlinable public var count: Int { total - first }

    @inlinable public var isEmpty: Bool { count == 0 }

    /// Bytes of all frames shown.
    public var byteCount: Int {
        var bytes = 0
        for frame in first..<total {
            let (start, end) = bounds(of: frame)
            bytes += start < 0 ? large[-1 - start].count : end - start
        }
        return bytes
    }

    /// Frame `index` (counted from the first shown), as a view of the buffer or of its array.
    /// Always inlined: left to the optimiser, it stayed a call, made for each frame decoded.
    @inlinable @inline(__always) public subscript(index: Int) -> ArraySlice<UInt8> {
        precondition(index >= 0 && index < count, "frame \(index) of \(count)")
        let (start, end) = bounds(of: first + index)
        if start < 0 { return large[-1 - start][...] }
        let base = dataStart
        return storage[(base + start)..<(base + end)]
    }

    /// Lends frame `index`'s bytes without making a view of them (a view counts the buffer's
    /// reference up and down: a ROUTER's routing id is read this way on every message).
    @inlinable @inline(__always) public func withFrame<R>(_ index: Int, _ body: (UnsafeRawBufferPointer) -> R) -> R {
        precondition(index >= 0 && index < count, "frame \(index) of \(count)")
        let (start, end) = bounds(of: first + index)
        if start < 0 { return large[-1 - start].withUnsafeBytes(body) }
        let base = dataStart
        return storage.withUnsafeBytes { body(UnsafeRawBufferPointer(rebasing: $0[(base + start)..<(base + end)])) }
    }

    /// Frame `index` as the array that holds it and its place there, without a copy: the
    /// message's shared buffer for a small frame, its own array for a large one. For values that
    /// keep a frame as an array and a range (``TaskReply``), whose array they can hand out whole
    /// when the range spans it (an `ArraySlice` must be cast at run time to find its array).
    @inlinable public func arrayAndRange(_ index: Int) -> (array: [UInt8], range: Range<Int>) {
        precondition(index >= 0 && index < count, "frame \(index) of \(count)")
        let (start, end) = bounds(of: first + index)
        if start < 0 {
            let array = large[-1 - start]
            return (array, 0..<array.count)
        }
        let base = dataStart
        return (storage, (base + start)..<(base + end))
    }

    /// Frame `index` as an array of its own: a large frame's array as it is (no copy), a small
    /// frame's bytes copied out of the buffer in place (`Array(frames[index])` made a view of
    /// the buffer, counting its reference up and down, and copied it through the generic path,
    /// which asks the runtime what owns the view). A message's body is taken this way.
    @inlinable public func array(_ index: Int) -> [UInt8] {
        precondition(index >= 0 && index < count, "frame \(index) of \(count)")
        let (start, end) = bounds(of: first + index)
        if start < 0 { return large[-1 - start] }
        let base = dataStart
        return storage.withUnsafeBytes { [UInt8](UnsafeRawBufferPointer(rebasing: $0[(base + start)..<(base + end)])) }
    }

    /// Hides the first frame shown, in place: ``dropFirst()`` without a second value (whose
    /// two references were counted up and down on every message a ROUTER read).
    @inlinable public mutating func removeFirst() {
        first = min(first + 1, total)
    }

    /// The frames after the first, sharing the buffer.
    @inlinable public func dropFirst() -> Frames {
        var rest = self
        rest.first = min(first + 1, total)
        return rest
    }

    /// Each frame as an array (copies the small ones; for code off the hot paths).
    public var arrays: [[UInt8]] { (0..<count).map { Array(self[$0]) } }

    /// Calls `body` with each frame's bytes in order (for sending without copies) until it
    /// returns `false`.
    public func forEachFrame(_ body: (UnsafeRawBufferPointer, _ isLast: Bool) -> Bool) {
        let shown = count
        guard shown > 0 else { return }
        let base = dataStart
        storage.withUnsafeBytes { raw in
            for index in 0..<shown {
                let (start, end) = bounds(of: first + index)
                let isLast = index == shown - 1
                let goOn =
                    start < 0
                    ? large[-1 - start].withUnsafeBytes { body($0, isLast) }
                    : body(UnsafeRawBufferPointer(rebasing: raw[(base + start)..<(base + end)]), isLast)
                guard goOn else { return }
            }
        }
    }

    @inlinable static var wordSize: Int { MemoryLayout<Int>.size }
    /// Bytes before the frames' data: the count, then a start and an end per frame.
    @inlinable static func headerSize(frames: Int) -> Int { wordSize * (1 + 2 * frames) }
    /// The header word holding frame `frame`'s start (its end is the next).
    @inlinable static func startWord(_ frame: Int) -> Int { 1 + 2 * frame }
    @inlinable var total: Int { word(0) }
    @inlinable var dataStart: Int { Self.headerSize(frames: total) }
    @inlinable func bounds(of frame: Int) -> (start: Int, end: Int) {
        (word(Self.startWord(frame)), word(Self.startWord(frame) + 1))
    }

    @inlinable func word(_ index: Int) -> Int {
        storage.withUnsafeBytes { $0.loadUnaligned(fromByteOffset: Self.wordSize * index, as: Int.self) }
    }

    /// Builds frames in one buffer of the size given up front.
    public struct Writer {
        @usableFromInline var storage: [UInt8]
        @usableFromInline var large: [[UInt8]] = []
        @usableFromInline let frames: Int
        @usableFromInline var written = 0
        @usableFromInline let header: Int

        /// - Parameters:
        ///   - frames: exactly how many frames will be appended.
        ///   - bytes: the bytes the small frames take (see ``Frames/inlineSize(_:)``); a guess
        ///     only costs a regrowth.
        @inlinable public init(frames: Int, bytes: Int) {
            self.frames = frames
            header = Frames.headerSize(frames: frames)
            let header = header
            // One allocation with room for the frames; the header zeroed at once, not byte by byte.
            storage = ByteArray.reserved(header + bytes, zeroes: header)
            set(word: 0, to: frames)
        }

        @inlinable public mutating func append(_ frame: [UInt8]) {
            if frame.count >= Frames.largeFrame { appendLarge(frame) } else { appendSmall(frame) }
        }

        @inlinable public mutating func append(_ frame: ArraySlice<UInt8>) {
            if frame.count >= Frames.largeFrame { appendLarge(Array(frame)) } else { appendSmall(frame) }
        }

        /// A frame of borrowed bytes (a routing id kept inline by its owner, copied without an
        /// array of its own).
        @inlinable public mutating func append(_ frame: UnsafeRawBufferPointer) {
            if frame.count >= Frames.largeFrame { appendLarge(Array(frame)) } else { appendSmall(frame) }
        }

        /// A frame of the string's UTF-8 bytes.
        @inlinable public mutating func append(utf8 text: String) {
            var text = text
            text.withUTF8 { appendSmall($0) }
        }

        /// A frame of two big-endian 64-bit numbers (a request id's 16 bytes).
        @inlinable public mutating func append(bigEndian first: UInt64, _ second: UInt64) {
            let start = storage.count
            put(first)
            put(second)
            endFrame(from: start)
        }

        /// A one-byte frame.
        @inlinable public mutating func append(byte: UInt8) {
            let start = storage.count
            storage.append(byte)
            endFrame(from: start)
        }

        /// A frame of one big-endian number.
        @inlinable public mutating func append(bigEndian value: UInt32) {
            let start = storage.count
            put(value)
            endFrame(from: start)
        }

        /// A frame of two to five big-endian numbers (a request header); each optional one only
        /// after the one before it.
        @inlinable public mutating func append(
            bigEndian first: UInt32, _ second: UInt32, _ third: UInt32? = nil, _ fourth: UInt32? = nil,
            _ fifth: UInt32? = nil
        ) {
            let start = storage.count
            put(first)
            put(second)
            if let third {
                put(third)
                if let fourth {
                    put(fourth)
                    if let fifth { put(fifth) }
                }
            }
            endFrame(from: start)
        }

        @inlinable public mutating func append(bigEndian value: UInt64) {
            let start = storage.count
            put(value)
            endFrame(from: start)
        }

        /// Appends one frame of what `body` writes, at most `capacity` bytes, into a buffer on
        /// the stack: a packed header (docs/protocol.md, "Packed messages") in one append, where
        /// field by field it took eight to ten appends to the array, each with its checks.
        @inlinable public mutating func appendWritten(capacity: Int, _ body: (inout PackedFieldWriter) -> Void) {
            withUnsafeTemporaryAllocation(byteCount: capacity, alignment: MemoryLayout<UInt64>.alignment) { buffer in
                var writer = PackedFieldWriter(buffer)
                body(&writer)
                appendSmall(UnsafeRawBufferPointer(rebasing: buffer[..<writer.count]))
            }
        }

        /// The frames; every announced frame must have been appended.
        @inlinable public consuming func finish() -> Frames {
            precondition(written == frames, "\(written) of \(frames) frames written")
            return Frames(storage: storage, large: large)
        }

        @inlinable mutating func appendSmall(_ bytes: some Collection<UInt8>) {
            let start = storage.count
            storage.append(contentsOf: bytes)
            endFrame(from: start)
        }

        @usableFromInline mutating func appendLarge(_ frame: [UInt8]) {
            large.append(frame)
            record(start: -large.count, end: 0)
        }

        @inlinable mutating func put(_ value: UInt32) {
            withUnsafeBytes(of: value.bigEndian) { storage.append(contentsOf: $0.assumingMemoryBound(to: UInt8.self)) }
        }

        @inlinable mutating func put(_ value: UInt64) {
            withUnsafeBytes(of: value.bigEndian) { storage.append(contentsOf: $0.assumingMemoryBound(to: UInt8.self)) }
        }

        @inlinable mutating func endFrame(from start: Int) {
            record(start: start - header, end: storage.count - header)
        }

        @inlinable mutating func record(start: Int, end: Int) {
            precondition(written < frames, "more than \(frames) frames")
            set(word: Frames.startWord(written), to: start)
            set(word: Frames.startWord(written) + 1, to: end)
            written += 1
        }

        @inlinable mutating func set(word index: Int, to value: Int) {
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

/// Writes a packed header's fields into a buffer of known size (``Frames/Writer/appendWritten(capacity:_:)``);
/// writing past its end is a programming error, so it traps.
public struct PackedFieldWriter {
    @usableFromInline let buffer: UnsafeMutableRawBufferPointer
    @usableFromInline var written = 0
    /// Bytes written so far.
    @inlinable public var count: Int { written }

    @inlinable init(_ buffer: UnsafeMutableRawBufferPointer) { self.buffer = buffer }

    @inlinable public mutating func byte(_ value: UInt8) {
        precondition(count < buffer.count, "a packed header over its announced size")
        buffer[count] = value
        written += 1
    }

    @inlinable public mutating func bigEndian(_ value: UInt32) { store(value.bigEndian) }

    @inlinable public mutating func bigEndian(_ value: UInt64) { store(value.bigEndian) }

    @inlinable public mutating func bytes(_ bytes: [UInt8]) {
        bytes.withUnsafeBytes { copy($0) }
    }

    @inlinable public mutating func bytes(_ bytes: UnsafeRawBufferPointer) {
        copy(bytes)
    }

    @inlinable public mutating func utf8(_ text: String) {
        var text = text
        text.withUTF8 { copy(UnsafeRawBufferPointer($0)) }
    }

    @inlinable mutating func store<T: FixedWidthInteger>(_ value: T) {
        let size = MemoryLayout<T>.size
        precondition(count + size <= buffer.count, "a packed header over its announced size")
        buffer.storeBytes(of: value, toByteOffset: count, as: T.self)
        written += size
    }

    /// Always inlined: called, each of a header's byte runs (a signature, a name, a tag) cost
    /// a call more than its copy.
    @inlinable @inline(__always) mutating func copy(_ bytes: UnsafeRawBufferPointer) {
        precondition(count + bytes.count <= buffer.count, "a packed header over its announced size")
        guard let source = bytes.baseAddress, !bytes.isEmpty else { return }
        (buffer.baseAddress! + count).copyMemory(from: source, byteCount: bytes.count)
        written += bytes.count
    }
}
