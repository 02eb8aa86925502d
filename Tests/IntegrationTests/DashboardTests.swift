import Foundation
import Sky
import SkyProtocol
import SkyTestSupport
import SkyWorkloads
import Testing

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

extension SecondLineSuite {
    /// skyweb in a real headless Chromium against a real cluster: what a person sees, updated
    /// live over the page's WebSocket without a reload.
    @Suite("Web dashboard in a real browser")
    struct DashboardTests {
        /// Where the run keeps its screenshot (`SKY_ARTIFACTS`, default `.build/artifacts`).
        static var artifacts: URL {
            URL(fileURLWithPath: ProcessInfo.processInfo.environment["SKY_ARTIFACTS"] ?? ".build/artifacts")
        }

        /// The browser harness itself: a wait begun in a document that navigates away (here
        /// the page's own script, as a redirect or a login would) goes on in the new document
        /// instead of failing with DevTools' "Inspected target navigated or closed".
        @Test func aWaitOutlivesANavigationOfThePage() async throws {
            let chromium = try #require(
                HeadlessBrowser.executable,
                "Chromium is missing: run the tests with ./ops/sky test, or apt-get install chromium")
            let state = IntegrationSuite.JobTests.StateDirectory()
            try FileManager.default.createDirectory(atPath: state.path, withIntermediateDirectories: true)
            let file = state.path + "/moves.html"
            try """
            <script>
              if (location.search === '') setTimeout(() => { location.search = '?moved'; }, 300);
              else document.addEventListener('DOMContentLoaded', () => { document.body.id = 'arrived'; });
            </script><body></body>
            """.write(toFile: file, atomically: true, encoding: .utf8)
            let browser = try HeadlessBrowser(executable: chromium)
            defer { browser.shutDown() }
            let page = try await browser.open("file://" + file)
            try await page.waitUntil("the second document", "document.body.id === 'arrived'", timeout: .seconds(10))
        }

        @Test func thePageShowsWorkersFailuresDeparturesAndJobsLive() async throws {
            let chromium = try #require(
                HeadlessBrowser.executable,
                "Chromium is missing: run the tests with ./ops/sky test, or apt-get install chromium")
            let state = IntegrationSuite.JobTests.StateDirectory()
            let cluster = try await TestCluster.start(extraArguments: TestCluster.fastHeartbeats + state.arguments)
            defer { cluster.killAll() }
            _ = try await cluster.startWorker(name: "steady", capacity: 2, extraArguments: ["--flaky-every", "1"])
            let doomed = try await cluster.startWorker(
                name: "doomed", capacity: 2, extraArguments: ["--flaky-every", "1"])
            let web = cluster.track(
                try SkyProcess(
                    "skyweb", ["--broker", cluster.clients, "--events", cluster.events, "--listen", "127.0.0.1:0"]))
            let ready = try await web.waitForLine { $0.hasPrefix("skyweb ready ") }
            let url = try #require(ready.split(separator: " ").first { $0.hasPrefix("url=") }?.dropFirst(4))

            let browser = try HeadlessBrowser(executable: chromium)
            defer { browser.shutDown() }
            let page = try await browser.open(String(url))
            try await page.waitUntil(
                "both workers' rows",
                #"""
                document.querySelector('#workers tr[data-worker="steady"]')
                  && document.querySelector('#workers tr[data-worker="doomed"]')
                  && document.querySelector('#connection').textContent === 'live'
                """#)

            // A handler's failure shows with its error type and message, and counts against its service.
            let sky = try await SkyClient(broker: cluster.clients)
            let failure = await #expect(throws: SkyError.self) {
                _ = try await sky.scan(FlakyTask(value: 7), options: ScanOptions(retry: .never))
            }
            #expect(failure?.code == .remote)
            try await page.waitUntil(
                "the failure's row",
                #"""
                [...document.querySelectorAll('#failures tbody tr')].some(row =>
                  row.textContent.includes('FlakyFailure') && row.textContent.includes('simulated failure')
                  && row.textContent.includes('sky.flaky'))
                """#)
            try await page.waitUntil(
                "sky.flaky's failures",
                #"document.querySelector('#services tr[data-service="sky.flaky"]').className === 'failed'"#)
            // A service's rate limit shows in its row, set before any of it ran.
            try await sky.setRateLimit(RateLimit(perSecond: 30, burst: 5), for: "mail.send")
            try await page.waitUntil(
                "mail.send's limit",
                #"""
                document.querySelector('#services tr[data-service="mail.send"] td.limit')?.textContent
                  === '30/s, burst 5'
                """#)

            // A worker killed outright leaves the table once the broker notices, with the reason.
            doomed.killNow()
            try await page.waitUntil(
                "the dead worker gone, with a departure line",
                #"""
                !document.querySelector('#workers tr[data-worker="doomed"]')
                  && document.querySelector('#workers tr[data-worker="steady"]')
                  && /doomed left: (unreachable|expired)/.test(document.querySelector('#departures').textContent)
                """#)

            // Durable jobs: found by id, then cancelled from the page; the broker agrees.
            let job = try await sky.submit(EchoTask(message: "later"), options: JobOptions(delay: .seconds(600)))
            // The newest jobs are listed without a search.
            try await page.waitUntil(
                "the new job listed unasked",
                #"document.querySelector('#job-results tr[data-job="\#(job.id)"][data-state="scheduled"]')"#)
            try await page.evaluate(
                #"""
                document.querySelector('#job-id').value = '\#(job.id)';
                document.querySelector('#job-search button').click();
                """#)
            try await page.waitUntil(
                "the job found, scheduled",
                #"document.querySelector('#job-results tr[data-job="\#(job.id)"][data-state="scheduled"]')"#)
            try await page.evaluate(
                #"document.querySelector('#job-results tr[data-job="\#(job.id)"] button.cancel').click()"#)
            try await page.waitUntil(
                "the job shown cancelled",
                #"document.querySelector('#job-results tr[data-job="\#(job.id)"][data-state="cancelled"]')"#)
            #expect(try await sky.status(of: job.id) == .cancelled)
            // Retried from the page: a new job with the same task, which the broker holds.
            try await page.evaluate(
                #"document.querySelector('#job-results tr[data-job="\#(job.id)"] button.retry').click()"#)
            try await page.waitUntil(
                "the retry's new job named",
                #"/Retried as job [0-9A-Z]{26}/.test(document.querySelector('#job-message').textContent)"#)
            let message = try await page.evaluate("document.querySelector('#job-message').textContent")
            let newID = try #require(
                message.split(separator: " ").last.flatMap { JobID(String($0.filter { $0.isLetter || $0.isNumber })) })
            #expect(newID != job.id)
            let retried = try await sky.status(of: newID)
            #expect(retried != .unknown && retried != .cancelled, "\(retried)")
            try await page.waitUntil(
                "the job counts", #"document.querySelector('#job-counts').textContent.includes('cancelled 1')"#)

            // Schedules (a name with a slash): listed with their next tick and last job as ticks
            // fire, paused and run now from the page; the broker agrees.
            try await sky.schedule(name: "reports/daily beat+1", every: .seconds(1), task: EchoTask(message: "tick"))
            try await page.waitUntil(
                "the schedule listed with its last job",
                #"""
                (() => { const row = document.querySelector('#schedules tr[data-schedule="reports/daily beat+1"][data-state="active"]');
                  return row && /every 1 s/.test(row.textContent) && /[0-9A-Z]{26}/.test(row.textContent)
                    && /fired [1-9]/.test(document.querySelector('#schedule-counts').textContent); })()
                """#)
            try await page.evaluate(
                #"document.querySelector('#schedules tr[data-schedule="reports/daily beat+1"] button.pause').click()"#)
            try await page.waitUntil(
                "the schedule shown paused",
                #"document.querySelector('#schedules tr[data-schedule="reports/daily beat+1"][data-state="paused"]')"#)
            #expect(try await sky.schedules().first?.spec.paused == true)
            try await page.evaluate(
                #"document.querySelector('#schedules tr[data-schedule="reports/daily beat+1"] button.trigger').click()"#
            )
            try await page.waitUntil(
                "the triggered job named",
                #"/Ran reports\/daily beat\+1 now as job [0-9A-Z]{26}/.test(document.querySelector('#schedule-message').textContent)"#
            )
            let ran = try await page.evaluate("document.querySelector('#schedule-message').textContent")
            let triggered = try #require(
                ran.split(separator: " ").last.flatMap { JobID(String($0.filter { $0.isLetter || $0.isNumber })) })
            #expect(try await sky.status(of: triggered) != .unknown)

            // A flow (a chord): found among the jobs as mmi.flow, its steps drawn as a tree.
            let flow = try await sky.submit(
                try Flow(group: (0..<3).map { SleepTask(milliseconds: 10, tag: $0) }).then(GatherTask.self))
            #expect(try await flow.value == GatherTask.Result(count: 3, tags: [0, 1, 2]))
            try await page.evaluate(
                #"document.querySelector('#job-id').value = ''; document.querySelector('#job-service').value = 'mmi.flow'; document.querySelector('#job-search button').click()"#
            )
            try await page.waitUntil(
                "the flow found", #"document.querySelector('#job-results tr[data-job="\#(flow.id)"] button.steps')"#)
            try await page.evaluate(
                #"document.querySelector('#job-results tr[data-job="\#(flow.id)"] button.steps').click()"#)
            try await page.waitUntil(
                "the flow's tree",
                #"document.querySelectorAll('#flow-tree li[data-state="succeeded"]').length === 4 && /group \(3\)/.test(document.querySelector('#flow-tree').textContent)"#
            )

            // Failed jobs: grouped by error type with their count; retried from the page, all of
            // a type at once (they fail again: every sky.flaky call fails on this worker).
            for value in 0..<3 {
                let failing = try await sky.submit(FlakyTask(value: value), options: JobOptions(retry: .never))
                await #expect(throws: SkyError.self) { _ = try await failing.value }
            }
            try await page.waitUntil(
                "the failed jobs' group",
                #"document.querySelector('#failed-types tr[data-type="SkyWorkloads.FlakyFailure"] td.count')?.textContent === '3'"#
            )
            try await page.evaluate(
                #"document.querySelector('#failed-types tr[data-type="SkyWorkloads.FlakyFailure"] button.retry').click()"#
            )
            try await page.waitUntil(
                "the bulk retry's answer",
                #"document.querySelector('#failed-message').textContent === 'Retried 3 of 3 failed jobs of type SkyWorkloads.FlakyFailure.'"#
            )
            try await eventually("the retried jobs failed again") {
                try await Self.failedCount(sky, errorType: "SkyWorkloads.FlakyFailure") == 6
            }
            // A service paused and resumed from the page; the broker agrees each time.
            try await page.evaluate(
                #"document.querySelector('#services tr[data-service="sky.flaky"] button.pause').click()"#)
            try await page.waitUntil(
                "sky.flaky shown paused",
                #"document.querySelector('#services tr[data-service="sky.flaky"][data-paused="yes"]')"#)
            #expect(try await sky.services().first { $0.name == FlakyTask.service }?.paused == true)
            try await page.evaluate(
                #"document.querySelector('#services tr[data-service="sky.flaky"] button.resume').click()"#)
            try await page.waitUntil(
                "sky.flaky shown running",
                #"document.querySelector('#services tr[data-service="sky.flaky"][data-paused="no"]')"#)
            #expect(try await sky.services().first { $0.name == FlakyTask.service }?.paused == false)
            // A rate limit set and removed from the page; a rate that is none is refused saying why.
            try await page.evaluate(
                #"""
                document.querySelector('#limit-service').value = 'sky.flaky';
                document.querySelector('#limit-rate').value = '0';
                document.querySelector('#limit-form .set-limit').click();
                """#)
            try await page.waitUntil(
                "the bad rate refused",
                #"/a rate must be/.test(document.querySelector('#service-message').textContent)"#)
            try await page.evaluate(
                #"""
                document.querySelector('#limit-rate').value = '50/s';
                document.querySelector('#limit-burst').value = '7';
                document.querySelector('#limit-form .set-limit').click();
                """#)
            try await page.waitUntil(
                "the limit set",
                #"document.querySelector('#service-message').textContent === 'Limited sky.flaky to 50/s, burst 7.'"#)
            #expect(try await sky.rateLimits().first { $0.service == FlakyTask.service }?.burst == 7)
            try await page.evaluate("document.querySelector('#limit-form .remove-limit').click()")
            try await page.waitUntil(
                "the limit removed",
                #"document.querySelector('#service-message').textContent === 'Removed the limit of sky.flaky.'"#)
            #expect(try await sky.rateLimits().contains { $0.service == FlakyTask.service } == false)
            // Per key, by a payload field: shown in the service's row beside nothing else.
            try await page.evaluate(
                #"""
                document.querySelector('#limit-rate').value = '3/s';
                document.querySelector('#limit-burst').value = '';
                document.querySelector('#limit-key-field').value = 'customer';
                document.querySelector('#limit-form .set-limit').click();
                """#)
            try await page.waitUntil(
                "the per-key limit set",
                #"document.querySelector('#service-message').textContent === 'Limited sky.flaky to 3/s per key (field customer), burst 3.'"#
            )
            let perKey = try await sky.rateLimits().first { $0.service == FlakyTask.service }
            #expect(perKey?.key?.field == "customer" && perKey?.perSecond == 3, "\(String(describing: perKey))")
            try await page.waitUntil(
                "the row shows it",
                #"""
                document.querySelector('#services tr[data-service="sky.flaky"] td.limit')?.textContent
                  .startsWith('per key (field customer) 3/s, burst 3')
                """#)
            try await page.evaluate("document.querySelector('#limit-form .remove-limit').click()")
            try await page.waitUntil(
                "the per-key limit removed",
                #"document.querySelector('#service-message').textContent === 'Removed the per-key limit of sky.flaky.'"#
            )
            #expect(try await sky.rateLimits().contains { $0.service == FlakyTask.service } == false)
            // A read-only dashboard refuses these.
            let watcher = cluster.track(
                try SkyProcess(
                    "skyweb",
                    ["--broker", cluster.clients, "--events", cluster.events, "--listen", "127.0.0.1:0", "--read-only"])
            )
            let watcherReady = try await watcher.waitForLine { $0.hasPrefix("skyweb ready ") }
            let watcherPort = try #require(
                watcherReady.split(separator: " ").first { $0.hasPrefix("url=") }?.split(separator: ":").last?
                    .split(separator: "/").first.flatMap { UInt16($0) })
            for request in [
                "POST /api/failed/retry?type=SkyWorkloads.FlakyFailure", "POST /api/services/pause?name=sky.flaky",
                "POST /api/limits/set?name=sky.flaky&rate=5/s",
            ] {
                let (status, body) = try Self.http(request, host: "127.0.0.1:\(watcherPort)", port: watcherPort)
                #expect(status == 403 && body.contains("read-only (skyweb --read-only)"), "\(request): \(body)")
            }
            #expect(try await Self.failedCount(sky) == 6, "nothing retried")

            // The charts of the last hour draw what the broker reported (asked again now, not at
            // the page's next 10 s).
            try await page.evaluate("loadCharts()")
            try await page.waitUntil(
                "the charts drawn",
                #"""
                (() => { const line = document.querySelector('#chart-throughput polyline');
                  return line && line.getAttribute('points').split(' ').length === 360
                    && document.querySelectorAll('#chart-latency polyline').length === 2
                    && document.querySelector('#chart-failures .most').textContent !== ' (highest 0.0)'
                    && [...document.querySelectorAll('#chart-service option')].some((o) => o.value === 'sky.flaky'); })()
                """#)

            let screenshot = Self.artifacts.appendingPathComponent("dashboard.png")
            try await page.screenshot(to: screenshot)
            #expect(try Data(contentsOf: screenshot).starts(with: [0x89, 0x50, 0x4E, 0x47]), "a PNG")
            await sky.close()

            // The broker gone: the page says so, and never "live" beside it.
            cluster.broker.killNow()
            try await page.waitUntil(
                "the broker said unreachable",
                #"""
                !document.querySelector('#banner').hidden
                  && document.querySelector('#connection').textContent === 'broker unreachable'
                """#)
        }

        /// A newcomer's two mistakes: a port already taken fails at once, naming the cause (it
        /// once took a 5 s time-out to say "timed out"), and a wrong broker endpoint leaves a
        /// page that says it has no answer from the broker instead of an empty cluster.
        @Test func aTakenPortFailsAtOnceAndAnUnansweredBrokerIsSaidSo() async throws {
            let first = try SkyProcess("skyweb", ["--broker", "tcp://127.0.0.1:1", "--listen", "127.0.0.1:0"])
            defer { first.killNow() }
            let ready = try await first.waitForLine { $0.hasPrefix("skyweb ready ") }
            let url = try #require(ready.split(separator: " ").first { $0.hasPrefix("url=") }?.dropFirst(4))
            let port = try #require(url.split(separator: ":").last?.split(separator: "/").first)

            let second = try SkyProcess("skyweb", ["--listen", "127.0.0.1:\(port)"])
            let status = try await second.waitForExit(timeout: .seconds(3))
            #expect(status == 1)
            #expect(
                second.errorText.contains("the port is in use (another process listens there)"), "\(second.errorText)")
            #expect(!second.errorText.contains("errno"), "said in words, not as a Swift enum: \(second.errorText)")
            #expect(second.errorText.contains("pick another --listen"), "\(second.errorText)")
            #expect(second.outputLines.isEmpty, "nothing may claim to be ready")

            let (body, response) = try await URLSession.shared.data(
                from: URL(string: "\(url)api/jobs?limit=99999999999999999999")!)
            #expect((response as? HTTPURLResponse)?.statusCode == 400)
            #expect(String(decoding: body, as: UTF8.self).contains("is not a whole number of at least 1"))
            // Over the broker's 1,000 a listing is cut, as the broker and skyctl cut it: not refused
            // as a bad request (this page's broker does not answer, so it is not a 200 either).
            let (_, many) = try await URLSession.shared.data(from: URL(string: "\(url)api/jobs?limit=5000")!)
            #expect((many as? HTTPURLResponse)?.statusCode != 400)
            // A service name no job can have is the request's fault, said at once (not a 502
            // after waiting for the broker).
            let (named, namedResponse) = try await URLSession.shared.data(
                from: URL(string: "\(url)api/jobs?service=a%0Ab")!)
            #expect((namedResponse as? HTTPURLResponse)?.statusCode == 400)
            #expect(
                String(decoding: named, as: UTF8.self).contains("(3 bytes) is not 1...255 bytes of UTF-8"),
                "\(String(decoding: named, as: UTF8.self))")
            let state = try await MetricsTests.fetch("\(url)api/state")
            #expect(state.contains(#""reachable":false"#), "\(state)")
            try await first.waitForLine(onStandardError: true, timeout: .seconds(10)) {
                $0.contains("no answer from the broker yet")
            }
        }

        /// DNS rebinding: a site whose name is pointed at the dashboard's address is the page's own
        /// origin to the browser, custom header and all. Its requests carry its name in `Host`:
        /// they were served (the cluster's state, and a cancel that reached the broker); now they
        /// are refused, unless the name is allowed with --allow-host.
        @Test func requestsAddressedToAnotherSitesNameAreRefused() async throws {
            let web = try SkyProcess(
                "skyweb", ["--broker", "tcp://127.0.0.1:1", "--listen", "127.0.0.1:0", "--allow-host", "Sky.Example"])
            defer { web.killNow() }
            let ready = try await web.waitForLine { $0.hasPrefix("skyweb ready ") }
            let port = try #require(
                ready.split(separator: " ").first { $0.hasPrefix("url=") }?.split(separator: ":").last?
                    .split(separator: "/").first.flatMap { UInt16($0) })
            let id = "01ARZ3NDEKTSV4RRFFQ69G5FAV"
            for (host, allowed) in [
                ("127.0.0.1:\(port)", true), ("localhost:\(port)", true), ("[::1]:\(port)", true),
                ("sky.example:\(port)", true), ("rebind.attacker.example:\(port)", false),
                ("rebind.attacker.example", false),
            ] {
                // (Only refused hosts try the cancel: an allowed one would wait for the absent broker.)
                for request in ["GET /api/state", "GET /"] + (allowed ? [] : ["POST /api/jobs/\(id)/cancel"]) {
                    let (status, body) = try Self.http(request, host: host, port: port)
                    if allowed {
                        #expect(status != 403, "\(request) for \(host): \(body)")
                    } else {
                        #expect(status == 403, "\(request) for \(host): \(body)")
                        #expect(body.contains("start skyweb with --allow-host rebind.attacker.example"), "\(body)")
                    }
                }
            }
        }

        /// With `--token-file`: nothing is served without the token; a wrong one is refused at the
        /// login, the right one opens a session whose cookie the page (and its WebSocket) then
        /// sends; a script sends the token itself.
        @Test func aTokenGuardsTheDashboardAndAWrongOneIsRefused() async throws {
            let state = IntegrationSuite.JobTests.StateDirectory()
            try FileManager.default.createDirectory(atPath: state.path, withIntermediateDirectories: true)
            let tokenFile = state.path + "/token"
            let token = "s3cret-token-of-24-chars"
            try (token + "\n").write(toFile: tokenFile, atomically: true, encoding: .utf8)
            try "short\n".write(toFile: state.path + "/short", atomically: true, encoding: .utf8)
            let short = try SkyProcess("skyweb", ["--token-file", state.path + "/short", "--listen", "127.0.0.1:0"])
            #expect(try await short.waitForExit(timeout: .seconds(10)) == 64)
            #expect(short.errorText.contains("holds a token of 5 characters; use at least 16"), "\(short.errorText)")
            let (web, host, port) = try await Self.startGuarded(["--token-file", tokenFile])
            defer { web.killNow() }
            #expect(try Self.http("GET /api/state", host: host, port: port).status == 401)
            let page = try Self.http("GET /", host: host, port: port)
            #expect(page.status == 303 && page.body.contains("Location: /login"), "\(page.body)")
            #expect(try Self.http("GET /login", host: host, port: port).body.contains(#"<form id="login""#))
            let wrong = try await Self.awaitedHTTP(
                "POST /login", host: host, port: port, body: "token=guess-guess-guess")
            #expect(wrong.status == 401 && wrong.body.contains("not this dashboard's token"), "\(wrong.body)")
            let right = try Self.http("POST /login", host: host, port: port, body: "token=" + token)
            #expect(right.status == 303, "\(right.body)")
            let cookie = try #require(
                right.body.split(separator: "\r\n").first { $0.hasPrefix("Set-Cookie: ") }?.dropFirst(12)
                    .split(separator: ";").first)
            #expect(
                try Self.http("GET /api/state", host: host, port: port, headers: ["Cookie: \(cookie)"]).status == 200)
            #expect(
                try Self.http("GET /api/state", host: host, port: port, headers: ["Authorization: Bearer \(token)"])
                    .status == 200)
            // Wrong bearer tokens are answered one a second, however many come at once.
            let started = ContinuousClock.now
            let refusals = try await withThrowingTaskGroup(of: (Int, String).self) { group in
                for _ in 0..<3 {
                    group.addTask {
                        try await Self.awaitedHTTP(
                            "GET /api/state", host: host, port: port, headers: ["Authorization: Bearer nope"])
                    }
                }
                return try await group.reduce(into: []) { $0.append($1) }
            }
            #expect(ContinuousClock.now - started >= .milliseconds(2_900), "three wrong tokens took a second each")
            #expect(refusals.allSatisfy { $0.0 == 401 && $0.1.contains("bearer token is not this dashboard's") })
            // An empty error type is a mistake, not "every failed job".
            let empty = try Self.http(
                "POST /api/failed/retry?type=", host: host, port: port, headers: ["Authorization: Bearer \(token)"])
            #expect(empty.status == 400 && empty.body.contains("type is empty"), "\(empty.body)")
        }

        /// `--auth-file`: users' bcrypt hashes (made by `skyweb --hash-password`). A wrong password
        /// and an unknown user are refused alike, a second each; the right one opens a session;
        /// a file of other hashes, or of none, exits 64 naming the line.
        @Test func aPasswordLoginRefusesAWrongPasswordAndOpensASessionForTheRightOne() async throws {
            let state = IntegrationSuite.JobTests.StateDirectory()
            try FileManager.default.createDirectory(atPath: state.path, withIntermediateDirectories: true)
            let skyweb = SkyProcess.binaries.appendingPathComponent("skyweb").path
            let hashing = try SkyProcess(
                program: URL(fileURLWithPath: "/bin/sh"),
                ["-c", #"printf 'correct horse\n' | exec "$0" --hash-password"#, skyweb], name: "hash-password")
            #expect(try await hashing.waitForExit(timeout: .seconds(20)) == 0, "\(hashing.errorText)")
            let hash = try #require(hashing.outputLines.first)
            #expect(hash.hasPrefix("$2b$12$") && hash.count == 60, "\(hash)")
            let authFile = state.path + "/users"
            try "# the dashboard's users\nada:\(hash)\n".write(toFile: authFile, atomically: true, encoding: .utf8)
            try "ada:$1$md5salt$notbcrypt\n".write(toFile: state.path + "/md5", atomically: true, encoding: .utf8)
            let weak = try SkyProcess("skyweb", ["--auth-file", state.path + "/md5", "--listen", "127.0.0.1:0"])
            #expect(try await weak.waitForExit(timeout: .seconds(10)) == 64)
            #expect(weak.errorText.contains("line 1: expected USER:HASH with a bcrypt hash"), "\(weak.errorText)")

            let (web, host, port) = try await Self.startGuarded(["--auth-file", authFile])
            defer { web.killNow() }
            let form = try Self.http("GET /login", host: host, port: port).body
            #expect(form.contains(#"<form id="password-login""#) && !form.contains(#"name="token""#), "\(form)")
            for body in ["user=ada&password=wrong+horse", "user=bob&password=correct+horse"] {
                let started = ContinuousClock.now
                let wrong = try await Self.awaitedHTTP("POST /login", host: host, port: port, body: body)
                #expect(wrong.status == 401 && wrong.body.contains("Wrong user or password."), "\(wrong.body)")
                #expect(ContinuousClock.now - started >= .milliseconds(900), "\(body): answered at its turn")
            }
            let right = try await Self.awaitedHTTP(
                "POST /login", host: host, port: port, body: "user=ada&password=correct+horse")
            #expect(right.status == 303, "\(right.body)")
            let cookie = try #require(
                right.body.split(separator: "\r\n").first { $0.hasPrefix("Set-Cookie: ") }?.dropFirst(12)
                    .split(separator: ";").first)
            #expect(
                try Self.http("GET /api/state", host: host, port: port, headers: ["Cookie: \(cookie)"]).status == 200)
            #expect(try Self.http("GET /api/state", host: host, port: port).status == 401)

            // The same in a real browser: the page asks for the login, refuses a wrong
            // password, and opens the dashboard for the right one.
            let chromium = try #require(
                HeadlessBrowser.executable,
                "Chromium is missing: run the tests with ./ops/sky test, or apt-get install chromium")
            let browser = try HeadlessBrowser(executable: chromium)
            defer { browser.shutDown() }
            let page = try await browser.open("http://\(host)/")
            try await page.waitUntil("the login form", "document.querySelector('#password-login') !== null")
            try await page.navigating(
                by: #"""
                    document.querySelector('#user').value = 'ada';
                    document.querySelector('#password').value = 'wrong horse';
                    document.querySelector('#password-login').submit();
                    """#)
            try await page.waitUntil(
                "the wrong password refused", "document.body.textContent.includes('Wrong user or password.')")
            #expect(try await page.evaluate("document.querySelector('#services') === null") == "true")
            try await page.navigating(
                by: #"""
                    document.querySelector('#user').value = 'ada';
                    document.querySelector('#password').value = 'correct horse';
                    document.querySelector('#password-login').submit();
                    """#)
            try await page.waitUntil("the dashboard", "document.querySelector('#services') !== null")
        }

        /// A skyweb behind a login (`arguments`), on a free port, for a broker that is not
        /// there: the process, the `Host` its requests name, and its port.
        static func startGuarded(_ arguments: [String]) async throws -> (SkyProcess, String, UInt16) {
            let web = try SkyProcess(
                "skyweb", ["--broker", "tcp://127.0.0.1:1", "--listen", "127.0.0.1:0"] + arguments)
            let ready = try await web.waitForLine { $0.hasPrefix("skyweb ready ") }
            let port = try #require(
                ready.split(separator: " ").first { $0.hasPrefix("url=") }?.split(separator: ":").last?
                    .split(separator: "/").first.flatMap { UInt16($0) })
            return (web, "127.0.0.1:\(port)", port)
        }

        /// ``http(_:host:port:headers:body:)`` on a thread of its own, for an answer that takes
        /// seconds (a wrong token's): a blocking read on one of the cooperative pool's two
        /// threads stalls every other test's tasks meanwhile (a client test beside this one
        /// saw a retry a second late).
        static func awaitedHTTP(
            _ request: String, host: String, port: UInt16, headers: [String] = [], body: String = ""
        ) async throws -> (status: Int, body: String) {
            try await withCheckedThrowingContinuation { continuation in
                Thread.detachNewThread {
                    continuation.resume(
                        with: Result { try Self.http(request, host: host, port: port, headers: headers, body: body) })
                }
            }
        }

        /// One request over a plain socket, with the `Host` header given (URLSession sets its own).
        /// Failed jobs counted by a bulk count. The page asks the broker for the same count
        /// every few seconds, and the broker runs one bulk action at a time (another is answered
        /// `overloaded`, ask again): a count that meets the page's asks again at once.
        static func failedCount(_ sky: SkyClient, errorType: String? = nil) async throws -> Int {
            while true {
                do {
                    return try await sky.bulk(.count, JobFilter(state: .failed, errorType: errorType)).matched
                } catch SkyError.overloaded {
                    await Task.yield()
                }
            }
        }

        static func http(
            _ request: String, host: String, port: UInt16, headers: [String] = [], body: String = ""
        ) throws -> (status: Int, body: String) {
            let socket = try DescriptorLimitTests.connect(port: port)
            defer { close(socket) }
            let extra = headers.map { $0 + "\r\n" }.joined()
            let type = body.isEmpty ? "" : "Content-Type: application/x-www-form-urlencoded\r\n"
            let text =
                "\(request) HTTP/1.1\r\nHost: \(host)\r\nX-Sky-Dashboard: 1\r\n\(extra)\(type)Content-Length: \(body.utf8.count)\r\nConnection: close\r\n\r\n\(body)"
            _ = text.utf8CString.withUnsafeBufferPointer { write(socket, $0.baseAddress, $0.count - 1) }
            var received: [UInt8] = []
            var chunk = [UInt8](repeating: 0, count: 4096)
            while true {
                let count = chunk.withUnsafeMutableBytes { read(socket, $0.baseAddress, $0.count) }
                guard count > 0 else { break }
                received += chunk[..<count]
            }
            let response = String(decoding: received, as: UTF8.self)
            let status = response.split(separator: " ").dropFirst().first.flatMap { Int($0) } ?? 0
            return (status, response)
        }
    }
}
