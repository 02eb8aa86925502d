import SkyWire

extension MonotonicInstant {
    /// The clock's reading now (the machines take it from their shells: they read no clock).
    package static var now: MonotonicInstant { MonotonicInstant(nanoseconds: LoopTime.clockNanoseconds()) }
}
