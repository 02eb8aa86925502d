import SkyZMQ

/// CURVE encryption on every broker socket, and who may connect to which.
///
/// Each socket authenticates in its own ZAP domain against its own allow-list, so a key is only
/// good for the roles it is listed for: a client key cannot register as a worker, a worker key
/// cannot submit tasks unless it is on the client list too. Allow-lists are read again when
/// their file or directory changes, so keys are added and revoked without a restart.
public struct BrokerSecurity: Sendable {
    /// The kinds of peers, one per broker socket.
    public enum Role: String, Sendable, CaseIterable {
        case client, worker, watcher

        /// The ZAP domain of the role's socket.
        public var domain: String { "sky-\(rawValue)s" }

        /// The User-Id prefix of an authenticated peer in this role.
        var userIDPrefix: String { "\(rawValue):" }
    }

    /// The broker's own key pair; peers are given its public key.
    public var keys: CurveKeyPair
    /// Per role: a directory of `.pub` files, or a file with one key per line. A role without an
    /// entry admits nobody.
    public var allowLists: [Role: String]

    public init(keys: CurveKeyPair, allowLists: [Role: String]) {
        self.keys = keys
        self.allowLists = allowLists
    }
}
