import CSkySystem
import Foundation
import SkyZMQ

/// A Sky executable (or any program) started by a test or a benchmark: its output is collected
/// line by line, and the caller can await a line instead of sleeping. Every process is started
/// with the parent watchdog on, so it dies with its parent even if the parent crashes.
public final class SkyProcess: Sendable {
    public struct Timeout: Error, CustomStringConvertible {
        public let description: String
        public init(description: String) { self.description = description }
    }

    private struct Output {
        var lines: [String] = []
        var partial = ""
        var waiters: [Waiter] = []
        /// The pipe reached end of file: everything the process wrote is in `lines`/`partial`.
        var ended = false
        var endWaiters: [(id: UUID, continuation: CheckedContinuation<Void, Never>)] = []
    }

    private struct Waiter {
        let id: UUID
        let condition: @Sendable ([String]) -> Bool
        let continuation: CheckedContinuation<[String], any Error>
    }

    public let name: String
    private let process: Process
    private let stdout = Locked(Output())
    private let stderr = Locked(Output())
    private let exit = Locked<(status: Int32?, waiters: [CheckedContinuation<Int32, Never>])>((nil, []))

    /// The directory holding the built executables (next to the test bundle).
    public static let binaries: URL = {
        if let override = ProcessInfo.processInfo.environment["SKY_BIN_DIR"] {
            return URL(fileURLWithPath: override)
        }
        let me = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath()
        return me.deletingLastPathComponent()
    }()

    /// - Parameter namespace: run it inside this Linux network namespace (`ip netns exec`, which
    ///   execs the program, so the pid is the program's).
    /// - Parameter environment: variables set on top of this process's environment.
    public convenience init(
        _ executable: String, _ arguments: [String], name: String? = nil, namespace: String? = nil,
        environment: [String: String] = [:]
    ) throws {
        try self.init(
            program: Self.binaries.appendingPathComponent(executable), arguments, name: name ?? executable,
            namespace: namespace, environment: environment)
    }

    /// Runs a Sky executable on a pseudo-terminal of its own (util-linux `script`), so it draws
    /// what it draws for a person. `script` starts the command through `$SHELL -c`; the shell is
    /// fixed to /bin/sh and replaced by the program (`exec`), so the pid's only child is the
    /// program itself whatever shell the caller's environment names.
    /// - Parameter columns: the terminal's width, if it should have one.
    public static func onTerminal(
        _ executable: String, _ arguments: [String], name: String, columns: Int? = nil
    ) throws -> SkyProcess {
        let command = ([binaries.appendingPathComponent(executable).path] + arguments)
            .map { "'" + $0.replacingOccurrences(of: "'", with: "'\\''") + "'" }
            .joined(separator: " ")
        let size = columns.map { "stty cols \($0) rows 50; " } ?? ""
        return try SkyProcess(
            program: URL(fileURLWithPath: "/usr/bin/script"), ["-qfec", "\(size)exec \(command)", "/dev/null"],
            name: name, environment: ["SHELL": "/bin/sh"])
    }

    /// Starts the program at `program` (not necessarily a Sky executable).
    /// - Parameter environment: variables set on top of this process's environment.
    public init(
        program: URL, _ arguments: [String], name: String, namespace: String? = nil,
        environment extra: [String: String] = [:]
    ) throws {
        self.name = name
        process = Process()
        if let namespace {
            process.executableURL = URL(fileURLWithPath: "/usr/sbin/ip")
            process.arguments = ["netns", "exec", namespace, program.path] + arguments
        } else {
            process.executableURL = program
            process.arguments = arguments
        }
        var environment = ProcessInfo.processInfo.environment
        environment["SKY_EXIT_WITH_PARENT"] = "1"
        environment.merge(extra) { _, new in new }
        process.environment = environment
        let outPipe = Pipe()
        let errPipe = Pipe()
        process.standardOutput = outPipe
        process.standardError = errPipe
        // A /dev/null of its own: the shared FileHandle.nullDevice is one descriptor for all.
        process.standardInput = FileHandle(forReadingAtPath: "/dev/null")
        // Plain blocking reads on a thread of their own until EOF. (Foundation's
        // readabilityHandler keeps a dispatch source on the fd, which crashed libdispatch here
        // when the pipe closed under it.)
        Self.drain(outPipe, into: stdout, name: "\(self.name)-stdout")
        Self.drain(errPipe, into: stderr, name: "\(self.name)-stderr")
        let exit = self.exit
        process.terminationHandler = { process in
            let status = process.terminationStatus
            let waiters = exit.withLock { state -> [CheckedContinuation<Int32, Never>] in
                state.status = status
                defer { state.waiters = [] }
                return state.waiters
            }
            for waiter in waiters { waiter.resume(returning: status) }
        }
        try process.run()
    }

    public var pid: Int32 { process.processIdentifier }
    public var isRunning: Bool { exit.withLock { $0.status == nil } }
    public var outputLines: [String] { stdout.withLock { $0.lines } }
    public var errorText: String { stderr.withLock { ($0.lines + [$0.partial]).joined(separator: "\n") } }

    private static func drain(_ pipe: Pipe, into buffer: Locked<Output>, name: String) {
        let thread = Thread {
            sky_name_this_thread(String(name.suffix(15)))  // the end of a long name tells more
            let fd = pipe.fileHandleForReading.fileDescriptor
            var chunk = [UInt8](repeating: 0, count: 65_536)
            while true {
                let count = read(fd, &chunk, chunk.count)
                if count > 0 {
                    append(Data(chunk[0..<count]), to: buffer)
                } else if count < 0 && errno == EINTR {
                    continue
                } else {
                    break
                }
            }
            try? pipe.fileHandleForReading.close()
            let waiting = buffer.withLock { output in
                output.ended = true
                defer { output.endWaiters = [] }
                return output.endWaiters
            }
            for waiter in waiting { waiter.continuation.resume() }
        }
        thread.start()
    }

    private static func append(_ data: Data, to buffer: Locked<Output>) {
        guard !data.isEmpty else { return }
        let ready = buffer.withLock { output -> [(CheckedContinuation<[String], any Error>, [String])] in
            output.partial += String(decoding: data, as: UTF8.self)
            var added = false
            // A terminal ends lines with "\r\n", which Swift counts as one Character.
            while let newline = output.partial.firstIndex(where: { $0 == "\n" || $0 == "\r\n" }) {
                output.lines.append(String(output.partial[..<newline]))
                output.partial.removeSubrange(...newline)
                added = true
            }
            guard added else { return [] }
            var fired: [(CheckedContinuation<[String], any Error>, [String])] = []
            let lines = output.lines
            output.waiters.removeAll { waiter in
                guard waiter.condition(lines) else { return false }
                fired.append((waiter.continuation, lines))
                return true
            }
            return fired
        }
        for (continuation, lines) in ready { continuation.resume(returning: lines) }
    }

    /// Waits until the lines printed so far (on standard output, or standard error) satisfy
    /// `condition`; it is checked now and after every new line. Fails after `timeout`.
    @discardableResult
    public func waitUntil(
        onStandardError: Bool = false, timeout: Duration = .seconds(20),
        _ condition: @escaping @Sendable ([String]) -> Bool
    ) async throws -> [String] {
        let buffer = onStandardError ? stderr : stdout
        let id = UUID()
        let name = self.name
        let timer = Task { [weak self] in
            try await Task.sleep(for: timeout)
            let waiter = buffer.withLock { output in
                output.waiters.firstIndex { $0.id == id }.map { output.waiters.remove(at: $0) }
            }
            let details =
                self.map { "\nstdout:\n\($0.outputLines.joined(separator: "\n"))\nstderr:\n\($0.errorText)" } ?? ""
            waiter?.continuation.resume(
                throwing: Timeout(description: "\(name): condition not met within \(timeout)\(details)"))
        }
        defer { timer.cancel() }
        return try await withCheckedThrowingContinuation { continuation in
            let now = buffer.withLock { output -> [String]? in
                if condition(output.lines) { return output.lines }
                output.waiters.append(Waiter(id: id, condition: condition, continuation: continuation))
                return nil
            }
            if let now { continuation.resume(returning: now) }
        }
    }

    /// Waits for a line that satisfies `predicate` (one printed earlier counts) and returns it.
    @discardableResult
    public func waitForLine(
        onStandardError: Bool = false, timeout: Duration = .seconds(20),
        where predicate: @escaping @Sendable (String) -> Bool
    ) async throws -> String {
        let lines = try await waitUntil(onStandardError: onStandardError, timeout: timeout) {
            $0.contains(where: predicate)
        }
        return lines.first(where: predicate)!
    }

    public func signal(_ signal: Int32) {
        if isRunning { kill(pid, signal) }
    }

    /// Waits for the process to exit and returns its status (the signal number if killed).
    public func waitForExit(timeout: Duration = .seconds(20)) async throws -> Int32 {
        let timer = Task {
            try await Task.sleep(for: timeout)
            kill(pid, SIGKILL)
        }
        defer { timer.cancel() }
        let status = await withCheckedContinuation { continuation in
            let status = exit.withLock { state -> Int32? in
                if let status = state.status { return status }
                state.waiters.append(continuation)
                return nil
            }
            if let status { continuation.resume(returning: status) }
        }
        // The exit can be seen before the reader threads drained the pipes: wait for their end
        // of file, so that what the process printed last is there (bounded: a grandchild could
        // hold a pipe open).
        await Self.waitForEnd(of: stdout)
        await Self.waitForEnd(of: stderr)
        return status
    }

    private static func waitForEnd(of buffer: Locked<Output>, atMost limit: Duration = .seconds(2)) async {
        let id = UUID()
        let timer = Task {
            try await Task.sleep(for: limit)
            let waiter = buffer.withLock { output in
                output.endWaiters.firstIndex { $0.id == id }.map { output.endWaiters.remove(at: $0) }
            }
            waiter?.continuation.resume()
        }
        defer { timer.cancel() }
        await withCheckedContinuation { continuation in
            let ended = buffer.withLock { output -> Bool in
                if output.ended { return true }
                output.endWaiters.append((id, continuation))
                return false
            }
            if ended { continuation.resume() }
        }
    }

    /// Kills the process at once (safety net for `defer`).
    public func killNow() {
        if isRunning { kill(pid, SIGKILL) }
    }
}
