import SkyProtocol

/// Bulk actions on durable jobs: count, retry, cancel or delete the jobs a filter selects, in
/// one call (docs/jobs.md, "Bulk actions and failed jobs"). For operators' tools.
extension SkyClient {
    /// Takes `kind` on every job `filter` selects (the oldest 100,000; run it again for the
    /// rest), or counts them (`.count`, a dry run).
    /// - Parameters:
    ///   - kind: retry (each failed or cancelled job, once), cancel (each unfinished one),
    ///     delete (each ended one), or count.
    ///   - filter: which jobs: by state, service, submit time and error type.
    ///   - all: needed to act (not to count) with a filter that selects every job.
    /// - Returns: how many jobs matched, how many were acted on, how many were left beyond the
    ///   bound, and the matched jobs' error types with their counts.
    /// - Throws: ``SkyError/invalidTask(_:)`` for a filter the broker refuses (no filter
    ///   without `all`, a name no service can have) or a broker without bulk actions;
    ///   ``SkyError/overloaded(_:)`` while another bulk action runs;
    ///   ``SkyError/journalUnavailable(_:)`` without a journal.
    public nonisolated func bulk(_ kind: BulkAction.Kind, _ filter: JobFilter, all: Bool = false) async throws
        -> BulkOutcome
    {
        let reply = try await operatorCommand(
            BrokerService.jobBulk, service: filter.service, body: BulkAction(kind, filter: filter, all: all).encode(),
            feature: \.actsInBulk, featureName: BrokerFeatures.bulkActionsFeature, lacking: "act on jobs in bulk")
        do {
            return try BulkOutcome(decoding: reply)
        } catch {
            throw SkyError.internalError("the broker's answer to a bulk \(kind) is malformed: \(error)")
        }
    }
}
