import ArgumentParser
import Sky
import SkyProtocol

struct ServicesCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "services",
        abstract: "Lists, pauses and resumes services (docs/operations.md, \"Pausing a service\").",
        subcommands: [List.self, Pause.self, Resume.self])

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
