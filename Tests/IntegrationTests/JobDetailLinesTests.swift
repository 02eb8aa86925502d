import Sky
import Testing

@testable import skyctl

/// `skyctl jobs show`'s lines from a job's details, without a broker.
@Suite("skyctl: a job's details, a fact a line")
struct JobDetailLinesTests {
    /// Work lost with a worker or a broker runs again beyond the retry policy's attempts: a
    /// kept call (one attempt) run again after a broker restart read "attempts 2 of 1".
    @Test func attemptsBeyondThePolicySayWhy() {
        var details = JobDetails(id: "0", state: "succeeded")
        details.attempt = 3
        details.maxAttempts = 3
        #expect(JobDetailLines.lines(details) == ["  attempts    3 of 3"])
        details.attempt = 2
        details.maxAttempts = 1
        #expect(
            JobDetailLines.lines(details) == [
                "  attempts    2 (its retry policy allows 1; work lost with a worker or a broker runs again)"
            ])
        details.maxAttempts = nil
        #expect(JobDetailLines.lines(details) == ["  attempts    2"])
    }

    /// A bulk action by an error type without its module matched nothing and said no more: the
    /// type of a thrown error carries its module (`Worker.ResizeError`).
    @Test func anErrorTypeWithoutItsModuleGetsAHint() {
        #expect(JobsCommand.Bulk.typeHint("ResizeError")?.contains("MyWorker.ResizeError") == true)
        #expect(JobsCommand.Bulk.typeHint("Worker.ResizeError") == nil)
        #expect(JobsCommand.Bulk.typeHint("deadlineExceeded") == nil, "the broker's own types have no module")
        #expect(JobsCommand.Bulk.typeHint(nil) == nil)
    }
}
