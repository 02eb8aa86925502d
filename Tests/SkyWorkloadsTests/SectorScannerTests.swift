import Testing

@testable import SkyWorkloads

@Suite("sky.scan workload")
struct SectorScannerTests {
    @Test func theSameSectorGivesTheSameReport() throws {
        let a = try SectorScanner.scan(ScanTask(sector: 17, size: 128))
        let b = try SectorScanner.scan(ScanTask(sector: 17, size: 128))
        #expect(a == b)
        #expect(!a.blobs.isEmpty)
    }

    @Test func differentSectorsDiffer() throws {
        let reports = try (0..<20).map { try SectorScanner.scan(ScanTask(sector: $0, size: 96)) }
        #expect(Set(reports.map(\.blobs)).count == 20)
    }

    /// Pins the algorithm: a change to rendering or detection changes these figures, and every
    /// deployed worker would then disagree with older clients' local checks.
    @Test func goldenReport() throws {
        let report = try SectorScanner.scan(ScanTask(sector: 42, size: 64))
        #expect(report.size == 64)
        #expect(report.blobs.count == Self.golden.blobs)
        #expect(report.brightPixels == Self.golden.bright)
    }

    static let golden = (blobs: 5, bright: 30)

    @Test func blobsAreOrderedAndInsideTheImage() throws {
        let report = try SectorScanner.scan(ScanTask(sector: 3, size: 200))
        for blob in report.blobs {
            #expect((0..<200).contains(blob.x))
            #expect((0..<200).contains(blob.y))
            #expect(blob.area >= SectorScanner.minimumArea)
            #expect(blob.peak >= Int(SectorScanner.threshold))
        }
        #expect(report.blobs == report.blobs.sorted { ($0.y, $0.x, $0.area) < ($1.y, $1.x, $1.area) })
        #expect(report.brightPixels >= report.blobs.reduce(0) { $0 + $1.area })
    }

    /// Every Int is a sector: the extremes give well-formed reports, the same on every run, and
    /// different from their neighbours.
    @Test func negativeAndHugeSectorNumbersWork() throws {
        for sector in [-1, Int.min, Int.max] {
            let report = try SectorScanner.scan(ScanTask(sector: sector, size: 64))
            #expect(report.sector == sector)
            #expect(report.size == 64)
            #expect(report == (try SectorScanner.scan(ScanTask(sector: sector, size: 64))))
            #expect(report.blobs.allSatisfy { (0..<64).contains($0.x) && (0..<64).contains($0.y) })
        }
        let neighbours = try [-1, 0, Int.max - 1, Int.max].map {
            try SectorScanner.scan(ScanTask(sector: $0, size: 64))
        }
        #expect(neighbours[0].blobs != neighbours[1].blobs)
        #expect(neighbours[2].blobs != neighbours[3].blobs)
    }

    @Test func sizesOutsideTheRangeAreRejected() {
        #expect(throws: SectorScanner.InvalidTask.self) { try SectorScanner.scan(ScanTask(sector: 1, size: 8)) }
        #expect(throws: SectorScanner.InvalidTask.self) { try SectorScanner.scan(ScanTask(sector: 1, size: 100_000)) }
    }
}
