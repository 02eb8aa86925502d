import CSkySystem
import Foundation

/// How other threads wake an I/O thread that sleeps in `zmq_poll`: a descriptor it polls with
/// its sockets. On Linux an `eventfd` (one descriptor, 8-byte counter: a write adds, one read
/// empties it); where there is none (``SkySystem/isPortable``), a non-blocking pipe.
struct WakeSignal: ~Copyable {
    /// What the I/O thread polls for readability.
    let readFD: Int32
    private let writeFD: Int32

    /// An eventfd: one descriptor, read and written.
    var isEventFD: Bool { readFD == writeFD }

    init() throws(ZMQError) {
        let fd = sky_wake_eventfd()
        if fd >= 0 {
            readFD = fd
            writeFD = fd
            return
        }
        guard errno == ENOSYS else { throw ZMQError(code: errno, operation: "eventfd") }
        var fds: [Int32] = [0, 0]
        guard pipe(&fds) == 0 else { throw ZMQError(code: errno, operation: "pipe") }
        for fd in fds {
            _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
            _ = fcntl(fd, F_SETFD, fcntl(fd, F_GETFD) | FD_CLOEXEC)
        }
        readFD = fds[0]
        writeFD = fds[1]
    }

    deinit {
        Foundation.close(readFD)
        if writeFD != readFD { Foundation.close(writeFD) }
    }

    /// Wakes the thread (callers make sure it is asked once per sleep, not once per message).
    func signal() {
        var one: UInt64 = 1
        _ = withUnsafeBytes(of: &one) { bytes in
            write(writeFD, bytes.baseAddress, isEventFD ? 8 : 1)
        }
    }

    /// Empties the signal after a wake-up, without allocating.
    func drain() {
        var buffer: (UInt64, UInt64, UInt64, UInt64) = (0, 0, 0, 0)
        withUnsafeMutableBytes(of: &buffer) { bytes in
            // One read of an eventfd takes the whole counter; a pipe may hold more.
            while Foundation.read(readFD, bytes.baseAddress, bytes.count) > 0 && !isEventFD {}
        }
    }
}
