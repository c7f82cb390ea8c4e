import CSpindle

/// The machine as Spindle sees it: NUMA nodes and their usable CPUs.
///
/// Read from sysfs — `/sys`, or the tree named by the `SPINDLE_SYSFS_ROOT` environment
/// variable, or an explicit root — and restricted to the process's CPU affinity mask or
/// an explicit CPU list, so that you can plan for a machine you are not running on:
///
/// ```swift
/// let topo = try Topology.load(sysfsRoot: "fixtures/epyc", cpus: "0-63,128-191")
/// let plan = try topo.plan(pinning: .core)
/// ```
public struct Topology: Sendable {
    /// A NUMA node and the CPUs of it that Spindle may use.
    public struct Node: Sendable, Equatable {
        /// The node's id in sysfs.
        public let id: Int
        /// Its usable CPUs, ascending.
        public let cpus: [Int]
    }

    /// Nodes with usable CPUs, by ascending id.
    public let nodes: [Node]
    /// Distance between nodes, by index into ``nodes`` (10: the same node).
    public let distances: [[Int]]
    /// Why the topology fell back to a single node (no NUMA support, partial sysfs),
    /// or nil.
    public let fallbackReason: String?

    let handle: TopologyHandle

    /// Errors loading a topology or planning on it.
    public enum Error: Swift.Error, Equatable, Sendable {
        /// The CPU list is malformed, or no CPU in it is usable.
        case invalidCPUList(String)
        /// The plan's arguments do not fit the topology (no such node, too many workers).
        case invalidPlan(String)
        /// The sysfs tree named is not there, or says something impossible (which file,
        /// and what).
        case invalidSysfs(String)
        case systemError(errno: Int32)
    }

    /// Reads the topology. `sysfsRoot` nil: `SPINDLE_SYSFS_ROOT` or `/sys`; `cpus` nil:
    /// the calling thread's affinity mask (inside a pool's work, the mask that pool was
    /// planned for); otherwise a list such as `"0-63,128-191"`.
    public static func load(sysfsRoot: String? = nil, cpus: String? = nil) throws -> Topology {
        var raw: OpaquePointer?
        let rc = unsafe withOptionalCString(sysfsRoot) { root in
            unsafe withOptionalCString(cpus) { list in unsafe spindle_topology_load(root, list, &raw) }
        }
        guard rc == 0, let raw = unsafe raw else {
            let why = unsafe spindle_topology_load_error().map { unsafe String(cString: $0) }
            switch rc {
            case EINVAL: throw Error.invalidCPUList(why.map { "\(cpus ?? "the CPU mask"): \($0)" } ?? (cpus ?? "the CPU mask"))
            case ENOENT, EBADMSG: throw Error.invalidSysfs(why ?? "errno \(rc)")
            default: throw Error.systemError(errno: rc)
            }
        }
        let handle = unsafe TopologyHandle(raw)
        var nodes: [Node] = []
        let n = unsafe spindle_topology_node_count(raw)
        for i in 0..<n {
            let count = unsafe spindle_topology_node_cpus(raw, i, nil, 0)
            var cpus = [Int32](repeating: 0, count: Int(count))
            unsafe spindle_topology_node_cpus(raw, i, &cpus, count)
            unsafe nodes.append(Node(id: Int(spindle_topology_node_id(raw, i)), cpus: cpus.map(Int.init)))
        }
        let distances = (0..<n).map { a in (0..<n).map { b in unsafe Int(spindle_topology_distance(raw, a, b)) } }
        let fallback = unsafe spindle_topology_fallback(raw).map { unsafe String(cString: $0) }
        return Topology(nodes: nodes, distances: distances, fallbackReason: fallback, handle: handle)
    }

    /// Plans `workers` workers (nil: one per usable CPU) on the given nodes (nil: all).
    public func plan(workers: Int? = nil, pinning: ThreadPool.Pinning = .node, nodes nodeIDs: [Int]? = nil) throws -> PlacementPlan {
        let most = ThreadPool.maxWorkers
        if let w = workers, w < 1 || w > most { throw Error.invalidPlan("workers must be in 1...\(most), got \(w)") }
        if let ids = nodeIDs {
            for id in ids where !nodes.contains(where: { $0.id == id }) {
                throw Error.invalidPlan("node \(id) has no usable CPU (known: \(nodes.map(\.id)))")
            }
        }
        let cpus = nodes.filter { nodeIDs?.contains($0.id) ?? true }.reduce(0) { $0 + $1.cpus.count }
        if workers == nil, cpus > most {
            throw Error.invalidPlan("one worker per usable CPU would be \(cpus) workers, more than the \(most) a pool can have: "
                                    + "pass workers (1...\(most)), or fewer nodes")
        }
        var raw: OpaquePointer?
        let ids = (nodeIDs ?? []).map(Int32.init)
        let rc = unsafe ids.withUnsafeBufferPointer { buf in
            unsafe spindle_plan_create(handle.raw, UInt32(workers ?? 0), pinning.engineValue, buf.baseAddress, UInt32(buf.count), &raw)
        }
        guard rc == 0, let raw = unsafe raw else {
            if rc == EINVAL { throw Error.invalidPlan("the chosen nodes have no usable CPU") }
            throw Error.systemError(errno: rc)
        }
        return unsafe PlacementPlan(PlanHandle(raw))
    }
}

/// Where a pool's workers go and whom each steals from, nearest first.
public struct PlacementPlan: Sendable {
    /// One worker's placement.
    public struct Worker: Sendable, Equatable {
        /// The worker's index in the pool.
        public let id: Int
        /// The CPU it is pinned to, or nil (pinned to its node, or not pinned).
        public let cpu: Int?
        /// The NUMA node it runs on.
        public let node: Int
        /// The node its memory comes from (its own, or the nearest with memory).
        public let memoryNode: Int
        let handle: PlanHandle

        /// The other workers, nearest first: SMT sibling, same L3, same node, other
        /// nodes by distance.
        ///
        /// Built when asked for: the engine keeps each tier as a range of one ordering
        /// of the workers, so that a plan takes memory linear in its workers, and this
        /// list holds all the others.
        public var stealOrder: [Int] { stealTiers.flatMap { $0 } }

        /// The steal order cut into its tiers, each listed by worker index.
        public var stealTiers: [[Int]] {
            let raw = unsafe handle.raw, w = UInt32(id)
            let n = unsafe spindle_plan_worker_count(raw)
            var order = [UInt32](repeating: 0, count: Int(n))
            let k = unsafe Int(spindle_plan_steal_order(raw, w, &order, n))
            return unsafe (0..<spindle_plan_tier_count(raw, w)).map { t in
                let lo = unsafe Int(spindle_plan_tier_start(raw, w, t)), hi = unsafe Int(spindle_plan_tier_start(raw, w, t + 1))
                return order[min(lo, k)..<min(hi, k)].map(Int.init)
            }
        }

        public static func == (a: Worker, b: Worker) -> Bool {
            a.id == b.id && a.cpu == b.cpu && a.node == b.node && a.memoryNode == b.memoryNode
                && a.stealTiers == b.stealTiers
        }
    }

    /// The workers, by index.
    public let workers: [Worker]
    let handle: PlanHandle

    init(_ handle: PlanHandle) {
        self.handle = handle
        let raw = unsafe handle.raw
        workers = unsafe (0..<spindle_plan_worker_count(raw)).map { w in
            let cpu = unsafe spindle_plan_worker_cpu(raw, w)
            return unsafe Worker(id: Int(w), cpu: cpu >= 0 ? Int(cpu) : nil, node: Int(spindle_plan_worker_node(raw, w)),
                          memoryNode: Int(spindle_plan_worker_memory_node(raw, w)), handle: handle)
        }
    }
}

extension ThreadPool {
    /// How workers are tied to CPUs.
    public enum Pinning: Sendable {
        /// Each worker may run on any CPU of its NUMA node (the default). The kernel
        /// can move a worker off a CPU that other threads keep busy; and a worker woken
        /// to steal forked work that the kernel places beside the worker that forked
        /// it moves itself to a CPU of the node where no other worker of its pool runs
        /// (at most one such move per pool every 10 ms).
        case node
        /// Each worker is pinned to one CPU: for machines whose CPUs the pool has to
        /// itself. A pinned worker cannot leave a CPU that another busy thread shares
        /// with it; it runs there in turns with that thread, a scheduler slice (some
        /// milliseconds) at a time, and the tasks it has taken wait with it until an
        /// idle worker steals them.
        case core
        /// Workers may run anywhere the process may (and move as with ``node``).
        case none

        var engineValue: spindle_pinning {
            switch self {
            case .node: return SPINDLE_PIN_NODE
            case .core: return SPINDLE_PIN_CORE
            case .none: return SPINDLE_PIN_NONE
            }
        }
    }
}

/// Owns a C topology; freed with the last copy of the Topology.
@safe
final class TopologyHandle: @unchecked Sendable {
    // safety: owns `raw`, freed once in deinit.
    // @unchecked: immutable after load; the C object is only read.
    let raw: OpaquePointer
    init(_ raw: OpaquePointer) { unsafe self.raw = unsafe raw }
    deinit { unsafe spindle_topology_free(raw) }
}

/// Owns a C plan; freed with the last copy of the PlacementPlan.
@safe
final class PlanHandle: @unchecked Sendable {
    // safety: owns `raw`, freed once in deinit.
    // @unchecked: immutable after creation; the C object is only read.
    let raw: OpaquePointer
    init(_ raw: OpaquePointer) { unsafe self.raw = unsafe raw }
    deinit { unsafe spindle_plan_free(raw) }
}

func withOptionalCString<R>(_ s: String?, _ body: (UnsafePointer<CChar>?) -> R) -> R {
    guard let s else { return body(nil) }
    return unsafe s.withCString { unsafe body($0) }
}
