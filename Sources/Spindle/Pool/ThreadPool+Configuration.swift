import CSpindle
import Logging

extension ThreadPool {
    /// The Linux scheduling policy a pool's workers run under.
    public enum SchedulingPolicy: Int32, Sendable {
        /// The process's own policy (its main thread's): SCHED_OTHER, the ordinary
        /// time-sharing policy, unless the process was started under another
        /// (`chrt -b`, say). Never the policy of the thread that creates the pool.
        case normal = 0
        /// SCHED_BATCH: for throughput work; does not preempt others on wake-up.
        case batch = 1
        /// SCHED_IDLE: runs when nothing else wants the CPU and is preempted at once
        /// when something does; keeps a small share, so it is never starved forever.
        case idle = 2
    }

    /// How to build a pool. Every field has a default that needs no thought.
    public struct Configuration: Sendable {
        /// Worker threads; `nil` means one per CPU in the affinity mask of the thread
        /// that creates the pool (so `taskset` and container CPU sets are honoured). A
        /// pool created from inside another pool's work is sized by the mask that pool
        /// was planned for, not by its worker's, which Spindle may have pinned to one CPU.
        public var workers: Int?
        /// Slots in each worker's deque (rounded up to a power of two). When a worker
        /// spawns more than this without running any, half moves to the shared queue.
        public var dequeCapacity: Int = 256
        /// How long an idle worker keeps looking for work before it sleeps. A worker
        /// woken by a thread outside the pool that it outranks (a lower nice), and
        /// running on that thread's CPU, looks once and sleeps: its spin would only keep
        /// that thread off the CPU.
        public var spin: Duration = .microseconds(50)
        /// Nice value the workers run at (Linux, per thread); nil keeps the process's
        /// (its main thread's, which `nice` and `renice -p` set) — never that of the
        /// thread that creates the pool, which may be another pool's demoted worker.
        /// Negative values need privilege; when refused, workers stay at the process's
        /// nice and ``niceError`` says why.
        public var nice: Int32? = nil
        /// Linux scheduling policy of the workers (see ``SchedulingPolicy``).
        public var policy: SchedulingPolicy = .normal
        /// How workers are tied to CPUs (default: each to its NUMA node's CPUs).
        public var pinning: Pinning = .node
        /// The NUMA nodes to run on (nil: every node with usable CPUs). An empty list, or
        /// a node without usable CPUs, is refused with ``Error/invalidConfiguration(_:)``.
        public var nodes: [Int]?
        /// The CPUs the pool runs on (nil: those of the thread that creates it, its
        /// affinity mask — or, for a pool created inside another pool's work, the CPUs
        /// that pool was planned for). The process-wide pools (``shared`` and the
        /// quality-of-service classes) always use the CPUs the process started with,
        /// whichever thread first touches them. CPUs that are not online are dropped
        /// (none left is ``Error/invalidConfiguration(_:)``); pinning to one the process
        /// may not use (a container's cpuset) is reported by ``pinningError``.
        public var cpus: [Int]?
        /// An explicit placement (overrides `workers`, `pinning`, `nodes` and `cpus`).
        public var plan: PlacementPlan?
        /// Thread-name prefix (the kernel keeps 15 characters, index included).
        public var name: String = "spindle-w"
        /// The scheduler time slice each worker asks for (Linux 6.12+; the kernel
        /// clamps it to 0.1–100 ms). nil: 100 µs for ``SchedulingPolicy/normal`` pools —
        /// short, so that a worker woken for new work preempts the thread that submitted
        /// it rather than waiting for that thread to block — and the kernel's own for
        /// the batch and idle policies. `Duration.zero` keeps the kernel's slice.
        /// A refusal (an older kernel) is reported by ``ThreadPool/timeSliceError``.
        public var timeSlice: Duration? = nil
        /// Spare workers the pool may run, at most, while its workers are blocked inside
        /// their work — in Spindle's own blocking waits (`waitUntilFinished()` in an
        /// operation, a wait on another pool), inside ``ThreadPool/blocking(_:)``, or
        /// found blocked by Spindle's monitor (a worker inside one task, off its CPU,
        /// while work waits). Spares run at the pool's nice and policy and exit after
        /// ``spareIdleTimeout`` without work. 0 turns compensation off. At most 4096.
        public var maxSpareWorkers: Int = 64
        /// How long a spare worker waits for work before it exits.
        public var spareIdleTimeout: Duration = .seconds(2)
        /// The most closures the pool holds queued — accepted and not yet started — at
        /// once (nil: no limit). At the limit, ``ThreadPool/submit(_:)`` throws
        /// ``Error/overloaded``, ``ThreadPool/trySubmit(_:)`` returns false, and
        /// ``ThreadPool/run(ifFull:_:)`` waits for room or throws. The limit counts what
        /// those three queue; fork-join, operations and tasks that prefer the pool as
        /// their executor are not counted.
        public var queueLimit: Int? = nil
        /// The longest the oldest queued closure may have waited — a queueing-delay
        /// budget — before the pool admits no more (nil: no limit). While it has waited
        /// longer, the pool is full exactly as at ``queueLimit``, and it has room again
        /// once that closure starts. It counts what ``ThreadPool/submit(_:)``,
        /// ``ThreadPool/trySubmit(_:)`` and ``ThreadPool/run(ifFull:_:)`` queue. With
        /// both limits set, either one makes the pool full.
        ///
        /// A depth limit means different waits for different work; a delay limit is
        /// what a server's clients feel. Set it below the time after which a request is
        /// no longer worth answering, so that work the clients would have given up on
        /// is refused at once rather than queued.
        public var queueDelayLimit: Duration? = nil
        /// Where this pool reports what it could not do as configured — a nice value,
        /// policy or time slice the kernel refused — once, at creation, with the pool's
        /// name in the metadata (nil: ``ThreadPool/logger``).
        public var logger: Logger? = nil

        /// The defaults, with `workers` workers (nil: one per usable CPU).
        public init(workers: Int? = nil) { self.workers = workers }
    }
}

extension ThreadPool.Configuration {
    /// What the engine is given: every setting checked, converted, and the placement
    /// planned when nodes or CPUs are named.
    @unsafe
    struct Validated {
        // safety: `engine` points into the configuration's strings and plan, which must
        // outlive its use.
        var engine: spindle_config
        var plan: PlacementPlan?
    }

    /// Checks every setting, in one place, and converts it for the engine.
    ///
    /// - Throws: ``ThreadPool/Error/invalidConfiguration(_:)`` naming the first setting
    ///   out of range.
    func validated(processWide: Bool) throws -> Validated {
        typealias Error = ThreadPool.Error
        let most = ThreadPool.maxWorkers
        if let w = workers, w < 1 || w > most {
            throw Error.invalidConfiguration("workers must be in 1...\(most), got \(w)")
        }
        guard dequeCapacity >= 1, dequeCapacity <= 1 << 24 else {
            throw Error.invalidConfiguration("dequeCapacity must be in 1...\(1 << 24), got \(dequeCapacity)")
        }
        if let nice, !(-20...19).contains(nice) {
            throw Error.invalidConfiguration("nice must be in -20...19, got \(nice)")
        }
        let spinNs = spin.wholeNanoseconds
        guard spinNs >= 0, spinNs <= Int64(UInt32.max) else {
            throw Error.invalidConfiguration("spin must be between 0 and ~4 s")
        }
        guard (0...most).contains(maxSpareWorkers) else {
            throw Error.invalidConfiguration("maxSpareWorkers must be in 0...\(most), got \(maxSpareWorkers)")
        }
        if let limit = queueLimit, limit < 1 {
            throw Error.invalidConfiguration("queueLimit must be at least 1 (nil: no limit), got \(limit)")
        }
        if let delay = queueDelayLimit, delay <= .zero || delay > .seconds(86_400) {
            throw Error.invalidConfiguration("queueDelayLimit must be positive and at most a day (nil: no limit), got \(delay)")
        }
        let spareIdleNs = spareIdleTimeout.wholeNanoseconds
        guard spareIdleNs > 0 else {
            throw Error.invalidConfiguration("spareIdleTimeout must be positive, got \(spareIdleTimeout)")
        }
        var cfg = unsafe spindle_config()
        unsafe spindle_config_init(&cfg)
        unsafe cfg.max_spares = UInt32(maxSpareWorkers)
        unsafe cfg.spare_idle_ns = UInt64(spareIdleNs)
        unsafe cfg.workers = UInt32(workers ?? 0)
        unsafe cfg.deque_capacity = UInt32(dequeCapacity)
        unsafe cfg.spin_ns = spinNs == 0 ? 1 : UInt32(spinNs)
        unsafe cfg.nice = nice ?? SPINDLE_NICE_INHERIT
        unsafe cfg.policy = policy.rawValue
        if let timeSlice {
            let ns = timeSlice.wholeNanoseconds
            guard ns >= 0, ns < Int64(UInt32.max) else {
                throw Error.invalidConfiguration("timeSlice must be between 0 and ~4 s")
            }
            unsafe cfg.slice_ns = ns == 0 ? SPINDLE_SLICE_KERNEL : UInt32(ns)
        }
        unsafe cfg.pinning = Int32(pinning.engineValue.rawValue)
        // Process-wide pools never shut down: the engine then skips the shutdown
        // bookkeeping on every submission.
        unsafe cfg.permanent = processWide
        let placement = try plannedPlacement()
        if placement != nil { unsafe cfg.workers = 0 }
        return unsafe Validated(engine: cfg, plan: placement)
    }

    /// ``plan``, or one made for ``nodes`` and ``cpus`` when either is set; nil lets the
    /// engine plan the machine.
    private func plannedPlacement() throws -> PlacementPlan? {
        guard plan == nil, nodes != nil || cpus != nil else { return plan }
        typealias Error = ThreadPool.Error
        if let nodes, nodes.isEmpty {
            throw Error.invalidConfiguration("nodes is empty; leave it nil to run on every node")
        }
        var list: String? = nil
        if let cpus {
            guard !cpus.isEmpty, cpus.allSatisfy({ (0..<8192).contains($0) }) else {
                throw Error.invalidConfiguration("cpus must be a non-empty list of CPU numbers in 0..<8192, got \(cpus)")
            }
            list = cpus.map(String.init).joined(separator: ",")
        }
        do {
            return try Topology.load(cpus: list).plan(workers: workers, pinning: pinning, nodes: nodes)
        } catch let error as Topology.Error {
            throw Error.invalidConfiguration("nodes \(nodes.map { "\($0)" } ?? "all"), cpus \(list ?? "all"): \(error)")
        }
    }
}
