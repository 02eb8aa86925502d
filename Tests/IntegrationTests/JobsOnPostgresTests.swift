import Testing

extension SecondLineSuite {
    /// The job tests that take a store (``IntegrationSuite/JobTests/JobStoreFixture``) again,
    /// with the jobs on a real PostgreSQL server: what a job does must not depend on where it is
    /// kept. On this line because each starts a server and mostly waits.
    @Suite("Durable jobs on PostgreSQL: the job tests again")
    struct JobsOnPostgresTests {
        typealias Jobs = IntegrationSuite.JobTests

        @Test func aJobSubmittedByOneClientIsReadByAnotherAfterTheFirstClosed() async throws {
            try await Jobs.aJobSubmittedByOneClientIsReadByAnotherAfterTheFirstClosed(on: .postgresql)
        }

        @Test func theSameIdempotencyKeyYieldsOneJobAlsoAcrossABrokerRestart() async throws {
            try await Jobs.theSameIdempotencyKeyYieldsOneJobAlsoAcrossABrokerRestart(on: .postgresql)
        }

        @Test func aJobsReaderRidesAGracefulBrokerRestartWithoutWaitingOutItsAttempt() async throws {
            try await Jobs.aJobsReaderRidesAGracefulBrokerRestartWithoutWaitingOutItsAttempt(on: .postgresql)
        }

        @Test func aDelayedJobDoesNotStartBefore3sAlsoWhenTheBrokerRestartsMeanwhile() async throws {
            try await Jobs.aDelayedJobDoesNotStartBefore3sAlsoWhenTheBrokerRestartsMeanwhile(on: .postgresql)
        }

        @Test func cancellingAQueuedAndARunningJobRecordsThemCancelled() async throws {
            try await Jobs.cancellingAQueuedAndARunningJobRecordsThemCancelled(on: .postgresql)
        }

        @Test func aFailingHandlerIsRetriedByTheBrokerWithBackoffThenFailsTyped() async throws {
            try await Jobs.aFailingHandlerIsRetriedByTheBrokerWithBackoffThenFailsTyped(on: .postgresql)
        }

        @Test func aChainRunsItsEndedStepOnceAcrossAKill() async throws {
            try await ThirdLineSuite.FlowRunTests.aChainRunsItsEndedStepOnceAcrossAKill(on: .postgresql)
        }
    }
}
