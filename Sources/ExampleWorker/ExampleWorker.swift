import SkyWorkerCLI

/// A task of our own: count the words in a text. Clients declare the same type (or one with
/// the same JSON shape) and call `sky.scan(WordCount(text: ...))`.
struct WordCount: SkyTask {
    static let service = "example.wordcount"
    typealias Result = Counts
    var text: String
}

struct Counts: Codable, Sendable {
    var words: Int
    var characters: Int
}

/// A complete worker process with skyworker's flags (`--help` lists them):
/// `sky-example-worker --broker tcp://broker:5556 --capacity 8 --metrics 127.0.0.1:9101`.
@main
struct ExampleWorker {
    static func main() async {
        await WorkerOptions.main { system in
            await system.register(WordCount.self) { task in
                Counts(words: task.text.split(whereSeparator: \.isWhitespace).count, characters: task.text.count)
            }
        }
    }
}
