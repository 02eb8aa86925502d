import ArgumentParser
import CoreMetrics
import FlyingFox
import FlyingSocks
import Foundation
import Prometheus

/// `--metrics HOST:PORT`: bootstraps swift-metrics with swift-prometheus and serves
/// `GET /metrics` (Prometheus's text format) over HTTP with FlyingFox, a maintained HTTP server
/// on plain sockets (no SwiftNIO: the executables stay light to build). Off unless asked for.
public struct MetricsOptions: ParsableArguments {
    @Option(
        help: """
            Serve Prometheus metrics at http://HOST:PORT/metrics (PORT 0 picks a free one; the \
            ready line names it). Off by default; keep it on loopback or a trusted network.
            """)
    public var metrics: String?

    public init() {}

    public func validate() throws {
        guard let metrics else { return }
        guard MetricsEndpoint.split(metrics) != nil else {
            throw ValidationError(
                "--metrics \(metrics) is not HOST:PORT with an IPv4 address and a port in 0...65535 (for example 127.0.0.1:9464)"
            )
        }
    }

    /// The TCP address it binds, as a ZeroMQ endpoint for ``FlagCheck/distinctEndpoints(_:)``
    /// (port 0, a free port, as `*`); `nil` when off.
    public var boundEndpoint: String? {
        guard let metrics, let (host, port) = MetricsEndpoint.split(metrics) else { return nil }
        return "tcp://\(host):\(port == 0 ? "*" : String(port))"
    }

    /// Starts the endpoint if asked for; returns its URL, or exits naming the cause.
    public func start(program: String) async -> String? {
        guard let metrics, let (host, port) = MetricsEndpoint.split(metrics) else { return nil }
        do {
            return try await MetricsEndpoint.start(host: host, port: port)
        } catch {
            ProcessSetup.fail(
                program, "cannot serve metrics at \(metrics): \(ListenFailure.text(error)); pick another --metrics")
        }
    }
}

public enum MetricsEndpoint {
    /// "HOST:PORT" with an IPv4 host (also skyweb's `--listen`).
    public static func split(_ text: String) -> (String, UInt16)? {
        guard let colon = text.lastIndex(of: ":"), let port = UInt16(text[text.index(after: colon)...]) else {
            return nil
        }
        let host = String(text[..<colon])
        let parts = host.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 4, parts.allSatisfy({ UInt8($0) != nil }) else { return nil }
        return (host, port)
    }

    /// Bootstraps the metrics system with a Prometheus registry and serves it.
    /// - Returns: the endpoint's URL, with the port actually bound.
    public static func start(host: String, port: UInt16) async throws -> String {
        let registry = PrometheusCollectorRegistry()
        MetricsSystem.bootstrap(SkyMetricsFactory(registry: registry))
        let server = HTTPServer(address: try .inet(ip4: host, port: port), logger: .disabled)
        await server.appendRoute("GET /metrics") { _ in
            HTTPResponse(
                statusCode: .ok, headers: [.contentType: "text/plain; version=0.0.4; charset=utf-8"],
                body: Data(registry.emitToBuffer()))
        }
        let bound = try await server.startListening()
        return "http://\(host):\(bound)/metrics"
    }
}

extension HTTPServer {
    /// Runs the server in the background and returns its bound port once it listens, or the
    /// reason it could not (a port in use, say) as soon as it fails, not after a time-out.
    public func startListening() async throws -> UInt16 {
        let (outcomes, outcome) = AsyncStream.makeStream(of: Result<Void, any Error>.self)
        Task {
            do {
                try await run()
                outcome.yield(.failure(EndpointError(description: "the HTTP server stopped")))
            } catch {
                outcome.yield(.failure(error))
            }
        }
        Task {
            do {
                try await waitUntilListening()
                outcome.yield(.success(()))
            } catch {
                outcome.yield(.failure(error))
            }
        }
        var first = outcomes.makeAsyncIterator()
        try await first.next()?.get()
        guard case .ip4(_, port: let bound)? = listeningAddress else {
            throw EndpointError(description: "the HTTP server is not listening")
        }
        return bound
    }
}

struct EndpointError: Error, CustomStringConvertible {
    var description: String
}
