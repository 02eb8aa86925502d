import SkyProtocol
import Testing

@testable import Sky

/// ``ScanOptions`` keeps its values in a box shared by its copies (a call's options are passed
/// many times and changed rarely): it must still behave as a plain value.
@Suite("ScanOptions: a value, whatever it shares")
struct ScanOptionsTests {
    @Test func aChangedCopyLeavesTheOriginalAlone() {
        let original = ScanOptions(timeout: .seconds(5), concurrencyKey: "tenant-1")
        var copy = original
        #expect(copy == original)
        copy.timeout = .seconds(9)
        copy.retry.maxAttempts = 7
        copy.concurrencyKey = nil
        copy.keptAs = JobID(bytes: Array(1...16))!
        #expect(original.timeout == .seconds(5) && original.concurrencyKey == "tenant-1" && original.keptAs == nil)
        #expect(original.retry == ScanOptions.default.retry)
        #expect(copy.timeout == .seconds(9) && copy.retry.maxAttempts == 7 && copy.concurrencyKey == nil)
        #expect(copy.keptAs == JobID(bytes: Array(1...16))!)
        #expect(copy != original)
    }

    /// Equal values are equal whether or not they share a box; one field apart, they are not.
    @Test func equalityIsByValue() {
        var built = ScanOptions(timeout: .seconds(1))
        built.timeout = .seconds(30)
        #expect(built == ScanOptions())
        #expect(ScanOptions.default == ScanOptions())
        let fields: [(inout ScanOptions) -> Void] = [
            { $0.timeout = nil }, { $0.deadline = .seconds(2) }, { $0.retry.maxAttempts += 1 },
            { $0.coalesce.toggle() }, { $0.priority = .urgent }, { $0.keepIfAbandoned.toggle() },
            { $0.concurrencyKey = "k" }, { $0.concurrencyLimit = 3 },
            { $0.keptAs = JobID(bytes: Array(repeating: 9, count: 16))! },
        ]
        for change in fields {
            var other = ScanOptions()
            change(&other)
            #expect(other != ScanOptions())
        }
    }

    /// Printed as its values (a log line or a failed expectation shows them), not as its box.
    @Test func printedAsItsValues() {
        let text = String(describing: ScanOptions(timeout: .seconds(4), concurrencyKey: "tenant-1"))
        #expect(text.hasPrefix("ScanOptions(timeout: Optional(4.0 seconds), deadline: "))
        #expect(text.contains("concurrencyKey: Optional(\"tenant-1\")") && !text.contains("Box"))
    }
}
