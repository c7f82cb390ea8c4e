import CSpindle
import CSpindleTesting
import Foundation
import XCTest

@testable import Spindle

/// A machine far larger than this one, written as a sysfs tree: `nodes` nodes of
/// `cores` two-thread cores each, eight cores to an L3, numbered as x86 Linux numbers
/// them (every core's first thread, then every second thread). Node `a` is 16 from the
/// other node of its package and 20 + |a - b| from the rest, so distance and id orders
/// differ.
struct ManyCoreMachine {
    let nodes: Int
    let cores: Int
    static let coresPerL3 = 8

    var cpuCount: Int { nodes * cores * 2 }
    /// The CPU's node, core (numbered machine-wide) and L3 group (machine-wide).
    func node(ofCPU c: Int) -> Int { (c % (nodes * cores)) / cores }
    func core(ofCPU c: Int) -> Int { c % (nodes * cores) }
    func l3(ofCPU c: Int) -> Int { core(ofCPU: c) / Self.coresPerL3 }
    func distance(_ a: Int, _ b: Int) -> Int { a == b ? 10 : a / 2 == b / 2 ? 16 : 20 + abs(a - b) }

    /// Writes the tree under a new temporary directory and returns its path.
    func write() throws -> String {
        let root = FileManager.default.temporaryDirectory
            .appendingPathComponent("spindle-manycore-\(nodes)x\(cores)-\(getpid())").path
        try? FileManager.default.removeItem(atPath: root)
        func put(_ rel: String, _ text: String) throws {
            let path = root + "/" + rel
            try FileManager.default.createDirectory(atPath: (path as NSString).deletingLastPathComponent,
                                                    withIntermediateDirectories: true)
            try (text + "\n").write(toFile: path, atomically: false, encoding: .utf8)
        }
        let firsts = nodes * cores
        try put("devices/system/cpu/online", "0-\(cpuCount - 1)")
        for c in 0..<cpuCount {
            let core = core(ofCPU: c), group = l3(ofCPU: c) * Self.coresPerL3
            let dir = "devices/system/cpu/cpu\(c)"
            try put("\(dir)/topology/physical_package_id", "\(node(ofCPU: c) / 2)")
            try put("\(dir)/topology/core_id", "\(core % cores)")
            try put("\(dir)/topology/thread_siblings_list", "\(core),\(core + firsts)")
            let last = group + Self.coresPerL3 - 1
            try put("\(dir)/cache/index3/shared_cpu_list", "\(group)-\(last),\(group + firsts)-\(last + firsts)")
        }
        try put("devices/system/node/online", "0-\(nodes - 1)")
        for n in 0..<nodes {
            let lo = n * cores, hi = lo + cores - 1
            try put("devices/system/node/node\(n)/cpulist", "\(lo)-\(hi),\(lo + firsts)-\(hi + firsts)")
            try put("devices/system/node/node\(n)/distance", (0..<nodes).map { "\(distance(n, $0))" }.joined(separator: " "))
            try put("devices/system/node/node\(n)/meminfo", "Node \(n) MemTotal:       16777216 kB")
        }
        return root
    }
}

/// Planning many-core machines: the steal tiers still say what PL3 (topology_plan.c)
/// says they are, and what a plan or a pool holds grows linearly with its workers.
final class PlanScalingTests: XCTestCase {
    static let machine = ManyCoreMachine(nodes: 8, cores: 128) // 2048 CPUs
    nonisolated(unsafe) static var root: String?

    override class func tearDown() {
        if let root { try? FileManager.default.removeItem(atPath: root) }
    }

    func topology() throws -> Topology {
        if Self.root == nil { Self.root = try Self.machine.write() }
        return try Topology.load(sysfsRoot: Self.root, cpus: "0-\(Self.machine.cpuCount - 1)")
    }

    /// The tiers PL3 defines, computed from the machine's description rather than by the
    /// engine: same core, same L3, same node, then every other node by (distance, id),
    /// each listed by worker index, empty ones left out.
    func expectedTiers(of w: Int, in plan: PlacementPlan) -> [[Int]] {
        let m = Self.machine
        let me = plan.workers[w], myCPU = me.cpu!
        let others = plan.workers.filter { $0.id != w }
        let sameNode = others.filter { $0.node == me.node }
        let core = sameNode.filter { m.core(ofCPU: $0.cpu!) == m.core(ofCPU: myCPU) }
        let l3 = sameNode.filter { m.l3(ofCPU: $0.cpu!) == m.l3(ofCPU: myCPU) && m.core(ofCPU: $0.cpu!) != m.core(ofCPU: myCPU) }
        let node = sameNode.filter { m.l3(ofCPU: $0.cpu!) != m.l3(ofCPU: myCPU) }
        let remote = (0..<m.nodes).filter { $0 != me.node }
            .sorted { (m.distance(me.node, $0), $0) < (m.distance(me.node, $1), $1) }
            .map { n in others.filter { $0.node == n } }
        return ([core, l3, node] + remote).map { $0.map(\.id) }.filter { !$0.isEmpty }
    }

    func testStealTiersOnAManyCoreMachineAreWhatP3Defines() throws {
        let topo = try topology()
        XCTAssertEqual(topo.nodes.count, 8)
        // One worker per CPU; fewer workers than cores (first threads only, uneven
        // nodes); more workers than CPUs (several on one CPU).
        for workers in [2048, 700, 3001] {
            let plan = try topo.plan(workers: workers, pinning: .core)
            XCTAssertEqual(plan.workers.count, workers)
            for w in stride(from: 0, to: workers, by: 97) {
                XCTAssertEqual(plan.workers[w].stealTiers, expectedTiers(of: w, in: plan), "\(workers) workers, worker \(w)")
                XCTAssertEqual(plan.workers[w].stealOrder.count, workers - 1)
            }
        }
        // Node pinning: no fixed CPU, so only node tiers.
        let byNode = try topo.plan(workers: 64, pinning: .node)
        XCTAssertEqual(byNode.workers[0].stealTiers.first, Array(1..<8))
        XCTAssertEqual(byNode.workers[0].stealTiers.count, 8)
    }

    /// A machine with more CPUs than a pool can have workers: a plan for one worker per
    /// CPU names the limit and what to do, and a count within it plans.
    func testAPlanForMoreCPUsThanAPoolCanHaveNamesTheLimit() throws {
        // Two nodes of 2112 CPUs, with no per-CPU files: cores and caches unknown.
        let root = FileManager.default.temporaryDirectory.appendingPathComponent("spindle-4224-\(getpid())").path
        defer { try? FileManager.default.removeItem(atPath: root) }
        for (rel, text) in [("cpu/online", "0-4223"), ("node/online", "0-1"),
                            ("node/node0/cpulist", "0-2111"), ("node/node0/distance", "10 20"),
                            ("node/node1/cpulist", "2112-4223"), ("node/node1/distance", "20 10")] {
            let path = root + "/devices/system/" + rel
            try FileManager.default.createDirectory(atPath: (path as NSString).deletingLastPathComponent,
                                                    withIntermediateDirectories: true)
            try (text + "\n").write(toFile: path, atomically: false, encoding: .utf8)
        }
        let topo = try Topology.load(sysfsRoot: root, cpus: "0-4223")
        XCTAssertEqual(topo.nodes.map(\.cpus.count), [2112, 2112])
        XCTAssertThrowsError(try topo.plan()) { error in
            guard case Topology.Error.invalidPlan(let why) = error else { return XCTFail("\(error)") }
            XCTAssertTrue(why.contains("4224") && why.contains("4096") && why.contains("pass workers"), why)
        }
        XCTAssertEqual(try topo.plan(workers: 4096).workers.count, 4096)
        // One node is within the limit.
        XCTAssertEqual(try topo.plan(nodes: [1]).workers.count, 2112)
    }

    func testAPlanTakesMemoryLinearInItsWorkers() throws {
        let topo = try topology()
        let cpus = Self.machine.cpuCount, nodes = Self.machine.nodes
        var bytes: [Int: Int] = [:]
        for workers in [1024, 2048, 4096] {
            let plan = try topo.plan(workers: workers, pinning: .core)
            bytes[workers] = spindle_test_plan_bytes(plan.handle.raw)
            // A steal list per worker would be 4 bytes per pair of workers: 64 MB at 4096.
            XCTAssertLessThan(bytes[workers]!, 256 * workers + 8 * cpus + 32 * nodes * nodes + 4096,
                              "\(workers) workers")
        }
        // Exactly linear: each doubling adds as much per worker as the one before.
        XCTAssertEqual((bytes[4096]! - bytes[2048]!) / 2048, (bytes[2048]! - bytes[1024]!) / 1024)
    }

    /// A pool holds per worker one state block of a fixed size and one pointer in the
    /// shared steal order: the bytes grow by the same amount with every worker.
    func testAPoolsPlacementGrowsLinearlyWithItsWorkers() throws {
        var bytes: [Int] = []
        for workers in [4, 8, 16] {
            let pool = try ThreadPool(workers: workers)
            bytes.append(spindle_test_pool_placement_bytes(pool.raw))
            try pool.shutdown()
        }
        XCTAssertEqual(bytes[2] - bytes[1], 2 * (bytes[1] - bytes[0]), "\(bytes)")
    }
}
