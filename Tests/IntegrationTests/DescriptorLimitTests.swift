import Foundation
import Sky
import SkyTestSupport
import SkyWorkloads
import Testing

extension SecondLineSuite {
    /// A broker whose open-files limit is used up by idle connections: libzmq can accept no
    /// peer and tells nobody (its I/O thread spins on the failing accept), so before this the
    /// broker wrote nothing and new clients waited without a cause named.
    @Suite("A broker out of file descriptors")
    struct DescriptorLimitTests {
        @Test func theBrokerSaysItHasNoDescriptorLeftAndServesNewClientsOnceConnectionsClose() async throws {
            let cluster = try await TestCluster.start()
            defer { cluster.killAll() }
            _ = try await cluster.startWorker(name: "steady", capacity: 2)
            let pid = cluster.broker.pid
            let open = try FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/fd").count
            let limit = open + 8
            let prlimit = try SkyProcess(
                program: URL(fileURLWithPath: "/usr/bin/prlimit"), ["--pid", "\(pid)", "--nofile=\(limit):\(limit)"],
                name: "prlimit")
            #expect(try await prlimit.waitForExit() == 0)

            // Idle TCP connections to the clients port, more than the descriptors left.
            let port = try #require(cluster.clients.split(separator: ":").last.flatMap { UInt16($0) })
            var connections: [Int32] = []
            defer { for connection in connections { close(connection) } }
            for _ in 0..<32 { connections.append(try Self.connect(port: port)) }

            let warning = try await cluster.broker.waitForLine(onStandardError: true) {
                $0.contains("the broker has no file descriptor left")
            }
            #expect(warning.contains("limit=\(limit)"))
            #expect(warning.contains("ulimit -n"))

            for connection in connections { close(connection) }
            connections = []
            let over = try await cluster.broker.waitForLine(onStandardError: true, timeout: .seconds(30)) {
                $0.contains("file descriptors are free again")
            }
            #expect(over.contains("limit=\(limit)"))
            // A client that connects now is served.
            let sky = try await SkyClient(broker: cluster.clients)
            #expect(try await sky.scan(EchoTask(message: "after")) == EchoTask(message: "after"))
            await sky.close()
            #expect(cluster.broker.isRunning)
            await cluster.stop()
        }

        /// Started from a shell whose soft limit is low (1,024 is common) under a higher hard
        /// one, the broker raises its soft limit to the hard one and says so.
        @Test func theBrokerRaisesItsOpenFilesLimitToTheHardLimit() async throws {
            let program = SkyProcess.binaries.appendingPathComponent("skybroker").path
            let broker = try await StartedBroker.start(
                launcher: ["/usr/bin/prlimit", "--nofile=256:4096", program])
            defer { broker.process.killNow() }
            let limits = try String(contentsOfFile: "/proc/\(broker.process.pid)/limits", encoding: .utf8)
            let line = try #require(limits.split(separator: "\n").first { $0.hasPrefix("Max open files") })
            #expect(
                line.split(separator: " ", omittingEmptySubsequences: true).dropFirst(3).prefix(2) == ["4096", "4096"])
            let logged = try await broker.process.waitForLine(onStandardError: true) {
                $0.contains("raised the open files limit")
            }
            #expect(logged.contains("from=256") && logged.contains("to=4096"))
        }

        /// A TCP connection to 127.0.0.1:`port` that sends nothing.
        static func connect(port: UInt16) throws -> Int32 {
            let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
            guard descriptor >= 0 else { throw POSIXError(.EMFILE) }
            var address = sockaddr_in()
            address.sin_family = sa_family_t(AF_INET)
            address.sin_port = port.bigEndian
            address.sin_addr.s_addr = inet_addr("127.0.0.1")
            let result = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    Foundation.connect(descriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
                }
            }
            guard result == 0 else {
                close(descriptor)
                throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .ECONNREFUSED)
            }
            return descriptor
        }
    }
}
