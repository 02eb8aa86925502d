import SkyProtocol
import Testing

@testable import Sky

/// What an error says is what a newcomer acts on: advice that fits the cause, one sentence
/// end each.
@Suite("SkyError: what each says")
struct SkyErrorTextTests {
    /// A decoding error's text ends with a period of its own: it was followed by a second one.
    @Test func aMessageEndingInAPeriodGetsNoSecond() {
        let text = SkyError.invalidPayload(
            "the payload is not a valid sky.scan task: Key 'size' not found in container."
        )
        .description
        #expect(!text.contains(".."), "\(text)")
        #expect(text.contains("Check the payload against the task type"), "\(text)")
    }

    /// A broker without a journal takes no jobs, ever: advice about its journal coming back and
    /// about idempotency keys misled.
    @Test func aBrokerWithoutAJournalIsNotAJournalThatFailed() {
        let text = SkyError.journalUnavailable(
            "this broker keeps no journal, so it takes no jobs: start skybroker with --state-dir (scan works without one)"
        ).description
        #expect(text.hasPrefix("the broker takes no jobs: this broker keeps no journal"), "\(text)")
        #expect(!text.contains("until it is back") && !text.contains("idempotency"), "\(text)")
    }

    /// A handler's failure may pass (a service down for a moment): the advice names the retry
    /// policy that retries them, instead of saying retrying never helps.
    @Test func aHandlersFailureNamesTheRetryThatTakesIt() {
        let text = SkyError.remote(type: "MyApp.Unavailable", message: "the mail server is down").description
        #expect(text.contains("RetryPolicy.retryingHandlerErrors()") && !text.contains("will not help"), "\(text)")
    }

    /// A worker may answer status 4 itself (it already runs its capacity): that reached the
    /// caller as "the broker is overloaded", blaming a broker with room to spare.
    @Test func anOverloadedWorkerIsNotCalledTheBroker() {
        let reply = TaskReply.failure(
            RequestID(high: 0, low: 1), .overloaded, type: nil,
            message: "worker w-1 already runs its capacity of 4 tasks")
        let text = SkyError(failure: reply, service: "sky.echo").description
        #expect(!text.contains("the broker is overloaded"), "\(text)")
        #expect(text.hasPrefix("refused as overloaded: worker w-1 already runs its capacity of 4 tasks."), "\(text)")
    }

    /// A task that ran past its timeout on a reachable broker was told to "check that
    /// skybroker runs": the advice names the broker only when the deadline passed without a
    /// connection.
    @Test func aTimeoutNamesTheBrokerOnlyWithoutAConnection() {
        let ran = SkyError(
            failure: TaskReply.failure(
                RequestID(high: 0, low: 1), .deadlineExceeded, type: nil, message: "the job ran past its timeout of 1 s"
            ),
            service: "sky.sleep"
        ).description
        #expect(!ran.contains("skybroker") && ran.contains("Raise the timeout"), "\(ran)")
        let offline = SkyError.timeout(
            "the call's deadline of 2 s passed \(RequestTable.noConnection) for 2 s (nothing listens) (attempt 1)"
        ).description
        #expect(offline.contains("Check that skybroker runs") && !offline.contains("add workers"), "\(offline)")
    }
}
