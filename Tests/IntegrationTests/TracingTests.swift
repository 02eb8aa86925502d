import Foundation
import InMemoryTracing
import Sky
import SkyCLISupport
import SkyProtocol
import SkyTestSupport
import SkyTracing
import SkyWorkloads
import Testing
import Tracing

extension IntegrationSuite {
    /// Distributed tracing across three real processes: this test is the client, with an
    /// in-memory tracer; the broker and the worker record theirs with `--trace-log`. A call's
    /// spans must form one trace: client → broker (queue wait and dispatch) → worker (the
    /// handler) → the handler's own child span.
    @Suite("Tracing: one trace from client through broker to worker")
    struct TracingTests {
        /// The spans a process wrote to its trace log so far.
        static func spans(in path: String) -> [SpanRecord] {
            let text = (try? String(contentsOfFile: path, encoding: .utf8)) ?? ""
            return text.split(separator: "\n").compactMap {
                try? JSONDecoder().decode(SpanRecord.self, from: Data($0.utf8))
            }
        }

        @Test func aScanAndAJobAreEachOneTraceAcrossTheThreeProcesses() async throws {
            let directory = JobTests.StateDirectory()
            try FileManager.default.createDirectory(atPath: directory.path, withIntermediateDirectories: true)
            let brokerLog = directory.path + "/broker-spans.jsonl"
            let workerLog = directory.path + "/worker-spans.jsonl"
            let cluster = try await TestCluster.start(
                extraArguments: ["--state-dir", directory.path + "/state", "--trace-log", brokerLog])
            defer { cluster.killAll() }
            _ = try await cluster.startWorker(name: "traced", extraArguments: ["--trace-log", workerLog])

            // W3C on the wire, as with swift-otel: the broker's and worker's --trace-log speak it.
            let tracer = InMemoryTracer(idGenerator: TraceLogTracer.w3cIDs)
            var configuration = SkyClient.Configuration()
            configuration.tracer = TraceLogTracer(tracer)
            let sky = try await SkyClient(broker: cluster.clients, configuration: configuration)
            defer { Task { await sky.close() } }
            _ = try await sky.scan(ScanTask(sector: 7, size: 32))
            let job = try await sky.submit(EchoTask(message: "traced job"))
            _ = try await job.value

            let finished = tracer.finishedSpans
            let call = try #require(
                finished.first { $0.operationName == "sky.call sky.scan" }, "\(finished.map(\.operationName))")
            #expect(call.kind == .client)
            let submit = try #require(finished.first { $0.operationName == "sky.call mmi.jobs.submit" })

            var broker: [SpanRecord] = []
            var worker: [SpanRecord] = []
            try await eventually("the broker's and the worker's spans are written") {
                broker = Self.spans(in: brokerLog)
                worker = Self.spans(in: workerLog)
                return broker.count >= 2 && worker.filter { $0.name.hasPrefix("sky.handle") }.count >= 2
                    && worker.contains { $0.name == "scan sector" }
            }
            // The scan: client → broker → worker → the handler's own span.
            let dispatch = try #require(broker.first { $0.name == "sky.dispatch sky.scan" }, "\(broker)")
            #expect(
                dispatch.trace == call.traceID && dispatch.parent == call.spanID,
                "the broker's span is the call's child")
            #expect(dispatch.attributes["sky.worker"] == "traced")
            #expect(dispatch.attributes["sky.queue_wait_ms"] != nil)
            #expect(dispatch.program == "skybroker")
            let handle = try #require(worker.first { $0.name == "sky.handle sky.scan" }, "\(worker)")
            #expect(
                handle.trace == call.traceID && handle.parent == dispatch.span,
                "the handler's span is the broker's child")
            #expect(handle.kind == "server" && handle.attributes["sky.status"] == "ok")
            let step = try #require(worker.first { $0.name == "scan sector" })
            #expect(step.trace == call.traceID && step.parent == handle.span, "the handler reached its span")
            #expect(step.attributes["sky.sector"] == "7")

            // The job: submitted in one trace, run in the same one.
            let jobDispatch = try #require(broker.first { $0.name == "sky.dispatch sky.echo" }, "\(broker)")
            #expect(jobDispatch.trace == submit.traceID && jobDispatch.parent == submit.spanID)
            let jobHandle = try #require(worker.first { $0.name == "sky.handle sky.echo" })
            #expect(jobHandle.trace == submit.traceID && jobHandle.parent == jobDispatch.span)
        }
    }
}

extension IntegrationSuite.TracingTests {
    /// Version rules, client side: a traced client sends the trace frame only to a broker that
    /// said it takes one (`mmi.features`). One that predates it answers `unknownService`, gets
    /// plain 6-frame REQUESTs, and every call is answered as before.
    @Test(arguments: [false, true])
    func aTracedClientSendsTheTraceFrameOnlyToABrokerThatTakesIt(brokerTakesTrace: Bool) async throws {
        let broker = try await FakeBroker.start(reportsFeatures: true)
        defer { Task { await broker.stop() } }
        var configuration = SkyClient.Configuration()
        configuration.tracer = InMemoryTracer()
        let sky = try await SkyClient(broker: broker.endpoint, configuration: configuration)
        defer { Task { await sky.close() } }
        let call = Task { try await sky.request(service: "svc", body: [1, 2, 3]) }

        let ask = await broker.nextRequest()
        let asked = try #require(ask.request)
        #expect(asked.service == BrokerService.features && asked.trace == nil)
        if brokerTakesTrace {
            broker.reply(
                to: ask.peer, TaskReply(requestID: asked.requestID, status: .ok, body: Array(TraceContext.feature.utf8))
            )
        } else {
            broker.reply(
                to: ask.peer,
                .failure(
                    asked.requestID, .unknownService, message: "501: the broker has no internal service mmi.features"))
        }
        let sent = await broker.nextRequest()
        let request = try #require(sent.request)
        #expect(request.service == "svc")
        if brokerTakesTrace {
            let trace = TraceContext(frame: try #require(request.trace))
            #expect(trace[InMemoryTracer.traceIDKey] != nil && trace[InMemoryTracer.spanIDKey] != nil, "\(trace)")
        } else {
            #expect(request.trace == nil, "an old broker gets 6 frames")
        }
        broker.echo(sent)
        #expect(try await call.value == [1, 2, 3])
        // Asked once per connection, not per call.
        let second = Task { try await sky.request(service: "svc", body: [4]) }
        let next = await broker.nextRequest()
        #expect(next.request?.service == "svc" && (next.request?.trace != nil) == brokerTakesTrace)
        broker.echo(next)
        #expect(try await second.value == [4])
    }

    /// `--trace-log` speaks W3C Trace Context, so it joins traces with swift-otel peers; and a
    /// broker whose tracer writes the frame keeps the fields it does not write (a `tracestate`,
    /// or another tracer's keys) as they came.
    @Test func theTraceLogSpeaksW3CAndForeignFieldsPassThrough() throws {
        let memory = InMemoryTracer(idGenerator: TraceLogTracer.w3cIDs)
        let tracer = TraceLogTracer(memory)
        let span = tracer.startSpan("dispatch")
        let ids = try #require(span.context.inMemorySpanContext)
        let frame = try #require(
            SkyTracing.frame(
                for: span.context, tracer: tracer,
                base: Array(
                    "traceparent: 00-\(String(repeating: "1", count: 32))-\(String(repeating: "2", count: 16))-01\ntracestate: congo=t61rcWkgMzE\nin-memory-trace-id: 7"
                        .utf8)))
        let carried = TraceContext(frame: frame)
        #expect(carried["traceparent"] == "00-\(ids.traceID)-\(ids.spanID)-01")
        #expect(carried["tracestate"] == "congo=t61rcWkgMzE" && carried["in-memory-trace-id"] == "7")
        let extracted = SkyTracing.context(from: frame, tracer: tracer)
        #expect(extracted.inMemorySpanContext?.traceID == ids.traceID)
        #expect(extracted.inMemorySpanContext?.spanID == ids.spanID)
        for bad in [
            "traceparent: 00-xyz-abc-01",
            "traceparent: 00-\(String(repeating: "0", count: 32))-\(String(repeating: "2", count: 16))-01",
        ] {
            #expect(SkyTracing.context(from: Array(bad.utf8), tracer: tracer).inMemorySpanContext == nil, "\(bad)")
        }
        span.end()
    }
}

extension IntegrationSuite.TracingTests {
    /// Asking the broker for its features happens inside the call's deadline: a broker that
    /// does not answer costs a traced call no more than its deadline.
    @Test func theFeaturesQuestionStaysWithinTheCallsDeadline() async throws {
        let broker = try await FakeBroker.start(reportsFeatures: true)
        defer { Task { await broker.stop() } }
        var configuration = SkyClient.Configuration()
        configuration.tracer = InMemoryTracer()
        configuration.connectTimeout = .seconds(10)
        let sky = try await SkyClient(broker: broker.endpoint, configuration: configuration)
        defer { Task { await sky.close() } }
        let started = ContinuousClock.now
        let outcome = await #expect(throws: SkyError.self) {
            _ = try await sky.request(service: "svc", body: [1], options: ScanOptions(deadline: .milliseconds(300)))
        }
        let elapsed = ContinuousClock.now - started
        #expect(outcome?.code == .timeout, "\(String(describing: outcome))")
        #expect(elapsed < .seconds(3), "\(elapsed): bounded by the 300 ms deadline, not the 10 s connect timeout")
        #expect((await broker.nextRequest()).request?.service == BrokerService.features, "it did ask")
    }
}

extension IntegrationSuite.TracingTests {
    /// Hostile and old peers, written from docs/protocol.md: a raw client's REQUEST with a junk
    /// trace frame is answered as any other, by a real skyworker that never announced the frame
    /// (it gets 7 frames) and by a raw worker that did (it gets the frame as sent); an
    /// oversized trace frame makes the REQUEST malformed, dropped and counted, and the broker
    /// goes on serving; FEATURES from a worker that never said READY changes nothing.
    @Test func junkAndOversizedTraceFramesFromRawPeers() async throws {
        let cluster = try await TestCluster.start(extraArguments: ["--state-dir", "none"])
        defer { cluster.killAll() }
        _ = try await cluster.startWorker(name: "plain", capacity: 1)
        let client = try await RawPeer(connectingTo: cluster.clients)
        defer { Task { await client.close() } }
        let junk: [UInt8] = Array("\u{1}not: a\ntrace context at all\n\n".utf8)
        func request(_ low: UInt64, service: String = "sky.echo", trace: [UInt8]) -> [[UInt8]] {
            ClientToBroker.request(
                TaskRequest(
                    requestID: RequestID(high: 7, low: low), service: service,
                    header: RequestHeader(attempt: 1, timeoutMilliseconds: 5000), body: Array("\"hi\"".utf8))
            ).encode() + [trace]
        }
        client.send(request(1, trace: junk))
        let first = try await client.waitForReplies(1)
        #expect(first.first?.status == .ok && first.first?.body == Array("\"hi\"".utf8))

        client.send(request(2, trace: [UInt8](repeating: 0x61, count: TraceContext.maxBytes + 1)))
        client.send(request(3, trace: junk))
        let replies = try await client.waitForReplies(2)
        #expect(
            replies.map(\.requestID) == [RequestID(high: 7, low: 1), RequestID(high: 7, low: 3)],
            "2 dropped, 3 answered")
        let snapshot = try await cluster.snapshot()
        #expect(snapshot.counters.malformedClientMessages == 1)

        // A raw worker that announced the frame gets it exactly as the client sent it.
        let stranger = try await RawPeer(connectingTo: cluster.workers)
        stranger.send(WorkerToBroker.features([TraceContext.feature]).encode())
        let announced = try await HungWorker(broker: cluster.workers, services: ["raw.traced"])
        defer { Task { await announced.close() } }
        announced.peer.send(WorkerToBroker.features([TraceContext.feature]).encode())
        try await cluster.waitForWorkers(2)
        client.send(request(4, service: "raw.traced", trace: junk))
        try await eventually("the raw worker holds the request") { !announced.requests.isEmpty }
        #expect(announced.requests.first?.request.trace == junk)
        announced.answerAll()
        #expect(try await client.waitForReplies(3).last?.requestID == RequestID(high: 7, low: 4))
        #expect(cluster.broker.isRunning)
        await stranger.close()
    }
}
