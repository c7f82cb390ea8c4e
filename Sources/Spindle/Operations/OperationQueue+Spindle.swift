import Synchronization

// Spindle's additions to Foundation's `OperationQueue`: the async forms of what
// Foundation does by blocking a thread, and observing the queue's operation count.

extension OperationQueue {
    /// Runs `body` as an operation of this queue — within its width, in its priority
    /// order, at its quality of service — and returns its result, suspending the calling
    /// task until the operation has finished. The async form of adding a
    /// ``BlockOperation`` and waiting for it.
    ///
    /// Cancelling the calling task cancels the operation: if it has not started, `body`
    /// never runs and the call throws `CancellationError` once the queue has retired the
    /// operation (at once, unless the queue is suspended); once it has started, it runs
    /// to its end and its result is returned. An error `body` throws is rethrown.
    ///
    /// On a queue with an ``admissionLimit``, the call first waits for room, first come
    /// first served (``run(ifFull:_:)`` can throw instead).
    @inlinable @inline(__always)
    public func run<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
        try await run(ifFull: .wait, body)
    }

    /// `body` as a BlockOperation added to this queue, once the caller holds a place in
    /// it (QueueAdmission.swift, QA1), and where the operation will leave its result.
    @usableFromInline
    func addRun<T: Sendable>(_ body: @escaping @Sendable () throws -> T) -> (BlockOperation, RunOutcome) {
        let outcome = RunOutcome(holding: T.self)
        let op = BlockOperation {
            do {
                outcome.returned(try body())
            } catch {
                outcome.threw(error)
            }
        }
        addOperation(op)
        admission.added { operationCount }
        return (op, outcome)
    }

    /// Adds `ops` and suspends the calling task until they have all finished: the async
    /// form of ``addOperations(_:waitUntilFinished:)`` with `true`, which blocks a thread.
    public func addOperations(_ ops: [Operation]) async {
        addOperations(ops, waitUntilFinished: false)
        for op in ops { await op.finished() }
    }

    /// Suspends the calling task until the queue has no operations left, without
    /// blocking a thread (Spindle's addition). A task of a higher priority than the
    /// queue's operations promotes them to its class, as a blocking wait does.
    public func allOperationsFinished() async {
        // The waiting task's class reaches every operation it waits for (Promotion.swift,
        // P3), those added while it waits included.
        let rank = Promotion.callingTaskRank()
        unsafe await withUnsafeContinuation { (c: UnsafeContinuation<Void, Never>) in
            // safety: resumed once: here when the registration is refused, else by the
            // finish that drains the queue (Waiter.swift).
            if unsafe registerDrainWaiter(Waiter(continuation: c), rank: rank) {
                promoteAll(to: rank)
            } else {
                unsafe c.resume()
            }
        }
    }

    /// Calls `handler` with the new ``operationCount`` whenever it changes (Spindle's
    /// addition). Runs synchronously on the thread that changed it; keep it quick.
    /// Returns a token; pass it to ``removeOperationCountObserver(_:)`` to stop.
    @discardableResult
    public func onOperationCountChange(_ handler: @escaping @Sendable (Int) -> Void) -> Int {
        hasCountObservers.store(true, ordering: .releasing)
        return unsafe state.locked { s in
            unsafe s.nextObserverID += 1
            unsafe s.countObservers.append((s.nextObserverID, handler))
            return unsafe s.nextObserverID
        }
    }

    /// Stops the observer registered under `token`.
    public func removeOperationCountObserver(_ token: Int) {
        unsafe state.locked { s in unsafe s.countObservers.removeAll { $0.id == token } }
    }

    func notifyCountChange() {
        let observers = unsafe state.locked { s in unsafe s.countObservers.map(\.handler) }
        let count = operationCount
        for o in observers { o(count) }
    }
}

/// What `run`'s operation produced: its value, its error, or nothing when it never ran.
///
/// Not generic, and holding the value in raw storage: in `addRun` and its operation's
/// block, which are generic and not specialised for `run`'s caller, a `Result<T, Error>`,
/// an `Optional` of it or a `Mutex` of that is stored, copied and destroyed through type
/// metadata looked up at run time, a hash-table lookup each time (several per call).
/// `T`'s own metadata comes with the call.
///
/// RO1. The operation's block writes the value or the error, then publishes which with
///      a release store of `state`; `take` reads `state` with an acquire load, after
///      the operation has finished, so it sees what the block wrote.
/// RO2. `run` always calls `take` once the operation has finished, and `take` moves
///      the value out, so the storage holds no value when it is deallocated.
@safe
@usableFromInline
final class RunOutcome: @unchecked Sendable {
    // safety: a value lives only between RO1's write and `take` (RO2), in `inline` when
    // `T` fits there, else in `outOfLine`, which the class allocates and frees itself.
    // @unchecked: the value and `error` are written once, by the operation's block,
    // before `state` publishes them, and read once, after (RO1).
    private static let none: UInt8 = 0, value: UInt8 = 1, thrown: UInt8 = 2
    private let state = Atomic<UInt8>(RunOutcome.none)
    /// Room for a value of up to four words with at most a word's alignment — most
    /// results: a number, a reference, a `String`, `Data`, an array — so that `run`
    /// allocates nothing for it beyond this object. Reached only through a pointer made
    /// for one access (`withStorage`); its synchronisation is RO1.
    @exclusivity(unchecked) private var inline: (UInt64, UInt64, UInt64, UInt64) = (0, 0, 0, 0)
    /// Storage for a larger or more aligned value; nil when `inline` holds it.
    private let outOfLine: UnsafeMutableRawPointer?
    private var error: (any Error)?

    init<T>(holding _: T.Type) {
        if MemoryLayout<T>.size <= MemoryLayout<(UInt64, UInt64, UInt64, UInt64)>.size
            && MemoryLayout<T>.alignment <= MemoryLayout<UInt64>.alignment {
            unsafe outOfLine = nil
        } else {
            // safety: sized and aligned for `T`, the one type `returned` and `take` use
            // (RO1, RO2).
            unsafe outOfLine = .allocate(byteCount: MemoryLayout<T>.size, alignment: MemoryLayout<T>.alignment)
        }
    }

    deinit { unsafe outOfLine?.deallocate() }

    /// Calls `body` with the value's storage, valid for the call.
    private func withStorage<R>(_ body: (UnsafeMutableRawPointer) -> R) -> R {
        if let outOfLine = unsafe outOfLine { return unsafe body(outOfLine) }
        return unsafe withUnsafeMutablePointer(to: &inline) { unsafe body(UnsafeMutableRawPointer($0)) }
    }

    func returned<T>(_ value: T) {
        _ = unsafe withStorage { unsafe $0.initializeMemory(as: T.self, to: value) }
        state.store(RunOutcome.value, ordering: .releasing)
    }

    func threw(_ error: any Error) {
        self.error = error
        state.store(RunOutcome.thrown, ordering: .releasing)
    }

    /// The value, the error rethrown, or `CancellationError` when the operation never
    /// ran (it was cancelled first). Called once, after the operation finished.
    @usableFromInline
    func take<T>(_: T.Type) throws -> T {
        switch state.load(ordering: .acquiring) {
        case RunOutcome.value: return unsafe withStorage { unsafe $0.assumingMemoryBound(to: T.self).move() }
        case RunOutcome.thrown: throw unsafe error.unsafelyUnwrapped
        default: throw CancellationError()
        }
    }
}
