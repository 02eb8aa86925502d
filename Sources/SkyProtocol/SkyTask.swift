/// A kind of task that can run on Sky: it names the service that runs it and the type of its
/// result. Tasks and results travel as JSON.
///
/// ```swift
/// struct Resize: SkyTask {
///     static let service = "images.resize"
///     typealias Result = Thumbnail
///     var url: String
/// }
/// let thumbnail = try await sky.scan(Resize(url: "..."))
/// ```
public protocol SkyTask: Codable, Sendable {
    associatedtype Result: Codable & Sendable
    /// The service name workers register this task's handler under.
    static var service: String { get }
}
