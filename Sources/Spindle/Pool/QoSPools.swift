import CSpindle
import Foundation
import Synchronization

/// One worker set per quality-of-service class, created on first use.
///
/// Linux gives a thread one nice value, and an unprivileged thread cannot lower its
/// nice once raised (RLIMIT_NICE): re-nicing shared workers per task would be both
/// slow and one-way. So each class gets its own workers at the libdispatch-on-Linux
/// nice value, and the kernel's scheduler does the prioritising:
///
/// | class              | nice | policy      | workers               |
/// |--------------------|------|-------------|-----------------------|
/// | `.userInteractive` | −4   | SCHED_OTHER | one pinned to each CPU |
/// | `.userInitiated`   | −2   | SCHED_OTHER | per NUMA node         |
/// | `.default`         | 0    | SCHED_OTHER | per NUMA node         |
/// | `.utility`         | +2   | SCHED_BATCH | per NUMA node         |
/// | `.background`      | +10  | SCHED_IDLE  | per NUMA node         |
///
/// userInteractive workers are pinned one per CPU so that work submitted from outside
/// the pool wakes the worker on the submitting thread's own CPU, which preempts the
/// submitter there at once instead of waiting for an interrupt to reach another,
/// possibly busy, CPU (see `pick_sleeper_locked` in park.c; the start latencies are in
/// docs/performance.md, `qos-under-load`). Pinning costs the class little: its workers
/// preempt everything else on their CPU anyway. A worker woken that way runs the work it
/// finds and parks without spinning (park.c, G1), so the submitter — often an event
/// loop — has its CPU back as soon as the task is done, not after the worker's spin.
///
/// Background workers run under SCHED_IDLE: whenever any other thread wants a CPU the
/// kernel preempts them at once, so queued higher-class work starts before queued
/// background work without Spindle re-ordering anything. They keep a small share of
/// the CPU (SCHED_IDLE's weight), so background work is delayed under load, never
/// starved forever: with every CPU saturated by userInteractive work, queued background
/// work still gets a kernel slice every few seconds
/// (`testBackgroundWorkProgressesUnderInteractiveSaturation`). Rejected: aging in
/// Spindle — running a starved background task on a higher class's worker once it has
/// waited long enough. That worker is then unavailable to its own class for as long as
/// the background task runs, which is unbounded; the kernel's share costs interactive
/// work nothing. Utility uses SCHED_BATCH (no wake-up preemption of interactive
/// threads). Both need no privilege.
///
/// The values are offsets from the process's own nice (its main thread's, which `nice`
/// and `renice -p` set), clamped to -20...19: a service started with `nice -n 15` keeps
/// its classes apart (utility at 17, background at 19) instead of running every class
/// at 15. A process without CAP_SYS_NICE (or RLIMIT_NICE headroom) may not go below its
/// own nice (EACCES): the classes above default then run at the process's nice, the
/// refusal is reported by ``ThreadPool/niceError`` of the class's pool, and once per
/// process to ``ThreadPool/logger`` with what every class runs at, as the topology fallback is: a
/// service that expected interactive work to outrank the rest learns at start-up that
/// it does not, without having to ask.
enum QoSPools {
    /// The offset of each class from the process's nice.
    static func offset(for qos: QualityOfService) -> Int32 {
        switch qos {
        case .userInteractive: return -4
        case .userInitiated: return -2
        case .utility: return 2
        case .background: return 10
        default: return 0
        }
    }

    /// The process's nice: its main thread's (whose thread id is the process id), as
    /// the spawner reads it (spawn.c), so that the classes are placed around the nice
    /// every worker starts from.
    static let processNice: Int32 = {
        errno = 0
        let n = getpriority(__priority_which_t(PRIO_PROCESS.rawValue), id_t(getpid()))
        return errno == 0 ? n : 0
    }()

    /// The nice value a class's workers ask for: the process's nice plus the class's
    /// offset, within -20...19, and kept in order where the range runs out.
    static func nice(for qos: QualityOfService) -> Int32 {
        niceTable[Int(ClassRank.of(qos)) - 1]
    }

    /// The nice of each class, background first: `nices(around:)` for this process.
    static let niceTable: [Int32] = nices(around: processNice)

    /// Each class's nice around a process nice of `base`, background first.
    ///
    /// Every class keeps its own place at every process nice. Clamping alone would let
    /// classes meet at the ends of the range: at −20, userInteractive, userInitiated and
    /// default would all run at −20 and share the CPU evenly. Where the offsets run
    /// past −20, the classes above default are kept one nice apart from each other and
    /// from default, pushing default (and utility) up as little as that takes. At the
    /// other end, utility and default may meet at 19, and their policies still order
    /// them (SCHED_BATCH gets no wake-up preemption), as SCHED_IDLE orders background
    /// below everything whatever its nice.
    static func nices(around base: Int32) -> [Int32] {
        func clamp(_ n: Int32) -> Int32 { min(19, max(-20, n)) }
        let ui = clamp(base + offset(for: .userInteractive))
        let initiated = min(19, max(clamp(base + offset(for: .userInitiated)), ui + 1))
        let def = min(19, max(clamp(base), initiated + 1))
        let ut = min(19, max(clamp(base + offset(for: .utility)), def + 1))
        let bg = max(clamp(base + offset(for: .background)), ut)
        return [bg, ut, def, initiated, ui]
    }

    /// The class of a process-wide pool's engine, if it is one (creates nothing). The
    /// default class's first: a class the system gave no threads runs on its pool.
    static func rank(ofEngine raw: OpaquePointer) -> UInt8? {
        // safety: an address compared, never dereferenced.
        let bits = unsafe UInt(bitPattern: UnsafeRawPointer(raw))
        if engineDefault.load(ordering: .acquiring) == bits { return 3 }
        if engineUI.load(ordering: .acquiring) == bits { return 5 }
        if engineIN.load(ordering: .acquiring) == bits { return 4 }
        if engineUT.load(ordering: .acquiring) == bits { return 2 }
        if engineBG.load(ordering: .acquiring) == bits { return 1 }
        return nil
    }

    /// The class's name as messages, logs and metrics spell it. A switch, not `"\(qos)"`:
    /// interpolating an enum reflects on its metadata, about a million instructions,
    /// paid by the first operation of a class on the path that makes its pool.
    static func label(for qos: QualityOfService) -> String {
        switch qos {
        case .userInteractive: return "userInteractive"
        case .userInitiated: return "userInitiated"
        case .utility: return "utility"
        case .background: return "background"
        default: return "default"
        }
    }

    /// The classes from the highest to the lowest.
    static let classes: [QualityOfService] = [.userInteractive, .userInitiated, .default, .utility, .background]

    static func name(for qos: QualityOfService) -> String {
        switch qos {
        case .userInteractive: return "spindle-ui"
        case .userInitiated: return "spindle-in"
        case .utility: return "spindle-ut"
        case .background: return "spindle-bg"
        default: return "spindle-w"
        }
    }

    /// The process-wide pools, by class (the default class's is ``ThreadPool/shared``)
    /// and fork generation: a forked child makes its own (see `forkGeneration`).
    private static let pools = Mutex<[Int: ThreadPool]>([:])

    /// Bumped in a forked child, whose inherited pools have no threads (the engine
    /// refuses their work with ECHILD): the child's first use of a class makes a new
    /// pool. The caches below are cleared then too.
    static let forkGeneration = Atomic<Int>(0)

    /// Installs the fork handler once, before the first process-wide pool exists.
    private static let forkHandler: Void = {
        pthread_atfork(nil, nil, {
            // The child's only thread, before anything else runs: atomics only.
            QoSPools.forkGeneration.add(1, ordering: .relaxed)
            QoSPools.engineUI.store(0, ordering: .relaxed)
            QoSPools.engineIN.store(0, ordering: .relaxed)
            QoSPools.engineDefault.store(0, ordering: .relaxed)
            QoSPools.engineUT.store(0, ordering: .relaxed)
            QoSPools.engineBG.store(0, ordering: .relaxed)
            QoSPools.sharedObject.store(0, ordering: .relaxed)
        })
    }()

    /// Says once that `qos`'s nice was refused (see the type's documentation).
    private static func reportRefusedNice(_ qos: QualityOfService, _ error: Int32) {
        let what = error == EACCES
            ? "EACCES: a nice below the process's (\(processNice)) needs CAP_SYS_NICE or RLIMIT_NICE"
            : "errno \(error)"
        // What each class runs at: its own nice, or, when that is below the process's
        // and the process may not go there, the process's.
        let runs = classes.map { c in
            let wanted = nice(for: c)
            return "\(label(for: c)) \(wanted < processNice && error == EACCES ? processNice : wanted)"
        }.joined(separator: ", ")
        let line = "nice \(nice(for: qos)) for \(name(for: qos)) workers (\(label(for: qos))) was refused (\(what)); "
            + "the classes run at nice: \(runs)"
        SpindleLogging.log(level: .warning, "\(line)", metadata: ["spindle.qos": "\(label(for: qos))"])
    }

    /// A process-wide pool from `config`, with as many of its workers as the system
    /// allows: under a thread limit (RLIMIT_NPROC, a container's pids.max, memory for
    /// stacks) it halves the count until it starts, and says so once. Nil when not even
    /// one worker starts.
    static func makeProcessWide(_ config: ThreadPool.Configuration, label: String) -> ThreadPool? {
        var c = config
        var wanted: Int? = nil
        while true {
            do {
                let pool = try ThreadPool(configuration: c, processWide: true)
                if let wanted {
                    report("the \(label) class runs \(pool.workerCount) of \(wanted) workers: the system refused more threads")
                }
                return pool
            } catch ThreadPool.Error.systemError(let e) where e == EAGAIN || e == ENOMEM || e == EPERM {
                let had = c.workers ?? Int(spindle_usable_cpu_count())
                if wanted == nil { wanted = had }
                if had <= 1 { return nil }
                c.workers = had / 2
                c.plan = nil
            } catch {
                return nil
            }
        }
    }

    /// The default class's pool, made to carry another class's work when that class
    /// gets no threads; nil if it cannot be made either. Called under the pools' lock.
    private static func makeDefaultForFallback() -> ThreadPool? {
        var c = ThreadPool.Configuration()
        c.nice = nice(for: .default)
        return makeProcessWide(c, label: "default")
    }

    /// Says `line` to ``ThreadPool/logger`` (once per distinct line).
    private static let said = Mutex<Set<String>>([])
    static func report(_ line: String) {
        guard said.locked({ $0.insert(line).inserted }) else { return }
        SpindleLogging.log(level: .warning, "\(line)")
    }

    /// Every process-wide pool made so far (for tests that wait for them to be idle).
    static func allProcessWide() -> [ThreadPool] {
        pools.locked { p in Array(p.values) }
    }

    /// The already-created class pool whose engine is `raw`, if any (creates nothing).
    static func existing(_ raw: OpaquePointer) -> ThreadPool? {
        pools.locked { p in p.values.first { unsafe $0.raw == raw } }
    }

    /// The engine pool for `qos`, without touching the `ThreadPool` object: every
    /// operation is submitted through this, and a retain/release pair per operation on
    /// an object that every thread shares is a cache line bouncing between cores.
    static func engine(for qos: QualityOfService) -> OpaquePointer {
        switch qos {
        case .userInteractive: return unsafe engine(qos, cachedIn: engineUI)
        case .userInitiated: return unsafe engine(qos, cachedIn: engineIN)
        case .utility: return unsafe engine(qos, cachedIn: engineUT)
        case .background: return unsafe engine(qos, cachedIn: engineBG)
        default: return unsafe engine(qos, cachedIn: engineDefault)
        }
    }

    private static func engine(_ qos: QualityOfService, cachedIn slot: borrowing Atomic<UInt>) -> OpaquePointer {
        // safety: the slot holds zero or the engine of a process-wide pool, which is never
        // freed.
        if let raw = unsafe OpaquePointer(bitPattern: slot.load(ordering: .acquiring)) { return unsafe raw }
        let raw = unsafe pool(for: qos).raw
        // A class's pool is created once and lives for the process: caching its
        // pointer is safe, and racing stores store the same value.
        unsafe slot.store(UInt(bitPattern: UnsafeRawPointer(raw)), ordering: .releasing)
        return unsafe raw
    }

    /// Caches `raw` as the engine of `qos`'s pool (a pool is made once per class and
    /// fork generation, so racing stores store the same value).
    private static func cacheEngine(_ raw: OpaquePointer, for qos: QualityOfService) {
        // safety: the engine of a process-wide pool, never freed, so its address may be
        // cached.
        let bits = unsafe UInt(bitPattern: UnsafeRawPointer(raw))
        switch qos {
        case .userInteractive: engineUI.store(bits, ordering: .releasing)
        case .userInitiated: engineIN.store(bits, ordering: .releasing)
        case .utility: engineUT.store(bits, ordering: .releasing)
        case .background: engineBG.store(bits, ordering: .releasing)
        default: engineDefault.store(bits, ordering: .releasing)
        }
    }

    static let engineUI = Atomic<UInt>(0)
    static let engineIN = Atomic<UInt>(0)
    static let engineDefault = Atomic<UInt>(0)
    static let engineUT = Atomic<UInt>(0)
    static let engineBG = Atomic<UInt>(0)
    /// ``ThreadPool/shared`` of this fork generation (an unretained `ThreadPool`; 0: not
    /// made yet), so that asking for it takes no lock.
    static let sharedObject = Atomic<UInt>(0)

    static func pool(for qos: QualityOfService) -> ThreadPool {
        // The default class's pool is `ThreadPool.shared`: cached, as it is asked for
        // often (by code that submits to it directly).
        let isDefault = offset(for: qos) == 0
        // safety: a non-zero word is the default class's ThreadPool, stored below and kept
        // alive by `pools`, which never lets go of a process-wide pool.
        if isDefault, let object = unsafe UnsafeRawPointer(bitPattern: sharedObject.load(ordering: .acquiring)) {
            return unsafe Unmanaged<ThreadPool>.fromOpaque(object).takeUnretainedValue()
        }
        _ = forkHandler
        // Keyed by class, never by nice: two classes whose nice values meet at the end
        // of the range still have workers, a policy and an order of their own.
        let key = Int(ClassRank.of(qos)) + 8 * forkGeneration.load(ordering: .relaxed)
        return pools.locked { p in
            if let existing = p[key] { return existing }
            var c = ThreadPool.Configuration()
            c.nice = nice(for: qos)
            c.policy = qos == .background ? .idle : qos == .utility ? .batch : .normal
            c.name = name(for: qos)
            if qos == .userInteractive { c.pinning = .core }
            // A class the system will not give threads to runs its work on a pool that
            // exists (the default class's, or any other), rather than stop the process.
            let made: ThreadPool
            let defaultKey = Int(ClassRank.of(QualityOfService.default)) + 8 * forkGeneration.load(ordering: .relaxed)
            if let own = makeProcessWide(c, label: label(for: qos)) {
                made = own
            } else if !isDefault, let fallback = p[defaultKey] ?? makeDefaultForFallback() {
                p[defaultKey] = fallback
                report("the \(label(for: qos)) class has no threads of its own (the system refused them); its work runs on the default class's workers")
                made = fallback
            } else if let any = p.values.first(where: { $0.isProcessWide }) {
                report("the \(label(for: qos)) class has no threads of its own (the system refused them); its work runs on another class's workers")
                made = any
            } else {
                // Not even the spawner could start (spawn.c, SP1): the process cannot make a
                // single thread, so no work given to these pools could ever run.
                fatalError("Spindle could not start a single thread for its process-wide pools (\(label(for: qos))): the system refuses "
                           + "every new thread; raise the process's thread limit (RLIMIT_NPROC, or the container's pids.max)")
            }
            if isDefault {
                // safety: unretained: `pools` keeps `made` for the life of the process.
                unsafe sharedObject.store(UInt(bitPattern: Unmanaged.passUnretained(made).toOpaque()), ordering: .releasing)
            }
            // Once per process: the first class pool refused its nice.
            if let error = made.niceError, !p.values.contains(where: { $0.niceError != nil }) {
                reportRefusedNice(qos, error)
            }
            p[key] = made
            // So that `rank(ofEngine:)` knows a pool reached only through this call.
            unsafe cacheEngine(made.raw, for: qos)
            return made
        }
    }
}

extension ThreadPool {
    /// The pool whose worker is the calling thread, if it is one of Spindle's pools
    /// that is reachable from Swift (the shared pool or a quality-of-service pool).
    static var current: ThreadPool? {
        guard let raw = unsafe spindle_current_pool() else { return nil }
        if unsafe raw == ThreadPool.shared.raw { return .shared }
        return unsafe QoSPools.existing(raw)
    }

    /// The worker set that runs operations of quality of service `qos`.
    public static func forQualityOfService(_ qos: QualityOfService) -> ThreadPool {
        QoSPools.pool(for: qos)
    }
}

extension ThreadPool {
    /// What promotion has done in this process since it started (see
    /// <doc:QualityOfService>).
    public struct PromotionCounts: Sendable, Equatable {
        /// Operations moved to a higher class's workers before they started.
        public var moved: Int
        /// Running operations whose thread took a higher class's priority.
        public var raised: Int
        /// Running operations whose thread the kernel refused a higher class's
        /// priority: a lower nice, or leaving SCHED_IDLE, needs CAP_SYS_NICE or
        /// RLIMIT_NICE. They ran on at their own class's priority.
        public var refused: Int
    }

    /// What promotion has done in this process: operations moved to a higher class's
    /// workers, running ones raised, and raises the kernel refused.
    public static var promotionCounts: PromotionCounts {
        PromotionCounts(moved: PromotionCounters.moved.load(ordering: .relaxed),
                        raised: PromotionCounters.raised.load(ordering: .relaxed),
                        refused: PromotionCounters.refused.load(ordering: .relaxed))
    }
}
