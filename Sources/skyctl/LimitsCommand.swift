import ArgumentParser
import Sky
import SkyProtocol

struct LimitsCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "limits",
        abstract: "Lists, sets and removes services' rate limits (docs/operations.md, \"Rate limits\").",
        subcommands: [List.self, SetLimit.self, Remove.self])

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Lists the limited services: their limit, where it comes from, and what it did.")

        @OptionGroup var options: BrokerOptions

        func run() async throws {
            await options.run("skyctl") { client in
                let limits = try await client.rateLimits()
                if limits.isEmpty {
                    print("no rate limits")
                    return
                }
                let rows = limits.map { item in
                    [
                        item.service, item.limit.rateText, "\(item.burst)", Self.scope(item), item.source,
                        "\(item.started)", "\(item.refused)", Self.now(item),
                    ]
                }
                ScheduleText.table(["SERVICE", "RATE", "BURST", "PER", "FROM", "STARTED", "REFUSED", "NOW"], rows)
            }
        }

        /// What a limit is on: the service, or each key (and where the key comes from).
        static func scope(_ item: RateLimitState) -> String {
            guard let key = item.key else { return "service" }
            return key.field.map { "key (field \($0))" } ?? "key"
        }

        static func now(_ item: RateLimitState) -> String {
            guard item.throttled else { return "" }
            guard item.key != nil else { return "waiting for a token" }
            let waiting = item.keysWaiting ?? 0
            return "\(waiting) key\(waiting == 1 ? "" : "s") waiting for a token"
        }
    }

    struct SetLimit: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "set",
            abstract: "Limits a service's starts (calls and jobs together), across broker restarts.",
            discussion: """
                Example: skyctl limits set images.resize --rate 100/s --burst 20
                         skyctl limits set geocode --key-field customer --rate 10/s
                A rate is a count per s, m, h or d (100/s, 30/m, 2/h, 1/d). The burst is how many may
                start at once after a quiet spell; by default a second's worth (at least 1). With
                --per-key or --key-field, each key of the service's work has a limit of its own: its
                concurrency key, or for work without one the payload's top-level field (work whose
                payload lacks it is refused). A service may have a limit of each kind. A limit set
                here replaces the broker's --rate-limit (or --key-rate-limit) until removed.
                """)

        @OptionGroup var service: ServiceNameArguments

        // Unconditional: `--rate -1` is a value (refused as such), not a flag.
        @Option(parsing: .unconditional, help: "Starts per unit: 100/s, 30/m, 2/h, 1/d.")
        var rate: String

        @Option(parsing: .unconditional, help: "Starts at once after a quiet spell (default: a second's worth).")
        var burst: Int?

        @Flag(help: "A limit for each key of the service's work (its concurrency key), not for the service.")
        var perKey = false

        @Option(
            parsing: .unconditional,
            help: "Per key, the key of work without one being this top-level field of its JSON payload.")
        var keyField: String?

        func validate() throws {
            _ = try limit()
        }

        func limit() throws -> RateLimit {
            guard let perSecond = RateLimit.parseRate(rate) else {
                throw ValidationError("--rate \(rate) is not a rate: give a count per s, m, h or d, as 100/s or 30/m")
            }
            let burst = burst ?? RateLimit.defaultBurst(perSecond)
            let key = perKey || keyField != nil ? KeyScope(field: keyField) : nil
            if let problem = key?.problem { throw ValidationError("--key-field: \(problem)") }
            let limit = RateLimit(perSecond: perSecond, burst: burst, key: key)
            if let problem = limit.problem {
                let given = "--rate \(rate)" + (self.burst.map { " --burst \($0)" } ?? "")
                throw ValidationError("\(given): \(problem)")
            }
            return limit
        }

        func run() async throws {
            let limit = try limit()
            let name = service.name
            await service.options.run("skyctl") { client in
                let changed: Bool
                do {
                    changed = try await client.setRateLimit(limit, for: name)
                } catch SkyError.invalidTask(let message) {
                    throw ScheduleText.refusal(message)
                }
                let per = limit.key.map { $0.field.map { " per key (field \($0))" } ?? " per key" } ?? ""
                print(
                    changed
                        ? "limited \(name) to \(limit.rateText)\(per), burst \(limit.burst)"
                        : "\(name) had this limit already")
            }
        }
    }

    struct Remove: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Removes the limit set for a service (the broker's --rate-limit for it, if any, applies again).")

        @OptionGroup var service: ServiceNameArguments

        @Flag(help: "Remove the service's per-key limit, not its limit on the whole service.")
        var perKey = false

        func run() async throws {
            let name = service.name
            let perKey = perKey
            let what = perKey ? "per-key limit" : "limit"
            await service.options.run("skyctl") { client in
                let removed: Bool
                do {
                    removed = try await client.removeRateLimit(for: name, perKey: perKey)
                } catch SkyError.invalidTask(let message) {
                    throw ScheduleText.refusal(message)
                }
                print(removed ? "removed the \(what) set for \(name)" : "no \(what) was set for \(name)")
                if let flag = try await client.rateLimits().first(where: {
                    $0.service == name && $0.limit.isPerKey == perKey
                }) {
                    let field = flag.key?.field.map { " (field \($0))" } ?? ""
                    print(
                        "\(name) keeps the broker's \(perKey ? "--key-rate-limit" : "--rate-limit"): \(flag.limit.rateText)\(field), burst \(flag.burst)"
                    )
                }
            }
        }
    }
}
