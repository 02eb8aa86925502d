import FlyingFox
import Foundation

/// The dashboard's login, with `--token-file` or `--auth-file` (or both): a request is served if
/// it carries the token (`Authorization: Bearer …`, for scripts) or the cookie of a session a
/// login opened (for the page, whose WebSocket sends the cookie too). `/login` takes the token,
/// or a user and password checked against the file's bcrypt hashes (``Bcrypt``), in a form and
/// opens a session. Wrong tokens and passwords are answered one a second, however many come at
/// once (in a form or a header), so that guessing is slow; a password is checked by one login at
/// a time (PasswordChecker), so that a flood of them keeps at most one core busy. An address has one
/// login in flight at a time: more from it while one is checked or waits for its answer are
/// answered at once, unchecked, so that one address's flood of wrong passwords takes at most one
/// check at a time from everyone else's (20 at once held a right password 17 s, then a 500).
actor LoginGate {
    static let cookie = "sky_session"
    /// Sessions kept at most (the oldest go first), and how long one lasts.
    static let maxSessions = 1_000
    static let sessionLifetime: TimeInterval = 12 * 3_600
    static let wrongTokenDelay = Duration.seconds(1)

    private let token: [UInt8]?
    /// Users and their bcrypt hashes (`--auth-file`).
    private let passwords: [String: String]
    private var sessions: [String: Date] = [:]
    /// When the next wrong token or password may be answered.
    private var nextRefusal = ContinuousClock.now
    /// Addresses with a login being checked or waiting for its refusal's turn.
    private var loggingIn: Set<String> = []
    /// Checks passwords one at a time, apart from the gate: while a check runs, sessions are
    /// checked and other logins answered (a check held every request of the dashboard).
    private let checker = PasswordChecker()

    init(token: String?, passwords: [String: String]) {
        self.token = token.map { Array($0.utf8) }
        self.passwords = passwords
    }

    /// Reads `--auth-file`: a line `user:hash` per user, a bcrypt hash (`htpasswd -B`'s
    /// format); empty lines and lines starting with `#` are skipped.
    static func passwords(inFile path: String) throws -> [String: String] {
        var passwords: [String: String] = [:]
        for (number, line) in try read(path, flag: "--auth-file").split(
            separator: "\n", omittingEmptySubsequences: false
        )
        .enumerated() {
            let text = line.trimmingCharacters(in: .whitespaces)
            guard !text.isEmpty, !text.hasPrefix("#") else { continue }
            let parts = text.split(separator: ":", maxSplits: 1)
            guard parts.count == 2, !parts[0].isEmpty, Bcrypt.prefixes.contains(where: { parts[1].hasPrefix($0) })
            else {
                throw TokenFileError(
                    message:
                        "--auth-file \(path), line \(number + 1): expected USER:HASH with a bcrypt hash ($2b$…); make one with: skyweb --hash-password"
                )
            }
            passwords[String(parts[0])] = String(parts[1])
        }
        guard !passwords.isEmpty else {
            throw TokenFileError(
                message:
                    "--auth-file \(path) names no user; add a line USER:HASH (make a hash with: skyweb --hash-password)"
            )
        }
        return passwords
    }

    private static func read(_ path: String, flag: String) throws -> String {
        do {
            return try String(contentsOfFile: path, encoding: .utf8)
        } catch {
            var isDirectory: ObjCBool = false
            let exists = FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory)
            let why =
                !exists ? "no such file" : isDirectory.boolValue ? "it is a directory" : "\(error.localizedDescription)"
            throw TokenFileError(message: "cannot read \(flag) \(path): \(why)")
        }
    }

    /// Reads the token file: its first line, which must hold at least 16 characters.
    static func token(inFile path: String) throws -> String {
        let text = try read(path, flag: "--token-file")
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

    /// `GET /login` shows the form; `POST /login` checks the token, or the user and password, it
    /// sent and opens a session.
    func login(_ request: HTTPRequest) async -> HTTPResponse {
        guard request.method == .POST else { return page(status: .ok, message: nil) }
        let address = Self.host(of: request.remoteAddress)
        guard loggingIn.insert(address).inserted else {
            return page(
                status: .tooManyRequests,
                message: "A login from this address is being checked: wait for its answer, then try again.")
        }
        defer { loggingIn.remove(address) }
        let body = (try? await request.bodyData).map { String(decoding: $0, as: UTF8.self) } ?? ""
        if let user = Self.formValue("user", in: body), !passwords.isEmpty {
            let password = Self.formValue("password", in: body) ?? ""
            // An unknown user costs a check too, so that the answer's time does not say who exists.
            let hash = passwords[user] ?? Self.unknownUserHash
            let right = await checker.verify(password, against: hash)
            guard right, passwords[user] != nil else {
                await refusalTurn()
                return page(status: .unauthorized, message: "Wrong user or password.")
            }
        } else {
            let given = Self.formValue("token", in: body) ?? ""
            guard matches(Array(given.utf8)) else {
                await refusalTurn()
                return page(status: .unauthorized, message: "That is not this dashboard's token.")
            }
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
                HTTPHeader("Set-Cookie"):
                    "\(Self.cookie)=\(session); Path=/; Max-Age=\(Int(Self.sessionLifetime)); HttpOnly; SameSite=Strict",
            ]))
    }

    /// The host a request came from, without its port (a browser opens a connection per
    /// request); behind a reverse proxy, every client shares the proxy's.
    static func host(of address: HTTPRequest.Address?) -> String {
        switch address {
        case .ip4(let host, _), .ip6(let host, _): host
        case .unix(let path): path
        case nil: ""
        }
    }

    /// Waits for a wrong token's turn: one a second at most, in the order they came.
    private func refusalTurn() async {
        let turn = max(nextRefusal, ContinuousClock.now) + Self.wrongTokenDelay
        nextRefusal = turn
        try? await Task.sleep(until: turn)
    }

    /// A hash no password matches (its salt and cost are a real hash's), checked for a user the
    /// file does not name.
    private static let unknownUserHash = "$2b$12$" + String(repeating: "A", count: 53)

    /// Compares with the token in time independent of where they differ; false without one.
    private func matches(_ given: [UInt8]) -> Bool {
        guard let token else { return false }
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

    /// The login form: plain HTML, no script (the page's policy allows none inline). With
    /// passwords, a user and password form; with a token, a token form (both with both).
    func page(status: HTTPStatusCode, message: String?) -> HTTPResponse {
        let note = message.map { #"<p id="login-message" class="bad">\#($0)</p>"# } ?? ""
        var forms = ""
        if !passwords.isEmpty {
            forms += """
                <form id="password-login" method="post" action="/login">
                <label>User <input id="user" name="user" autocomplete="username" autofocus></label>
                <label>Password <input id="password" name="password" type="password" autocomplete="current-password"></label>
                <button type="submit">Log in</button></form>

                """
        }
        if token != nil {
            forms += """
                <form id="login" method="post" action="/login">
                <label>Token <input id="token" name="token" type="password" autocomplete="current-password"></label>
                <button type="submit">Log in</button></form>
                <p class="empty">The token is in the file skyweb was started with (--token-file).</p>

                """
        }
        let html = """
            <!doctype html>
            <html lang="en"><head><meta charset="utf-8"><title>Sky dashboard: log in</title>
            <link rel="stylesheet" href="/dashboard.css"></head>
            <body><h1>Sky</h1>\(note)
            \(forms)</body></html>
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

/// bcrypt checks, one at a time (a flood of them keeps at most one core busy), off the gate's
/// actor.
private actor PasswordChecker {
    func verify(_ password: String, against hash: String) -> Bool { Bcrypt.verify(password, against: hash) }
}
