// Spindle's additions to Foundation's `OperationQueue`: awaiting the queue's drain
// without blocking a thread, and observing its operation count.

extension OperationQueue {
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
