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
    public func run<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
        try await run(ifFull: .wait, body)
    }

    /// `run`, once the caller holds a place in the queue (QueueAdmission.swift, QA1).
    func runAdmitted<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
        let outcome = Mutex<Result<T, any Error>?>(nil)
        let op = BlockOperation {
            let result = Result { try body() }
            outcome.locked { $0 = result }
        }
        addOperation(op)
        admission.added { [unowned self] in operationCount }
        await withTaskCancellationHandler {
            await op.finished()
        } onCancel: {
            op.cancel()
        }
        guard let result = outcome.locked({ $0 }) else { throw CancellationError() }
        return try result.get()
    }

    /// Adds `ops` and suspends the calling task until they have all finished: the async
    /// form of ``addOperations(_:waitUntilFinished:)`` with `true`, which blocks a thread.
    public func addOperations(_ ops: [Operation]) async {
        addOperations(ops, waitUntilFinished: false)
        for op in ops { await op.finished() }
    }

    /// Suspends the calling task until the queue has no operations left, without
    /// blocking a thread (Spindle's addition).
    public func allOperationsFinished() async {
        await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
            if !registerDrainWaiter(Waiter(continuation: c)) { c.resume() }
        }
    }

    /// Calls `handler` with the new ``operationCount`` whenever it changes (Spindle's
    /// addition). Runs synchronously on the thread that changed it; keep it quick.
    /// Returns a token; pass it to ``removeOperationCountObserver(_:)`` to stop.
    @discardableResult
    public func onOperationCountChange(_ handler: @escaping @Sendable (Int) -> Void) -> Int {
        hasCountObservers.store(true, ordering: .releasing)
        return state.locked { s in
            s.nextObserverID += 1
            s.countObservers.append((s.nextObserverID, handler))
            return s.nextObserverID
        }
    }

    /// Stops the observer registered under `token`.
    public func removeOperationCountObserver(_ token: Int) {
        state.locked { s in s.countObservers.removeAll { $0.id == token } }
    }

    func notifyCountChange() {
        let observers = state.locked { s in s.countObservers.map(\.handler) }
        let count = operationCount
        for o in observers { o(count) }
    }
}
