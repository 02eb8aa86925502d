import SkyProtocol

/// Echo: returns its input unchanged. The worker's handler never decodes it, which makes it
/// the workload for measuring Sky itself.
public struct EchoTask: SkyTask, Hashable {
    public static let service = "sky.echo"
    public typealias Result = EchoTask

    public var message: String

    public init(message: String) {
        self.message = message
    }
}
