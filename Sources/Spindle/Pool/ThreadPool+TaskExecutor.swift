import CSpindle
import Glibc

/// Swift concurrency on Spindle's workers: a pool is a `TaskExecutor` (SE-0417).
///
/// A task that prefers a pool runs its nonisolated code on the pool's workers, and so
/// does every child task it creates, so CPU-bound async code stays off both the
/// cooperative pool and the caller's event loop:
///
/// ```swift
/// let thumbnails = await withTaskExecutorPreference(ThreadPool.shared) {
///     await withTaskGroup(of: Thumbnail.self) { group in
///         for image in images { group.addTask { Thumbnail(decoding: image) } }
///         return await group.reduce(into: []) { $0.append($1) }
///     }
/// }
/// let digest = await Task(executorPreference: ThreadPool.forQualityOfService(.utility)) {
///     sha256(payload)
/// }.value
/// ```
///
/// Actor-isolated code still runs on its actor's executor; the preference covers the
/// rest. A class pool (``ThreadPool/forQualityOfService(_:)``) gives the task's code its
/// class's nice value, which a task's `priority` alone does not on Linux.
///
/// ### Nothing is dropped
/// A job the pool cannot run — it was submitted after `shutdown(_:)`
/// began, or was still queued when a ``ThreadPool/ShutdownMode/cancel`` shutdown
/// discarded the queue — is handed to Swift's global concurrent executor instead.
/// Dropping it would leave its task suspended forever, and whoever awaits it with it.
/// The task keeps preferring the pool, so after each suspension it comes back here and
/// is handed on again.
///
/// Rejected alternative: submitting a closure that captures the job (``submit(_:)``).
/// It costs a second allocation (the closure's context), and a cancelling shutdown
/// would release the closure, and with it the only way to run the job.
extension ThreadPool: TaskExecutor {
    /// Runs `job` on one of the pool's workers; from inside the pool, on the current
    /// worker's own deque. When the pool has shut down, on Swift's global concurrent
    /// executor (see the extension's documentation).
    public func enqueue(_ job: consuming ExecutorJob) {
        JobTask.submit(UnownedJob(job), to: self)
    }
}

/// The engine's task node with a Swift job in it: `[spindle_task | Payload]`, one
/// allocation, freed before the job runs.
enum JobTask {
    @unsafe
    struct Payload {
        // safety: lives inside a task node; the pool reference is retained at submission
        // and released once, after the job runs.
        let job: UnownedJob
        /// Retained from submission until the job has run, which passes the pool to
        /// the runtime as its executor: the pool must outlive the run whoever else
        /// holds it (anyone may call ``ThreadPool/enqueue(_:)``, and a pool freed with
        /// jobs queued still runs them).
        let pool: Unmanaged<ThreadPool>
    }

    /// The block's size, which the engine's node cache must fit (TaskNodeCacheTests).
    static let byteCount = unsafe taskBlockSize(Payload.self)

    static func submit(_ job: UnownedJob, to pool: ThreadPool) {
        let task = unsafe makeTaskBlock(Payload(job: job, pool: .passRetained(pool))) { task, reason in
            let payload = unsafe takeTaskPayload(task!, Payload.self)
            if reason == SPINDLE_RUN {
                unsafe payload.job.runSynchronously(on: payload.pool.takeUnretainedValue().asUnownedTaskExecutor())
            } else {
                unsafe JobTask.runElsewhere(payload.job)
            }
            unsafe payload.pool.release()
        }
        if unsafe spindle_submit_task(pool.raw, task) != 0 {
            // Refused: the pool is shutting down. Nothing was queued; the job goes
            // elsewhere, as when a cancelling shutdown discards it.
            unsafe releaseRefusedTask(task)
        }
    }

    /// A job this pool cannot run goes to Swift's global concurrent executor.
    private static func runElsewhere(_ job: UnownedJob) {
        globalConcurrentExecutor.enqueue(ExecutorJob(job))
    }
}
