import SkyProtocol

/// Scan one "satellite sector": render its image from the sector number and find the bright
/// blobs in it. Deterministic, so any result can be checked by recomputing it locally with
/// ``SectorScanner/scan(_:)``.
public struct ScanTask: SkyTask, Hashable {
    public static let service = "sky.scan"
    public typealias Result = SectorReport

    public var sector: Int
    /// Image side in pixels. CPU time grows with its square: 512 takes a few milliseconds.
    public var size: Int

    public static let defaultSize = 512
    public static let sizeRange = 16...4096

    public init(sector: Int, size: Int = ScanTask.defaultSize) {
        self.sector = sector
        self.size = size
    }
}

/// What a scan found in one sector.
public struct SectorReport: Codable, Sendable, Hashable {
    public var sector: Int
    public var size: Int
    /// Bright blobs, ordered by position (top to bottom, left to right).
    public var blobs: [Blob]
    /// Pixels over the detection threshold.
    public var brightPixels: Int

    public init(sector: Int, size: Int, blobs: [Blob], brightPixels: Int) {
        self.sector = sector
        self.size = size
        self.blobs = blobs
        self.brightPixels = brightPixels
    }
}

/// One connected bright region.
public struct Blob: Codable, Sendable, Hashable {
    /// Centroid column, rounded to a pixel.
    public var x: Int
    /// Centroid row, rounded to a pixel.
    public var y: Int
    /// Pixels in the region.
    public var area: Int
    /// Brightest pixel value (0...255).
    public var peak: Int

    public init(x: Int, y: Int, area: Int, peak: Int) {
        self.x = x
        self.y = y
        self.area = area
        self.peak = peak
    }
}

/// Echo: returns its input unchanged. The worker's handler never decodes it, which makes it
/// the workload for measuring Sky itself.
public struct EchoTask: SkyTask, Hashable {
    public static let service = "sky.echo"
    public typealias Result = EchoTask

    public var message: String

    public init(message: String) {
        self.message = message
    }
}

/// Sleep: holds a worker slot for the given time without using CPU, then returns it. For
/// failure drills (a task a worker is holding when it dies) and for demos of queueing.
public struct SleepTask: SkyTask, Hashable {
    public static let service = "sky.sleep"
    public typealias Result = SleepTask

    public var milliseconds: Int
    /// Makes otherwise equal sleeps distinct (and lets a test tell its tasks apart).
    public var tag: Int

    public init(milliseconds: Int, tag: Int = 0) {
        self.milliseconds = milliseconds
        self.tag = tag
    }
}

/// Flaky: fails every N-th call on a worker (N set on the worker, `--flaky-every`), like an
/// unreliable downstream API; otherwise returns its input. For retry demos and error tests.
public struct FlakyTask: SkyTask, Hashable {
    public static let service = "sky.flaky"
    public typealias Result = FlakyTask

    public var value: Int

    public init(value: Int) {
        self.value = value
    }
}

/// The error `sky.flaky` throws on its failing calls.
public struct FlakyFailure: Error, CustomStringConvertible {
    public let call: Int
    public let every: Int

    public init(call: Int, every: Int) {
        self.call = call
        self.every = every
    }

    public var description: String {
        "simulated failure on call \(call) (this worker fails every \(every)th sky.flaky call)"
    }
}
