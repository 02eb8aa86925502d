import ArgumentParser
import CSkySystem
import Foundation
import Logging

/// Options every Sky executable shares.
public struct CommonOptions: ParsableArguments {
    @Option(
        help: """
            Log level: trace, debug, info, notice, warning, error or critical. Logs go to standard error. \
            (default: info; skyctl's: critical, as it says what went wrong in its own one line)
            """)
    public var logLevel: Logger.Level?

    public init() {}
}

extension Logger.Level: @retroactive ExpressibleByArgument {}

/// Process-wide set-up shared by the executables.
public enum ProcessSetup {
    /// Environment variable that makes a process exit when its parent dies (set by the
    /// integration tests and the ops scripts, so a crashed runner leaves no process behind).
    public static let exitWithParentVariable = "SKY_EXIT_WITH_PARENT"

    /// Sends logs to standard error at the chosen level, ignores SIGPIPE, and starts the parent
    /// watchdog when asked for. Write standard output with ``line(_:)``.
    /// - Parameter quiet: logs only what is critical unless `--log-level` says otherwise: for a
    ///   one-shot command whose outcome is its own line (a log line before it said the same).
    public static func prepare(label: String, options: CommonOptions, quiet: Bool = false) -> Logger {
        // A process whose standard output or error is a pipe nobody reads any more must not die
        // of SIGPIPE at its next log line: writes fail with EPIPE instead.
        signal(SIGPIPE, SIG_IGN)
        let level = options.logLevel ?? (quiet ? .critical : .info)
        LoggingSystem.bootstrap { label in
            var handler = StreamLogHandler.standardError(label: label)
            handler.logLevel = level
            return handler
        }
        if ProcessInfo.processInfo.environment[exitWithParentVariable] == "1" {
            watchParent()
        }
        return Logger(label: label)
    }

    private static func watchParent() {
        let parent = getppid()
        let thread = Thread {
            sky_name_this_thread("parent-watchdog")
            while true {
                usleep(100_000)
                if getppid() != parent { _exit(3) }
            }
        }
        thread.start()
    }

    /// Writes one line to standard output at once, unbuffered, so a program reading it through
    /// a pipe (a test, a script waiting for "ready") sees it immediately.
    public static func line(_ text: String) {
        standardOutput(text + "\n")
    }

    /// Writes a server's "ready" line, unbuffered as ``line(_:)`` does; a reader that is gone
    /// is ignored: the server goes on serving (its logs go to standard error).
    public static func readyLine(_ text: String) {
        _ = write(text + "\n", to: STDOUT_FILENO)
    }

    /// Writes `text` to standard output at once. When its reader is gone (`skywatch | head`),
    /// the program ends quietly with status 0, as Unix filters do: Foundation's
    /// `FileHandle.write` trapped on EPIPE (SIGPIPE is ignored, see ``prepare(label:options:)``).
    public static func standardOutput(_ text: String) {
        guard let failure = write(text, to: STDOUT_FILENO) else { return }
        if failure == EPIPE { exit(0) }
        standardError("cannot write to standard output: \(String(cString: strerror(failure)))\n")
        exit(1)
    }

    /// Writes `text` to standard error at once; if nobody reads it any more, the text is lost
    /// and the program goes on.
    public static func standardError(_ text: String) {
        _ = write(text, to: STDERR_FILENO)
    }

    /// Writes all of `text` to `descriptor`; the `errno` of a failed write, or `nil`.
    private static func write(_ text: String, to descriptor: Int32) -> Int32? {
        var bytes = Array(text.utf8)[...]
        while !bytes.isEmpty {
            let written = bytes.withUnsafeBytes { Foundation.write(descriptor, $0.baseAddress, $0.count) }
            if written < 0 {
                if errno == EINTR { continue }
                return errno
            }
            bytes = bytes.dropFirst(written)
        }
        return nil
    }

    /// Raises this process's soft limit of open files to its hard limit, as a server that
    /// takes connections should (the soft limit of a login shell is often 1,024, the hard one far
    /// higher; systemd leaves raising it to the program). Each peer's connection is a descriptor,
    /// and a broker without one to spare cannot accept the next peer.
    /// - Returns: the soft limit before and after, or `nil` if it was at the hard limit already
    ///   or could not be raised.
    public static func raiseOpenFilesLimit() -> (from: Int, to: Int)? {
        var limits = rlimit()
        let resource = Int32(RLIMIT_NOFILE.rawValue)
        guard getrlimit(resource, &limits) == 0, limits.rlim_cur < limits.rlim_max else { return nil }
        let before = limits.rlim_cur
        limits.rlim_cur = limits.rlim_max
        guard setrlimit(resource, &limits) == 0 else { return nil }
        return (Int(clamping: before), Int(clamping: limits.rlim_max))
    }

    /// Prints to standard error and exits with `code`.
    public static func fail(_ program: String, _ message: String, code: Int32 = 1) -> Never {
        standardError("\(program): \(message)\n")
        exit(code)
    }
}
