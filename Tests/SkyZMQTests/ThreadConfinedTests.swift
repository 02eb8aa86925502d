import Foundation
import SkyZMQ
import Testing

/// A value one thread owns: the first thread to use it, and no other.
@Suite("Thread-confined values")
struct ThreadConfinedTests {
    @Test func theFirstThreadToUseItKeepsUsingIt() async throws {
        let confined = ThreadConfined([Int](), name: "a test list")
        let count = try await onThread {
            for number in 0..<1000 { confined.withValue { $0.append(number) } }
            return confined.withValue { $0.count }
        }
        #expect(count == 1000)
    }

    /// The race a lock would have hidden is a trap that names the value (in a child process:
    /// the trap ends it).
    @Test func aUseFromAnotherThreadTrapsNamingTheValue() async {
        await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            let confined = ThreadConfined(0, name: "the test's counter")
            confined.withValue { $0 += 1 }
            let done = DispatchSemaphore(value: 0)
            Thread {
                confined.withValue { $0 += 1 }
                done.signal()
            }.start()
            done.wait()
        }.map { result in
            let said = String(decoding: result.standardErrorContent, as: UTF8.self)
            #expect(said.contains("the test's counter belongs to one thread and was used from another"), "\(said)")
        }
    }
}
