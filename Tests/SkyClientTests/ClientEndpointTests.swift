import Testing

@testable import Sky

/// A newcomer's first endpoint is often `localhost:5555`: libzmq refuses it with only "Invalid
/// argument", so the client says what is wrong and how to write it, when it is made.
@Suite("SkyClient: endpoints checked when the client is made")
struct ClientEndpointTests {
    @Test(arguments: ["localhost:5555", "tcp://127.0.0.1", "tcp://*:5555"])
    func aStringThatIsNotAnEndpointFailsAtOnceSayingHowToWriteIt(broker: String) async {
        let error = await #expect(throws: SkyError.self) { _ = try await SkyClient(broker: broker) }
        #expect(error?.code == .wrongEndpoint)
        #expect("\(String(describing: error))".contains("\(broker) is not a ZeroMQ endpoint"))
        #expect("\(String(describing: error))".contains("write it like tcp://"))
    }

    /// The events endpoint a broker says it bound, as a client subscribes to it: a wildcard
    /// host (`tcp://*:5557` bound reads `tcp://0.0.0.0:5557`) is the host the client reaches the
    /// broker at; any other endpoint is taken as said.
    @Test func aWildcardHostInTheEventsEndpointTheBrokerSaysIsTheBrokersHost() {
        let broker = "tcp://10.1.2.3:5555"
        #expect(SkyClient.reachable("tcp://0.0.0.0:40123", via: broker) == "tcp://10.1.2.3:40123")
        #expect(SkyClient.reachable("tcp://[::]:40123", via: broker) == "tcp://10.1.2.3:40123")
        #expect(SkyClient.reachable("tcp://127.0.0.1:40123", via: broker) == "tcp://127.0.0.1:40123")
        #expect(SkyClient.reachable("ipc:///run/sky/events", via: broker) == "ipc:///run/sky/events")
        #expect(SkyClient.reachable("tcp://0.0.0.0:40123", via: "ipc:///run/sky/c") == "tcp://0.0.0.0:40123")
    }

    /// No endpoint, or an empty one, is the caller's mistake: `wrongEndpoint`, which is not
    /// retried, where `brokerUnreachable` (retried by default) blamed the network.
    @Test func noEndpointOrAnEmptyOneIsTheCallersMistake() async {
        let none = await #expect(throws: SkyError.self) { _ = try await SkyClient(brokers: []) }
        #expect(none?.code == .wrongEndpoint)
        #expect("\(String(describing: none))".contains("no broker endpoint was given"))
        let empty = await #expect(throws: SkyError.self) { _ = try await SkyClient(broker: "") }
        #expect(empty?.code == .wrongEndpoint)
        #expect("\(String(describing: empty))".contains("an empty string is not a ZeroMQ endpoint"))
    }

    /// A timeout of zero or less: each attempt timed out at once and was retried, three
    /// requests sent for nothing, and the error blamed the reply.
    @Test(arguments: [Duration.zero, .seconds(-1)])
    func aTimeoutThatIsNotPositiveIsRefusedBeforeAnythingIsSent(timeout: Duration) async throws {
        let sky = try await SkyClient(broker: "tcp://127.0.0.1:1")
        let error = await #expect(throws: SkyError.self) {
            _ = try await sky.request(service: "sky.echo", body: [1], options: ScanOptions(timeout: timeout))
        }
        #expect(error?.code == .invalidTask)
        #expect(
            "\(String(describing: error))".contains(
                "ScanOptions.timeout is \(timeout): give each attempt a positive time"))
        #expect(await sky.statistics.counters.attemptsSent == 0)
        await sky.close()
    }

    /// A deadline of zero or less had passed before the call started: it was answered "the
    /// task timed out... Raise the timeout or add workers", which helps nobody.
    @Test(arguments: [Duration.zero, .seconds(-1)])
    func aDeadlineThatIsNotPositiveIsRefusedSayingSo(deadline: Duration) async throws {
        let sky = try await SkyClient(broker: "tcp://127.0.0.1:1")
        let error = await #expect(throws: SkyError.self) {
            _ = try await sky.request(service: "sky.echo", body: [1], options: ScanOptions(deadline: deadline))
        }
        #expect(error?.code == .invalidTask)
        let text = "\(String(describing: error))"
        #expect(text.contains("ScanOptions.deadline is \(deadline): the call's deadline had passed before it started"))
        #expect(!text.contains("Raise the timeout"))
        #expect(await sky.statistics.counters.attemptsSent == 0)
        await sky.close()
    }

    /// Durations no caller means literally ("forever" as `Int64.max` seconds) and policies out of
    /// range run a call to its end without trapping.
    @Test func extremeOptionsRunACallWithoutTrapping() async throws {
        var configuration = SkyClient.Configuration()
        configuration.connectTimeout = .milliseconds(200)
        let sky = try await SkyClient(broker: "tcp://127.0.0.1:1", configuration: configuration)
        let options = ScanOptions(
            timeout: .seconds(Int64.max), deadline: .seconds(Int64.max),
            retry: RetryPolicy(maxAttempts: 0, initialBackoff: .seconds(Int64.max), multiplier: .infinity, jitter: .nan)
        )
        let error = await #expect(throws: SkyError.self) {
            _ = try await sky.request(service: "sky.echo", body: [1], options: options)
        }
        #expect(error?.code == .brokerUnreachable, "\(String(describing: error))")
        await sky.close()
    }

    @Test func aWrongEventsEndpointIsCaughtToo() async {
        var configuration = SkyClient.Configuration()
        configuration.events = "127.0.0.1:5557"
        let error = await #expect(throws: SkyError.self) {
            _ = try await SkyClient(broker: "tcp://127.0.0.1:5555", configuration: configuration)
        }
        #expect("\(String(describing: error))".contains("127.0.0.1:5557 is not a ZeroMQ endpoint"))
    }
}
