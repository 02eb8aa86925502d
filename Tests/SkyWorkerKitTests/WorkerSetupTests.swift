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
        await system.register(service: "echo") { body in body }
        let worker = SkyWorker(
            configuration: .init(broker: "localhost:5556"), system: system, logger: Logger(label: "w"))
        let error = await #expect(throws: WorkerSetupError.self) { try await worker.run() }
        #expect(
            error.map(String.init(describing:))?.contains(
                "localhost:5556 is not a ZeroMQ endpoint (no transport: expected tcp://, ipc:// or inproc://)") == true)
    }
}
