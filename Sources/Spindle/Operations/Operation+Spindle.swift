// Spindle's additions to Foundation's `Operation`: awaiting an operation without
// blocking a thread, and observing its state without KVO.

extension Operation {
    /// Suspends the calling task until the operation has finished, without blocking a
    /// thread (Spindle's addition; `waitUntilFinished()` blocks). A task of a higher
    /// priority than the operation's class promotes it, as a blocking wait does.
    public func finished() async {
        if finishCompleted.load(ordering: .acquiring) { return }
        promote(to: Promotion.callingTaskRank())
        hasWaiters.store(true, ordering: .sequentiallyConsistent)
        await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
            let registered = guarded.locked { g -> Bool in
                if finishCompleted.load(ordering: .sequentiallyConsistent) { return false }
                unsafe g.makeExtras().waiters.append(Waiter(continuation: c))
                return true
            }
            if !registered { c.resume() }
        }
    }

    /// Calls `handler` on every state change of this operation from now on: ready,
    /// executing, finished, cancelled. Handlers run synchronously on the thread that
    /// made the change and must be quick; they are released once the operation has
    /// finished.
    public func onStateChange(_ handler: @escaping @Sendable (StateChange) -> Void) {
        needsFinishLock.store(true, ordering: .sequentiallyConsistent)
        withExtras { $0.observers.append(handler) }
        hasObservers.store(true, ordering: .releasing)
    }
}
