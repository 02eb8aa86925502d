import CSkySystem
import Foundation
import SkyProtocol

/// Reads this process's memory: live heap from glibc, resident size from `/proc/self/statm`.
enum ProcessMemoryProbe {
    static func measure() -> ProcessMemory {
        ProcessMemory(heapInUse: Int(sky_heap_in_use()), resident: residentBytes())
    }

    private static func residentBytes() -> Int {
        guard let statm = try? String(contentsOfFile: "/proc/self/statm", encoding: .utf8) else { return 0 }
        let fields = statm.split(separator: " ")
        guard fields.count > 1, let pages = Int(fields[1]) else { return 0 }
        return pages * Int(sysconf(Int32(_SC_PAGESIZE)))
    }
}
