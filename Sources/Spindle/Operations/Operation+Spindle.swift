// Spindle's additions to Foundation's `Operation`: awaiting an operation without
// blocking a thread, and observing its state without KVO.

extension Operation {
    /// Suspends the calling task until the operation has finished, without blocking a
    /// thread (Spindle's addition; `waitUntilFinished()` blocks). A task of a higher
    /// priority than the operation's class promotes it, as a blocking wait does.
    public func finished() async {
        await awaitFinish()
    }

    /// `finished()`, inlined into `OperationQueue.run` and from there into its caller,
    /// where a call would add an async frame, and two checks of the task's executor, to
    /// every run. The steps on either side of the suspension are out of line.
    @inlinable
    func awaitFinish() async {
        guard prepareToAwaitFinish() else { return }
        unsafe await withUnsafeContinuation { (c: UnsafeContinuation<Void, Never>) in
            unsafe registerFinishContinuation(c)
        }
    }

    /// Before a task waits for the operation: false when it has finished already;
    /// else it is raised to the waiting task's class (P3) and marked as waited for.
    @usableFromInline
    func prepareToAwaitFinish() -> Bool {
        if finishCompleted.load(ordering: .acquiring) { return false }
        promote(to: Promotion.callingTaskRank())
        hasWaiters.store(true, ordering: .sequentiallyConsistent)
        return true
    }

    /// Lists `c` to be resumed when the operation has finished, or resumes it now if it
    /// has (the caller has called `prepareToAwaitFinish`).
    @usableFromInline
    func registerFinishContinuation(_ c: UnsafeContinuation<Void, Never>) {
        // safety: resumed once: here when the registration is refused, else by the
        // finish that takes the waiter off the list (Waiter.swift).
        if unsafe !registerFinishWaiter(Waiter(continuation: c)) { unsafe c.resume() }
    }

    /// Lists `waiter` to be signalled when the operation has finished (F6); false,
    /// listing nothing, when it already has. The caller has set `hasWaiters` first.
    func registerFinishWaiter(_ waiter: Waiter) -> Bool {
        guarded.locked { g -> Bool in
            if finishCompleted.load(ordering: .sequentiallyConsistent) { return false }
            unsafe extras(in: &g).addWaiter(waiter)
            return true
        }
    }

    /// Calls `handler` on every state change of this operation from now on: ready,
    /// executing, finished, cancelled. Handlers run synchronously on the thread that
    /// made the change and must be quick; they are released once the operation has
    /// finished. An operation that becomes ready when its last dependency finishes
    /// reports `.ready` before its queue can start it, so before `.executing`.
    public func onStateChange(_ handler: @escaping @Sendable (StateChange) -> Void) {
        needsFinishLock.store(true, ordering: .sequentiallyConsistent)
        withExtras { $0.observers.append(handler) }
        hasObservers.store(true, ordering: .releasing)
    }
}
