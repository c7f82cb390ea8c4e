import CSpindle
import CSpindleTesting
import Foundation
import Synchronization
import XCTest

@testable import Spindle

/// Placement on machines described by the sysfs fixture trees in Fixtures/topology
/// (made by scripts/make-topology-fixtures.py). Every expectation is written out.
final class TopologyTests: XCTestCase {
    func fixture(_ name: String) -> String { Fixtures.topology(name) }

    func testTwoSocketsWithSMT() throws {
        let topo = try Topology.load(sysfsRoot: fixture("two-socket-smt"), cpus: "0-31")
        XCTAssertNil(topo.fallbackReason)
        XCTAssertEqual(topo.nodes, [
            .init(id: 0, cpus: Array(0...7) + Array(16...23)),
            .init(id: 1, cpus: Array(8...15) + Array(24...31)),
        ])
        XCTAssertEqual(topo.distances, [[10, 21], [21, 10]])

        let plan = try topo.plan(pinning: .core)
        XCTAssertEqual(plan.workers.count, 32)
        // One thread per core first: node 0's workers take 0-7, then the siblings 16-23.
        XCTAssertEqual(plan.workers.map(\.cpu), (Array(0...7) + Array(16...23) + Array(8...15) + Array(24...31)).map { Optional($0) })
        XCTAssertEqual(plan.workers.map(\.node), Array(repeating: 0, count: 16) + Array(repeating: 1, count: 16))
        // Worker 0 (CPU 0): its SMT sibling (CPU 16 = worker 8), then its socket's L3, then node 1.
        XCTAssertEqual(plan.workers[0].stealTiers, [[8], [1, 2, 3, 4, 5, 6, 7, 9, 10, 11, 12, 13, 14, 15], Array(16...31)])
        XCTAssertEqual(plan.workers[8].stealTiers, [[0], [1, 2, 3, 4, 5, 6, 7, 9, 10, 11, 12, 13, 14, 15], Array(16...31)])
        XCTAssertEqual(plan.workers[20].stealTiers, [[28], Array(16...27).filter { $0 != 20 } + Array(29...31), Array(0...15)])

        // Four workers: two per node, one thread per core.
        let small = try topo.plan(workers: 4, pinning: .core)
        XCTAssertEqual(small.workers.map(\.cpu), [0, 1, 8, 9])
        XCTAssertEqual(small.workers[0].stealTiers, [[1], [2, 3]])

        // Node pinning: no CPU of its own, so only node tiers.
        let byNode = try topo.plan(pinning: .node)
        XCTAssertEqual(byNode.workers[0].cpu, nil)
        XCTAssertEqual(byNode.workers[0].stealTiers, [Array(1...15), Array(16...31)])

        // One node requested: all workers there.
        let one = try topo.plan(workers: 6, pinning: .core, nodes: [1])
        XCTAssertEqual(one.workers.map(\.node), Array(repeating: 1, count: 6))
        XCTAssertThrowsError(try topo.plan(nodes: [7]))
    }

    func testAffinityMaskRestrictsNodesAndCPUs() throws {
        let topo = try Topology.load(sysfsRoot: fixture("two-socket-smt"), cpus: "0-3")
        XCTAssertEqual(topo.nodes, [.init(id: 0, cpus: [0, 1, 2, 3])])
        XCTAssertEqual(try topo.plan().workers.count, 4)
        let split = try Topology.load(sysfsRoot: fixture("two-socket-smt"), cpus: "0-1,8-13")
        XCTAssertEqual(split.nodes.map(\.cpus), [[0, 1], [8, 9, 10, 11, 12, 13]])
        // 4 workers over 2 + 6 CPUs: in proportion, 1 and 3.
        XCTAssertEqual(try split.plan(workers: 4).workers.map(\.node), [0, 1, 1, 1])
    }

    func testFourCCXSingleSocketStealsWithinTheL3First() throws {
        let topo = try Topology.load(sysfsRoot: fixture("epyc-4ccx"), cpus: "0-15")
        XCTAssertEqual(topo.nodes.count, 1)
        let plan = try topo.plan(pinning: .core)
        XCTAssertEqual(plan.workers.map(\.cpu), (0...15).map { Optional($0) })
        XCTAssertEqual(plan.workers[0].stealTiers, [[1, 2, 3], Array(4...15)])
        XCTAssertEqual(plan.workers[5].stealTiers, [[4, 6, 7], [0, 1, 2, 3] + Array(8...15)])
    }

    func testSparseAndOfflineCPUs() throws {
        let topo = try Topology.load(sysfsRoot: fixture("sparse-offline"), cpus: "0-7")
        XCTAssertEqual(topo.nodes, [.init(id: 0, cpus: [0, 1]), .init(id: 1, cpus: [4, 5, 7])])
        let plan = try topo.plan(pinning: .core)
        XCTAssertEqual(plan.workers.map(\.cpu), [0, 1, 4, 5, 7])
        XCTAssertEqual(plan.workers[2].stealTiers, [[3, 4], [0, 1]])
        // Two workers over 2 + 3 CPUs: largest remainder gives one each.
        XCTAssertEqual(try topo.plan(workers: 2).workers.map(\.node), [0, 1])
    }

    func testMemorylessNodeTakesMemoryFromTheNearestNode() throws {
        let topo = try Topology.load(sysfsRoot: fixture("memoryless-node"), cpus: "0-11")
        XCTAssertEqual(topo.nodes.map(\.id), [0, 1, 2])
        let plan = try topo.plan(workers: 6)
        XCTAssertEqual(plan.workers.map(\.node), [0, 0, 1, 1, 2, 2])
        XCTAssertEqual(plan.workers.map(\.memoryNode), [0, 0, 0, 0, 2, 2])
        // Other nodes by distance: from node 0, node 1 (16) before node 2 (32).
        XCTAssertEqual(plan.workers[0].stealTiers, [[1], [2, 3], [4, 5]])
        XCTAssertEqual(plan.workers[5].stealTiers, [[4], [2, 3], [0, 1]])
    }

    func testNoNUMAInSysfsFallsBackToOneNode() throws {
        let topo = try Topology.load(sysfsRoot: fixture("no-numa"), cpus: "0-3")
        XCTAssertNotNil(topo.fallbackReason)
        XCTAssertEqual(topo.nodes, [.init(id: 0, cpus: [0, 1, 2, 3])])
        XCTAssertEqual(try topo.plan(pinning: .core).workers.map(\.stealTiers), [[[1, 2, 3]], [[0, 2, 3]], [[0, 1, 3]], [[0, 1, 2]]])
    }

    func testBadCPUListsAreErrors() {
        XCTAssertThrowsError(try Topology.load(sysfsRoot: fixture("epyc-4ccx"), cpus: "0-x"))
        XCTAssertThrowsError(try Topology.load(sysfsRoot: fixture("epyc-4ccx"), cpus: "100-200"), "no usable CPU")
        // Digits only: no sign and no blank inside an item, as the kernel writes them.
        for bad in ["+1", "1- 3", "1-+3", "0x1", "1 -3", "3-1"] {
            XCTAssertThrowsError(try Topology.load(sysfsRoot: fixture("epyc-4ccx"), cpus: bad), "'\(bad)'") { error in
                guard case Topology.Error.invalidCPUList = error else { return XCTFail("'\(bad)': \(error)") }
            }
        }
        XCTAssertEqual(try Topology.load(sysfsRoot: fixture("epyc-4ccx"), cpus: " 1,\t2").nodes
                        .flatMap(\.cpus), [1, 2])
    }

    func testThisMachineHasAUsablePlan() throws {
        let topo = try Topology.load()
        XCTAssertFalse(topo.nodes.isEmpty)
        XCTAssertEqual(topo.nodes.reduce(0) { $0 + $1.cpus.count }, Int(spindle_usable_cpu_count()))
    }

    /// A pool built from a fixture plan allocates each worker's own state and its deque
    /// ring on the worker's memory node — observed through the allocator seam: every
    /// worker's struct and ring lie inside an allocation made for that node, and the
    /// pool allocates nothing else per worker behind the seam's back — and reports that
    /// it could not pin to CPUs this machine does not have, while still running work.
    func testPoolAllocatesOnPlannedNodesThroughTheSeam() throws {
        let topo = try Topology.load(sysfsRoot: fixture("memoryless-node"), cpus: "0-11")
        let plan = try topo.plan(workers: 6, pinning: .core)
        AllocationLog.reset()
        var cfg = spindle_config()
        spindle_config_init(&cfg)
        cfg.plan = plan.handle.raw
        cfg.alloc_on_node = { bytes, node, _ in
            let mem = malloc(bytes)
            AllocationLog.record(node, mem, bytes)
            return mem
        }
        cfg.free_on_node = { mem, _, _ in AllocationLog.forget(mem); free(mem) }
        var raw: OpaquePointer?
        XCTAssertEqual(spindle_pool_create(&cfg, &raw), 0)
        let pool = try XCTUnwrap(raw)
        // Node 1 has no memory: its workers' memory comes from the nearest node that has.
        let memoryNodes: [Int32] = [0, 0, 0, 0, 2, 2]
        XCTAssertEqual(AllocationLog.live.count, 2 * memoryNodes.count, "one state block and one ring per worker")
        for (w, node) in memoryNodes.enumerated() {
            var state: UnsafeRawPointer?, ring: UnsafeRawPointer?, stateBytes = 0, ringBytes = 0
            spindle_test_worker_memory(pool, UInt32(w), &state, &stateBytes, &ring, &ringBytes)
            XCTAssertEqual(AllocationLog.node(containing: state, bytes: stateBytes), node, "worker \(w)'s state")
            XCTAssertEqual(AllocationLog.node(containing: ring, bytes: ringBytes), node, "worker \(w)'s deque ring")
            XCTAssertEqual(Int(bitPattern: state) % 64, 0, "worker \(w)'s state is cache-line aligned")
        }
        XCTAssertEqual((0..<6).map { spindle_pool_worker_node(pool, $0) }, [0, 0, 1, 1, 2, 2])
        XCTAssertEqual(spindle_pool_steal_tiers(pool, 0), 3)
        if spindle_usable_cpu_count() < 12 {
            XCTAssertEqual(spindle_pool_pin_error(pool), EINVAL, "CPUs 4-11 do not exist here: pinning must report it")
        }
        // It still runs work (unpinned where pinning failed).
        let sem = DispatchSemaphore(value: 0)
        let ctx = Unmanaged.passRetained(sem).toOpaque()
        XCTAssertEqual(spindle_submit(pool, { ctx, _ in Unmanaged<DispatchSemaphore>.fromOpaque(ctx!).takeRetainedValue().signal() }, ctx), 0)
        XCTAssertEqual(sem.wait(timeout: .now() + 60), .success)
        spindle_pool_destroy(pool, SPINDLE_SHUTDOWN_DRAIN)
        XCTAssertTrue(AllocationLog.live.isEmpty, "everything allocated through the seam is freed through it")
    }

    /// A process restricted to one CPU gets a one-worker pool (run in a child process
    /// under `taskset -c 0`).
    func testOneCPUAffinityGivesOneWorker() throws {
        if ProcessInfo.processInfo.environment["SPINDLE_AFFINITY_PROBE"] != nil {
            print("WORKERS=\(try ThreadPool().workerCount)")
            return
        }
        var env = ProcessInfo.processInfo.environment
        env["SPINDLE_AFFINITY_PROBE"] = "1"
        let (status, text) = try runChild("/usr/bin/taskset", ["-c", "0", CommandLine.arguments[0],
                                                              "SpindleTests.TopologyTests/testOneCPUAffinityGivesOneWorker"], environment: env)
        XCTAssertEqual(status, 0, text)
        XCTAssertTrue(text.contains("WORKERS=1"), text)
    }
}

/// The test allocator's live allocations (creation and destruction are single-threaded).
enum AllocationLog {
    struct Entry { let node: Int32; let start: UInt; let bytes: Int }
    nonisolated(unsafe) static var live: [Entry] = []
    static func reset() { live = [] }
    static func record(_ node: Int32, _ mem: UnsafeMutableRawPointer?, _ bytes: Int) {
        if let mem { live.append(Entry(node: node, start: UInt(bitPattern: mem), bytes: bytes)) }
    }
    static func forget(_ mem: UnsafeMutableRawPointer?) { live.removeAll { $0.start == UInt(bitPattern: mem) } }
    /// The node of the live allocation holding `bytes` bytes from `p`; nil if none does.
    static func node(containing p: UnsafeRawPointer?, bytes: Int) -> Int32? {
        guard let p else { return nil }
        let a = UInt(bitPattern: p)
        return live.first { a >= $0.start && a + UInt(bytes) <= $0.start + UInt($0.bytes) }?.node
    }
}

/// libnuma is looked up when the process first needs it, not linked: a machine without
/// it builds and runs Spindle, scheduled as one node, with a note that names the library.
final class LibnumaAtRunTimeTests: XCTestCase {
    override func tearDown() {
        _ = spindle_test_numa_reload(nil) // back to the real library, if the machine has it
    }

    func testWithoutLibnumaTheMachineIsOneNodeAndTheNoteNamesTheLibrary() throws {
        XCTAssertEqual(spindle_test_numa_reload("libnuma-not-installed.so.1"), 0)
        let topo = try Topology.load() // the real /sys
        XCTAssertEqual(topo.nodes.count, 1)
        let why = try XCTUnwrap(topo.fallbackReason)
        XCTAssertTrue(why.contains("libnuma-not-installed.so.1 is not installed"), why)
        XCTAssertTrue(why.contains("libnuma1"), "the note names the package to install: \(why)")
        // A pool still runs work.
        let pool = try ThreadPool(configuration: .init())
        let ran = Counter()
        pool.concurrentPerform(iterations: 100) { _ in ran.increment() }
        XCTAssertEqual(ran.value, 100)
        try pool.shutdown()
    }

    func testTheRealLibraryIsFoundWhereItIsInstalled() throws {
        let installed = FileManager.default.fileExists(atPath: "/usr/lib/x86_64-linux-gnu/libnuma.so.1")
            || FileManager.default.fileExists(atPath: "/usr/lib/aarch64-linux-gnu/libnuma.so.1")
        try XCTSkipUnless(installed, "libnuma1 is not installed on this machine")
        XCTAssertEqual(spindle_test_numa_reload(nil), 1, "libnuma.so.1 is installed but was not usable")
        let topo = try Topology.load()
        if let why = topo.fallbackReason { XCTAssertFalse(why.contains("not installed"), why) }
    }
}

/// Malformed or missing sysfs trees give a precise error or a fallback that says why.
final class TopologyErrorTests: XCTestCase {
    /// A copy of a fixture tree, to break.
    func copyOf(_ fixture: String) throws -> String {
        let source = Fixtures.topology(fixture)
        let dest = NSTemporaryDirectory() + "spindle-topo-\(UUID().uuidString)"
        try Fixtures.copyTree(source, to: dest)
        addTeardownBlock { try? FileManager.default.removeItem(atPath: dest) }
        return dest
    }

    func write(_ text: String, to path: String) throws {
        try? FileManager.default.removeItem(atPath: path)
        try text.write(toFile: path, atomically: false, encoding: .utf8)
    }

    func testAMistypedRootIsAnErrorNotThisMachine() {
        XCTAssertThrowsError(try Topology.load(sysfsRoot: "/no/such/sysfs/tree", cpus: "0-3")) { error in
            guard case Topology.Error.invalidSysfs(let why) = error else { return XCTFail("\(error)") }
            XCTAssertTrue(why.contains("/no/such/sysfs/tree"), why)
        }
    }

    func testAnEmptyOnlineListNamesTheFile() throws {
        let root = try copyOf("two-socket-smt")
        try write("\n", to: root + "/devices/system/cpu/online")
        XCTAssertThrowsError(try Topology.load(sysfsRoot: root, cpus: "0-31")) { error in
            guard case Topology.Error.invalidSysfs(let why) = error else { return XCTFail("\(error)") }
            XCTAssertTrue(why.contains("devices/system/cpu/online is empty or malformed"), why)
        }
    }

    func testAFIFOInTheTreeDoesNotBlockTheLoad() throws {
        let root = try copyOf("two-socket-smt")
        let online = root + "/devices/system/cpu/online"
        try FileManager.default.removeItem(atPath: online)
        XCTAssertEqual(mkfifo(online, 0o644), 0)
        let done = DispatchSemaphore(value: 0)
        let outcome = Mutex<String>("")
        Thread.detachNewThread {
            do {
                _ = try Topology.load(sysfsRoot: root, cpus: "0-31")
                outcome.locked { $0 = "loaded" }
            } catch {
                outcome.locked { $0 = "\(error)" }
            }
            done.signal()
        }
        XCTAssertEqual(done.wait(timeout: .now() + 60), .success, "a FIFO in the tree blocked the load")
        let said = outcome.locked { $0 }
        XCTAssertTrue(said.contains("devices/system/cpu/online is not a regular file"), said)
    }

    /// The online list present as a directory is a malformed tree, named, not a tree
    /// without an online list.
    func testAnOnlineListThatIsADirectoryNamesTheFile() throws {
        let root = try copyOf("two-socket-smt")
        let online = root + "/devices/system/cpu/online"
        try FileManager.default.removeItem(atPath: online)
        try FileManager.default.createDirectory(atPath: online, withIntermediateDirectories: false)
        XCTAssertThrowsError(try Topology.load(sysfsRoot: root, cpus: "0-31")) { error in
            guard case Topology.Error.invalidSysfs(let why) = error else { return XCTFail("\(error)") }
            XCTAssertTrue(why.contains("devices/system/cpu/online is not a regular file"), why)
        }
    }

    /// A distance row must be one integer per online node (two here): a row that is
    /// not schedules the machine as one node and says which way it is wrong.
    func testMalformedDistanceRowsFallBackAndSayHow() throws {
        let cases = ["nan 21": "other than integers", "10 21x": "other than integers", "10": "fewer entries",
                     "": "fewer entries", "10 21 21": "more entries", "10 NaN": "other than integers"]
        for (row, reason) in cases {
            let root = try copyOf("two-socket-smt")
            try write(row + "\n", to: root + "/devices/system/node/node0/distance")
            let topo = try Topology.load(sysfsRoot: root, cpus: "0-31")
            XCTAssertEqual(topo.nodes.count, 1, "'\(row)'")
            XCTAssertTrue(topo.fallbackReason?.contains(reason) ?? false, "'\(row)': \(topo.fallbackReason ?? "no reason")")
        }
        // A distance that is a directory.
        let root = try copyOf("two-socket-smt")
        let distance = root + "/devices/system/node/node1/distance"
        try FileManager.default.removeItem(atPath: distance)
        try FileManager.default.createDirectory(atPath: distance, withIntermediateDirectories: false)
        let topo = try Topology.load(sysfsRoot: root, cpus: "0-31")
        XCTAssertEqual(topo.nodes.count, 1)
        XCTAssertTrue(topo.fallbackReason?.contains("not a regular file") ?? false, topo.fallbackReason ?? "no reason")
        // A well-formed row with spacing of its own still loads.
        let spaced = try copyOf("two-socket-smt")
        try write("  10\t21 \n", to: spaced + "/devices/system/node/node0/distance")
        let two = try Topology.load(sysfsRoot: spaced, cpus: "0-31")
        XCTAssertEqual(two.nodes.count, 2, two.fallbackReason ?? "")
        XCTAssertEqual(two.distances[0], [10, 21])
    }

    func testOutOfRangeDistancesFallBackAndSaySo() throws {
        for bad in ["10 99999999999999999999", "10 -21", "10 0"] {
            let root = try copyOf("two-socket-smt")
            try write(bad + "\n", to: root + "/devices/system/node/node0/distance")
            let topo = try Topology.load(sysfsRoot: root, cpus: "0-31")
            XCTAssertEqual(topo.nodes.count, 1, bad)
            XCTAssertTrue(topo.fallbackReason?.contains("distance") ?? false, "\(bad): \(topo.fallbackReason ?? "no reason")")
        }
    }
}

/// Planning is fast at scale, and the CPU limit is named.
final class PlanningScaleTests: XCTestCase {
    func testACPUListBeyondTheEngineLimitNamesIt() {
        XCTAssertThrowsError(try Topology.load(cpus: "0-9000")) { error in
            guard case Topology.Error.invalidCPUList(let why) = error else { return XCTFail("\(error)") }
            XCTAssertTrue(why.contains("8192"), why)
        }
    }
}
