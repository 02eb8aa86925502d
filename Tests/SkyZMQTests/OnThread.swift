import Foundation
import Synchronization

@testable import SkyZMQ

/// Runs blocking socket code on a fresh OS thread, so tests never block the cooperative pool.
func onThread<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
    try await withCheckedThrowingContinuation { continuation in
        let thread = Thread {
            do { continuation.resume(returning: try body()) } catch { continuation.resume(throwing: error) }
        }
        thread.start()
    }
}

/// Endpoints for the transports under test; tcp always asks for a free port.
enum Transport: String, CaseIterable, Sendable {
    case inproc, tcp, ipc

    func endpoint() -> String {
        switch self {
        case .inproc: "inproc://test-\(UUID().uuidString)"
        case .tcp: "tcp://127.0.0.1:*"
        case .ipc: "ipc://\(NSTemporaryDirectory())sky-test-\(UUID().uuidString).sock"
        }
    }
}

/// A ROUTER on a thread of its own that accepts connections and never reads, until closed:
/// what a peer that goes away with messages still on their way looks like.
final class SilentPeer: Sendable {
    let endpoint: String
    private let closeNow = DispatchSemaphore(value: 0)
    private let closed = DispatchSemaphore(value: 0)

    init() throws {
        let bound = DispatchSemaphore(value: 0)
        let result = Mutex<Result<String, any Error>?>(nil)
        let closeNow = closeNow
        let closed = closed
        Thread {
            do {
                let context = try ZMQContext()
                let router = try ZMQSocket(context: context, type: .router)
                try router.set(.receiveHighWaterMark(1))
                try router.bind("tcp://127.0.0.1:*")
                result.withLock { $0 = .success(router.lastEndpoint) }
                bound.signal()
                closeNow.wait()
                router.close(linger: 0)
                context.terminate()
            } catch {
                result.withLock { $0 = .failure(error) }
                bound.signal()
            }
            closed.signal()
        }.start()
        bound.wait()
        endpoint = try result.withLock { $0! }.get()
    }

    /// Closes the peer's socket and context; returns once they are gone.
    func close() {
        closeNow.signal()
        closed.wait()
    }
}
