import Testing

@testable import SkyWorkloads

@Suite("sky.flaky's failure message")
struct FlakyFailureTests {
    @Test(arguments: [
        (1, "every"), (2, "every 2nd"), (3, "every 3rd"), (4, "every 4th"), (11, "every 11th"), (12, "every 12th"),
        (13, "every 13th"), (21, "every 21st"), (22, "every 22nd"), (101, "every 101st"), (111, "every 111th"),
    ])
    func namesWhichCallsFailInPlainEnglish(every: Int, words: String) {
        #expect(FlakyFailure.which(every) == words)
        #expect(FlakyFailure(call: 3, every: every).description.contains("fails \(words) sky.flaky call"))
    }
}
