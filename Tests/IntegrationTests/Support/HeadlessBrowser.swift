import Foundation
import SkyTestSupport
import SkyZMQ

#if canImport(Glibc)
    import Glibc
#endif

/// A real headless Chromium, driven over the DevTools protocol on a pipe
/// (`--remote-debugging-pipe`: commands in on fd 3, answers out on fd 4, one JSON message per
/// NUL-terminated chunk), as Puppeteer does; no WebSocket client and no driver binary needed.
/// The browser exits when this process closes the pipe or dies.
final class HeadlessBrowser: Sendable {
    struct Failure: Error, CustomStringConvertible {
        let description: String

        /// The page's document was replaced while a command ran in it (DevTools' "Inspected
        /// target navigated or closed").
        var navigated: Bool { description.contains("navigated") }
    }

    /// `chromium` (Debian) or another Chromium on PATH; `SKY_CHROMIUM` overrides.
    static var executable: String? {
        if let path = ProcessInfo.processInfo.environment["SKY_CHROMIUM"] { return path }
        let path = ProcessInfo.processInfo.environment["PATH"] ?? ""
        for name in ["chromium", "chromium-browser", "google-chrome"] {
            for directory in path.split(separator: ":")
            where FileManager.default.isExecutableFile(atPath: "\(directory)/\(name)") {
                return "\(directory)/\(name)"
            }
        }
        return nil
    }

    private let pid: pid_t
    private let commands: Int32
    private let profile: URL
    fileprivate struct Calls {
        var nextID = 1
        var waiting: [Int: CheckedContinuation<Data, any Error>] = [:]
        /// Who awaits a page's next `Page.loadEventFired`, by session.
        var loads: [String: [CheckedContinuation<Void, any Error>]] = [:]
        var closed = false
    }
    fileprivate let calls = Locked(Calls())

    init(executable: String, width: Int = 1300, height: Int = 1000) throws {
        profile = FileManager.default.temporaryDirectory.appendingPathComponent("sky-chromium-\(UUID().uuidString)")
        var toBrowser: [Int32] = [0, 0]
        var fromBrowser: [Int32] = [0, 0]
        guard pipe(&toBrowser) == 0, pipe(&fromBrowser) == 0 else {
            throw Failure(description: "pipe failed: errno \(errno)")
        }
        // Every end close-on-exec (other tests spawn processes too), and the browser's ends out
        // of the way of fds 3 and 4, which its dup2s target.
        let browserIn = fcntl(toBrowser[0], F_DUPFD_CLOEXEC, 100)
        let browserOut = fcntl(fromBrowser[1], F_DUPFD_CLOEXEC, 100)
        Glibc.close(toBrowser[0])
        Glibc.close(fromBrowser[1])
        _ = fcntl(toBrowser[1], F_SETFD, FD_CLOEXEC)
        _ = fcntl(fromBrowser[0], F_SETFD, FD_CLOEXEC)
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_adddup2(&actions, browserIn, 3)
        posix_spawn_file_actions_adddup2(&actions, browserOut, 4)
        posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0)
        let arguments = [
            executable, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
            "--no-first-run", "--no-default-browser-check", "--hide-scrollbars", "--remote-debugging-pipe",
            "--user-data-dir=\(profile.path)", "--window-size=\(width),\(height)", "about:blank",
        ]
        var argv = arguments.map { strdup($0) } + [nil]
        defer { for pointer in argv { free(pointer) } }
        var child: pid_t = 0
        let status = posix_spawn(&child, executable, &actions, nil, &argv, environ)
        Glibc.close(browserIn)
        Glibc.close(browserOut)
        guard status == 0 else {
            Glibc.close(toBrowser[1])
            Glibc.close(fromBrowser[0])
            throw Failure(description: "cannot start \(executable): error \(status)")
        }
        pid = child
        commands = toBrowser[1]
        let answers = fromBrowser[0]
        let calls = calls
        let reader = Thread { Self.read(answers, into: calls) }
        reader.name = "chromium-pipe"
        reader.start()
    }

    /// Reads NUL-separated messages and hands each answer to its caller, and each page's load
    /// event to whoever awaits it; other events are ignored.
    private static func read(_ fd: Int32, into calls: Locked<Calls>) {
        var pending = Data()
        var buffer = [UInt8](repeating: 0, count: 65536)
        while true {
            let count = buffer.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, $0.count) }
            if count < 0, errno == EINTR { continue }
            guard count > 0 else { break }
            pending.append(contentsOf: buffer[0..<count])
            while let end = pending.firstIndex(of: 0) {
                let message = pending[pending.startIndex..<end]
                pending = Data(pending[(end + 1)...])
                guard let object = try? JSONSerialization.jsonObject(with: message) as? [String: Any] else { continue }
                if object["method"] as? String == "Page.loadEventFired", let session = object["sessionId"] as? String {
                    let loaded = calls.withLock { $0.loads.removeValue(forKey: session) } ?? []
                    for waiter in loaded { waiter.resume() }
                    continue
                }
                guard let id = object["id"] as? Int else { continue }
                let waiter = calls.withLock { $0.waiting.removeValue(forKey: id) }
                waiter?.resume(returning: Data(message))
            }
        }
        Glibc.close(fd)
        let (waiters, loads) = calls.withLock { calls in
            calls.closed = true
            defer {
                calls.waiting.removeAll()
                calls.loads.removeAll()
            }
            return (Array(calls.waiting.values), calls.loads.values.flatMap { $0 })
        }
        for waiter in waiters { waiter.resume(throwing: Failure(description: "the browser closed its pipe")) }
        for waiter in loads { waiter.resume(throwing: Failure(description: "the browser closed its pipe")) }
    }

    /// Sends one DevTools command and returns its `result` as JSON (throws its `error`).
    func send(_ method: String, _ params: [String: any Sendable] = [:], session: String? = nil) async throws -> Data {
        let answer: Data = try await withCheckedThrowingContinuation { continuation in
            let id: Int? = calls.withLock { calls in
                guard !calls.closed else { return nil }
                calls.nextID += 1
                calls.waiting[calls.nextID] = continuation
                return calls.nextID
            }
            guard let id else {
                continuation.resume(throwing: Failure(description: "the browser is gone"))
                return
            }
            var message: [String: Any] = ["id": id, "method": method, "params": params]
            if let session { message["sessionId"] = session }
            var bytes = (try? JSONSerialization.data(withJSONObject: message)) ?? Data()
            bytes.append(0)
            let written = bytes.withUnsafeBytes { write(commands, $0.baseAddress, $0.count) }
            if written != bytes.count, let waiter = calls.withLock({ $0.waiting.removeValue(forKey: id) }) {
                waiter.resume(throwing: Failure(description: "writing to the browser failed: errno \(errno)"))
            }
        }
        let object = try JSONSerialization.jsonObject(with: answer) as? [String: Any] ?? [:]
        if let error = object["error"] as? [String: Any] {
            throw Failure(description: "\(method): \(error["message"] ?? error)")
        }
        return try JSONSerialization.data(withJSONObject: object["result"] ?? [:])
    }

    /// Opens `url` in a new tab and returns it once its document has loaded (its
    /// `Page.loadEventFired`): what the page is asked from then on is asked of `url`'s
    /// document, not of the blank one before it, and no late load event of this navigation
    /// can be taken for a later one's.
    func open(_ url: String) async throws -> Page {
        let target = try Self.field("targetId", of: try await send("Target.createTarget", ["url": "about:blank"]))
        let session = try Self.field(
            "sessionId", of: try await send("Target.attachToTarget", ["targetId": target, "flatten": true]))
        _ = try await send("Page.enable", session: session)
        let page = Page(browser: self, session: session)
        try await page.loading { _ = try await self.send("Page.navigate", ["url": url], session: session) }
        return page
    }

    static func field(_ name: String, of json: Data) throws -> String {
        guard let object = try JSONSerialization.jsonObject(with: json) as? [String: Any],
            let value = object[name] as? String
        else { throw Failure(description: "no \(name) in \(String(decoding: json, as: UTF8.self))") }
        return value
    }

    /// Ends the browser and removes its profile.
    func shutDown() {
        Glibc.close(commands)
        kill(pid, SIGKILL)
        var status: Int32 = 0
        waitpid(pid, &status, 0)
        try? FileManager.default.removeItem(at: profile)
    }

    /// One tab.
    struct Page: Sendable {
        let browser: HeadlessBrowser
        let session: String

        /// Runs `expression` in the page and returns its value as JSON text (`null` for none).
        @discardableResult
        func evaluate(_ expression: String) async throws -> String {
            let answer = try await browser.send(
                "Runtime.evaluate", ["expression": expression, "returnByValue": true, "awaitPromise": true],
                session: session)
            let object = try JSONSerialization.jsonObject(with: answer) as? [String: Any] ?? [:]
            if let exception = object["exceptionDetails"] as? [String: Any] {
                throw Failure(description: "\(expression) threw: \(exception["exception"] ?? exception)")
            }
            let result = object["result"] as? [String: Any] ?? [:]
            guard let value = result["value"] else { return "null" }
            let data = try JSONSerialization.data(withJSONObject: [value])
            return String(String(decoding: data, as: UTF8.self).dropFirst().dropLast())
        }

        /// Waits until `expression` is true in the page. The page itself awaits it: a
        /// MutationObserver checks it on every change to the document (the page updates itself
        /// from its WebSocket), so nothing here sleeps or polls; the page gives up at `timeout`.
        func waitUntil(_ what: String, _ expression: String, timeout: Duration = .seconds(20)) async throws {
            let deadline = ContinuousClock.now + timeout
            var shown = "false"
            // A navigation (a redirect, the page's own reload) ends the document the wait runs
            // in and the evaluation with it: ask the new document, until the deadline.
            while true {
                let left = deadline - ContinuousClock.now
                let milliseconds = max(0, Int(left / .milliseconds(1)))
                do {
                    shown = try await evaluate(
                        """
                        new Promise((resolve) => {
                          const holds = () => { try { return Boolean(\(expression)); } catch (e) { return false; } };
                          if (holds()) { resolve(true); return; }
                          const observer = new MutationObserver(() => {
                            if (holds()) { observer.disconnect(); resolve(true); }
                          });
                          observer.observe(document, { subtree: true, childList: true, attributes: true, characterData: true });
                          setTimeout(() => { observer.disconnect(); resolve(holds()); }, \(milliseconds));
                        })
                        """)
                    break
                } catch let failure as Failure where failure.navigated && ContinuousClock.now < deadline {
                    continue
                }
            }
            guard shown == "true" else {
                let text = try await evaluate("document.body.innerText")
                throw Failure(description: "not shown within \(timeout): \(what). The page showed: \(text)")
            }
        }

        /// Runs `script`, which makes the page navigate (a form sent), and returns once the new
        /// document has loaded (its `Page.loadEventFired`): ask it then with
        /// ``waitUntil(_:_:timeout:)``. An in-page wait begun before would stay in the document
        /// the navigation replaces, neither answered nor refused.
        func navigating(by script: String) async throws {
            try await loading {
                do {
                    // Later: the navigation would end the evaluation that starts it.
                    try await evaluate("setTimeout(() => { \(script) }, 0)")
                } catch let failure as Failure where failure.navigated {
                    // The navigation overtook this evaluation's answer (a loaded machine):
                    // it happened, which is what the load event will say.
                }
            }
        }

        /// Runs `start`, which begins a navigation, and returns once the page's next load
        /// event came (the waiter is registered before `start` runs, so a fast load is not
        /// missed); `start`'s error ends the wait.
        func loading(by start: @escaping @Sendable () async throws -> Void) async throws {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                let registered = browser.calls.withLock { calls -> Bool in
                    guard !calls.closed else { return false }
                    calls.loads[session, default: []].append(continuation)
                    return true
                }
                guard registered else {
                    continuation.resume(throwing: Failure(description: "the browser is gone"))
                    return
                }
                Task {
                    do {
                        try await start()
                    } catch {
                        let waiter = browser.calls.withLock { $0.loads.removeValue(forKey: session) } ?? []
                        for waiting in waiter { waiting.resume(throwing: error) }
                    }
                }
            }
        }

        /// Saves a PNG of the viewport.
        func screenshot(to url: URL) async throws {
            let answer = try await browser.send("Page.captureScreenshot", ["format": "png"], session: session)
            guard let data = Data(base64Encoded: try HeadlessBrowser.field("data", of: answer)) else {
                throw Failure(description: "the screenshot is not base64")
            }
            try FileManager.default.createDirectory(
                at: url.deletingLastPathComponent(), withIntermediateDirectories: true)
            try data.write(to: url)
        }
    }
}
