extension Array {
    /// Hands each element to `body`, in order, moved out of the array, and leaves `placeholder`
    /// in its place: the array then holds only placeholders (the caller empties it, keeping its
    /// capacity).
    ///
    /// For the I/O loops' batches, whose elements hold buffers: a `for` loop copies each element
    /// (a reference count per buffer) and the array destroys it again afterwards. Moving it out
    /// saves both. `placeholder` should be a case without payload, so that putting it in costs a
    /// store. `body` should `switch consume` on an enum element: a plain `switch` binds copies of
    /// the payload, each reference counted.
    @inlinable
    public mutating func takeEach(
        leaving placeholder: @autoclosure () -> Element, _ body: (consuming Element) throws -> Void
    ) rethrows {
        for index in indices {
            var element = placeholder()
            swap(&element, &self[index])
            try body(consume element)
        }
    }
}

extension Array {
    /// Empties the array and keeps its buffer, for the next batch of an I/O thread: the
    /// elements are destroyed one by one from the end, in code specialised for `Element`.
    ///
    /// `removeAll(keepingCapacity: true)` goes through `replaceSubrange` and the runtime's
    /// generic `swift_arrayDestroy`, unspecialised even for a list of one element, and a client's
    /// or a worker's thread empties several lists on every wake-up.
    @inlinable
    public mutating func removeAllKeepingBuffer() {
        while !isEmpty { removeLast() }
    }
}
