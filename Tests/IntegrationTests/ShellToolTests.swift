import Foundation
import Sky
import SkyProtocol
import SkyTestSupport
import SkyWorkloads
import Testing

extension ThirdLineSuite {
    /// Work from the shell: `skyctl call` and `skyctl jobs submit` against a real cluster.
    @Suite("skyctl call and jobs submit: work from the shell")
    struct ShellToolTests {
        typealias StateDirectory = IntegrationSuite.JobTests.StateDirectory

        @Test(.timeLimit(.minutes(1)))
        func aCallPrintsItsResultAndASubmitItsJob() async throws {
            let state = StateDirectory()
            let cluster = try await TestCluster.start(extraArguments: state.arguments)
            defer { cluster.killAll() }
            _ = try await cluster.startWorker(name: "w1", extraArguments: ["--workloads", "sky.echo"])
            func skyctl(_ arguments: [String]) async throws -> (status: Int32, out: [String], err: String) {
                let process = try SkyProcess("skyctl", arguments + ["--broker", cluster.clients])
                let status = try await process.waitForExit()
                return (status, process.outputLines, process.errorText)
            }
            let called = try await skyctl(["call", "sky.echo", "--json", #"{"message":"hi"}"#])
            #expect(called.status == 0 && called.out == [#"{"message":"hi"}"#], "\(called)")
            // A standby list whose first endpoint is another kind of server: skyctl tries the
            // next before it gives up (its one try ended at the failover, with the broker up at
            // the second).
            let silent = try SilentListener()
            defer { silent.close() }
            let failover = try SkyProcess(
                "skyctl", ["services", "list", "--broker", "\(silent.endpoint),\(cluster.clients)"])
            #expect(try await failover.waitForExit(timeout: .seconds(30)) == 0, "\(failover.errorText)")
            #expect(failover.errorText.isEmpty && failover.outputLines.contains { $0.contains("sky.echo") })
            // Pointed at the workers port: one line on standard error, skyctl's own (the
            // client's log line said the same just before it).
            let misdirected = try SkyProcess("skyctl", ["services", "list", "--broker", cluster.workers])
            #expect(try await misdirected.waitForExit() == 1)
            let said = misdirected.errorText.split(separator: "\n")
            #expect(said.count == 1 && said.first?.hasPrefix("skyctl: ") == true, "\(misdirected.errorText)")
            let keyedCall = try await skyctl([
                "call", "sky.echo", "--json", #"{"message":"hi"}"#, "--concurrency-key", "c", "--concurrency-limit",
                "1",
            ])
            #expect(keyedCall.status == 0 && keyedCall.out == [#"{"message":"hi"}"#], "\(keyedCall)")
            let limitAlone = try await skyctl(["call", "sky.echo", "--json", "{}", "--concurrency-limit", "1"])
            #expect(limitAlone.status == 64 && limitAlone.err.contains("the calls of a key"), "\(limitAlone)")
            let keys = try await skyctl(["services", "keys", "sky.echo"])
            #expect(keys.status == 0 && keys.out == ["no keyed work waits or runs in sky.echo"], "\(keys)")
            // Standard input, as a pipe gives it.
            let skyctlPath = SkyProcess.binaries.appendingPathComponent("skyctl").path
            let piped = cluster.track(
                try SkyProcess(
                    program: URL(fileURLWithPath: "/bin/bash"),
                    [
                        "-c", #"printf '{"message":"piped"}' | "$0" call sky.echo --json - --broker "$1""#,
                        skyctlPath, cluster.clients,
                    ], name: "echo | skyctl call"))
            #expect(try await piped.waitForExit() == 0 && piped.outputLines == [#"{"message":"piped"}"#])
            let notJSON = try await skyctl(["call", "sky.echo", "--json", "hi"])
            #expect(notJSON.status == 64 && notJSON.err.contains("--json is not JSON"), "\(notJSON)")
            let nobody = try await skyctl(["call", "no.such.service", "--json", "{}", "--timeout", "10"])
            #expect(nobody.status == 1 && nobody.err.contains("no.such.service"), "\(nobody)")

            let submitted = try await skyctl([
                "jobs", "submit", "sky.echo", "--json", #"{"message":"later"}"#, "--key", "k1", "--unique",
                "while-running",
            ])
            let id = try #require(submitted.out.first.flatMap { JobID($0) }, "\(submitted)")
            let sky = try await SkyClient(broker: cluster.clients)
            #expect(try await sky.result(of: id, as: EchoTask.self) == EchoTask(message: "later"))
            // A negative priority is a value, not a flag.
            let low = try await skyctl([
                "jobs", "submit", "sky.echo", "--json", #"{"message":"low"}"#, "--priority", "-1",
            ])
            let lowID = try #require(low.out.first.flatMap { JobID($0) }, "\(low)")
            #expect(try await sky.result(of: lowID, as: EchoTask.self) == EchoTask(message: "low"))
            let keyless = try await skyctl(["jobs", "submit", "sky.echo", "--json", "{}", "--unique", "while-queued"])
            #expect(keyless.status == 64 && keyless.err.contains("give --key"), "\(keyless)")
            // A customer's job, limited to one at a time: it runs as any job.
            let keyed = try await skyctl([
                "jobs", "submit", "sky.echo", "--json", #"{"message":"keyed"}"#, "--concurrency-key", "customer-42",
                "--concurrency-limit", "1",
            ])
            let keyedID = try #require(keyed.out.first.flatMap { JobID($0) }, "\(keyed)")
            #expect(!keyed.err.contains("no worker serves"), "\(keyed)")
            // A service nobody serves (a typo): the job is queued, and skyctl says so on stderr.
            let typo = try await skyctl(["jobs", "submit", "sky.ehco", "--json", "{}"])
            #expect(typo.status == 0 && typo.out.count == 1 && JobID(typo.out[0]) != nil, "\(typo)")
            #expect(typo.err.contains("note: no worker serves sky.ehco now"), "\(typo)")
            // Shown later, it says the same: queued alone did not tell a typo from a wait.
            let typoShown = try await skyctl(["jobs", "show", typo.out[0]])
            #expect(typoShown.out.last?.hasPrefix("note: no worker serves sky.ehco now") == true, "\(typoShown)")
            #expect(try await sky.pause(service: "sky.ehco"))
            let pausedShown = try await skyctl(["jobs", "show", typo.out[0]])
            #expect(
                pausedShown.out.last
                    == "note: sky.ehco is paused; its jobs wait until it is resumed (skyctl services resume sky.ehco)",
                "\(pausedShown)")
            // A call to a paused service: its timeout says the pause, not "add workers".
            let pausedCall = try await skyctl(["call", "sky.ehco", "--json", "{}", "--timeout", "1"])
            #expect(pausedCall.status == 1, "\(pausedCall)")
            #expect(
                pausedCall.err.contains("sky.ehco is paused, so nothing of it runs until it is resumed")
                    && !pausedCall.err.contains("add workers"), "\(pausedCall)")
            #expect(try await sky.result(of: keyedID, as: EchoTask.self) == EchoTask(message: "keyed"))
            for (arguments, says) in [
                (["--concurrency-limit", "2"], "give --concurrency-key"),
                (
                    ["--concurrency-key", "c", "--concurrency-limit", "-1"],
                    "--concurrency-limit must be a whole number"
                ),
                (["--concurrency-key", "c", "--concurrency-limit", "0"], "in 1...1000000"),
                (["--concurrency-key", ""], "--concurrency-key \"\" (0 bytes)"),
            ] {
                let refused = try await skyctl(["jobs", "submit", "sky.echo", "--json", "{}"] + arguments)
                #expect(refused.status == 64 && refused.err.contains(says), "\(arguments): \(refused)")
            }
            await sky.close()
            await cluster.stop()
        }
    }
}
