import CSpindle
import Foundation
import Logging
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// A work-stealing pool of worker threads, one per usable CPU.
///
/// `ThreadPool` is the engine under Spindle's `OperationQueue`, exposed for code that
/// wants raw throughput: fire-and-forget closures (``submit(_:)``), work that async
/// code awaits (``run(ifFull:_:)``), fork-join (``join(_:_:)``) and parallel loops
/// (``concurrentPerform(iterations:grain:_:)``).
///
/// Work submitted from a thread outside the pool goes to a shared injector queue;
/// work submitted from inside a pool task goes to the submitting worker's own deque,
/// where it runs next on that worker unless an idle worker steals it. Idle workers
/// spin for up to 50 µs and then sleep; an idle pool consumes no CPU.
///
/// ```swift
/// let pool = ThreadPool.shared
/// try pool.submit { compress(chunk) }
/// let (left, right) = pool.join({ sum(a[..<mid]) }, { sum(a[mid...]) })
/// ```
///
/// ### Trade-offs
/// - Submitted closures run in no guaranteed order: this is a throughput engine. Use
///   ``OperationQueue`` for dependencies, priorities and cancellation. (A closure
///   awaited with ``run(ifFull:_:)`` is not started if its task is cancelled first.)
/// - A task that blocks (I/O, locks, `sleep`) holds its worker. The pool runs a spare
///   worker meanwhile, up to ``Configuration/maxSpareWorkers``, at once for Spindle's
///   own waits and ``blocking(_:)``, and within a millisecond or two for blocking it
///   finds; past the cap, work waits for a worker to return.
/// - By default the pool queues without bound, as its peers do. Give it a
///   ``Configuration/queueLimit`` to refuse work under overload instead.
@safe
public final class ThreadPool: @unchecked Sendable {
    // safety: `raw` is the engine's pool, created in init and freed once, after the last
    // reference goes: in deinit, or by a helper thread deinit starts for a busy pool.
    // @unchecked: the C pool is internally synchronised; `raw` never changes and is
    // freed only in deinit, when no other reference can exist.
    @usableFromInline let raw: OpaquePointer
    /// Threads in this pool. A process-wide pool keeps one per CPU it may use, and
    /// under a container's CPU limit only ``activeWorkerCount`` of them take work.
    public let workerCount: Int
    /// The most workers, and the most spares, one pool can have: the engine's
    /// SPINDLE_MAX_WORKERS (Sources/CSpindle/internal.h).
    static let maxWorkers = 4096
    /// Set for ``shared`` and the quality-of-service pools, which cannot be shut down.
    let isProcessWide: Bool
    /// The admission limit, for a pool configured with a ``Configuration/queueLimit``.
    let admission: Admission?
    /// Its threads' name prefix (``Configuration/name``): its `pool` metrics dimension.
    let name: String
    /// Submissions refused (over the queue limit, or after shutdown), for metrics.
    let refusals = Atomic<UInt64>(0)
    /// The timers of offloads and sampled submissions, while a ``PoolMetrics`` publishes
    /// this pool's metrics.
    let timerSlot = PoolTimerSlot()

    /// What happens to queued work when the pool shuts down.
    public enum ShutdownMode: Sendable {
        /// Run everything already queued (and everything it spawns), then stop.
        case drain
        /// Discard every closure that has not started (it is released, not run);
        /// running closures finish.
        case cancel
    }

    /// Errors reported by the pool.
    public enum Error: Swift.Error, LocalizedError, Equatable, Sendable, CustomStringConvertible {
        /// The pool has been shut down (or is shutting down); the work was not queued.
        case shutDown
        /// In a child process made by `fork()`: the pool was created before the fork,
        /// and its threads do not exist in the child; the work was not queued. Create a
        /// pool in the child (the process-wide pools, ``shared`` and the quality-of-
        /// service classes, are made anew there on first use).
        case createdBeforeFork
        /// `shutdown(_:)` was called from one of the pool's own workers, where
        /// waiting for the workers to exit would wait forever.
        case shutdownFromOwnWorker
        /// `shutdown(_:)` was called on ``ThreadPool/shared`` or a quality-of-service
        /// pool: every ``OperationQueue`` in the process runs on them.
        case processWidePool
        /// The pool holds as many queued closures as its ``Configuration/queueLimit``
        /// allows, or its oldest queued closure has waited longer than its
        /// ``Configuration/queueDelayLimit``; the work was not queued.
        case overloaded
        /// The configuration was rejected (value out of range).
        case invalidConfiguration(String)
        /// The operating system refused a resource (thread, memory); `errno` says which.
        case systemError(errno: Int32)

        /// The same sentence as ``description``, for `localizedDescription`.
        public var errorDescription: String? { description }

        /// A sentence naming the problem.
        public var description: String {
            switch self {
            case .shutDown: return "the thread pool has been shut down; the work was not queued"
            case .createdBeforeFork:
                return "the thread pool was created before fork(), and its threads do not exist in this child process; the work was not queued"
            case .shutdownFromOwnWorker:
                return "ThreadPool.shutdown() was called from one of the pool's own workers, which would wait for itself"
            case .processWidePool:
                return "ThreadPool.shutdown() was called on a process-wide pool (shared or per quality of service), which every OperationQueue uses"
            case .overloaded: return "the thread pool is at its queue limit; the work was not queued"
            case .invalidConfiguration(let why): return "invalid ThreadPool configuration: \(why)"
            case .systemError(let e): return "the system refused a thread-pool resource (errno \(e))"
            }
        }
    }

    /// The process-wide pool, created on first use with one worker per usable CPU. It
    /// is also the worker set of the `.default` quality of service, so it runs at the
    /// process's own nice whichever thread happens to create it. In a child process made
    /// by `fork()`, a new one is made on first use there.
    public static var shared: ThreadPool { QoSPools.pool(for: .default) }

    /// Creates a pool with `workers` threads (`nil`: one per usable CPU).
    public convenience init(workers: Int? = nil) throws {
        try self.init(configuration: Configuration(workers: workers))
    }

    /// Creates a pool from a full configuration.
    public convenience init(configuration: Configuration) throws {
        try self.init(configuration: configuration, processWide: false)
    }

    init(configuration: Configuration, processWide: Bool) throws {
        SpindleLogging.installEngineHandler()
        let checked = unsafe try configuration.validated(processWide: processWide)
        var cfg = unsafe checked.engine
        let plan = unsafe checked.plan
        var pool: OpaquePointer?
        let rc = unsafe configuration.name.withCString { name -> Int32 in
            unsafe cfg.name = unsafe name
            unsafe cfg.plan = unsafe plan.map { unsafe $0.handle.raw }
            return unsafe spindle_pool_create(&cfg, &pool)
        }
        guard rc == 0, let pool = unsafe pool else {
            if rc == EINVAL { throw Error.invalidConfiguration("rejected by the engine") }
            throw Error.systemError(errno: rc)
        }
        unsafe self.raw = unsafe pool
        self.workerCount = unsafe Int(spindle_pool_worker_count(pool))
        self.isProcessWide = processWide
        self.admission = configuration.queueLimit != nil || configuration.queueDelayLimit != nil
            ? Admission(limit: configuration.queueLimit, delayLimit: configuration.queueDelayLimit) : nil
        self.name = configuration.name
        if !processWide { reportRefusals(to: configuration.logger, name: configuration.name) }
    }

    deinit {
        let pool = unsafe UncheckedSendablePointer(raw)
        // The thread dropping the last reference must not wait for the pool's work: it
        // may be a cooperative thread, and a drain may never finish. An idle pool stops
        // at once and is freed here; a busy one is drained and freed by a helper thread.
        if unsafe spindle_pool_current_worker(raw) >= 0 || !spindle_pool_is_idle(raw) {
            // (Inside one of our own tasks this thread could not wait for itself either.)
            var thread = pthread_t()
            // safety: one retained reference, taken back once: by the thread, or below if
            // it did not start.
            let box = unsafe Unmanaged.passRetained(FreeRequest(pool)).toOpaque()
            let rc = unsafe pthread_create(&thread, nil, { arg in
                let req = unsafe Unmanaged<FreeRequest>.fromOpaque(arg!).takeRetainedValue()
                unsafe spindle_pool_free(req.pool.pointer)
                return nil
            }, unsafe box)
            if rc == 0 { pthread_detach(thread) } else {
                unsafe Unmanaged<FreeRequest>.fromOpaque(box).release()
                // Leaking is the only safe answer left: the pool stays alive, idle.
            }
        } else {
            unsafe spindle_pool_free(pool.pointer)
        }
    }

    /// Queues `work` to run once on one of the pool's threads.
    ///
    /// From inside a pool task the closure goes on the current worker's own deque (the
    /// fast path: no shared cache line); from any other thread it goes to the shared
    /// injector queue. Costs no lock, and one node for the closure from a cache of the
    /// submitting thread's, to which the worker that runs it gives it back: a steady
    /// stream of submissions does not call malloc.
    ///
    /// - Throws: ``Error/shutDown`` once `shutdown(_:)` has begun; the closure is then
    ///   released without running, and nothing was queued. ``Error/createdBeforeFork``
    ///   in a child process made by `fork()`, for a pool created before it.
    ///   ``Error/overloaded`` when the pool is at its ``Configuration/queueLimit``.
    public func submit(_ work: consuming @escaping @Sendable () -> Void) throws {
        if let admission {
            if let timers = submissionTimers { return try submitAdmitted(timed(work, timers), admission) }
            return try submitAdmitted(work, admission)
        }
        let task: UnsafeMutablePointer<spindle_task>
        if let timers = submissionTimers { unsafe task = unsafe ClosureTask.make(timed(work, timers)) } else { unsafe task = unsafe ClosureTask.make(work) }
        let rc = unsafe spindle_submit_task(raw, task)
        if rc != 0 {
            unsafe releaseRefusedTask(task)
            throw engineRefusal(rc)
        }
    }

    /// Stops the pool and waits for its threads to exit.
    ///
    /// With ``ShutdownMode/drain`` every closure already queued runs first (and what
    /// they spawn); with ``ShutdownMode/cancel`` queued closures are released without
    /// running. Either way, submissions from outside the pool fail with
    /// ``Error/shutDown`` from the moment shutdown begins. Every caller returns only
    /// once the pool has stopped: a second call, concurrent or later, waits for the
    /// first; a ``ShutdownMode/cancel`` takes over a ``ShutdownMode/drain`` in
    /// progress — one that cannot finish, say a task that keeps resubmitting itself —
    /// and releases every closure not yet started.
    ///
    /// - Throws: ``Error/shutdownFromOwnWorker`` when called from a pool task;
    ///   ``Error/processWidePool`` for ``shared`` and the quality-of-service pools.
    @available(*, noasync, message: "blocks the calling thread; in async code use 'try await pool.shutdown()', which suspends")
    public func shutdown(_ mode: ShutdownMode = .drain) throws {
        if isProcessWide { throw Error.processWidePool }
        admission?.close()
        let rc = unsafe spindle_pool_shutdown(raw, mode == .drain ? SPINDLE_SHUTDOWN_DRAIN : SPINDLE_SHUTDOWN_CANCEL)
        switch rc {
        case 0, EALREADY: return
        case EDEADLK: throw Error.shutdownFromOwnWorker
        default: throw Error.systemError(errno: rc)
        }
    }

    /// True once `shutdown(_:)` has begun.
    public var isShuttingDown: Bool { unsafe spindle_pool_is_shutting_down(raw) }

    /// True when the calling thread is one of this pool's workers, a spare included.
    public var isCurrentThreadWorker: Bool { unsafe spindle_pool_current_worker(raw) >= 0 }

    /// The index, in `0..<workerCount`, of the calling worker; nil outside the pool and
    /// on a spare worker.
    ///
    /// A spare runs the pool's work while one of its workers is blocked, and that worker
    /// may resume while the spare still runs: the two have no index of their own to
    /// share, so a per-worker array indexed by this value is only ever used by the
    /// worker it belongs to. Code on a spare that needs a slot falls back to a shared
    /// one, as code outside the pool does.
    public var currentWorkerIndex: Int? {
        let i = unsafe spindle_pool_current_worker(raw)
        return i >= 0 && i < workerCount ? Int(i) : nil
    }

    /// Why pinning a worker to its planned CPUs failed (for instance, a plan for CPUs
    /// this machine does not have), or nil.
    public var pinningError: Int32? {
        let e = unsafe spindle_pool_pin_error(raw)
        return e == 0 ? nil : e
    }

    /// The nice value the workers actually run at.
    public var effectiveNice: Int32 { unsafe spindle_pool_effective_nice(raw) }
    /// Why the configured nice value was refused (`EACCES` for an unprivileged process
    /// asking for a negative nice), or nil if it was applied.
    public var niceError: Int32? {
        let e = unsafe spindle_pool_nice_error(raw)
        return e == 0 ? nil : e
    }

    /// The policy the workers actually run under, as `sched_getscheduler` reports it
    /// (`SCHED_OTHER` 0, `SCHED_BATCH` 3, `SCHED_IDLE` 5).
    public var effectivePolicy: Int32 { unsafe spindle_pool_effective_policy(raw) }
    /// Why the configured policy was refused, or nil if it was applied.
    public var policyError: Int32? {
        let e = unsafe spindle_pool_policy_error(raw)
        return e == 0 ? nil : e
    }

    /// Why the kernel refused the workers' time slice (``Configuration/timeSlice``;
    /// Linux before 6.12 has no per-thread slice), or nil if it was applied or none was
    /// asked for.
    public var timeSliceError: Int32? {
        let e = unsafe spindle_pool_slice_error(raw)
        return e == 0 ? nil : e
    }

    /// The time slice the workers asked the kernel for — ``Configuration/timeSlice``
    /// resolved, so 100 µs for a normal-policy pool by default — or nil when they kept
    /// the kernel's. Whether the kernel granted it: ``timeSliceError``.
    public var requestedTimeSlice: Duration? {
        let ns = unsafe spindle_pool_requested_slice_ns(raw)
        return ns == 0 ? nil : .nanoseconds(Int64(ns))
    }

    /// Per-worker counters, as one snapshot (each counter read atomically): the pool's
    /// own workers first, then each spare slot it has made (``WorkerStats/isSpare``).
    public var stats: [WorkerStats] {
        let slots = unsafe Int(spindle_pool_slot_count(raw))
        var out = [spindle_worker_stats](repeating: spindle_worker_stats(), count: slots)
        let n = unsafe Int(spindle_pool_stats(raw, &out, UInt32(slots)))
        return out.prefix(n).map(WorkerStats.init)
    }

    /// CPU time consumed by all the pool's threads since it started.
    public var cpuTime: Duration { unsafe .nanoseconds(Int64(spindle_pool_cpu_time_ns(raw))) }
}

/// Counters of one worker thread, monotonic since the pool started.
public struct WorkerStats: Sendable, Equatable {
    /// Tasks this worker ran (or released, when cancelled by shutdown).
    public var executed: UInt64
    /// Tasks this worker took from another worker's deque.
    public var stolen: UInt64
    /// Tasks other workers took from this worker's deque.
    public var stolenFrom: UInt64
    /// Times this worker went to sleep.
    public var parked: UInt64
    /// Tasks this worker took from the shared injector queue.
    public var injectorPops: UInt64
    /// Tasks this worker moved from its full deque to the injector.
    public var overflowed: UInt64
    /// CPU time the thread has consumed (a spare slot: its current thread's).
    public var cpuTime: Duration
    /// True for a spare slot, run by spare workers while the pool's own are blocked
    /// (``ThreadPool/Configuration/maxSpareWorkers``).
    public var isSpare: Bool

    init(_ s: spindle_worker_stats) {
        isSpare = s.spare != 0
        executed = s.executed
        stolen = s.stolen
        stolenFrom = s.stolen_from
        parked = s.parked
        injectorPops = s.injector_pops
        overflowed = s.overflowed
        cpuTime = .nanoseconds(Int64(s.cpu_ns))
    }
}

/// A raw pointer we promise to use safely across threads.
@unsafe
struct UncheckedSendablePointer: @unchecked Sendable {
    // safety: a bare engine pointer; its owner decides when it is freed.
    let pointer: OpaquePointer
    init(_ p: OpaquePointer) { unsafe pointer = unsafe p }
}

@safe
private final class FreeRequest: @unchecked Sendable {
    // safety: carries the pool to the thread that frees it, once.
    let pool: UncheckedSendablePointer
    init(_ p: UncheckedSendablePointer) { unsafe pool = unsafe p }
}

extension Duration {
    /// Whole nanoseconds (truncated), for the engine's configuration fields; saturated
    /// at `Int64.min`/`Int64.max` for durations beyond ±292 years, so that range checks
    /// reject them instead of the arithmetic trapping.
    var wholeNanoseconds: Int64 {
        let (seconds, attoseconds) = components
        let (scaled, overflow) = seconds.multipliedReportingOverflow(by: 1_000_000_000)
        if overflow { return seconds < 0 ? .min : .max }
        let (total, overflow2) = scaled.addingReportingOverflow(attoseconds / 1_000_000_000)
        if overflow2 { return seconds < 0 ? .min : .max }
        return total
    }
}

extension ThreadPool {
    /// Runs `body`, which blocks its thread (a lock, a semaphore, a sleep, synchronous
    /// I/O), telling the pool so: on one of Spindle's workers, the pool counts this
    /// worker out while `body` runs and, if work is waiting, wakes or starts a spare
    /// worker of the same class, so the CPUs stay busy and work that `body` waits for
    /// can run. Elsewhere it just runs `body`.
    ///
    /// Spindle's monitor finds such blocking by itself, a millisecond or more after it
    /// starts; this tells it at once (tokio's `block_in_place`, Java's `managedBlock`).
    /// Spare workers are capped by ``Configuration/maxSpareWorkers``.
    public static func blocking<T, E: Swift.Error>(_ body: () throws(E) -> T) throws(E) -> T {
        spindle_blocking_begin()
        defer { spindle_blocking_end() }
        return try body()
    }

    /// Spare workers this pool runs now, beside its own (see
    /// ``Configuration/maxSpareWorkers``).
    public var spareWorkerCount: Int { unsafe Int(spindle_pool_spare_count(raw)) }
}
