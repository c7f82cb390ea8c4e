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
    /// - From one of this pool's own workers — a task that prefers the pool as its
    ///   executor (`withTaskExecutorPreference(pool)`), say — `body` runs inline, in the
    ///   calling task, without waiting for room in the queue.
    ///
    /// - Throws: what `body` throws; `CancellationError`; ``Error/overloaded``;
    ///   ``Error/shutDown`` when the pool shuts down before `body` starts (a cancelling
    ///   shutdown included); ``Error/createdBeforeFork``.
    @inlinable @inline(__always)
    public func run<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
        try await awaitOffload(body, ifFull: .wait, as: Offload<T>.self)
    }

    /// The async `run(_:)` on a pool with a ``Configuration/queueLimit``, choosing what happens
    /// when the pool is full: wait for room (first come first served), or throw
    /// ``Error/overloaded`` at once.
    @inlinable @inline(__always)
    public func run<T: Sendable>(ifFull: FullPolicy,
                                 _ body: @escaping @Sendable () throws -> T) async throws -> T {
        try await awaitOffload(body, ifFull: ifFull, as: Offload<T>.self)
    }

    /// `run`, given the offload's class by its caller: inlined into a caller that knows
    /// `T`, `Offload<T>.self` is read from the caller's own cache of that type's metadata,
    /// where this generic function would look it up in the runtime's table on every call.
    ///
    /// It is inlined whole too, with the work around the suspension out of line
    /// (`makeOffload`, `admitOffload`, `submitOffload`), because each async function
    /// between the caller and the continuation costs a frame from the task's allocator
    /// and a check of the task's executor on the way in and on the way out
    /// (docs/performance.md, "Async offload").
    @inlinable @inline(__always)
    func awaitOffload<T: Sendable>(_ body: @escaping @Sendable () throws -> T, ifFull: FullPolicy,
                                   as offloadType: Offload<T>.Type) async throws -> T {
        // Already on a worker (a task that prefers this pool, or a closure of its own):
        // nothing to hand over, and nothing queued to count against a limit.
        if isCurrentThreadWorker {
            try Task.checkCancellation()
            return try body()
        }
        // A task cancelled already is answered by the handler below, which then runs at
        // once, before `submitOffload` publishes (OF2): nothing is submitted.
        let offload = hasAdmission ? try await admitOffload(body, ifFull: ifFull, as: offloadType)
                                   : makeOffload(body, ticket: 0, as: offloadType)
        return try await withTaskCancellationHandler {
            unsafe try await withUnsafeThrowingContinuation { (c: UnsafeContinuation<T, any Swift.Error>) in
                unsafe submitOffload(offload, c)
            }
        } onCancel: {
            offload.cancel()
        }
    }

    /// Whether the pool has a queue limit, whose place an offload takes first.
    @usableFromInline
    var hasAdmission: Bool { admission != nil }

    /// The offload of `body`, holding the admission place `ticket` (an `Admission.Ticket`).
    @usableFromInline
    func makeOffload<T: Sendable>(_ body: @escaping @Sendable () throws -> T, ticket: UInt64,
                                  as offloadType: Offload<T>.Type) -> Offload<T> {
        offloadType.init(body, admission: admission, ticket: ticket, timers: timerSlot.current)
    }

    /// The offload of `body` on a pool with a queue limit, once it has a place: waiting
    /// for one, or refusing at once, as `ifFull` says.
    @usableFromInline
    func admitOffload<T: Sendable>(_ body: @escaping @Sendable () throws -> T, ifFull: FullPolicy,
                                   as offloadType: Offload<T>.Type) async throws -> Offload<T> {
        // Cancelled already: said before anything else, a full pool's refusal included.
        try Task.checkCancellation()
        // Called only when `hasAdmission`.
        guard let admission else { preconditionFailure("admitOffload on a pool without a queue limit") }
        var ticket: Admission.Ticket = 0
        switch ifFull {
        case .wait:
            do { ticket = try await admission.take() } catch let error as Error {
                refusals.add(1, ordering: .relaxed)
                throw error
            }
        case .fail:
            guard let admitted = admission.tryTake() else { throw admissionRefusal() }
            ticket = admitted
        }
        return makeOffload(body, ticket: ticket, as: offloadType)
    }

    /// Publishes `c` in `offload` and submits it. A cancellation that came first (even
    /// while waiting for a place that was then granted) is taken here, and nothing is
    /// submitted; a refusal by the pool resumes `c` here, with the reason.
    @usableFromInline
    func submitOffload<T: Sendable>(_ offload: Offload<T>, _ c: UnsafeContinuation<T, any Swift.Error>) {
        guard unsafe offload.publish(c) else { return }
        let rc = unsafe spindle_submit_task(raw, offload.submissionNode())
        if rc != 0 {
            // Refused: nothing was queued. The node is ours again.
            offload.refused(engineRefusal(rc))
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

    /// `submit` on a pool with a queue limit: a place is taken first (AD1) and given back
    /// when the closure starts. A cancelling shutdown that discards it closes the
    /// admission first, so the place it keeps is never waited for.
    func submitAdmitted(_ work: consuming @escaping @Sendable () -> Void, _ admission: Admission) throws {
        guard let ticket = admission.tryTake() else { throw admissionRefusal() }
        let task = unsafe ClosureTask.make { [work] in
            admission.giveBack(ticket)
            work()
        }
        let rc = unsafe spindle_submit_task(raw, task)
        if rc != 0 {
            unsafe releaseRefusedTask(task)
            admission.giveBack(ticket)
            throw engineRefusal(rc)
        }
    }

    /// Counts a refusal by the admission (AD1), and says why: the pool is shutting down,
    /// or full.
    func admissionRefusal() -> Error {
        refusals.add(1, ordering: .relaxed)
        return isShuttingDown ? .shutDown : .overloaded
    }

    /// Counts a refusal by the engine (`spindle_submit_task`'s `rc`), and says why.
    func engineRefusal(_ rc: Int32) -> Error {
        refusals.add(1, ordering: .relaxed)
        return rc == ECHILD ? .createdBeforeFork : .shutDown
    }

    /// Stops the pool as `shutdown(_:)` does, suspending the calling task instead of
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

/// An offloaded closure, shared by the awaiting task, the worker that runs it and the
/// pool that may discard it; it is also the engine task that carries it (`engineTask`,
/// found as an operation's is: Runtime/UnsafeABI.swift), so an offload needs no node
/// of its own.
///
/// OF1. `phase` goes from `unpublished` to `pending` once the continuation is stored
///      (release), and from `pending` to one of `started`, `cancelled`, `discarded`
///      by one CAS (acquire, so the winner sees the continuation). The winner resumes
///      the continuation — with the result, `CancellationError` or the pool's refusal
///      — and gives back the admission place (AD1); everyone else does nothing.
/// OF2. A cancellation before publication moves `unpublished` to `cancelled`; the
///      publication then fails, resumes with `CancellationError` itself and submits
///      nothing.
/// OF3. The engine holds one reference from submission until its `run`, which either
///      starts the offload or, when a cancelling shutdown discards it, discards it.
///
/// Model: Tests/Models/offload.pml checks OF1-OF3 over every interleaving of the task,
/// a cancellation at any moment, and the engine running, discarding or refusing it.
@usableFromInline
class OffloadBase: @unchecked Sendable {
    // @unchecked: `engineTask` is written before submission and then only by the engine;
    // the continuation is published through `phase` (OF1).
    /// The engine's task node: the first stored property (see `TaskNode`).
    @exclusivity(unchecked) final var engineTask = unsafe spindle_task(spindle_private: (nil, nil), run: nil)
    final let phase = Atomic<UInt8>(OffloadBase.unpublished)
    final let admission: Admission?
    /// What the offload was admitted with (AD5), to give back with its place.
    final let ticket: Admission.Ticket

    static let unpublished: UInt8 = 0
    static let pending: UInt8 = 1
    static let started: UInt8 = 2
    static let cancelled: UInt8 = 3
    static let discarded: UInt8 = 4

    init(admission: Admission?, ticket: Admission.Ticket) {
        self.admission = admission
        self.ticket = ticket
    }

    /// Moves the offload from pending to `next`; true for the one caller that does,
    /// which has then given the place back (OF1).
    final func leavePending(to next: UInt8) -> Bool {
        guard phase.compareExchange(expected: OffloadBase.pending, desired: next, ordering: .acquiring).exchanged
        else { return false }
        admission?.giveBack(ticket)
        return true
    }

    /// The node to submit, with the engine's reference (OF3).
    final func submissionNode() -> UnsafeMutablePointer<spindle_task> {
        let node = unsafe TaskNode.node(of: self)
        unsafe node.pointee.run = { task, reason in
            // safety: the node is this offload's `engineTask`, and the engine's reference,
            // taken below, is handed back exactly once, here (OF3).
            let offload = unsafe TaskNode.object(of: task.unsafelyUnwrapped, as: OffloadBase.self).takeRetainedValue()
            if reason == SPINDLE_RUN { offload.start() } else { offload.discard(ThreadPool.Error.shutDown) }
        }
        // safety: the engine's reference (OF3): given back once, by the node's run or by
        // `refused`.
        _ = unsafe Unmanaged.passRetained(self)
        return unsafe node
    }

    /// The pool refused the node: takes the engine's reference back, and tells the
    /// awaiting task why.
    final func refused(_ error: ThreadPool.Error) {
        // safety: releases the engine's reference `submissionNode` took; the node was never
        // queued, so its run will not release it too.
        unsafe Unmanaged.passUnretained(self).release()
        discard(error)
    }

    func start() {}
    func discard(_ error: ThreadPool.Error) {}
}

@usableFromInline
@safe
final class Offload<T: Sendable>: OffloadBase, @unchecked Sendable {
    // safety: the unsafe continuation is resumed exactly once, by whoever moves `phase` out
    // of pending (OF1).
    // @unchecked: `continuation` is written once, before `phase` publishes it, and read
    // only by the one that moves `phase` out of pending (OF1).
    let body: @Sendable () throws -> T
    /// Unsafe, not checked: a checked continuation is a resilient generic type, so this
    /// generic class would look up its metadata at run time (a hash-table lookup) each
    /// time it stores, copies or destroys one — several per offload. OF1 already
    /// guarantees that exactly one party resumes it. Every resume goes through
    /// `resume(_:returning:)` or `resume(_:throwing:)`, below.
    private var continuation: UnsafeContinuation<T, any Swift.Error>?
    /// The pool's timers when it is being timed (``PoolMetrics``), and when the offload
    /// was made.
    private let timers: PoolTimers?
    private let madeAt: UInt64

    init(_ body: @escaping @Sendable () throws -> T, admission: Admission?, ticket: Admission.Ticket = 0,
         timers: PoolTimers? = nil) {
        self.body = body
        self.timers = timers
        self.madeAt = timers == nil ? 0 : DispatchTime.now().uptimeNanoseconds
        super.init(admission: admission, ticket: ticket)
    }

    /// Stores the continuation and publishes it (OF1); false, having resumed it with
    /// `CancellationError`, when the awaiting task was cancelled first (OF2).
    func publish(_ c: UnsafeContinuation<T, any Swift.Error>) -> Bool {
        unsafe continuation = unsafe c
        // Release: the continuation before the phase that says it is there.
        if phase.compareExchange(expected: OffloadBase.unpublished, desired: OffloadBase.pending,
                                 ordering: .releasing).exchanged {
            return true
        }
        unsafe resume(c, throwing: CancellationError())
        return false
    }

    /// The awaiting task was cancelled: if the closure has not started, it never will.
    @usableFromInline
    func cancel() {
        // Before publication (OF2): `publish` sees it and resumes.
        if phase.compareExchange(expected: OffloadBase.unpublished, desired: OffloadBase.cancelled,
                                 ordering: .relaxed).exchanged {
            admission?.giveBack(ticket)
            return
        }
        if leavePending(to: OffloadBase.cancelled) {
            unsafe resume(continuation.unsafelyUnwrapped, throwing: CancellationError())
        }
    }

    override func start() {
        guard leavePending(to: OffloadBase.started) else { return }
        let c = unsafe continuation.unsafelyUnwrapped
        let started = timers == nil ? 0 : DispatchTime.now().uptimeNanoseconds
        let value: T
        do {
            value = try body()
        } catch {
            record(started: started)
            unsafe resume(c, throwing: error)
            return
        }
        record(started: started)
        unsafe resume(c, returning: value)
    }

    /// Records the closure's queueing delay and run time when the pool is timed.
    private func record(started: UInt64) {
        guard let timers else { return }
        let ended = DispatchTime.now().uptimeNanoseconds
        timers.queueDelay.recordNanoseconds(Int64(started &- madeAt))
        timers.runTime.recordNanoseconds(Int64(ended &- started))
    }

    /// The resume is inlined here, so under ThreadSanitizer its write of the result into
    /// the awaiting task's frame is seen, but not the runtime's ordering of that write
    /// before the task runs again; the bracket keeps TSan from recording the write
    /// (tsan.c). The closure itself never runs inside it; what does is the runtime's
    /// enqueue of the resumed task, which for a task that prefers this pool is a push
    /// onto this worker's deque, so under TSan that one push goes unrecorded too.
    private func resume(_ c: UnsafeContinuation<T, any Swift.Error>, returning value: T) {
        spindle_tsan_ignore_accesses_begin()
        unsafe c.resume(returning: value)
        spindle_tsan_ignore_accesses_end()
    }

    private func resume(_ c: UnsafeContinuation<T, any Swift.Error>, throwing error: any Swift.Error) {
        spindle_tsan_ignore_accesses_begin()
        unsafe c.resume(throwing: error)
        spindle_tsan_ignore_accesses_end()
    }

    override func discard(_ error: ThreadPool.Error) {
        guard leavePending(to: OffloadBase.discarded) else { return }
        unsafe resume(continuation.unsafelyUnwrapped, throwing: error)
    }
}
