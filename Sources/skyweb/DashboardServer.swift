import FlyingFox
import FlyingSocks
import Foundation
import Sky
import SkyCLISupport
import SkyProtocol

/// The dashboard's HTTP side, on FlyingFox: the page and its two static files, the state as
/// JSON, a WebSocket that pushes the state on every change, and the jobs API (list, show,
/// cancel, retry), the schedules API (list, pause, resume, trigger), the services' pause and
/// resume, the failed jobs by error type (bulk retry and delete) and the charts' last hour, over
/// the client protocol.
///
/// Without `--token-file` or `--auth-file` no authentication: it listens on loopback by default
/// (with them, see ``LoginGate``). Against other sites in the same
/// browser, the WebSocket accepts only the page's own origin, and the two actions need a
/// header a cross-site form cannot send (`X-Sky-Dashboard`), which also forces CORS's
/// preflight that this server never grants. Against a site whose name was made to resolve to
/// this address (DNS rebinding), requests whose `Host` is not an address, `localhost` or a name
/// allowed with `--allow-host` are refused (``HostCheck``).
struct DashboardServer {
    let dashboard: Dashboard
    let client: SkyClient
    let readOnly: Bool
    let hosts: HostCheck
    let gate: LoginGate?

    static let actionHeader = HTTPHeader("X-Sky-Dashboard")
    private static let origin = HTTPHeader("Origin")

    /// Serves until the task is cancelled; returns once listening, with the bound port.
    func start(host: String, port: UInt16) async throws -> (server: HTTPServer, port: UInt16) {
        var routes = RoutedHTTPHandler()
        routes.appendRoute("GET /") { _ in Self.file(DashboardPage.html, type: "text/html; charset=utf-8") }
        routes.appendRoute("GET /dashboard.css") { _ in
            Self.file(DashboardPage.css, type: "text/css; charset=utf-8")
        }
        routes.appendRoute("GET /dashboard.js") { _ in
            Self.file(DashboardPage.script, type: "text/javascript; charset=utf-8")
        }
        let dashboard = dashboard
        routes.appendRoute("GET /api/state") { _ in
            Self.json(await dashboard.stateJSON())
        }
        routes.appendRoute("GET /api/history") { request in
            Self.json(await dashboard.historyJSON(of: request.query["service"].flatMap { $0.isEmpty ? nil : $0 }))
        }
        routes.appendRoute("GET /live") { request in
            try await Self.live(request, dashboard)
        }
        let client = client
        routes.appendRoute("GET /api/jobs") { request in
            await Self.answer { try await Self.list(request, client) }
        }
        routes.appendRoute("GET /api/jobs/:id") { (_: HTTPRequest, id: String) in
            await Self.answer {
                let jobID = try Self.jobID(id)
                var row = try Self.row(id, await client.status(of: jobID))
                // Its progress and log lines, from a broker that describes jobs.
                if let details = try? await client.details(of: jobID) { row.show(details) }
                return Self.encode(row)
            }
        }
        let readOnly = readOnly
        routes.appendRoute("POST /api/jobs/:id/cancel") { (request: HTTPRequest, id: String) in
            await Self.answer {
                try Self.checkAction(request, readOnly: readOnly)
                return try await Self.job(id, client.cancel(job: Self.jobID(id)))
            }
        }
        routes.appendRoute("POST /api/jobs/:id/retry") { (request: HTTPRequest, id: String) in
            await Self.answer {
                try Self.checkAction(request, readOnly: readOnly)
                let new = try await client.retry(job: Self.jobID(id))
                return try await Self.job(new.description, client.status(of: new))
            }
        }
        routes.appendRoute("GET /api/flows/:id") { (_: HTTPRequest, id: String) in
            await Self.answer {
                let status = try await client.flowStatus(Self.jobID(id))
                guard status.state != .unknown else {
                    throw DashboardError(
                        status: .notFound, message: "no flow \(id): never submitted, or its retention ended")
                }
                return Self.encode(FlowRow(id: id, status: status))
            }
        }
        routes.appendRoute("GET /api/schedules") { _ in
            await Self.answer { Self.encode(["schedules": try await client.schedules().map(ScheduleRow.init)]) }
        }
        // The name goes in the query: a schedule's name may hold a slash, which a path cannot.
        routes.appendRoute("POST /api/schedules/:action") { (request: HTTPRequest, action: String) in
            await Self.answer {
                try Self.checkAction(request, readOnly: readOnly)
                let name = try Self.name(in: request, of: "schedule")
                switch action {
                case "pause": try await client.pauseSchedule(name)
                case "resume": try await client.resumeSchedule(name)
                case "trigger": return Self.encode(["job": "\(try await client.triggerSchedule(name))"])
                default:
                    throw DashboardError(
                        status: .notFound, message: "\(action) is not a schedule action: use pause, resume or trigger")
                }
                return Self.encode(["schedule": name])
            }
        }
        // The failed jobs (the dead letters), by error type; a bulk retry or delete of a type's.
        routes.appendRoute("GET /api/failed") { _ in
            await Self.answer { Self.encode(FailedRow(try await client.bulk(.count, JobFilter(state: .failed)))) }
        }
        routes.appendRoute("POST /api/failed/:action") { (request: HTTPRequest, action: String) in
            await Self.answer {
                try Self.checkAction(request, readOnly: readOnly)
                let kinds: [String: BulkAction.Kind] = ["retry": .retry, "delete": .delete]
                guard let kind = kinds[action] else {
                    throw DashboardError(
                        status: .notFound, message: "\(action) is not an action on failed jobs: use retry or delete")
                }
                let type = request.query["type"]
                if type?.isEmpty == true {
                    throw DashboardError(
                        status: .badRequest,
                        message: "type is empty: name an error type, or leave type out for every failed job")
                }
                let outcome = try await client.bulk(kind, JobFilter(state: .failed, errorType: type))
                return Self.encode(["matched": outcome.matched, "acted": outcome.acted])
            }
        }
        routes.appendRoute("GET /api/services") { _ in
            await Self.answer { Self.encode(["services": try await client.services().map(ServiceRow.init)]) }
        }
        routes.appendRoute("POST /api/services/:action") { (request: HTTPRequest, action: String) in
            await Self.answer {
                try Self.checkAction(request, readOnly: readOnly)
                let name = try Self.name(in: request, of: "service")
                switch action {
                case "pause": _ = try await client.pause(service: name)
                case "resume": _ = try await client.resume(service: name)
                default:
                    throw DashboardError(
                        status: .notFound, message: "\(action) is not a service action: use pause or resume")
                }
                return Self.encode(["service": name])
            }
        }
        // A service's rate limit set or removed (the rate as skyctl takes it: 100/s, 30/m, ...).
        routes.appendRoute("POST /api/limits/:action") { (request: HTTPRequest, action: String) in
            await Self.answer {
                try Self.checkAction(request, readOnly: readOnly)
                let name = try Self.name(in: request, of: "service")
                switch action {
                case "set":
                    let limit = try Self.limit(
                        rate: request.query["rate"] ?? "", burst: request.query["burst"],
                        perKey: request.query["perKey"] == "1", keyField: request.query["keyField"])
                    _ = try await client.setRateLimit(limit, for: name)
                    let per = limit.key.map { $0.field.map { " per key (field \($0))" } ?? " per key" } ?? ""
                    return Self.encode(["service": name, "limit": "\(limit.rateText)\(per), burst \(limit.burst)"])
                case "remove":
                    _ = try await client.removeRateLimit(for: name, perKey: request.query["perKey"] == "1")
                    return Self.encode(["service": name])
                default:
                    throw DashboardError(
                        status: .notFound, message: "\(action) is not a limit action: use set or remove")
                }
            }
        }
        // Every request passes the Host check first, whatever its route.
        let server = HTTPServer(
            address: try .inet(ip4: host, port: port), logger: .disabled,
            handler: HostCheckedHandler(hosts: hosts, gate: gate, routes: routes))
        return (server, try await server.startListening())
    }

    /// Upgrades to a WebSocket that carries the state as text messages until the page leaves.
    private static func live(_ request: HTTPRequest, _ dashboard: Dashboard) async throws -> HTTPResponse {
        if let origin = request.headers[Self.origin], let host = request.headers[.host],
            origin != "http://\(host)"
        {
            return json(
                #"{"error":"this live feed serves only the dashboard's own page"}"#, status: .forbidden)
        }
        guard let (id, states) = await dashboard.watch() else {
            return json(
                #"{"error":"too many pages are watching this dashboard; close one and reload"}"#,
                status: .serviceUnavailable)
        }
        let handler = LiveFeed(states: states) { await dashboard.stopWatching(id) }
        return try await WebSocketHTTPHandler(handler: MessageFrameWSHandler(handler: handler)).handleRequest(request)
    }

    private static func list(_ request: HTTPRequest, _ client: SkyClient) async throws -> String {
        var state: JobState?
        if let name = request.query["state"], !name.isEmpty {
            guard let parsed = JobState(name: name), parsed != .unknown else {
                throw DashboardError(
                    status: .badRequest,
                    message:
                        "\(name) is not a job state: use queued, scheduled, running, succeeded, failed or cancelled")
            }
            state = parsed
        }
        let service = request.query["service"].flatMap { $0.isEmpty ? nil : $0 }
        let text = request.query["limit"] ?? "50"
        // Above 1,000 the listing is cut, as the broker cuts it for any client (docs/jobs.md).
        guard let limit = Int(text), limit >= 1 else {
            throw DashboardError(status: .badRequest, message: "limit \(text) is not a whole number of at least 1")
        }
        let jobs = try await client.jobs(state: state, service: service, limit: min(limit, Int(JobQuery.maxLimit)))
        let rows = jobs.map { JobRow(id: $0.id.description, service: $0.service, status: $0.status) }
        return encode(["jobs": rows])
    }

    private static func job(_ id: String, _ status: JobStatus) throws -> String {
        encode(try row(id, status))
    }

    private static func row(_ id: String, _ status: JobStatus) throws -> JobRow {
        if case .unknown = status {
            throw DashboardError(status: .notFound, message: "no job \(id): never submitted, or its retention ended")
        }
        return JobRow(id: id, service: nil, status: status)
    }

    /// The name an action's query gives (`?name=NAME`: a schedule's may hold a slash, which a
    /// path cannot), or why not.
    static func name(in request: HTTPRequest, of what: String) throws -> String {
        guard let name = request.query["name"], !name.isEmpty else {
            throw DashboardError(status: .badRequest, message: "name the \(what): ?name=NAME")
        }
        return name
    }

    /// A rate limit from the page's fields, or why not.
    static func limit(rate: String, burst: String?, perKey: Bool = false, keyField: String? = nil) throws -> RateLimit {
        guard let perSecond = RateLimit.parseRate(rate) else {
            throw DashboardError(
                status: .badRequest, message: "\(rate) is not a rate: give a count per s, m, h or d, as 100/s or 30/m")
        }
        var count = RateLimit.defaultBurst(perSecond)
        if let burst, !burst.isEmpty {
            guard let given = Int(burst) else {
                throw DashboardError(status: .badRequest, message: "burst \(burst) is not a whole number")
            }
            count = given
        }
        let field = keyField.flatMap { $0.isEmpty ? nil : $0 }
        let limit = RateLimit(
            perSecond: perSecond, burst: count, key: perKey || field != nil ? KeyScope(field: field) : nil)
        if let problem = limit.problem { throw DashboardError(status: .badRequest, message: problem) }
        return limit
    }

    static func jobID(_ text: String) throws -> JobID {
        guard let id = JobID(text) else {
            throw DashboardError(
                status: .badRequest, message: "\(text) is not a job id (26 characters of Crockford base32)")
        }
        return id
    }

    private static func checkAction(_ request: HTTPRequest, readOnly: Bool) throws {
        guard !readOnly else {
            throw DashboardError(status: .forbidden, message: "this dashboard is read-only (skyweb --read-only)")
        }
        guard request.headers[actionHeader] == "1" else {
            throw DashboardError(status: .forbidden, message: "an action needs the header X-Sky-Dashboard: 1")
        }
    }

    /// Runs an API call; errors become a JSON `{"error": ...}` with a fitting status.
    private static func answer(_ body: () async throws -> String) async -> HTTPResponse {
        do {
            return json(try await body())
        } catch let error as DashboardError {
            return json(encode(["error": error.message]), status: error.status)
        } catch SkyError.overloaded(let message) {
            // The broker takes no more of this now (another bulk action runs, its queue is
            // full): the request may come again later, which 503 says; not a broken gateway.
            return json(encode(["error": message]), status: .serviceUnavailable)
        } catch let error as SkyError where error.code == .jobNotFound {
            return json(encode(["error": "\(error)"]), status: .notFound)
        } catch SkyError.invalidTask(let message) where message.contains("no schedule named") {
            // A schedule the broker does not know: not found, as an unknown job is.
            return json(encode(["error": message]), status: .notFound)
        } catch let error as SkyError where error.code == .invalidTask {
            // The caller asked for something that cannot be done (a service name no job can
            // have, a retry of a job that did not fail): the request's fault, not the broker's.
            return json(encode(["error": "\(error)"]), status: .badRequest)
        } catch {
            return json(encode(["error": "\(error)"]), status: .badGateway)
        }
    }

    private static func file(_ text: String, type: String) -> HTTPResponse {
        HTTPResponse(
            statusCode: .ok,
            headers: [
                .contentType: type,
                // Nothing but this server: no CDN, no inline code, no frames.
                HTTPHeader("Content-Security-Policy"):
                    "default-src 'self'; connect-src 'self'; img-src 'self' data:; frame-ancestors 'none'",
                HTTPHeader("X-Content-Type-Options"): "nosniff",
            ],
            body: Data(text.utf8))
    }

    fileprivate static func json(_ text: String, status: HTTPStatusCode = .ok) -> HTTPResponse {
        HTTPResponse(
            statusCode: status,
            headers: [.contentType: "application/json; charset=utf-8", .cacheControl: "no-store"],
            body: Data(text.utf8))
    }

    fileprivate static func encode(_ value: some Encodable) -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        guard let data = try? encoder.encode(value) else { return #"{"error":"encoding failed"}"# }
        return String(decoding: data, as: UTF8.self)
    }
}

/// A flow as the page draws it: its state, and its tree of steps.
struct FlowRow: Encodable {
    struct Node: Encodable {
        var kind: String
        var index: Int?
        var service: String?
        var state: String?
        var attempt: UInt32?
        var job: String?
        var parts: [Node]?

        init(_ node: FlowStatus.Node) {
            switch node {
            case .step(let step):
                kind = "step"
                index = step.index
                service = step.service
                state = step.state.description
                attempt = step.attempt
                job = step.job?.description
            case .chain(let nodes), .group(let nodes), .batch(let nodes):
                switch node {
                case .chain: kind = "chain"
                case .group: kind = "group"
                default: kind = "batch"
                }
                parts = nodes.map(Node.init)
            }
        }
    }

    var id: String
    var state: String
    var onFailure: String
    var root: Node

    init(id: String, status: FlowStatus) {
        self.id = id
        state = status.state.description
        onFailure = status.onFailure.name
        root = Node(status.root)
    }
}

/// A job as the page lists it.
struct JobRow: Encodable {
    var id: String
    var service: String?
    var state: String
    var detail: String
    /// What its handler last said of its progress, and its last log lines (a job looked up by
    /// its id only).
    var progress: String?
    var log: [String]?

    mutating func show(_ details: JobDetails) {
        let fraction = details.progress.map { String(format: "%.0f %%", $0 * 100) }
        let said = [fraction, details.progressMessage].compactMap { $0 }.joined(separator: ": ")
        progress = said.isEmpty ? nil : said
        log = details.log
    }

    init(id: String, service: String?, status: JobStatus) {
        self.id = id
        self.service = service
        self.detail = status.description
        state =
            switch status {
            case .queued: "queued"
            case .scheduled: "scheduled"
            case .running: "running"
            case .succeeded: "succeeded"
            case .failed: "failed"
            case .cancelled: "cancelled"
            case .unknown: "unknown"
            }
    }
}

/// A schedule as the page lists it.
/// The failed jobs as the page shows them: how many, and how many of each error type.
struct FailedRow: Encodable {
    struct TypeCount: Encodable {
        var type: String
        var count: Int
    }

    var failed: Int
    var more: Int
    var types: [TypeCount]

    init(_ outcome: BulkOutcome) {
        failed = outcome.matched
        more = outcome.left
        types = outcome.errorTypes.map { TypeCount(type: $0.type, count: $0.count) }
    }
}

/// A service as the page's pause buttons need it.
struct ServiceRow: Encodable {
    var name: String
    var paused: Bool

    init(_ state: ServiceState) {
        name = state.name
        paused = state.paused
    }
}

struct ScheduleRow: Encodable {
    var name: String
    var timing: String
    var state: String
    var nextFire: String
    var service: String
    var overlap: String
    var lastJob: String?

    init(_ item: ScheduleListing.Item) {
        name = item.spec.name
        timing = "\(item.spec.timing)"
        state = item.spec.paused ? "paused" : "active"
        nextFire = SkyEvent.timestamp(item.nextFireDate)
        service = item.spec.job.service
        overlap = item.spec.overlap.name
        lastJob = item.lastJob.map { "\($0)" }
    }
}

struct DashboardError: Error {
    var status: HTTPStatusCode
    var message: String
}

/// One page's WebSocket: the dashboard's states out; anything the page sends is ignored, and
/// its closing ends the feed.
struct LiveFeed: WSMessageHandler {
    let states: AsyncStream<String>
    let onClose: @Sendable () async -> Void

    func makeMessages(for client: AsyncStream<WSMessage>) async throws -> AsyncStream<WSMessage> {
        let (messages, continuation) = AsyncStream.makeStream(of: WSMessage.self, bufferingPolicy: .bufferingNewest(2))
        let states = states
        let onClose = onClose
        let feed = Task {
            for await state in states { continuation.yield(.text(state)) }
            continuation.finish()
        }
        Task {
            for await _ in client {}
            feed.cancel()
            continuation.finish()
            await onClose()
        }
        return messages
    }
}

/// The dashboard's routes behind ``HostCheck``: a request addressed to a name the dashboard
/// does not answer to is refused before any route sees it.
struct HostCheckedHandler: HTTPHandler {
    let hosts: HostCheck
    /// With `--token-file` or `--auth-file`: what a request must carry (``LoginGate``).
    let gate: LoginGate?
    let routes: RoutedHTTPHandler

    func handleRequest(_ request: HTTPRequest) async throws -> HTTPResponse {
        if let refusal = refusal(request) { return refusal }
        if let gate {
            if request.path == "/login" { return await gate.login(request) }
            // The style sheet serves the login page too.
            if request.path != "/dashboard.css", !(await gate.admits(request)) {
                guard request.path == "/" else {
                    let wrong = request.headers[.authorization]?.hasPrefix("Bearer ") == true
                    return DashboardServer.json(
                        DashboardServer.encode([
                            "error": wrong
                                ? "the bearer token is not this dashboard's (skyweb --token-file)"
                                : "log in first: open /login, or send Authorization: Bearer TOKEN (skyweb --token-file)"
                        ]),
                        status: .unauthorized)
                }
                return HTTPResponse(statusCode: .seeOther, headers: HTTPHeaders([.location: "/login"]))
            }
        }
        return try await routes.handleRequest(request)
    }

    /// The answer to a request addressed to a name this dashboard does not answer to; `nil`
    /// when it does.
    private func refusal(_ request: HTTPRequest) -> HTTPResponse? {
        let header = request.headers[.host]
        guard !hosts.admits(header) else { return nil }
        let name = HostCheck.name(of: header?.lowercased() ?? "")
        let message =
            "this dashboard answers requests addressed to an IP address, localhost or a name given with --allow-host,"
            + " not \(name) (a page of another site whose name was pointed here would otherwise be served):"
            + " to open it by this name, start skyweb with --allow-host \(name)"
        return DashboardServer.json(DashboardServer.encode(["error": message]), status: .forbidden)
    }
}
