import CSkySystem
import Dispatch
import Synchronization

/// Returns freed heap memory to the system (`malloc_trim`) on a background queue, off the
/// broker's I/O thread: after a large queue drains, the trim walks every free chunk and takes
/// tens of milliseconds that heartbeats must not wait for. Requests made while one is pending
/// share it.
final class MemoryReleaser: Sendable {
    private let queue = DispatchQueue(label: "sky.broker.memory-release", qos: .utility)
    private let pending = Atomic(false)

    func release() {
        guard !pending.exchange(true, ordering: .acquiringAndReleasing) else { return }
        queue.async {
            self.pending.store(false, ordering: .releasing)
            sky_release_free_memory()
        }
    }
}
