import ArgumentParser
import Sky
import SkyCLISupport
import SkyProtocol

struct FlowsCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "flows",
        abstract: "Shows a flow's steps as a tree (docs/jobs.md, \"Flows\"); a flow is cancelled as a job.",
        subcommands: [Show.self])

    struct Show: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Shows a flow: its state, and each step's state, attempts and job, in the flow's shape.")

        @Argument(help: "The flow's id (what submitting it returned).")
        var id: String

        @OptionGroup var options: BrokerOptions

        func validate() throws { _ = try jobID(id) }

        func run() async throws {
            let id = try jobID(id)
            await options.run("skyctl") { client in
                let status: FlowStatus
                do {
                    status = try await client.flowStatus(id)
                } catch SkyError.invalidTask(let message) {
                    throw CommandFailure(message)
                }
                guard status.state != .unknown else {
                    throw CommandFailure(
                        "no flow \(id) at this broker: never submitted there, or its retention passed")
                }
                print("flow \(id)  \(status.state)  (on failure: \(status.onFailure.name))")
                for line in Self.lines(status.root, prefix: "", last: true, top: true) { print(line) }
            }
        }

        /// The tree, a line a node: `chain`, `group (50)`, `batch (3)`, or a step's number,
        /// service, state, attempts and job.
        static func lines(_ node: FlowStatus.Node, prefix: String, last: Bool, top: Bool = false) -> [String] {
            let branch = top ? "" : (last ? "└─ " : "├─ ")
            let inner = top ? "" : prefix + (last ? "   " : "│  ")
            let head: String
            let parts: [FlowStatus.Node]
            switch node {
            case .step(let step):
                var text = "step \(step.index)  \(step.service)  \(step.state)"
                if step.attempt > 0 { text += " (attempt \(step.attempt))" }
                if let job = step.job { text += "  job \(job)" }
                return [prefix + branch + text]
            case .chain(let nodes):
                head = "chain"
                parts = nodes
            case .group(let nodes):
                head = "group (\(nodes.count))"
                parts = nodes
            case .batch(let nodes):
                head = "batch (\(nodes.count))"
                parts = nodes
            }
            var lines = [prefix + branch + head]
            for (offset, part) in parts.enumerated() {
                lines += Self.lines(part, prefix: inner, last: offset == parts.count - 1)
            }
            return lines
        }
    }
}
