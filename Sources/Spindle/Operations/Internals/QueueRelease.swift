import Synchronization

// How a queue lets go of its finished operations outside the adding thread's prunes,
// and when its waits may return: a returning wait means the queue keeps no finished
// operation alive (`State.isDrained`).
//
// - A drain's releases: the chain it released after unlocking, and each operation it
//   left to a runner still returning from it (QueueSync.runState: `listGone`,
//   `reports`), which the runner reports once released. Each counts in
//   `State.releasing` until done; the wait returns after the last.
// - A quiet queue's: when nothing has been added since the newest operation finished,
//   a check behind the pool's queued work lets go of what has finished, if still
//   nothing has been added (`releaseIfQuiet`).
//
// Model: Tests/Models/run_state.pml checks a drain's release against its runner's,
// and that the wait returns only after both.

extension OperationQueue {
    /// Counts one releaser of operations the queue let go of out (`State.releasing`)
    /// and returns the waits to signal if that was the last and the queue has drained.
    func doneReleasing() -> [Waiter] {
        unsafe state.locked { s -> [Waiter] in
            unsafe s.releasing -= 1
            guard unsafe s.isDrained(unfinished: unfinishedCount) else { return unsafe [] }
            unsafe s.drainWaitRank = 0
            defer { unsafe s.waiters = unsafe [] }
            return unsafe s.waiters
        }
    }

    /// Schedules `releaseIfQuiet` on `queue` behind what the pool of class `qos` holds
    /// now: what is queued runs first, the adding thread among it.
    static func scheduleQuietCheck(_ queue: OperationQueue, class qos: QualityOfService) {
        unsafe ChainRunner.submitCompletion({ queue.releaseIfQuiet() }, on: QoSPools.engine(for: qos))
    }

    /// Lets go of the finished operations if nothing has been added since the newest
    /// one finished and scheduled this: no prune will while the operations left
    /// unfinished run, for as long as they like. When something has been added, its
    /// prunes let go of them, on the adding thread (QueueRegistry.swift).
    func releaseIfQuiet() {
        let released = unsafe state.locked { s -> Unmanaged<Operation>? in
            defer { unsafe s.quietCheck = nil }
            guard unsafe s.quietCheck == s.nextOrder else { return nil }
            var released: Unmanaged<Operation>? = nil
            unsafe s.releaseFinished(onto: &released)
            // A wait returns once these are released (`isDrained`).
            if unsafe released != nil { unsafe s.releasing += 1 }
            return unsafe released
        }
        guard let released = unsafe released else { return }
        unsafe OperationQueue.release(released)
        for unsafe w in unsafe doneReleasing() { unsafe w.signal() }
    }

    /// A runner's report that it has released an operation a drain left to it
    /// (`QueueSync.listGone`): the drain's waits return once every such operation has
    /// been released. Drops the reference to the queue the drain gave the runner.
    func drainedOperationReleased() {
        for unsafe w in unsafe doneReleasing() { unsafe w.signal() }
        // Last: this may free the queue.
        // safety: the reference the drain gave this runner (`finishLocked`).
        unsafe Unmanaged.passUnretained(self).release()
    }
}
