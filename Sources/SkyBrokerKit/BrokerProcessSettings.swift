import CSkySystem

/// Process-wide settings that serve a broker. A library does not change its host process on
/// its own (an application that embeds a ``Broker`` owns its allocator): the executable applies
/// them once at its start, as `skybroker` does, and so may an application that embeds a broker.
public enum BrokerProcessSettings {
    /// Gives allocations of a megabyte or more mappings of their own (glibc's
    /// `M_MMAP_THRESHOLD`, which otherwise rises with the largest block freed), so that the
    /// memory of large request bodies goes back to the system as each request is answered
    /// instead of staying in the heap after a burst.
    public static func apply() {
        sky_fix_mmap_threshold(1 << 20)
    }
}
