import FlyingFox
import Foundation

/// The dashboard's login, with `--token-file`: a request is served if it carries the token
/// (`Authorization: Bearer …`, for scripts) or the cookie of a session a login opened (for the
/// page, whose WebSocket sends the cookie too). `/login` takes the token in a form and opens a
/// session.
///
/// A bearer token rather than passwords: checking bcrypt hashes (`--auth-file`) needs a bcrypt
/// implementation, and none is in this project's package mirror; writing one is not worth its
/// risk when one secret in a file, compared in constant time, does the job. Wrong tokens are
/// answered one a second, however many come at once (in a form or a header), so that guessing
/// is slow.
actor TokenGate {
    static let cookie = "sky_session"
    /// Sessions kept at most (the oldest go first), and how long one lasts.
    static let maxSessions = 1_000
    static let sessionLifetime: TimeInterval = 12 * 3_600
    static let wrongTokenDelay = Duration.seconds(1)

    private let token: [UInt8]
    private var sessions: [String: Date] = [:]
    /// When the next wrong token may be answered.
    private var nextRefusal = ContinuousClock.now

    init(token: String) {
        self.token = Array(token.utf8)
    }

    /// Reads the token file: its first line, which must hold at least 16 characters.
    static func token(inFile path: String) throws -> String {
        let text: String
        do {
            text = try String(contentsOfFile: path, encoding: .utf8)
        } catch {
            var isDirectory: ObjCBool = false
            let exists = FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory)
            let why =
                !exists ? "no such file" : isDirectory.boolValue ? "it is a directory" : "\(error.localizedDescription)"
            throw TokenFileError(message: "cannot read --token-file \(path): \(why)")
        }
        let token =
            text.split(whereSeparator: \.isNewline).first.map(String.init)?
            .trimmingCharacters(in: .whitespaces) ?? ""
        guard token.count >= 16 else {
            throw TokenFileError(
                message:
                    "--token-file \(path) holds a token of \(token.count) characters; use at least 16 (make one with: head -c 24 /dev/urandom | base64)"
            )
        }
        return token
    }

    /// Whether `request` may be served: it names the token, or a live session. A wrong bearer
    /// token is answered `false` only at its turn (``refusalTurn()``).
    func admits(_ request: HTTPRequest) async -> Bool {
        if let authorization = request.headers[.authorization], authorization.hasPrefix("Bearer ") {
            if matches(Array(authorization.dropFirst(7).utf8)) { return true }
            await refusalTurn()
            return false
        }
        guard let session = Self.session(in: request.headers[.cookie]), let opened = sessions[session] else {
            return false
        }
        guard Date().timeIntervalSince(opened) < Self.sessionLifetime else {
            sessions[session] = nil
            return false
        }
        return true
    }

    /// `GET /login` shows the form; `POST /login` checks the token it sent and opens a session.
    func login(_ request: HTTPRequest) async -> HTTPResponse {
        guard request.method == .POST else { return Self.page(status: .ok, message: nil) }
        let body = (try? await request.bodyData).map { String(decoding: $0, as: UTF8.self) } ?? ""
        let given = Self.formValue("token", in: body) ?? ""
        guard matches(Array(given.utf8)) else {
            await refusalTurn()
            return Self.page(status: .unauthorized, message: "That is not this dashboard's token.")
        }
        if sessions.count >= Self.maxSessions, let oldest = sessions.min(by: { $0.value < $1.value })?.key {
            sessions[oldest] = nil
        }
        var generator = SystemRandomNumberGenerator()
        let session = (0..<4).map { _ in String(generator.next() as UInt64, radix: 16) }.joined(separator: "-")
        sessions[session] = Date()
        return HTTPResponse(
            statusCode: .seeOther,
            headers: HTTPHeaders([
                .location: "/",
                HTTPHeader("Set-Cookie"): "\(Self.cookie)=\(session); Path=/; HttpOnly; SameSite=Strict",
            ]))
    }

    /// Waits for a wrong token's turn: one a second at most, in the order they came.
    private func refusalTurn() async {
        let turn = max(nextRefusal, ContinuousClock.now) + Self.wrongTokenDelay
        nextRefusal = turn
        try? await Task.sleep(until: turn)
    }

    /// Compares in time independent of where they differ.
    private func matches(_ given: [UInt8]) -> Bool {
        var difference = UInt8(given.count == token.count ? 0 : 1)
        for index in token.indices { difference |= token[index] ^ (index < given.count ? given[index] : 0) }
        return difference == 0
    }

    static func session(in cookies: String?) -> String? {
        for part in (cookies ?? "").split(separator: ";") {
            let pair = part.trimmingCharacters(in: .whitespaces)
            if pair.hasPrefix(cookie + "=") { return String(pair.dropFirst(cookie.count + 1)) }
        }
        return nil
    }

    static func formValue(_ name: String, in body: String) -> String? {
        for pair in body.split(separator: "&") {
            let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            guard parts.count == 2, parts[0] == name else { continue }
            return String(parts[1]).replacingOccurrences(of: "+", with: " ").removingPercentEncoding
        }
        return nil
    }

    /// The login form: plain HTML, no script (the page's policy allows none inline).
    static func page(status: HTTPStatusCode, message: String?) -> HTTPResponse {
        let note = message.map { #"<p id="login-message" class="bad">\#($0)</p>"# } ?? ""
        let html = """
            <!doctype html>
            <html lang="en"><head><meta charset="utf-8"><title>Sky dashboard: log in</title>
            <link rel="stylesheet" href="/dashboard.css"></head>
            <body><h1>Sky</h1>\(note)
            <form id="login" method="post" action="/login">
            <label>Token <input id="token" name="token" type="password" autocomplete="current-password" autofocus></label>
            <button type="submit">Log in</button></form>
            <p class="empty">The token is in the file skyweb was started with (--token-file).</p>
            </body></html>
            """
        return HTTPResponse(
            statusCode: status,
            headers: [
                .contentType: "text/html; charset=utf-8", .cacheControl: "no-store",
                HTTPHeader("Content-Security-Policy"): "default-src 'self'; frame-ancestors 'none'",
            ],
            body: Data(html.utf8))
    }
}

struct TokenFileError: Error, CustomStringConvertible {
    var message: String
    var description: String { message }
}
