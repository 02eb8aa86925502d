/// Byte arrays for the hot paths, allocated without the standard library's generic slow path.
///
/// `[UInt8](unsafeUninitializedCapacity:)` and `[UInt8](repeating:count:)` allocate through an
/// unspecialised function of the standard library that looks up the array's generic metadata on
/// every call, where bytes written on the stack and copied once into an array take a
/// specialised path. A message costs the broker several such arrays.
@usableFromInline package enum ByteArray {
    /// Up to this many bytes are written on the stack first; more go straight into the array.
    @usableFromInline package static let stackLimit = 1024

    /// An array of the bytes `body` writes into a buffer of `capacity` bytes; `body` returns how
    /// many it wrote (at most `capacity`).
    @inlinable @inline(__always)
    package static func written(capacity: Int, _ body: (UnsafeMutableRawBufferPointer) -> Int) -> [UInt8] {
        guard capacity <= stackLimit else {
            return [UInt8](unsafeUninitializedCapacity: capacity) { buffer, count in
                count = body(UnsafeMutableRawBufferPointer(buffer))
            }
        }
        return withUnsafeTemporaryAllocation(byteCount: capacity, alignment: MemoryLayout<Int>.alignment) {
            buffer in
            let count = body(buffer)
            precondition(count >= 0 && count <= capacity, "wrote \(count) of \(capacity) bytes")
            return [UInt8](UnsafeRawBufferPointer(rebasing: buffer[..<count]))
        }
    }

    /// An array of `zeroes` zero bytes with room for `capacity` (``Frames/Writer`` appends to it).
    @inlinable @inline(__always)
    package static func reserved(_ capacity: Int, zeroes: Int) -> [UInt8] {
        var array: [UInt8] = []
        array.reserveCapacity(max(capacity, zeroes))
        guard zeroes <= stackLimit else {
            array.append(contentsOf: repeatElement(0, count: zeroes))
            return array
        }
        withUnsafeTemporaryAllocation(byteCount: zeroes, alignment: MemoryLayout<Int>.alignment) { buffer in
            buffer.initializeMemory(as: UInt8.self, repeating: 0)
            array.append(contentsOf: UnsafeRawBufferPointer(buffer))
        }
        return array
    }
}
