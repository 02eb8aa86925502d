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
