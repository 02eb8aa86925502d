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
                        item.service, item.limit.rateText, "\(item.burst)", item.source, "\(item.started)",
                        "\(item.refused)", item.throttled ? "waiting for a token" : "",
                    ]
                }
                ScheduleText.table(["SERVICE", "RATE", "BURST", "FROM", "STARTED", "REFUSED", "NOW"], rows)
            }
        }
    }

    struct SetLimit: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "set",
            abstract: "Limits a service's starts (calls and jobs together), across broker restarts.",
            discussion: """
                Example: skyctl limits set images.resize --rate 100/s --burst 20
                A rate is a count per s, m, h or d (100/s, 30/m, 2/h, 1/d). The burst is how many may
                start at once after a quiet spell; by default a second's worth (at least 1). A limit
                set here replaces the broker's --rate-limit for the service until removed.
                """)

        @OptionGroup var service: ServiceNameArguments

        // Unconditional: `--rate -1` is a value (refused as such), not a flag.
        @Option(parsing: .unconditional, help: "Starts per unit: 100/s, 30/m, 2/h, 1/d.")
        var rate: String

        @Option(parsing: .unconditional, help: "Starts at once after a quiet spell (default: a second's worth).")
        var burst: Int?

        func validate() throws {
            _ = try limit()
        }

        func limit() throws -> RateLimit {
            guard let perSecond = RateLimit.parseRate(rate) else {
                throw ValidationError("--rate \(rate) is not a rate: give a count per s, m, h or d, as 100/s or 30/m")
            }
            let burst = burst ?? RateLimit.defaultBurst(perSecond)
            let limit = RateLimit(perSecond: perSecond, burst: burst)
            if let problem = limit.problem { throw ValidationError("--rate \(rate): \(problem)") }
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
                print(
                    changed
                        ? "limited \(name) to \(limit.rateText), burst \(limit.burst)"
                        : "\(name) had this limit already")
            }
        }
    }

    struct Remove: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Removes the limit set for a service (the broker's --rate-limit for it, if any, applies again).")

        @OptionGroup var service: ServiceNameArguments

        func run() async throws {
            let name = service.name
            await service.options.run("skyctl") { client in
                let removed: Bool
                do {
                    removed = try await client.removeRateLimit(for: name)
                } catch SkyError.invalidTask(let message) {
                    throw ScheduleText.refusal(message)
                }
                print(removed ? "removed the limit set for \(name)" : "no limit was set for \(name)")
                if let flag = try await client.rateLimits().first(where: { $0.service == name }) {
                    print("\(name) keeps the broker's --rate-limit: \(flag.limit.rateText), burst \(flag.burst)")
                }
            }
        }
    }
}
