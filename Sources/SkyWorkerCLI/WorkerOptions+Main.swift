import ArgumentParser
import SkyCLISupport
import SkyWorkerKit

extension WorkerOptions {
    /// A whole worker process with `skyworker`'s flags and nothing else: parses the command
    /// line (`--help` lists the flags; a bad flag prints the usage and exits 64), then
    /// ``run(program:register:)``. A worker with flags of its own declares a command with
    /// `@OptionGroup var worker: WorkerOptions` instead.
    ///
    /// ```swift
    /// @main
    /// struct Worker {
    ///     static func main() async {
    ///         await WorkerOptions.main { system in
    ///             await system.register(Thumbnail.self) { task in try await render(task) }
    ///         }
    ///     }
    /// }
    /// ```
    public static func main(
        program: String = WorkerOptions.programName, register: @Sendable (ScanSystem) async throws -> Void
    ) async {
        let options: WorkerOptions
        do {
            var command = try WorkerMainCommand.parseAsRoot()
            guard let worker = command as? WorkerMainCommand else {
                // ArgumentParser's own command for `help`: it prints the help.
                try command.run()
                WorkerMainCommand.exit()
            }
            options = worker.worker
        } catch {
            WorkerMainCommand.exit(withError: error)
        }
        do {
            try await options.run(program: program, register: register)
        } catch {
            ProcessSetup.fail(program, "\(error)")
        }
    }
}

/// The command ``WorkerOptions/main(program:register:)`` parses: named after the executable,
/// so that its help and usage lines name it.
struct WorkerMainCommand: ParsableCommand {
    static var configuration: CommandConfiguration {
        CommandConfiguration(
            commandName: WorkerOptions.programName,
            abstract: "A Sky worker: serves its handlers for a broker, up to --capacity tasks at once.",
            discussion: """
                SIGTERM or SIGINT finishes the tasks it holds (for at most --drain-grace seconds; \
                the broker gets no new tasks for it meanwhile and runs unfinished ones elsewhere), \
                disconnects, and exits 0. A second signal exits at once.
                """)
    }

    @OptionGroup var worker: WorkerOptions
}
