import SkyWire

/// A list's buffer kept from one wake-up of an I/O thread to the next: a shell builds each
/// wake-up's actions in it, so that they allocate nothing once it has grown. A new list per
/// wake-up cost an allocation, a regrowth on the second action and a free, every wake-up.
///
/// A buffer that grew past ``keptCapacity`` elements in a burst (a worker with thousands of
/// deliveries lost at once, every waiting request answered) is freed rather than kept, so that
/// the burst does not hold its memory for good. A wake-up reads at most 1,024 messages a
/// socket, so the usual lists stay well below.
///
/// Only the I/O thread takes and gives back (``ThreadConfined`` traps on any other).
public struct SpareBuffer<Element: Sendable>: Sendable {
    @usableFromInline let storage = ThreadConfined<[Element]>([], name: "a shell's spare buffer of actions")
    /// The most elements a kept buffer has room for.
    public let keptCapacity: Int

    public init(keptCapacity: Int = 4096) {
        self.keptCapacity = keptCapacity
    }

    /// The buffer, empty, with the capacity earlier wake-ups gave it.
    @inlinable
    public func take() -> [Element] {
        storage.withValue { stored in
            var taken: [Element] = []
            swap(&taken, &stored)
            return taken
        }
    }

    /// Keeps `buffer` (emptied here) for the next ``take()``, unless it outgrew
    /// ``keptCapacity``; `buffer` is left empty.
    @inlinable
    public func giveBack(_ buffer: inout [Element]) {
        guard buffer.capacity <= keptCapacity else {
            buffer = []
            return
        }
        buffer.removeAllKeepingBuffer()
        storage.withValue { swap(&$0, &buffer) }
    }
}
