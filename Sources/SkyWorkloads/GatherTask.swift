import SkyProtocol

/// Gather: the callback of a flow's group of sleeps (a chord): it gets their results, the
/// sleeps themselves, and returns how many there were and their tags in order. For flows'
/// drills and demos.
public struct GatherTask: FlowResultsTask, Hashable {
    public static let service = "sky.gather"

    public var results: [SleepTask]

    public init(results: [SleepTask]) {
        self.results = results
    }

    public struct Result: Codable, Sendable, Hashable {
        public var count: Int
        public var tags: [Int]

        public init(count: Int, tags: [Int]) {
            self.count = count
            self.tags = tags
        }
    }
}
