import Foundation

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
