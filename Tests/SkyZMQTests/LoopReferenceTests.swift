import Testing

@testable import SkyZMQ

@Suite("libzmq wrapper: a loop set once")
struct LoopReferenceTests {
    @Test(.timeLimit(.minutes(1)))
    func theFirstLoopStoredStaysAndEveryStoreReturnsIt() async throws {
        let first = try await ZMQEventLoop.start(name: "sky-ref-1", sockets: [])
        let second = try await ZMQEventLoop.start(name: "sky-ref-2", sockets: [])
        let reference = LoopReference()
        #expect(reference.load() == nil)
        #expect(reference.storeIfNil(first) === first)
        #expect(reference.storeIfNil(second) === first)
        #expect(reference.load() === first)
        await first.shutdown()
        await second.shutdown()
    }

    /// Concurrent first stores (concurrent first calls of a client) agree on one loop.
    @Test(.timeLimit(.minutes(1)))
    func concurrentStoresAgreeOnOneLoop() async throws {
        var loops: [ZMQEventLoop] = []
        for index in 0..<8 { loops.append(try await ZMQEventLoop.start(name: "sky-ref-c\(index)", sockets: [])) }
        // As a client holds it: in a class that many tasks share.
        final class Holder: Sendable { let reference = LoopReference() }
        let holder = Holder()
        let candidates = loops
        let winners = await withTaskGroup(of: ObjectIdentifier.self) { group in
            for loop in candidates {
                group.addTask { ObjectIdentifier(holder.reference.storeIfNil(loop)) }
            }
            return await group.reduce(into: Set()) { $0.insert($1) }
        }
        #expect(winners.count == 1)
        #expect(winners.first == holder.reference.load().map(ObjectIdentifier.init))
        for loop in loops { await loop.shutdown() }
    }
}
