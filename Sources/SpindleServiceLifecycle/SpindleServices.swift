// Built only with the `ServiceLifecycle` trait (Package.swift): without it, the module
// is empty and swift-service-lifecycle is not resolved.
#if ServiceLifecycle
import ServiceLifecycle
import Spindle

/// A ``Spindle/ThreadPool`` as a `Service` of swift-service-lifecycle, so that a pool
/// shuts down in order with the rest of a server in a `ServiceGroup`.
///
/// The service does nothing while the server runs. On graceful shutdown (SIGTERM, or
/// whatever the group was told to treat as one) the pool stops admitting work — later
/// submissions throw ``Spindle/ThreadPool/Error/shutDown`` — and then drains what it
/// has queued, or releases it, as configured, before `run()` returns. If the group
/// cancels the service instead, the pool is shut down with
/// ``Spindle/ThreadPool/ShutdownMode/cancel``. The wait happens without blocking a
/// cooperative thread.
///
/// ```swift
/// let pool = try ThreadPool(configuration: .init(workers: nil))
/// let group = ServiceGroup(
///     services: [httpServer, ThreadPoolService(pool)],
///     gracefulShutdownSignals: [.sigterm],
///     logger: logger)
/// try await group.run()
/// ```
///
/// List the HTTP server before the pool: a `ServiceGroup` shuts its services down in
/// reverse order, so the server stops taking requests before the pool stops taking
/// work. The process-wide pools (``Spindle/ThreadPool/shared`` and the quality-of-
/// service classes) cannot be shut down; give the service a pool of your own.
public struct ThreadPoolService: Service {
    /// The pool this service shuts down.
    public let pool: ThreadPool
    /// What graceful shutdown does with queued work.
    public let mode: ThreadPool.ShutdownMode

    /// A service for `pool`; on graceful shutdown, queued work is handled as `mode`
    /// says (``Spindle/ThreadPool/ShutdownMode/drain``: run it).
    public init(_ pool: ThreadPool, onGracefulShutdown mode: ThreadPool.ShutdownMode = .drain) {
        self.pool = pool
        self.mode = mode
    }

    /// Waits for graceful shutdown, then shuts the pool down.
    public func run() async throws {
        do {
            try await gracefulShutdown()
        } catch is CancellationError {
            try await pool.shutdown(.cancel)
            return
        }
        try await pool.shutdown(mode)
    }
}

/// A Spindle ``Spindle/OperationQueue`` as a `Service` of swift-service-lifecycle.
///
/// On graceful shutdown the queue finishes what it holds — or, with `cancelling: true`,
/// cancels it first (operations that have not started finish without running) — and
/// `run()` returns once the queue is empty. Stop adding operations when the group
/// starts shutting down: list the services that add them before this one, since a
/// `ServiceGroup` shuts its services down in reverse order.
public struct OperationQueueService: Service {
    /// The queue this service drains.
    public let queue: OperationQueue
    /// Whether graceful shutdown cancels the queue's operations before waiting.
    public let cancelling: Bool

    /// A service for `queue`.
    public init(_ queue: OperationQueue, cancelling: Bool = false) {
        self.queue = queue
        self.cancelling = cancelling
    }

    /// Waits for graceful shutdown, then for the queue to empty.
    public func run() async throws {
        do {
            try await gracefulShutdown()
        } catch is CancellationError {
            queue.cancelAllOperations()
            await queue.allOperationsFinished()
            return
        }
        if cancelling { queue.cancelAllOperations() }
        await queue.allOperationsFinished()
    }
}
#endif
