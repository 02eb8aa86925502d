import ArgumentParser
import Sky
import SkyProtocol

struct ServicesCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "services",
        abstract:
            "Lists, pauses and resumes services, and shows who fills one's queue (docs/operations.md, \"Pausing a service\").",
        subcommands: [List.self, Pause.self, Resume.self, Keys.self])

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Lists the services the broker knows (served, with work waiting, or paused).")

        @OptionGroup var options: BrokerOptions

        func run() async throws {
            await options.run("skyctl") { client in
                let items = try await client.services()
                if items.isEmpty {
                    print("no services")
                    return
                }
                let rows = items.map { item in
                    [
                        item.name, item.paused ? "paused" : "active", "\(item.workers)", "\(item.queued)",
                        "\(item.jobsQueued)",
                    ]
                }
                ScheduleText.table(["SERVICE", "STATE", "WORKERS", "CALLS WAITING", "JOBS WAITING"], rows)
            }
        }
    }

    struct Keys: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract:
                "Lists a service's concurrency keys with calls or jobs waiting or running under a limit, the most waiting first."
        )

        @OptionGroup var service: ServiceNameArguments

        func run() async throws {
            let name = service.name
            await service.options.run("skyctl") { client in
                let listing: KeyListing
                do {
                    listing = try await client.keys(of: name)
                } catch SkyError.invalidTask(let message) {
                    throw ScheduleText.refusal(message)
                }
                guard !listing.keys.isEmpty else {
                    print("no keyed work waits or runs in \(name)")
                    return
                }
                let rows = listing.keys.map { key in
                    [
                        key.key.isEmpty ? "(no key)" : key.key, "\(key.callsWaiting)", "\(key.callsRunning)",
                        "\(key.jobsWaiting)", "\(key.jobsRunning)",
                    ]
                }
                ScheduleText.table(["KEY", "CALLS WAITING", "CALLS RUNNING", "JOBS WAITING", "JOBS RUNNING"], rows)
                if listing.more > 0 { print("and \(listing.more) more keys") }
            }
        }
    }

    struct Pause: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Pauses a service: nothing of it starts until it is resumed, across broker restarts.")

        @OptionGroup var service: ServiceNameArguments

        func run() async throws { await service.run(true) }
    }

    struct Resume: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Resumes a paused service: its waiting work starts.")

        @OptionGroup var service: ServiceNameArguments

        func run() async throws { await service.run(false) }
    }
}

extension ServiceNameArguments {
    /// Pauses (or resumes) the service, and says what changed.
    func run(_ pause: Bool) async {
        let name = name
        await options.run("skyctl") { client in
            let changed: Bool
            do {
                changed = try await pause ? client.pause(service: name) : client.resume(service: name)
            } catch SkyError.invalidTask(let message) {
                throw ScheduleText.refusal(message)
            }
            switch (pause, changed) {
            case (true, true):
                print(
                    "paused \(name): its waiting calls and jobs wait (calls up to their deadline); what runs finishes"
                )
            case (true, false): print("\(name) was paused already")
            case (false, true): print("resumed \(name): its waiting calls and jobs start")
            case (false, false): print("\(name) was not paused")
            }
            // A typo pauses a service nobody has: say so (it stays paused all the same).
            if pause, let state = try await client.services().first(where: { $0.name == name }),
                state.workers == 0, state.queued == 0, state.jobsQueued == 0
            {
                print(
                    "note: no worker serves \(name) now and nothing of it waits; check the name (skyctl services list)"
                )
            }
        }
    }
}
