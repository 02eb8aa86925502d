import Foundation
import Sky
import SkyProtocol
import SkyWire
import SkyWorkloads

extension JobBench {
    /// A chain step's overhead, from the end of one step to the start of the next: chains of
    /// 2 and of ``longChain`` `sky.echo` steps (a handler that takes no time), one at a time;
    /// the difference of their medians over the steps between is what each step adds (its
    /// outcome recorded, the next step decided, recorded and sent to a worker, and the worker's
    /// round trip, which a step's end and the next's start bound from outside).
    func measureFlows(_ target: SkyTarget, into results: inout Results) async throws {
        let sky = target.client
        progress("flows: chains of 2 and of \(Self.longChain) steps, one at a time")
        var short: [Double] = []
        var long: [Double] = []
        for index in 0..<(flowChains + 5) {
            let two = try await chainMicroseconds(sky, steps: 2)
            let many = try await chainMicroseconds(sky, steps: Self.longChain)
            if index >= 5 {  // warm-up
                short.append(two)
                long.append(many)
            }
        }
        let shortMedian = Self.median(short)
        let longMedian = Self.median(long)
        results.chainOfTwoMicroseconds.append(shortMedian)
        results.chainStepMicroseconds.append((longMedian - shortMedian) / Double(Self.longChain - 2))

        // What a group's steps cost the broker, small and at the largest: each step's end
        // decides the flow afresh (O(steps)), so the cost per step grows with the group.
        results.groupSize = flowGroupSize
        for size in [100, flowGroupSize] {
            progress("flows: a group of \(size) steps")
            let body = try JSONTaskCoder().encode(Self.task)
            var spec = FlowSpec(
                .group(Array(repeating: .step(JobSubmission(service: EchoTask.service, body: body)), count: size)))
            spec.idempotencyKey = UUID().uuidString
            let before = target.brokerCPUSeconds()
            let started = ContinuousClock.now
            let id = try await sky.submitFlow(spec)
            _ = try await sky.result(of: id, as: [EchoTask].self)
            let elapsed = (ContinuousClock.now - started).inSeconds
            let perStep = (target.brokerCPUSeconds() - before) / Double(size) * 1e6
            if size == flowGroupSize {
                results.largeGroupBrokerMicrosecondsPerStep.append(perStep)
                results.largeGroupSeconds.append(elapsed)
            } else {
                results.smallGroupBrokerMicrosecondsPerStep.append(perStep)
            }
        }
    }

    /// Steps of the long chain.
    static let longChain = 12

    private func chainMicroseconds(_ sky: SkyClient, steps: Int) async throws -> Double {
        let body = try JSONTaskCoder().encode(Self.task)
        var parts: [FlowSpec.Node] = [.step(JobSubmission(service: EchoTask.service, body: body))]
        for _ in 1..<steps { parts.append(.step(JobSubmission(service: EchoTask.service, body: []))) }
        var spec = FlowSpec(.chain(parts))
        spec.idempotencyKey = UUID().uuidString
        let started = ContinuousClock.now
        let id = try await sky.submitFlow(spec)
        _ = try await sky.result(of: id, as: EchoTask.self)
        return (ContinuousClock.now - started).inSeconds * 1e6
    }
}
