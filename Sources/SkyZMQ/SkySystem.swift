import CSkySystem

/// What the one system shim (`CSkySystem`) says of the calls it makes.
public enum SkySystem {
    /// Whether the shim takes its portable ways: on a system other than Linux (no eventfd,
    /// scheduling class, heap figures, malloc trim or thread names), or on Linux with
    /// `SKY_SYSTEM_PORTABLE=1`, which the test suite sets for a second run of the client's and
    /// the worker's tests (docs/developing.md, "The tests").
    public static var isPortable: Bool { sky_system_portable() != 0 }
}
