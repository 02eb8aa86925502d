import ArgumentParser
import Foundation
import Sky
import SkyCLISupport
import SkyProtocol

extension JobsCommand {
    /// The filter flags `bulk` and `failed` share.
    struct FilterOptions: ParsableArguments {
        @Option(help: "Only jobs in this state: queued (scheduled ones too), running, succeeded, failed, cancelled.")
        var state: String?

        @Option(help: "Only jobs of this service.")
        var service: String?

        // Unconditional: `-5m` is a value (refused as such), not a flag.
        @Option(
            parsing: .unconditional,
            help: ArgumentHelp(
                "Only jobs submitted at or after this time: ISO 8601 (2026-11-29T10:00:00Z), or how long ago (90s, 30m, 2h, 7d).",
                valueName: "time"))
        var submittedAfter: String?

        @Option(
            parsing: .unconditional,
            help: ArgumentHelp("Only jobs submitted before this time (as --submitted-after).", valueName: "time"))
        var submittedBefore: String?

        @Option(
            help:
                "Only failed or cancelled jobs whose error has this type: as skyctl jobs failed lists them (a thrown error's type name, deadlineExceeded, workerLost, cancelled, ...)."
        )
        var errorType: String?

        func validate() throws {
            if let state, JobState(name: state) == nil || state == "unknown" || state == "scheduled" {
                throw ValidationError(
                    "--state \"\(state)\" is not a state a bulk action selects by; use queued, running, succeeded, failed or cancelled"
                )
            }
            if let service, let problem = WireFormat.nameProblem(service, what: "--service") {
                throw ValidationError(problem)
            }
            _ = try Self.time(submittedAfter, "--submitted-after", now: Date())
            _ = try Self.time(submittedBefore, "--submitted-before", now: Date())
            if let errorType, errorType.isEmpty || errorType.utf8.count > 255 {
                throw ValidationError("--error-type takes 1 to 255 bytes")
            }
        }

        func filter(now: Date = Date()) throws -> JobFilter {
            JobFilter(
                state: state.flatMap(JobState.init(name:)), service: service,
                submittedAfter: try Self.time(submittedAfter, "--submitted-after", now: now),
                submittedBefore: try Self.time(submittedBefore, "--submitted-before", now: now), errorType: errorType)
        }

        /// A time flag's value in milliseconds since 1970: an ISO 8601 date-time, or a span
        /// back from `now` (a number and s, m, h or d).
        static func time(_ text: String?, _ flag: String, now: Date) throws -> Int64? {
            guard let text else { return nil }
            let units: [Character: Double] = ["s": 1, "m": 60, "h": 3600, "d": 86_400]
            if let unit = text.last, let seconds = units[unit], let count = Double(text.dropLast()), count >= 0,
                count.isFinite, count * seconds < 3_153_600_000
            {
                return Int64((now.timeIntervalSince1970 - count * seconds) * 1000)
            }
            let formatter = ISO8601DateFormatter()
            for options in [
                ISO8601DateFormatter.Options.withInternetDateTime, [.withInternetDateTime, .withFractionalSeconds],
            ] {
                formatter.formatOptions = options
                // Years 1 to 9999 (beyond, the formatter's arithmetic wraps).
                if let date = formatter.date(from: text),
                    (-62_135_596_800...253_402_300_799).contains(date.timeIntervalSince1970)
                {
                    return Int64((date.timeIntervalSince1970 * 1000).rounded(.down))
                }
            }
            throw ValidationError(
                "\(flag) \(text) is not a time; give an ISO 8601 date-time with its zone (2026-11-29T10:00:00Z) or how long ago (90s, 30m, 2h, 7d)"
            )
        }
    }

    struct Bulk: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Retries, cancels or deletes every job a filter selects (the oldest 100,000), or counts them.",
            discussion: """
                retry runs each failed or cancelled job again as a new job (once: a second bulk retry finds the \
                job the first made); cancel cancels each queued or running job; delete deletes each ended job \
                (its id is then unknown). --dry-run counts what the action would select, and changes nothing. \
                An action with no filter is refused without --all.
                """)

        @Argument(help: "What to do: retry, cancel, delete, or count.")
        var action: String

        @OptionGroup var filter: FilterOptions

        @Flag(help: "Only count the jobs the filter selects, by error type; change nothing.")
        var dryRun = false

        @Flag(help: "Act although no filter is given: on every job.")
        var all = false

        @OptionGroup var options: BrokerOptions

        func validate() throws {
            guard let kind = BulkAction.Kind.allCases.first(where: { $0.description == action }) else {
                throw ValidationError("\(action) is not a bulk action; use retry, cancel, delete or count")
            }
            if kind != .count, !dryRun, !all, try filter.filter().selectsAll {
                throw ValidationError(
                    "skyctl jobs bulk \(action) with no filter acts on every job; give --state, --service, --submitted-after, --submitted-before or --error-type, or --all to mean every job"
                )
            }
        }

        func run() async throws {
            let kind = BulkAction.Kind.allCases.first { $0.description == action } ?? .count
            let jobFilter = try filter.filter()
            let counting = kind == .count || dryRun
            // An attempt that times out asks again for the same answer (a large retry takes a while).
            await options.run("skyctl", retry: RetryPolicy(maxAttempts: 20, retryOn: [.timeout])) { client in
                let outcome: BulkOutcome
                do {
                    outcome = try await client.bulk(counting ? .count : kind, jobFilter, all: all)
                } catch SkyError.overloaded(let message) {
                    // One bulk action at a time: "add workers" would not help.
                    throw CommandFailure(message)
                }
                Self.print(outcome, kind: kind, dryRun: counting)
                if outcome.matched == 0, let hint = Self.typeHint(jobFilter.errorType) { Swift.print(hint) }
            }
        }

        static func print(_ outcome: BulkOutcome, kind: BulkAction.Kind, dryRun: Bool) {
            let matched = outcome.matched
            if dryRun {
                let what = kind == .count ? "" : " (a \(kind) would select them)"
                Swift.print("\(matched) matching jobs\(what)")
            } else {
                let done =
                    ["retry": "retried", "cancel": "cancelled", "delete": "deleted"][kind.description] ?? "\(kind)"
                Swift.print("\(done) \(outcome.acted) of \(matched) matching jobs")
                if outcome.retriedBefore > 0 {
                    Swift.print(
                        "\(outcome.retriedBefore) of them had been retried before (by a bulk retry, or a first jobs retry); those retries stand"
                    )
                }
                if outcome.acted + outcome.retriedBefore < outcome.matched {
                    let applies =
                        [
                            "retry": "failed or cancelled jobs (a flow is not retried: submit it again)",
                            "cancel": "unfinished jobs", "delete": "ended jobs",
                        ][kind.description] ?? "jobs"
                    Swift.print("the others were not \(applies)")
                }
            }
            if outcome.left > 0 {
                Swift.print(
                    "\(outcome.left) more jobs match beyond the first 100,000: run it again for them")
            }
            printTypes(outcome.errorTypes)
        }

        /// Why `--error-type` may have matched nothing: a thrown error's type is named with its
        /// module (`Worker.ResizeError`), which a newcomer leaves out.
        static func typeHint(_ errorType: String?) -> String? {
            guard let errorType, !errorType.contains("."),
                !ReplyStatus.allCases.map(\.description).contains(errorType)
            else { return nil }
            return
                "no job's error has the type \(errorType): a thrown error's type carries its module (as MyWorker.\(errorType)); skyctl jobs failed lists the types"
        }

        static func printTypes(_ types: [(type: String, count: Int)]) {
            guard !types.isEmpty else { return }
            let width = max(10, types.map(\.type.count).max() ?? 0)
            Swift.print("ERROR TYPE" + String(repeating: " ", count: width - 10) + "  JOBS")
            for (type, count) in types {
                Swift.print(type + String(repeating: " ", count: width - type.count) + "  \(count)")
            }
        }
    }

    struct Failed: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "The failed jobs (the dead letters): how many of each error type, then the newest.",
            discussion: """
                A failed job is kept for the broker's --failed-retention (7 days by default) or its own retention \
                if longer; skyctl jobs bulk retry --state failed runs them again, skyctl jobs bulk delete --state \
                failed deletes them.
                """)

        @Option(help: "Only failed jobs of this service.")
        var service: String?

        @Option(
            parsing: .unconditional,
            help: "List at most this many of the newest (0: none; the broker lists at most 1000).")
        var limit = 20

        @OptionGroup var options: BrokerOptions

        func validate() throws {
            if let service, let problem = WireFormat.nameProblem(service, what: "--service") {
                throw ValidationError(problem)
            }
            // Above 1,000 the listing is cut, as skyctl jobs list cuts it.
            try FlagCheck.integer(limit, "--limit", in: 0...Int.max)
        }

        func run() async throws {
            await options.run("skyctl") { client in
                let outcome = try await client.bulk(.count, JobFilter(state: .failed, service: service))
                if outcome.matched == 0 {
                    Swift.print("no failed jobs")
                    return
                }
                let more = outcome.left > 0 ? " (and \(outcome.left) more)" : ""
                Swift.print("\(outcome.matched) failed jobs\(more)")
                Bulk.printTypes(outcome.errorTypes)
                guard limit > 0 else { return }
                let (jobs, _) = try await client.jobPage(
                    state: .failed, service: service, limit: min(limit, Int(JobQuery.maxLimit)))
                JobsCommand.printTable(jobs)
            }
        }
    }
}
