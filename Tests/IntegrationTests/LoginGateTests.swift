import FlyingFox
import Foundation
import Testing

@testable import skyweb

/// The dashboard's login gate, without a server: what one address's flood of wrong passwords
/// leaves for the others.
@Suite("skyweb: the login gate")
struct LoginGateTests {
    static func login(_ user: String, _ password: String, from host: String) -> HTTPRequest {
        HTTPRequest(
            method: .POST, version: .http11, path: "/login", query: [], headers: HTTPHeaders(),
            body: HTTPBodySequence(data: Data("user=\(user)&password=\(password)".utf8)),
            remoteAddress: .ip4(host, port: 40_000))
    }

    /// An address has one login in flight: the rest of its flood is answered at once (429,
    /// unchecked), and a right password from another address is checked beside it and opens a
    /// session (20 wrong ones at once held it 17 s, then the server answered 500).
    @Test(.timeLimit(.minutes(1)))
    func oneAddressesFloodOfWrongPasswordsTakesOneCheckAtATime() async throws {
        let hash = try #require(Bcrypt.hash("right"))
        let gate = LoginGate(token: nil, passwords: ["ada": hash])
        let started = ContinuousClock.now
        let (flood, right) = await withTaskGroup(of: (Bool, Int).self) { group in
            for index in 0..<10 {
                group.addTask {
                    (true, await gate.login(Self.login("ada", "wrong\(index)", from: "10.0.0.9")).statusCode.code)
                }
            }
            group.addTask { (false, await gate.login(Self.login("ada", "right", from: "10.0.0.7")).statusCode.code) }
            var flood: [Int] = []
            var right = 0
            for await (fromFlood, code) in group {
                if fromFlood { flood.append(code) } else { right = code }
            }
            return (flood, right)
        }
        #expect(right == 303, "the right password opens a session")
        // The session's cookie says how long it lasts, as the server keeps it.
        let opened = await gate.login(Self.login("ada", "right", from: "10.0.0.8"))
        #expect(opened.headers[HTTPHeader("Set-Cookie")]?.contains("Max-Age=43200") == true, "\(opened.headers)")
        #expect(flood.filter { $0 == 429 }.count == 9 && flood.filter { $0 == 401 }.count == 1, "\(flood)")
        print(
            "login gate: 10 wrong passwords from one address and a right one from another: \(started.duration(to: .now))"
        )
    }
}
