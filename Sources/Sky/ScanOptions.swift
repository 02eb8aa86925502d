import SkyProtocol

/// How one call runs: its timeouts, its retries, and whether it may share an execution.
///
/// A client holds defaults (``SkyClient/Configuration/defaults``); a call may pass its own.
public struct ScanOptions: Sendable, Equatable {
    /// The options' values, shared by every copy until one is changed: a call's options travel
    /// from the caller through the client's queue into its request table, and as a value of
    /// their own (about 170 bytes) they were copied whole at every step of the way
    /// (docs/performance-history.md). A change makes a new box; options are set up once and
    /// passed many times.
    fileprivate struct Fields: Equatable, Sendable {
        var timeout: Duration?
        var deadline: Duration?
        var retry: RetryPolicy
        var coalesce: Bool
        var priority: JobPriority
        var keepIfAbandoned: Bool
        var concurrencyKey: String?
        var concurrencyLimit: Int?
        var keptAs: JobID?
    }

    fileprivate final class Box: Sendable {
        let fields: Fields
        init(_ fields: Fields) { self.fields = fields }
    }

    fileprivate var box: Box

    private mutating func change(_ body: (inout Fields) -> Void) {
        var fields = box.fields
        body(&fields)
        box = Box(fields)
    }

    public static func == (left: ScanOptions, right: ScanOptions) -> Bool {
        left.box === right.box || left.box.fields == right.box.fields
    }

    /// How long one attempt may wait for its reply; `nil` waits as long as it takes. The broker
    /// gets it too: a request still waiting for a worker then is answered `timeout` there. Zero
    /// or less is refused as ``SkyError/invalidTask(_:)`` before anything is sent.
    public var timeout: Duration? {
        get { box.fields.timeout }
        set { change { $0.timeout = newValue } }
    }
    /// How long the whole call may take, every attempt and backoff included: 30 s unless you
    /// say otherwise, so that a hung handler costs a caller 30 s, not attempts × timeout, and a
    /// retry never starts on a second worker after the caller's time is up. `nil` bounds the
    /// call only by ``retry``'s attempts × ``timeout``. When it passes, the call throws
    /// ``SkyError/timeout(_:)`` and the task is cancelled at the broker. A ``timeout`` longer
    /// than the deadline never fires: raise both. Zero or less (a deadline that had passed
    /// before the call started) is refused as ``SkyError/invalidTask(_:)`` before anything is
    /// sent.
    public var deadline: Duration? {
        get { box.fields.deadline }
        set { change { $0.deadline = newValue } }
    }
    public var retry: RetryPolicy {
        get { box.fields.retry }
        set { change { $0.retry = newValue } }
    }
    /// Share one remote execution with concurrent calls of an equal task (same service, same
    /// encoded payload). Turn it off for tasks that must run once per call.
    public var coalesce: Bool {
        get { box.fields.coalesce }
        set { change { $0.coalesce = newValue } }
    }
    /// While calls of a service wait for a worker, higher priority goes first, in four bands:
    /// ``JobPriority/urgent`` and above, above normal, ``JobPriority/normal``, below normal;
    /// within a band, older first. A call that joins an equal one in flight (``coalesce``)
    /// shares that one's place. A broker older than this option drops a call that sets it as
    /// malformed (its longer header), and the call times out: upgrade the broker first.
    public var priority: JobPriority {
        get { box.fields.priority }
        set { change { $0.priority = newValue } }
    }
    /// If the caller leaves the call (its ``deadline`` passes, its task is cancelled, or its
    /// process goes away) before the result, the broker keeps the call as a durable job whose
    /// id is the call's, instead of dropping it: the work is not lost, and any process reads
    /// its outcome later. A caller whose deadline passed gets ``SkyError/keptAsJob(_:)`` with the
    /// id. Nothing is written while the caller waits, so a broker that dies before the caller
    /// leaves loses the call as any call. Such a call is sent once (``retry`` and ``coalesce``
    /// do not apply: lost workers are the broker's to retry), its attempt lasts until the
    /// ``deadline``, it never runs in the client's local fallback, and the broker must keep a
    /// journal and name `keep-if-abandoned` in `mmi.features` (else ``SkyError/invalidTask(_:)``
    /// before anything is sent). To hold the job's id before the call ends (to store it, for
    /// another process, in case this one dies), choose it:
    /// ``SkyClient/scan(_:keptAs:options:coder:)``. See docs/jobs.md, "Calls that outlive their
    /// caller".
    public var keepIfAbandoned: Bool {
        get { box.fields.keepIfAbandoned }
        set { change { $0.keepIfAbandoned = newValue } }
    }
    /// The key (a customer, a tenant) this call shares a concurrency limit and its turns with:
    /// while calls of a service wait, the broker takes them round-robin across keys (priorities
    /// first), so one key's backlog delays another key's call by at most one turn per key
    /// (docs/client.md, "Concurrency keys"). A name: 1–255 bytes of UTF-8 without control
    /// characters. A keyed call does not coalesce with others. Needs a broker that names
    /// `concurrency-keys` in `mmi.features` (else ``SkyError/invalidTask(_:)`` before anything
    /// is sent).
    public var concurrencyKey: String? {
        get { box.fields.concurrencyKey }
        set { change { $0.concurrencyKey = newValue } }
    }
    /// At most this many calls of ``concurrencyKey`` run at once (1 to 1,000,000), counted from
    /// when the broker sends one to a worker until that worker answers it; `nil` for no limit.
    public var concurrencyLimit: Int? {
        get { box.fields.concurrencyLimit }
        set { change { $0.concurrencyLimit = newValue } }
    }
    /// The id the kept call's job takes, chosen by the caller before the call
    /// (``SkyClient/scan(_:keptAs:options:coder:)``); `nil`: the call's own request id. Not
    /// public: an id belongs to one call, and these options are also the client's defaults.
    var keptAs: JobID? {
        get { box.fields.keptAs }
        set { change { $0.keptAs = newValue } }
    }

    public init(
        timeout: Duration? = .seconds(30), deadline: Duration? = .seconds(30), retry: RetryPolicy = .default,
        coalesce: Bool = true, priority: JobPriority = .normal, keepIfAbandoned: Bool = false,
        concurrencyKey: String? = nil, concurrencyLimit: Int? = nil
    ) {
        box = Box(
            Fields(
                timeout: timeout, deadline: deadline, retry: retry, coalesce: coalesce, priority: priority,
                keepIfAbandoned: keepIfAbandoned, concurrencyKey: concurrencyKey, concurrencyLimit: concurrencyLimit,
                keptAs: nil))
    }

    /// Why the concurrency key and limit cannot be sent, if they cannot.
    var concurrencyProblem: String? {
        if let concurrencyKey, let problem = WireFormat.nameProblem(concurrencyKey, what: "concurrency key") {
            return problem
        }
        guard let concurrencyLimit else { return nil }
        guard concurrencyKey != nil else {
            return
                "a concurrency limit needs its key: ScanOptions(concurrencyKey: \"customer-42\", concurrencyLimit: \(concurrencyLimit))"
        }
        guard (1...Int(RequestHeader.maxConcurrencyLimit)).contains(concurrencyLimit) else {
            return
                "a concurrency limit is 1...\(RequestHeader.maxConcurrencyLimit) calls at once; got \(concurrencyLimit)"
        }
        return nil
    }

    /// 30 s per attempt, 30 s for the whole call, ``RetryPolicy/default``, coalescing on, normal
    /// priority.
    public static let `default` = ScanOptions()
}

/// Printed and dumped as its values, not as its box.
extension ScanOptions: CustomReflectable {
    public var customMirror: Mirror {
        Mirror(self, children: Mirror(reflecting: box.fields).children, displayStyle: .struct)
    }
}
