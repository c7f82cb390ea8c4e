import CSpindle
import Foundation
import Synchronization

/// A serial executor on a pool's workers: an actor whose `unownedExecutor` is one of
/// these runs its isolated code on Spindle's workers, one job at a time, in the order
/// the jobs arrived — at the pool's quality of service, so at that class's Linux nice
/// value. No executor that ships with Swift on Linux gives an actor an OS priority.
///
/// ```swift
/// actor ThumbnailCache {
///     static let executor = ActorExecutor(qualityOfService: .utility)
///     nonisolated var unownedExecutor: UnownedSerialExecutor {
///         Self.executor.asUnownedSerialExecutor()
///     }
///     func render(_ image: Image) -> Thumbnail { … }   // on a utility worker, at nice +2
/// }
/// ```
///
/// One executor is one serial line of work: give each actor its own, or share one among
/// actors that may run one at a time. While it has jobs, it occupies one worker at a
/// time and hands the worker back after every 64 jobs, so that other work of the pool
/// is not starved by a busy actor. Non-isolated async code the actor calls runs on the
/// same pool (the pool is the jobs' task executor).
///
/// If the pool has shut down, jobs still run, serially, on a thread of their own:
/// dropping a job would leave its task suspended forever.
public final class ActorExecutor: SerialExecutor, @unchecked Sendable {
    // @unchecked: the line and the `scheduled` flag are under `state`'s lock; `pool`
    // never changes.

    /// The pool the actor's code runs on.
    public let pool: ThreadPool

    private struct State {
        var jobs = FIFO<UnownedJob>()
        /// A drain is submitted or running: it runs every job queued before it stops,
        /// so one is enough (and two would break the actor's isolation).
        var scheduled = false
    }

    private let state = Mutex(State())

    /// How many jobs one drain runs before it hands its worker back to the pool.
    static let batch = 64

    /// An executor on `pool`'s workers.
    public init(pool: ThreadPool) { self.pool = pool }

    /// An executor on the workers of a quality-of-service class (see
    /// ``ThreadPool/forQualityOfService(_:)``).
    public convenience init(qualityOfService: QualityOfService) {
        self.init(pool: ThreadPool.forQualityOfService(qualityOfService))
    }

    /// Queues `job`; starts a drain on the pool if none is running.
    public func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        let start = state.locked { s -> Bool in
            s.jobs.append(job)
            if s.scheduled { return false }
            s.scheduled = true
            return true
        }
        if start { scheduleDrain() }
    }

    public func asUnownedSerialExecutor() -> UnownedSerialExecutor {
        unsafe UnownedSerialExecutor(ordinary: self)
    }

    /// Submits a drain to the pool; on a pool that has shut down, runs it on a thread
    /// of its own.
    private func scheduleDrain() {
        let task = unsafe ClosureTask.make { [self] in drain() }
        if unsafe spindle_submit_task(pool.raw, task) != 0 {
            unsafe releaseRefusedTask(task)
            Thread.detachNewThread { [self] in
                while drain() {}
            }
        }
    }

    /// Runs up to `batch` jobs. Returns true when jobs remain and the caller should
    /// drain again (the pool has shut down); otherwise it has either cleared `scheduled`
    /// or submitted the next drain.
    @discardableResult
    private func drain() -> Bool {
        let executor = unsafe asUnownedSerialExecutor()
        let taskExecutor = unsafe pool.asUnownedTaskExecutor()
        for _ in 0..<ActorExecutor.batch {
            let next = state.locked { s -> UnownedJob? in
                if let job = s.jobs.popFirst() { return job }
                s.scheduled = false
                return nil
            }
            guard let job = next else { return false }
            unsafe job.runSynchronously(isolatedTo: executor, taskExecutor: taskExecutor)
        }
        // Hand the worker back: the next drain goes behind whatever else waits.
        let more = state.locked { s -> Bool in
            if s.jobs.isEmpty { s.scheduled = false }
            return !s.jobs.isEmpty
        }
        guard more else { return false }
        if pool.isShuttingDown && !pool.isCurrentThreadWorker { return true }
        scheduleDrain()
        return false
    }
}
