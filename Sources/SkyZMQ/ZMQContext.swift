import CZMQ

/// A libzmq context: the owner of libzmq's own I/O threads and the namespace of `inproc://`.
///
/// libzmq documents contexts as thread safe, so this type is `Sendable`; sockets are not, and
/// each belongs to the one thread that created it (see ``ZMQSocket`` and ``ZMQEventLoop``).
public final class ZMQContext: @unchecked Sendable {  // libzmq contexts are thread safe (zmq_ctx_new(3)).
    let handle: UnsafeMutableRawPointer
    private let terminated = Locked(false)

    /// Creates a context with `ZMQ_BLOCKY` off, so terminating it never waits on lingering messages
    /// of sockets that were closed without an explicit linger.
    public init(ioThreads: Int = 1) throws(ZMQError) {
        guard let handle = zmq_ctx_new() else { throw ZMQError.last("zmq_ctx_new") }
        self.handle = handle
        zmq_ctx_set(handle, ZMQ_IO_THREADS, Int32(ioThreads))
        zmq_ctx_set(handle, ZMQ_BLOCKY, 0)
    }

    deinit {
        // Every socket holds a strong reference to its context, so by now all are closed.
        terminate()
    }

    /// Terminates the context: waits until every socket is closed and each one's lingering
    /// messages are sent or its linger time is over. Blocks, so call it from an I/O thread
    /// (``ZMQEventLoop`` does so for the context it owns), never from a Swift task.
    public func terminate() {
        let first = terminated.withLock { done -> Bool in
            defer { done = true }
            return !done
        }
        guard first else { return }
        while zmq_ctx_term(handle) != 0 && zmq_errno() == EINTR {}
    }

    /// The libzmq version this process runs against, as "major.minor.patch".
    public static var version: String {
        var major: Int32 = 0
        var minor: Int32 = 0
        var patch: Int32 = 0
        zmq_version(&major, &minor, &patch)
        return "\(major).\(minor).\(patch)"
    }

    /// Whether libzmq was built with a capability ("curve", "ipc", "draft"...).
    public static func has(_ capability: String) -> Bool {
        zmq_has(capability) != 0
    }
}
