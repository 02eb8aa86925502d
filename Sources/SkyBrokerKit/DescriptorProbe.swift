import Foundation

/// Whether this process can open one more file descriptor: what the broker's shell asks at each
/// tick (two system calls; see ``BrokerStateMachine/descriptorsChecked(exhausted:limit:now:into:)``).
enum DescriptorProbe {
    static func check() -> (exhausted: Bool, limit: Int) {
        let descriptor = open("/dev/null", O_RDONLY | O_CLOEXEC)
        let exhausted = descriptor < 0 && (errno == EMFILE || errno == ENFILE)
        if descriptor >= 0 { close(descriptor) }
        var limits = rlimit()
        guard getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limits) == 0 else { return (exhausted, 0) }
        return (exhausted, Int(clamping: limits.rlim_cur))
    }
}
