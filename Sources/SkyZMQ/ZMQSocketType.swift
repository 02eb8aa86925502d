import CZMQ

/// The socket types Sky uses (all from libzmq's stable API).
public enum ZMQSocketType: Sendable, Hashable {
    case router, dealer, pub, xpub, sub, pair
    /// A SUB that sends its subscriptions as messages (`[0x01 topic]`): for tests of a broker's
    /// event socket under subscription churn.
    case xsub

    var rawValue: Int32 {
        switch self {
        case .router: ZMQ_ROUTER
        case .dealer: ZMQ_DEALER
        case .pub: ZMQ_PUB
        case .xpub: ZMQ_XPUB
        case .sub: ZMQ_SUB
        case .pair: ZMQ_PAIR
        case .xsub: ZMQ_XSUB
        }
    }
}
