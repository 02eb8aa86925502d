import ArgumentParser
import Foundation
import SkyCLISupport
import SkyWorkerCLI
import SkyWorkloads

@main
struct SkyWorkerCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "skyworker",
        abstract: "Runs Sky tasks for a broker: the built-in workloads, up to --capacity at once.",
        discussion: """
            Connects to the broker's workers endpoint and serves the chosen built-in workloads
            (\(BuiltInWorkloads.all.joined(separator: ", "))). SIGTERM or SIGINT finishes the
            tasks it holds (for at most --drain-grace seconds; the broker gets no new tasks for it
            meanwhile and runs unfinished ones elsewhere), disconnects, and exits 0. A second signal
            exits at once. A worker of your own gets these flags from WorkerOptions (the
            SkyWorkerCLI product).
            """)

    @OptionGroup var worker: WorkerOptions

    @Option(help: "Comma-separated built-in workloads to serve.")
    var workloads = BuiltInWorkloads.all.joined(separator: ",")

    @Option(parsing: .unconditional, help: "sky.flaky fails every this many calls.")
    var flakyEvery = 3

    @Flag(
        help:
            "Serve sky.echo with a synchronous handler that the worker's I/O thread runs inline (ScanSystem.registerRawInline), with no task a call: what a handler of a few microseconds can do (skybench --worker-handlers inline compares it)."
    )
    var inlineEcho = false

    func validate() throws {
        try FlagCheck.integer(flakyEvery, "--flaky-every", in: 1...1_000_000_000)
        // Named here, at parse time: an empty list ended in "register at least one handler",
        // advice for the library.
        guard !workloadNames.isEmpty else {
            throw ValidationError(
                "--workloads names no workload; choose from \(BuiltInWorkloads.all.joined(separator: ", "))")
        }
        if let unknown = workloadNames.first(where: { !BuiltInWorkloads.all.contains($0) }) {
            throw ValidationError("--workloads: \(BuiltInWorkloads.UnknownWorkload(name: unknown))")
        }
        if inlineEcho && !workloadNames.contains(EchoTask.service) {
            throw ValidationError(
                "--inline-echo changes how \(EchoTask.service) is served, and --workloads does not name it: add \(EchoTask.service) to --workloads, or leave the flag out"
            )
        }
    }

    /// The workloads `--workloads` names, trimmed, without empty entries, each once (a name
    /// given twice would register its service twice, which a worker refuses).
    private var workloadNames: [String] {
        var seen: Set<String> = []
        return workloads.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }.filter {
            !$0.isEmpty && seen.insert($0).inserted
        }
    }

    func run() async throws {
        let (names, flakyEvery, inlineEcho) = (workloadNames, flakyEvery, inlineEcho)
        try await worker.run(program: "skyworker") { system in
            try await BuiltInWorkloads.register(names, on: system, flakyEvery: flakyEvery, inlineEcho: inlineEcho)
        }
    }
}
