/// A message that lends its frames one after another, as ``Frames`` and ``FrameParts`` do:
/// what a socket sends from, generic so that the message is borrowed, not captured. A bound
/// method (`message.forEachFrame`) passed as a closure copied the message into the closure's
/// context and retained each of its buffers, every send.
public protocol FrameSource {
    /// Calls `visit` with each frame and whether it is the last, until it returns `false`.
    func forEachFrame(_ visit: (UnsafeRawBufferPointer, _ isLast: Bool) -> Bool)
}

extension Frames: FrameSource {}
