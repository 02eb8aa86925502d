import SkyProtocol

/// Renders a sector's image and detects its bright blobs. A pure function of the task.
///
/// The image is noise (0...63) plus 8...24 cone-shaped spots of random radius and peak.
/// Detection smooths it with a 5×5 box filter (denoising, as a real pipeline would), thresholds
/// at 128 and labels 4-connected regions of at least 4 pixels.
public enum SectorScanner {
    public static let threshold: UInt8 = 128
    public static let minimumArea = 4

    /// Errors for tasks that cannot be scanned.
    public struct InvalidTask: Error, CustomStringConvertible {
        public let description: String
    }

    public static func scan(_ task: ScanTask) throws -> SectorReport {
        guard ScanTask.sizeRange.contains(task.size) else {
            throw InvalidTask(description: "size \(task.size) is outside \(ScanTask.sizeRange)")
        }
        var image = smooth(render(task), size: task.size)
        return detect(&image, task: task)
    }

    /// The sector's image, row-major, one byte per pixel.
    public static func render(_ task: ScanTask) -> [UInt8] {
        let size = task.size
        var random = SplitMix64(seed: UInt64(bitPattern: Int64(task.sector)) ^ 0x5EC7_0125_CA11_AB1E)
        var image = [UInt8](repeating: 0, count: size * size)
        image.withUnsafeMutableBufferPointer { pixels in
            var index = 0
            while index < pixels.count {
                // One 64-bit draw gives noise for eight pixels.
                var bits = random.next()
                for _ in 0..<8 where index < pixels.count {
                    pixels[index] = UInt8(bits & 63)
                    bits >>= 8
                    index += 1
                }
            }
            let spots = 8 + random.next(below: 17)
            let margin = max(1, size / 32)
            for _ in 0..<spots {
                let radius = max(2, size / 128) + random.next(below: max(1, size / 32))
                let centerX = margin + random.next(below: max(1, size - 2 * margin))
                let centerY = margin + random.next(below: max(1, size - 2 * margin))
                let peak = 160 + random.next(below: 96)
                let radiusSquared = radius * radius
                for y in max(0, centerY - radius)...min(size - 1, centerY + radius) {
                    for x in max(0, centerX - radius)...min(size - 1, centerX + radius) {
                        let dx = x - centerX
                        let dy = y - centerY
                        let distanceSquared = dx * dx + dy * dy
                        guard distanceSquared < radiusSquared else { continue }
                        let add = peak * (radiusSquared - distanceSquared) / radiusSquared
                        let offset = y * size + x
                        pixels[offset] = UInt8(min(255, Int(pixels[offset]) + add))
                    }
                }
            }
        }
        return image
    }

    /// A separable 5×5 box filter with clamped edges, in integers (so it is exact everywhere).
    static func smooth(_ image: [UInt8], size: Int) -> [UInt8] {
        let radius = 2
        let taps = 2 * radius + 1
        var rows = [UInt16](repeating: 0, count: image.count)
        var out = [UInt8](repeating: 0, count: image.count)
        image.withUnsafeBufferPointer { source in
            rows.withUnsafeMutableBufferPointer { rows in
                for y in 0..<size {
                    let base = y * size
                    for x in 0..<size {
                        var sum = 0
                        for dx in -radius...radius { sum += Int(source[base + min(size - 1, max(0, x + dx))]) }
                        rows[base + x] = UInt16(sum)
                    }
                }
                out.withUnsafeMutableBufferPointer { out in
                    for y in 0..<size {
                        for x in 0..<size {
                            var sum = 0
                            for dy in -radius...radius { sum += Int(rows[min(size - 1, max(0, y + dy)) * size + x]) }
                            out[y * size + x] = UInt8(sum / (taps * taps))
                        }
                    }
                }
            }
        }
        return out
    }

    /// Labels bright regions; clears visited pixels in `image`.
    static func detect(_ image: inout [UInt8], task: ScanTask) -> SectorReport {
        let size = task.size
        var blobs: [Blob] = []
        var brightPixels = 0
        var stack: [Int] = []
        image.withUnsafeMutableBufferPointer { pixels in
            for start in 0..<pixels.count where pixels[start] >= threshold {
                var area = 0
                var sumX = 0
                var sumY = 0
                var peak = 0
                stack.append(start)
                peak = Int(pixels[start])
                pixels[start] = 0
                while let offset = stack.popLast() {
                    let x = offset % size
                    let y = offset / size
                    area += 1
                    sumX += x
                    sumY += y
                    if x > 0 { visit(offset - 1) }
                    if x < size - 1 { visit(offset + 1) }
                    if y > 0 { visit(offset - size) }
                    if y < size - 1 { visit(offset + size) }
                }
                brightPixels += area
                if area >= minimumArea {
                    blobs.append(Blob(x: (sumX + area / 2) / area, y: (sumY + area / 2) / area, area: area, peak: peak))
                }

                func visit(_ neighbour: Int) {
                    let value = pixels[neighbour]
                    guard value >= threshold else { return }
                    peak = max(peak, Int(value))
                    pixels[neighbour] = 0
                    stack.append(neighbour)
                }
            }
        }
        blobs.sort { ($0.y, $0.x, $0.area) < ($1.y, $1.x, $1.area) }
        return SectorReport(sector: task.sector, size: size, blobs: blobs, brightPixels: brightPixels)
    }
}
