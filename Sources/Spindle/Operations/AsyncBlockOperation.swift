import Synchronization

/// An operation whose work is an `async` closure (Spindle's addition: Foundation has
/// no such type, and each project writes its own).
///
/// It is an asynchronous operation in Foundation's sense: ``start()`` launches the
/// closure as a task and returns, and the operation stays executing until the closure
/// returns. So a queue's ``OperationQueue/maxConcurrentOperationCount`` bounds how
/// many closures are in flight, dependents start only after the whole closure, and
/// ``Operation/waitUntilFinished()``, ``Operation/finished()`` and the completion block
/// see its end — Foundation's concurrent-operation template, written once:
///
/// ```swift
/// let downloads = OperationQueue()
/// downloads.maxConcurrentOperationCount = 4          // at most four in flight
/// for url in urls {
///     downloads.addOperation(AsyncBlockOperation {
///         let data = try? await http.get(url)
///         await store.save(data, for: url)
///     })
/// }
/// ```
///
/// The task runs on Spindle's workers (a ``ThreadPool`` is a `TaskExecutor`): on the
/// pool that started the operation — the worker set of its quality of service, when a
/// queue starts it — or, when it is started by hand from another thread, on the pool
/// of its own ``Operation/qualityOfService``. ``cancel()`` cancels the task too, so the
/// closure sees `Task.isCancelled` and `Task.checkCancellation()`; an operation
/// cancelled before it starts finishes without running the closure.
///
/// As with any asynchronous operation, ``OperationQueue/current`` is the operation's
/// queue inside ``start()``, not inside the closure, which runs after `start()` has
/// returned.
///
/// Rejected alternative: running the closure with a blocking bridge inside `main()`
/// (a semaphore waited on until the task ends). It would hold a pool worker for the
/// whole closure, suspensions included, which is what the width limit is meant to
/// bound without.
open class AsyncBlockOperation: Operation, @unchecked Sendable {
    // @unchecked: `body` is immutable; `task` is behind its mutex.

    private let body: @Sendable () async -> Void
    /// The running task, for ``cancel()``; nil before ``start()``.
    private let task = Mutex<Task<Void, Never>?>(nil)

    /// An operation that runs `block` when started, and finishes when it returns.
    public init(block: @escaping @Sendable () async -> Void) {
        body = block
        super.init()
    }

    /// True: ``start()`` returns before the operation has finished.
    open override var isAsynchronous: Bool { true }

    /// Launches the closure as a task on Spindle's workers and returns; the operation
    /// finishes when the closure returns. A cancelled operation finishes at once,
    /// without running it.
    ///
    /// Like ``Operation/start()``, it leaves an operation that has finished as it is, and
    /// traps when the operation is already executing, belongs to a queue (the queue
    /// starts it), or is not ready.
    open override func start() {
        guard let (cancelled, _) = claimStart() else { return }
        if cancelled {
            completeStart()
            return
        }
        willChangeValue(forKey: "isExecuting")
        didChangeValue(forKey: "isExecuting")
        let pool = ThreadPool.current
            ?? ThreadPool.forQualityOfService(effectiveQoS(queueDefault: .default))
        // The task holds the operation until the closure has returned.
        let running = Task(executorPreference: pool) { [self] in
            await body()
            completeStart()
        }
        task.locked { $0 = running }
        // A cancel() that read no task yet took the lock before we stored it, after
        // setting the flag: the flag is visible here (the lock orders the two).
        if isCancelled { running.cancel() }
    }

    /// Cancels the operation (see ``Operation/cancel()``) and its running task, whose
    /// closure then sees `Task.isCancelled`.
    open override func cancel() {
        super.cancel()
        task.locked { $0 }?.cancel()
    }
}
