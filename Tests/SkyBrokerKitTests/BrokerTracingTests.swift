import Testing

@testable import SkyBrokerKit
@testable import SkyProtocol

/// Version rules, broker side: a REQUEST's trace frame goes on only to a worker that announced
/// it takes one (FEATURES after READY); another gets the 7-frame REQUEST it always got.
@Suite("Broker state machine: trace frames")
struct BrokerTracingTests {
    let client = PeerID([0, 0, 0, 0, 1])
    let old = PeerID([0, 0, 0, 1, 1])
    let new = PeerID([0, 0, 0, 1, 2])
    let trace = Array("traceparent: 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".utf8)

    @Test func theTraceFrameGoesOnlyToAWorkerThatAnnouncedIt() throws {
        var broker = BrokerHarness()
        _ = broker.ready(old, capacity: 1)
        let first = RequestID(high: 0, low: 1)
        let toOld = effects(broker.request(client, first, trace: trace))
        guard case .sendToWorker(old, .request(_, let plain))? = toOld.first else {
            Issue.record("\(toOld)")
            return
        }
        #expect(plain.trace == nil, "a worker that never said FEATURES gets no trace frame")
        #expect(plain.requestID == first)

        _ = broker.ready(new, capacity: 1)
        #expect(effects(broker.worker(new, .features([TraceContext.feature, "unknown-later"]))).isEmpty)
        _ = broker.advance(.milliseconds(30))
        let second = RequestID(high: 0, low: 2)
        let toNew = effects(broker.request(client, second, trace: trace))
        guard case .sendTraced(new, _, let traced, let dispatch)? = toNew.first else {
            Issue.record("\(toNew)")
            return
        }
        #expect(traced.trace == trace && traced.requestID == second)
        #expect(dispatch.worker == "w-\(new)" && dispatch.delivery == 1 && dispatch.waitedNanoseconds == 0)
        #expect(
            effects(broker.reply(new, client: client, second)).contains {
                if case .sendToClient = $0 { true } else { false }
            })

        let third = RequestID(high: 0, low: 3)
        let untraced = effects(broker.request(client, third))
        guard case .sendToWorker(new, .request(_, let request))? = untraced.first else {
            Issue.record("\(untraced)")
            return
        }
        #expect(request.trace == nil, "no trace frame: nothing to carry")
    }

    /// The time a traced request waited in the queue goes into the broker's span.
    @Test func aQueuedTracedRequestReportsItsWait() throws {
        var broker = BrokerHarness()
        _ = broker.ready(new, capacity: 1)
        _ = broker.worker(new, .features([TraceContext.feature]))
        let busy = RequestID(high: 0, low: 1)
        _ = broker.request(client, busy)
        let waiting = RequestID(high: 0, low: 2)
        #expect(dispatched(broker.request(client, waiting, trace: trace)).isEmpty)
        _ = broker.advance(.milliseconds(250))
        let actions = effects(broker.reply(new, client: client, busy))
        let dispatch = try #require(
            actions.compactMap { if case .sendTraced(_, _, _, let dispatch) = $0 { dispatch } else { nil } }.first)
        #expect(dispatch.waitedNanoseconds == 250_000_000)
    }

    /// A worker learns the largest result the broker takes before its first task.
    @Test func aRegisteredWorkerIsToldTheFrameLimitBeforeItsFirstTask() {
        var configuration = BrokerStateMachine.Configuration()
        configuration.maxFrameSize = 65536
        var broker = BrokerHarness(configuration)
        _ = broker.request(client, RequestID(high: 0, low: 1))
        let worker = PeerID([0, 0, 0, 1, 1])
        let sent = effects(broker.ready(worker)).compactMap { action -> BrokerToWorker? in
            if case .sendToWorker(worker, let command) = action { return command }
            if case .sendTraced(worker, let tag, let request, _) = action { return .request(tag: tag, request) }
            return nil
        }
        #expect(
            sent.first == .features(["edition=2", "max-frame-size=65536", "packed", "progress", "heartbeat-ms=1000"]))
        #expect(sent.count == 2, "the features, then the waiting request: \(sent)")
    }

    /// docs/protocol.md, "Editions": the answer names the edition first, then every optional
    /// form the broker takes, the 12- and 16-byte REQUEST headers included (they had no name,
    /// so a client could not tell whether a broker took them).
    @Test func mmiFeaturesNamesTheEditionTheTraceFeatureTheFrameLimitPackedMessagesAndTheLongerHeaders() throws {
        var configuration = BrokerStateMachine.Configuration()
        configuration.maxFrameSize = 65536
        var broker = BrokerHarness(configuration)
        let ask = RequestID(high: 9, low: 9)
        let actions = effects(broker.request(client, ask, service: BrokerService.features, body: []))
        guard case .sendToClient(client, .reply(let reply))? = actions.first else {
            Issue.record("\(actions)")
            return
        }
        #expect(reply.status == .ok)
        #expect(
            String(decoding: reply.body, as: UTF8.self)
                == "edition=2\n\(TraceContext.feature)\nmax-frame-size=65536\npacked\nno-workers-ms\npriority\njob-submission=4\nschedule-queue\nflows\nservice-pause\nrate-limits\nkey-rate-limits\nbulk-actions\nconcurrency-keys\njob-details"
        )
        #expect(
            BrokerFeatures(decoding: reply.body)
                == BrokerFeatures(
                    edition: 2, takesTrace: true, maxFrameSize: 65536, takesPacked: true, takesNoWorkersGrace: true,
                    takesPriority: true, jobSubmissionVersion: 4, takesScheduleQueue: true, takesFlows: true,
                    pausesServices: true, limitsRates: true, actsInBulk: true, takesConcurrencyKeys: true,
                    describesJobs: true, limitsRatesPerKey: true))
        // With a journal it keeps abandoned calls, and says so.
        var journaled = BrokerHarness.withJournal()
        let asked = effects(journaled.request(client, ask, service: BrokerService.features, body: []))
        guard case .sendToClient(client, .reply(let answer))? = asked.first else {
            Issue.record("\(asked)")
            return
        }
        #expect(BrokerFeatures(decoding: answer.body).keepsAbandonedCalls)
    }
}
