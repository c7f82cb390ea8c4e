import CSpindle
import Foundation
import Synchronization

extension ThreadPool {
    /// What ``run(ifFull:_:)`` does when the pool is at its ``Configuration/queueLimit``.
    public enum FullPolicy: Sendable {
        /// Suspend the calling task until there is room, first come first served.
        case wait
        /// Throw ``ThreadPool/Error/overloaded`` at once.
        case fail
    }

    /// Runs `body` on one of the pool's workers and returns its result, suspending the
    /// calling task — never blocking its thread — until it has run.
    ///
    /// This is how async code hands CPU-bound work to the pool: a request handler on an
    /// event loop or on the cooperative pool awaits the result while the work runs at
    /// the pool's quality of service, as `NIOThreadPool.runIfActive` does for
    /// swift-nio.
    ///
    /// ```swift
    /// let thumbnail = try await ThreadPool.forQualityOfService(.utility).run {
    ///     try Thumbnail(decoding: upload)
    /// }
    /// ```
    ///
    /// - Cancellation: if the calling task is cancelled before `body` starts, `body`
    ///   never runs and the call throws `CancellationError`. Once it has started, it runs
    ///   to its end and its result is returned.
    /// - Errors: an error `body` throws is rethrown as it is.
    /// - Admission: on a pool with a ``Configuration/queueLimit``, a full pool makes the
    ///   caller wait for room, first come first served (``run(ifFull:_:)`` with `.fail`
    ///   throws ``Error/overloaded`` at once instead).
    /// - From one of this pool's own workers, `body` runs inline.
    ///
    /// - Throws: what `body` throws; `CancellationError`; ``Error/overloaded``;
    ///   ``Error/shutDown`` when the pool shuts down before `body` starts (a cancelling
    ///   shutdown included); ``Error/createdBeforeFork``.
    public func run<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
        try await run(ifFull: .wait, body)
    }

    /// ``run(_:)`` on a pool with a ``Configuration/queueLimit``, choosing what happens
    /// when the pool is full: wait for room (first come first served), or throw
    /// ``Error/overloaded`` at once.
    public func run<T: Sendable>(ifFull: FullPolicy,
                                 _ body: @escaping @Sendable () throws -> T) async throws -> T {
        if isCurrentThreadWorker { return try body() }
        try Task.checkCancellation()
        if let admission {
            switch ifFull {
            case .wait: try await admission.take()
            case .fail: guard admission.tryTake() else { throw isShuttingDown ? Error.shutDown : Error.overloaded }
            }
        }
        let offload = Offload(body, admission: admission)
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (c: CheckedContinuation<T, any Swift.Error>) in
                // A cancellation that came first (even while waiting for a slot that was
                // then granted) is taken here, and nothing is submitted.
                guard offload.publish(c) else { return }
                let task = OffloadTask.make(offload)
                let rc = spindle_submit_task(raw, task)
                if rc != 0 {
                    // Refused: nothing was queued. Resumed here, with the reason; the
                    // node's own discard then finds the offload no longer pending.
                    if offload.leavePending(to: .discarded) {
                        c.resume(throwing: rc == ECHILD ? Error.createdBeforeFork : Error.shutDown)
                    }
                    releaseRefusedTask(task)
                }
            }
        } onCancel: {
            offload.cancel()
        }
    }

    /// Queues `work` unless the pool is at its ``Configuration/queueLimit`` or has shut
    /// down: true when it was queued, false when it was not (and was released without
    /// running). Never blocks and never throws, for a caller that answers "busy" at once
    /// — a server's 503.
    public func trySubmit(_ work: consuming @escaping @Sendable () -> Void) -> Bool {
        do {
            try submit(work)
            return true
        } catch {
            return false
        }
    }

    /// `submit` on a pool with a queue limit: a slot is taken first (AD1) and given back
    /// when the closure starts. A cancelling shutdown that discards it closes the
    /// admission first, so the slot it keeps is never waited for.
    func submitAdmitted(_ work: consuming @escaping @Sendable () -> Void, _ admission: Admission) throws {
        guard admission.tryTake() else { throw isShuttingDown ? Error.shutDown : Error.overloaded }
        let task = ClosureTask.make { [work] in
            admission.giveBack()
            work()
        }
        let rc = spindle_submit_task(raw, task)
        if rc != 0 {
            releaseRefusedTask(task)
            admission.giveBack()
            throw rc == ECHILD ? Error.createdBeforeFork : Error.shutDown
        }
    }

    /// Stops the pool as ``shutdown(_:)`` does, suspending the calling task instead of
    /// blocking its thread: the wait for the workers to exit happens on a thread of its
    /// own, so a cooperative thread (or an event loop) is never held.
    public func shutdown(_ mode: ShutdownMode = .drain) async throws {
        if isProcessWide { throw Error.processWidePool }
        let result: Result<Void, any Swift.Error> = await withCheckedContinuation { c in
            Thread.detachNewThread { [self] in
                c.resume(returning: Result { try shutdown(mode) })
            }
        }
        try result.get()
    }
}

/// The state an offloaded closure shares between the awaiting task, the worker that
/// runs it and the pool that may discard it: who moves it out of `pending` is the one
/// that resumes the continuation and gives back the admission slot (AD1).
class OffloadBase: @unchecked Sendable {
    // @unchecked: `phase` and `continuation` are under `lock`; the rest is immutable.
    enum Phase { case pending, started, cancelled, discarded }
    let lock = Mutex<Phase>(.pending)
    let admission: Admission?

    init(admission: Admission?) { self.admission = admission }

    /// Moves the offload from pending to `to`; true for the one caller that does (which
    /// then gives the slot back).
    func leavePending(to next: Phase) -> Bool {
        let left = lock.locked { phase -> Bool in
            guard phase == .pending else { return false }
            phase = next
            return true
        }
        if left { admission?.giveBack() }
        return left
    }

    func start() {}
    func discard() {}
}

final class Offload<T: Sendable>: OffloadBase, @unchecked Sendable {
    // @unchecked: `continuation` is written once, before the offload is submitted, and
    // read only by whoever moves it out of pending, after.
    let body: @Sendable () throws -> T
    private var continuation: CheckedContinuation<T, any Swift.Error>?

    init(_ body: @escaping @Sendable () throws -> T, admission: Admission?) {
        self.body = body
        super.init(admission: admission)
    }

    /// Stores the continuation before the offload is submitted; false, having resumed
    /// it with `CancellationError`, when the awaiting task was cancelled first.
    func publish(_ c: CheckedContinuation<T, any Swift.Error>) -> Bool {
        let pending = lock.locked { phase -> Bool in
            guard phase == .pending else { return false }
            continuation = c // under the lock: `cancel` reads it under the lock too
            return true
        }
        if !pending { c.resume(throwing: CancellationError()) }
        return pending
    }

    /// The awaiting task was cancelled: if the closure has not started, it never will.
    func cancel() {
        let c = lock.locked { phase -> CheckedContinuation<T, any Swift.Error>?? in
            guard phase == .pending else { return nil }
            phase = .cancelled
            return .some(continuation)
        }
        guard let c else { return }
        admission?.giveBack()
        // Not yet published: `publish` sees `.cancelled` and resumes it.
        c?.resume(throwing: CancellationError())
    }

    override func start() {
        guard leavePending(to: .started) else { return }
        let c = continuation.unsafelyUnwrapped
        c.resume(with: Result { try body() })
    }

    override func discard() {
        guard leavePending(to: .discarded) else { return }
        continuation?.resume(throwing: ThreadPool.Error.shutDown)
    }
}

/// The task node of an offload: `[spindle_task | Unmanaged<OffloadBase>]`, one malloc.
/// Run, it starts the offload; discarded by a cancelling shutdown (or refused), it tells
/// the awaiting task.
enum OffloadTask {
    static let payloadOffset = taskPayloadOffset(Unmanaged<OffloadBase>.self)
    static let byteCount = payloadOffset + MemoryLayout<Unmanaged<OffloadBase>>.size

    static func make(_ offload: OffloadBase) -> UnsafeMutablePointer<spindle_task> {
        let raw = spindleMalloc(byteCount)
        let task = raw.initializeMemory(
            as: spindle_task.self,
            repeating: spindle_task(spindle_private: (nil, nil), run: { task, reason in
                let box = takeTaskPayload(task!, Unmanaged<OffloadBase>.self, at: OffloadTask.payloadOffset)
                let offload = box.takeRetainedValue()
                if reason == SPINDLE_RUN { offload.start() } else { offload.discard() }
            }),
            count: 1)
        (raw + payloadOffset).initializeMemory(as: Unmanaged<OffloadBase>.self,
                                               repeating: .passRetained(offload), count: 1)
        return task
    }
}
