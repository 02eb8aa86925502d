import SkyZMQ

/// A loop without sockets whose inline handler hands on every `Int` posted to it, in order:
/// a test posts a marker and awaits it to know the thread took everything posted before.
func loopEchoingInputs(name: String) async throws -> (loop: ZMQEventLoop, inputs: AsyncStream<Int>) {
    let (inputs, sink) = AsyncStream.makeStream(of: Int.self)
    let loop = try await ZMQEventLoop.start(
        name: name, sockets: [],
        handler: { batch, _ in
            for case .input(let value as Int) in batch { sink.yield(value) }
        })
    return (loop, inputs)
}
