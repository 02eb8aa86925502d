import SkyJournal
import SkyZMQ
import Testing

@testable import SkyBrokerKit
@testable import SkyProtocol

@Suite("Broker state machine: a job's progress and log lines")
struct BrokerJobProgressTests {
    let client = PeerID([0, 0, 0, 0, 1])
    let worker1 = PeerID([0, 0, 0, 1, 1])
    let worker2 = PeerID([0, 0, 0, 1, 2])

    /// The outcome's journal change among `actions`.
    static func finished(_ actions: [BrokerAction]) -> JobChange? {
        actions.lazy.compactMap { action -> JobChange? in
            switch action {
            case .journal(.write(let changes, .finished)), .journal(.writeWithNextCommit(let changes, .finished)):
                changes.last
            default: nil
            }
        }.first
    }

    /// Workers get FEATURES naming `progress`; a running job's PROGRESS is kept with it, published
    /// as `job.progress` at most once a second, and written with its outcome, from which
    /// `mmi.jobs.describe` reads it back.
    @Test func aRunningJobsProgressIsKeptPublishedAndWrittenWithItsOutcome() throws {
        var broker = BrokerHarness.withJournal()
        let joined = broker.ready(worker1)
        #expect(
            joined.contains {
                if case .sendToWorker(_, .features(let lines)) = $0 { lines.contains("progress") } else { false }
            })
        let (id, _) = broker.submit(client, RequestID(high: 1, low: 1))
        _ = broker.commit(broker.advance(.zero))
        let tag = broker.tag(id.requestID, at: worker1)
        let first = broker.worker(
            worker1,
            .progress(tag: tag, id.requestID, ProgressReport(fraction: 0.25, message: "resizing", lines: ["a"])))
        let published = events(first).filter { $0.event == .jobProgress }
        #expect(published.count == 1 && published.first?.task?.progress == 0.25)
        #expect(published.first?.task?.message == "resizing" && published.first?.task?.requestID == id.description)
        let second = broker.worker(
            worker1, .progress(tag: tag, id.requestID, ProgressReport(fraction: 0.5, lines: ["b"])))
        #expect(events(second).isEmpty, "within the second: kept, not published")
        let kept = try #require(broker.machine.jobBook.jobs[id]?.progress)
        #expect(kept.fraction == 0.5 && kept.message == "resizing" && kept.lines == ["a", "b"])

        let ended = broker.reply(worker1, client: client, id.requestID)
        guard case .finished(_, _, _, _, _, _, let stored?)? = Self.finished(ended) else {
            Issue.record("no progress with the outcome: \(ended)")
            return
        }
        #expect(JobProgress(decoding: stored) == kept)

        // Described after its end: from its record.
        let describe = RequestID(high: 3, low: 1)
        _ = broker.commit(ended)
        _ = broker.request(client, describe, service: BrokerService.jobDescribe, body: id.bytes)
        var record = JobRecord(
            id: id.bytes, service: "sky.scan", body: [7], state: .succeeded, outcome: [0, 42], expiresAt: .max)
        record.progress = stored
        let details = try broker.described(id, record, to: client, describe)
        #expect(details.progress == 0.5 && details.progressMessage == "resizing" && details.log == ["a", "b"])
        #expect(details.progressAt == 1_700_000_000_000 && details.droppedLogLines == nil)
        #expect(details.attempt == 0)
        // A flow has no attempts of its own.
        let flow = JobRecord(
            id: id.bytes, service: FlowSpec.service, body: [], state: .succeeded, attempt: 1, outcome: [0],
            expiresAt: .max)
        _ = broker.request(client, RequestID(high: 3, low: 2), service: BrokerService.jobDescribe, body: id.bytes)
        #expect(try broker.described(id, flow, to: client, RequestID(high: 3, low: 2)).attempt == nil)
    }

    /// Reports within a second of the job's last event are kept, and the newest is published
    /// once the second is over: watchers see where the handler is, not where it was.
    @Test func aReportWithinTheSecondIsPublishedWhenTheSecondIsOver() {
        let wall = Locked<Int64>(1_700_000_000_000)
        var broker = BrokerHarness.withJournal { $0.wallClock = { wall.withLock { $0 } } }
        _ = broker.ready(worker1)
        let (id, _) = broker.submit(client, RequestID(high: 1, low: 1))
        _ = broker.commit(broker.advance(.zero))
        let tag = broker.tag(id.requestID, at: worker1)
        func progress(_ fraction: Double, _ message: String) -> [SkyEvent] {
            events(
                broker.worker(
                    worker1, .progress(tag: tag, id.requestID, ProgressReport(fraction: fraction, message: message))))
        }
        #expect(progress(0, "phase 0").map(\.task?.message) == ["phase 0"])
        wall.withLock { $0 += 300 }
        #expect(progress(0.1, "phase 1").isEmpty)
        wall.withLock { $0 += 300 }
        #expect(progress(0.9, "sleeping").isEmpty)
        #expect(events(broker.advance(.milliseconds(100))).isEmpty, "the second is not over")
        wall.withLock { $0 += 400 }
        let late = events(broker.advance(.milliseconds(100))).filter { $0.event == .jobProgress }
        #expect(late.map(\.task?.message) == ["sleeping"] && late.first?.task?.progress == 0.9)
        wall.withLock { $0 += 2000 }
        #expect(events(broker.advance(.milliseconds(100))).isEmpty, "published once")
    }

    /// A PROGRESS that names a delivery its sender does not hold, or a call's, keeps nothing;
    /// from a stranger it is answered with DISCONNECT, as any message is; one over a bound is
    /// malformed; the broker serves on.
    @Test func progressForAnotherWorkersDeliveryOrACallIsNotKept() {
        var broker = BrokerHarness.withJournal()
        _ = broker.ready(worker1)
        _ = broker.ready(worker2, services: ["other"])
        let (id, _) = broker.submit(client, RequestID(high: 1, low: 1))
        _ = broker.commit(broker.advance(.zero))
        let tag = broker.tag(id.requestID, at: worker1)
        let report = ProgressReport(fraction: 1, message: "lies")
        #expect(effects(broker.worker(worker2, .progress(tag: tag, id.requestID, report))).isEmpty)
        #expect(effects(broker.worker(worker1, .progress(tag: tag, RequestID(high: 9, low: 9), report))).isEmpty)
        #expect(broker.machine.jobBook.jobs[id]?.progress == nil)
        let stranger = PeerID([0, 0, 0, 9, 9])
        #expect(
            effects(broker.worker(stranger, .progress(tag: tag, id.requestID, report))) == [
                .sendToWorker(stranger, .disconnect)
            ])

        // A 10 MB message is malformed: dropped and counted; the worker and its job go on.
        var frames = WorkerToBroker.progress(tag: tag, id.requestID, ProgressReport(fraction: 0.1)).encode()
        frames[5] = [UInt8](repeating: 65, count: 10 << 20)
        _ = broker.worker(worker1, frames: frames)
        #expect(broker.machine.counters.malformedWorkerMessages == 1)
        _ = broker.worker(worker1, .progress(tag: tag, id.requestID, ProgressReport(fraction: 0.2)))
        #expect(broker.machine.jobBook.jobs[id]?.progress?.fraction == 0.2, "the worker is still served")

        // A call's progress: nobody could read it.
        let call = RequestID(high: 2, low: 1)
        _ = broker.request(client, call, service: "other")
        let callTag = broker.tag(call, at: worker2)
        #expect(effects(broker.worker(worker2, .progress(tag: callTag, call, report))).isEmpty)
        #expect(broker.machine.counters.malformedWorkerMessages == 1)
    }

    /// A new attempt starts without the last one's fraction and message; the lines stay.
    @Test func aNewAttemptStartsWithoutTheLastOnesFractionButKeepsTheLines() {
        var broker = BrokerHarness.withJournal()
        _ = broker.ready(worker1)
        let (id, _) = broker.submit(client, RequestID(high: 1, low: 1)) {
            $0.retryOn = [.handlerError]
            $0.initialBackoffMilliseconds = 100
        }
        _ = broker.commit(broker.advance(.zero))
        let tag = broker.tag(id.requestID, at: worker1)
        _ = broker.worker(worker1, .progress(tag: tag, id.requestID, ProgressReport(fraction: 0.9, lines: ["tried"])))
        _ = broker.commit(broker.reply(worker1, client: client, id.requestID, status: .handlerError))
        _ = broker.commit(broker.advance(.milliseconds(200)))
        let kept = broker.machine.jobBook.jobs[id]?.progress
        #expect(broker.machine.jobBook.jobs[id]?.attempt == 2, "the second attempt runs")
        #expect(kept?.fraction == nil && kept?.lines == ["tried"])
    }
}
