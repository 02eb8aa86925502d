import CoreMetrics
import MetricsTestKit
import Sky
import SkyWorkloads
import Testing

/// The client's metrics, to a test backend given in its configuration.
@Suite("SkyClient metrics")
struct ClientMetricsTests {
    @Test func callsAreCountedByServiceAndOutcomeWithTheirAttemptsAndDuration() async throws {
        let metrics = TestMetrics()
        var configuration = SkyClient.Configuration()
        configuration.metricsFactory = metrics
        let sky = try await SkyClient(broker: "tcp://127.0.0.1:1", configuration: configuration)
        // Refused before it is sent: no attempt.
        _ = try? await sky.scan(EchoTask(message: String(repeating: "x", count: 17 << 20)))
        await sky.close()
        // The same outcome again: counted on the same series.
        _ = try? await sky.scan(EchoTask(message: "after close"))
        _ = try? await sky.scan(EchoTask(message: "after close, again"))
        let tooLarge = try metrics.expectCounter(
            "sky_client_calls_total", [("service", "sky.echo"), ("outcome", "requestTooLarge")])
        #expect(tooLarge.totalValue == 1)
        let closed = try metrics.expectCounter(
            "sky_client_calls_total", [("service", "sky.echo"), ("outcome", "clientClosed")])
        #expect(closed.totalValue == 2)
        #expect(
            try metrics.expectTimer("sky_client_call_duration_seconds", [("service", "sky.echo")]).values.count == 3)
        #expect(try metrics.expectMeter("sky_client_in_flight").lastValue == 0)
    }
}
