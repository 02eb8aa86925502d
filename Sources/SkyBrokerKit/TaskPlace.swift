extension BrokerStateMachine {
    /// Where an accepted, unanswered request is, in 8 bytes (``BrokerStateMachine/tasks`` holds
    /// one per waiting request): waiting, by its arrival number, whose low bits name its queue
    /// (``BrokerStateMachine/slotBits``); or at a worker, by its delivery's tag, which names its
    /// slot in ``BrokerStateMachine/deliveries``.
    ///
    /// The two are told apart by those low bits: ``ServiceBook/none`` names no queue (a request
    /// is refused before it would wait there), so a running request's place is its tag above
    /// them with those bits set. Tags fit (``DeliveryBook/tagBits``).
    struct TaskPlace: Equatable, Sendable {
        private let raw: UInt64

        enum Kind: Equatable {
            case waiting(arrival: UInt64)
            case running(tag: UInt64)
        }

        private init(raw: UInt64) { self.raw = raw }

        static func waiting(arrival: UInt64) -> TaskPlace {
            precondition(arrival & slotMask != UInt64(ServiceBook.none), "a waiting request has a queue")
            return TaskPlace(raw: arrival)
        }

        static func running(tag: UInt64) -> TaskPlace {
            precondition(tag >> DeliveryBook.tagBits == 0, "a delivery's tag fits above the queue bits")
            return TaskPlace(raw: tag << slotBits | UInt64(ServiceBook.none))
        }

        /// No place: what an empty slot of ``TaskTable`` holds (never a request's).
        static let vacant = TaskPlace(raw: 0)

        var kind: Kind {
            raw & slotMask == UInt64(ServiceBook.none) ? .running(tag: raw >> slotBits) : .waiting(arrival: raw)
        }
    }
}
