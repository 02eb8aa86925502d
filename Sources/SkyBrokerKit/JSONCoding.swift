import Foundation

/// JSON for the broker's own replies (snapshots), with stable key order.
enum JSONCoding {
    static func encode<T: Encodable>(_ value: T) -> [UInt8] {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        return (try? Array(encoder.encode(value))) ?? Array("{}".utf8)
    }
}
