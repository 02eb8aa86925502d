import Foundation

/// One `initdb` per test process: every ``PostgresServer`` starts on a copy of the cluster it
/// made. `initdb` costs a second of CPU each time, and the suite starts a few dozen servers
/// while both cores are busy; a copy (`cp -a`, which keeps `nobody` as the owner) costs little.
actor PostgresClusterTemplate {
    static let shared = PostgresClusterTemplate()

    /// The template's `data` directory, once made.
    private var made: Task<URL, any Error>?

    /// Copies a fresh cluster to `data` (which must not exist yet).
    func copy(to data: URL) async throws {
        let template = try await template()
        try await PostgresServer.run("/bin/cp", ["-a", template.path, data.path], asThisUser: true)
    }

    private func template() async throws -> URL {
        if let made { return try await made.value }
        let task = Task {
            let directory = try PostgresServer.makeDirectory()
            let data = directory.appendingPathComponent("data")
            try await PostgresServer.run(
                "initdb",
                ["-D", data.path, "-U", "sky", "-A", "trust", "-E", "UTF8", "--no-sync", "--no-instructions"])
            // The suite's process ends without a word to its test support: its template goes
            // when the next run starts (below) or with the temporary directory.
            Self.removeLeftovers(besides: directory)
            try Data("\(getpid())".utf8).write(to: directory.appendingPathComponent("owner"))
            return data
        }
        made = task
        return try await task.value
    }

    /// Templates of test processes that have ended.
    private static func removeLeftovers(besides current: URL) {
        let temporary = FileManager.default.temporaryDirectory
        for name in (try? FileManager.default.contentsOfDirectory(atPath: temporary.path)) ?? []
        where name.hasPrefix("sky-pg-") {
            let directory = temporary.appendingPathComponent(name)
            guard directory != current,
                let owner = try? String(contentsOf: directory.appendingPathComponent("owner"), encoding: .utf8),
                let pid = Int32(owner), kill(pid, 0) != 0, errno == ESRCH
            else { continue }
            try? FileManager.default.removeItem(at: directory)
        }
    }
}
