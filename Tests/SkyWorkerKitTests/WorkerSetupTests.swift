import Logging
import SkyTasks
import Testing

@testable import SkyWorkerKit

/// A worker made in Swift with a string that is not an endpoint stops at once, saying how to
/// write it (libzmq would answer only "Invalid argument").
@Suite("SkyWorker: set-up mistakes named before connecting")
struct WorkerSetupTests {
    @Test func aBrokerStringThatIsNotAnEndpointStopsTheWorkerSayingHowToWriteIt() async {
        let system = ScanSystem(name: "w", capacity: 1)
        await system.registerRaw(service: "echo") { body in body }
        let worker = SkyWorker(
            configuration: .init(broker: "localhost:5556"), system: system, logger: Logger(label: "w"))
        let error = await #expect(throws: WorkerSetupError.self) { try await worker.run() }
        #expect(
            error.map(String.init(describing:))?.contains(
                "localhost:5556 is not a ZeroMQ endpoint (no transport: expected tcp://, ipc:// or inproc://)") == true)
    }

    /// A name the protocol cannot carry stops the worker before it connects, naming the name:
    /// the broker refused its READY as "invalid service name", which said neither which one nor
    /// that the worker's own name counts.
    @Test(
        .timeLimit(.minutes(1)),  // without the check, the worker waits for port 1 forever
        arguments: [
            ("w", "my service\n", "service name \"my service\\n\" (11 bytes) is not 1...255 bytes"),
            (
                String(repeating: "n", count: 300), "echo",
                "worker name \"nnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnn…\" (300 bytes)"
            ),
        ])
    func aNameTheProtocolCannotCarryStopsTheWorkerNamingIt(worker: String, service: String, message: String) async {
        let system = ScanSystem(name: worker, capacity: 1)
        await system.registerRaw(service: service) { body in body }
        // An endpoint nobody serves: the check must come first, or the worker would wait.
        let worker = SkyWorker(
            configuration: .init(broker: "tcp://127.0.0.1:1"), system: system, logger: Logger(label: "w"))
        let error = await #expect(throws: WorkerSetupError.self) { try await worker.run() }
        let text = error.map(String.init(describing:)) ?? ""
        #expect(text.contains(message) && text.hasSuffix("choose another name"), "\(text)")
    }

    /// A service registered twice (the last handler silently replaced the first) and a name
    /// of the broker's own (`mmi.`, refused by the broker after the worker said it was ready)
    /// stop the worker before it connects, naming the service.
    @Test(.timeLimit(.minutes(1)))
    func aServiceRegisteredTwiceOrNamedLikeTheBrokersStopsTheWorker() async {
        let twice = ScanSystem(name: "w", capacity: 1)
        await twice.registerRaw(service: "images.resize") { body in body }
        await twice.registerRaw(service: "images.resize") { _ in [] }
        let owned = ScanSystem(name: "w", capacity: 1)
        await owned.registerRaw(service: "mmi.mine") { body in body }
        for (system, said) in [(twice, "images.resize is registered twice"), (owned, "mmi.mine starts with mmi.")] {
            let worker = SkyWorker(
                configuration: .init(broker: "tcp://127.0.0.1:1"), system: system, logger: Logger(label: "w"))
            let error = await #expect(throws: WorkerSetupError.self) { try await worker.run() }
            #expect(error.map(String.init(describing:))?.contains(said) == true, "\(String(describing: error))")
        }
    }
}
