import Foundation
import SkyZMQ

/// The broker's ZAP handler (27/ZAP): libzmq asks it, over `inproc://zeromq.zap.01`, whether a
/// CURVE peer may connect, and tags every message of an admitted peer with the User-Id it
/// returns ("worker:<public key>"). Runs on the broker's I/O thread; allow-lists are cached and
/// read again when their modification time changes.
struct ZAPAuthenticator {
    /// The socket libzmq sends ZAP requests to (it must be bound before any CURVE socket).
    static let endpoint = "inproc://zeromq.zap.01"

    private struct CachedList {
        var modified: Date?
        var keys: Set<CurveKey>
    }

    let security: BrokerSecurity
    private var cache: [String: CachedList] = [:]
    private(set) var lastError: String?

    init(security: BrokerSecurity) {
        self.security = security
    }

    enum Decision: Equatable {
        case allowed(userID: String)
        case denied(reason: String)
    }

    /// Answers one ZAP request, as received on a ROUTER: `[peer, "", "1.0", id, domain,
    /// address, identity, mechanism, credentials...]`. Returns the reply frames (addressed to
    /// the same peer) and the decision, or `nil` for something that is not a ZAP request. (The
    /// identity frame is the broker socket's own routing id, not the peer's: a peer's routing id
    /// is bound to its key per message, in ``BrokerStateMachine/workerMessage``.)
    mutating func answer(_ frames: [[UInt8]]) -> (reply: [[UInt8]], decision: Decision)? {
        guard frames.count >= 9, frames[1].isEmpty else { return nil }
        let requestID = frames[3]
        let decision = decide(
            version: String(decoding: frames[2], as: UTF8.self), domain: String(decoding: frames[4], as: UTF8.self),
            mechanism: String(decoding: frames[7], as: UTF8.self), credentials: Array(frames.dropFirst(8)))
        let (status, text, userID): (String, String, String) =
            switch decision {
            case .allowed(let userID): ("200", "OK", userID)
            case .denied(let reason): ("400", reason, "")
            }
        let reply: [[UInt8]] = [
            frames[0], [], Array("1.0".utf8), requestID, Array(status.utf8), Array(text.utf8), Array(userID.utf8), [],
        ]
        return (reply, decision)
    }

    private mutating func decide(version: String, domain: String, mechanism: String, credentials: [[UInt8]])
        -> Decision
    {
        guard version == "1.0" else { return .denied(reason: "unsupported ZAP version \(version)") }
        guard let role = BrokerSecurity.Role.allCases.first(where: { $0.domain == domain }) else {
            return .denied(reason: "unknown domain \(domain)")
        }
        guard mechanism == "CURVE", let key = credentials.first, let publicKey = try? CurveKey(bytes: key) else {
            return .denied(reason: "the \(role.rawValue) port requires CURVE")
        }
        guard let path = security.allowLists[role] else {
            return .denied(reason: "no \(role.rawValue) keys are allowed")
        }
        guard allowList(at: path).contains(publicKey) else {
            return .denied(reason: "\(role.rawValue) key \(publicKey.z85) is not allowed")
        }
        return .allowed(userID: role.userIDPrefix + publicKey.z85)
    }

    /// The keys at `path`, read again only when the file or directory changed. An allow-list
    /// that cannot be read admits nobody (fail closed) and is reported in ``lastError``.
    private mutating func allowList(at path: String) -> Set<CurveKey> {
        let modified = (try? FileManager.default.attributesOfItem(atPath: path))?[.modificationDate] as? Date
        if let cached = cache[path], cached.modified == modified, modified != nil { return cached.keys }
        do {
            let keys = try CurveKeyFile.readAllowList(path)
            cache[path] = CachedList(modified: modified, keys: keys)
            lastError = nil
            return keys
        } catch {
            lastError = "\(error)"
            cache[path] = nil
            return []
        }
    }
}
