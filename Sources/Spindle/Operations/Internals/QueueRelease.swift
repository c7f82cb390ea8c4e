import Dispatch
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
// - A watched queue's: an add to a queue that lists another operation arms a watch,
//   which ticks while finished operations are listed and, in direct mode, while
//   operations run (out of it every finish arms it again). A tick that finds nothing added
//   since the last lets go of what has finished: an operation that finished before one
//   added after it, which runs for long, is not kept until that one ends (`watchTick`).
//
// Rejected for the watch: taking the lock at every finish that leaves another operation
// unfinished, the only place that sees such a finish at once (slower on the operation
// path, docs/performance.md); a tick at a fixed period, which would wake a thread as
// often for as long as an operation runs, where the doubling delay comes down to one
// tick a second, and to none out of direct mode.
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
            return unsafe s.releaseFinished()
        }
        if let released = unsafe released { unsafe releaseCounted(released) }
    }

    /// Releases what `State.releaseFinished` let go of, then counts this releaser out:
    /// the waits it kept waiting may return.
    func releaseCounted(_ released: Unmanaged<Operation>) {
        unsafe OperationQueue.release(released)
        for unsafe w in unsafe doneReleasing() { unsafe w.signal() }
    }

    /// A drain, under the lock: the finish of `op` left no operation unfinished. Lets
    /// go of the list, takes the waits to signal when nothing is left to release, and
    /// hands on the queue's reference to itself (LT2).
    @inline(never)
    func drainLocked(_ s: inout State, finishing op: Operation) -> FinishOutcome.Rare {
        var rare = unsafe FinishOutcome.Rare()
        let reporting = unsafe s.unlinkAll(onto: &rare.released, finishing: op)
        if unsafe rare.released != nil { unsafe s.releasing += 1 }
        // A wait returns once the queue keeps no finished operation alive:
        // now, or when the last of those releasing them has (`isDrained`).
        unsafe s.releasing += reporting
        if unsafe s.releasing == 0 {
            unsafe rare.waiters = unsafe s.waiters
            unsafe s.waiters = unsafe []
        }
        unsafe s.lastBarrier = nil
        // Nothing is left for a skipped wait to protect, nor for an earlier
        // class to have left below it (Promotion.swift, P2).
        unsafe s.skippedWaitRank = 0
        unsafe s.drainWaitRank = 0
        unsafe s.lowestRank = ClassRank.of(s.qualityOfService)
        // The queue's reference to itself is ours now (LT2): it
        // keeps the queue alive until we drop it, last. An operation added
        // meanwhile makes the queue take another.
        unsafe rare.dropSelf = unsafe s.selfRetained
        unsafe s.selfRetained = false
        // Each runner left to release its operation and report reports with a
        // reference to the queue: the queue's own for the first. (The reports
        // wait for this lock, so the count is settled first.)
        if reporting > 0 {
            var owed = reporting
            if unsafe rare.dropSelf { unsafe rare.dropSelf = false; owed -= 1 }
            // safety: references the runners drop in `drainedOperationReleased`.
            for _ in 0..<owed { _ = unsafe Unmanaged.passUnretained(self).retain() }
        }
        return unsafe rare
    }

    /// The watch's first delay, in milliseconds, and the most it grows to.
    static let watchMinDelay = 8
    static let watchMaxDelay = 1024

    /// Runs `watchTick` on the queue's class of workers after `ms` milliseconds.
    ///
    /// The timer holds the queue: a weak reference would move the queue's reference
    /// count to a side table for good, and every retain and release of the queue, one
    /// or two per operation, would take the runtime's slow path. The queue holds
    /// itself while it has operations anyway; once drained, it outlives the drain by
    /// the pending tick's delay at most.
    func scheduleWatch(afterMilliseconds ms: Int) {
        DispatchQueue.global().asyncAfter(deadline: .now() + .milliseconds(ms)) {
            // The tick takes the queue's lock: on a worker of the queue's class, as the
            // queue's other work, so that a lower class never holds it against a higher
            // one. (The class is read without the lock, for the same reason.)
            unsafe ChainRunner.submitCompletion({ self.watchTick() }, on: QoSPools.engine(for: self.assignedClass))
        }
    }

    /// One tick of the watch: when nothing has been added since the last, lets go of
    /// the finished operations no add will prune (as `releaseIfQuiet`). Ticks again
    /// while finished operations are still listed, or, in direct mode, while an
    /// operation runs; the delay doubles while nothing is added. Otherwise the watch
    /// is disarmed, until an add, a finish out of direct mode or a scheduling pass that
    /// starts something arms it again.
    func watchTick() {
        let (released, next) = unsafe state.locked { s -> (Unmanaged<Operation>?, Int?) in
            let quiet = unsafe s.watch == s.nextOrder
            let released = unsafe quiet ? s.releaseFinished() : nil
            let running = counts.load(ordering: .sequentiallyConsistent) & OperationQueue.runningMask
            let listed = unsafe s.linked > unfinishedCount
            // Finished operations still listed (one whose runner was still returning
            // from it, say): on. Otherwise, while some run, on in direct mode only, where
            // a finish may take no lock; out of it every finish takes the lock and arms
            // the watch again (`finishLocked`), so a queue whose one operation runs for
            // hours does not tick meanwhile.
            let on = unsafe !s.suspended && (listed || (running > 0 && s.isDirect))
            guard on else {
                unsafe s.watch = nil
                return unsafe (released, nil)
            }
            unsafe s.watchDelay = unsafe quiet ? min(2 * s.watchDelay, OperationQueue.watchMaxDelay) : OperationQueue.watchMinDelay
            unsafe s.watch = unsafe s.nextOrder
            return unsafe (released, s.watchDelay)
        }
        if let released = unsafe released { unsafe releaseCounted(released) }
        if let next { scheduleWatch(afterMilliseconds: next) }
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

extension OperationQueue.State {
    /// True when the queue has no operations left and has released those it held.
    ///
    /// The count reaches zero before the finisher that brought it there takes the
    /// lock to empty the list; a wait that returned in between would return while
    /// finished operations (and what their blocks captured) were still referenced.
    /// Zero unfinished with a non-empty list means that finisher is on its way, and
    /// it signals the waiters once it has released them.
    ///
    /// Likewise, a finisher releasing what a drained queue held (outside the lock:
    /// deinits run user code), or a runner still returning from an operation the drain
    /// left to it, makes waiters wait until it has released it.
    func isDrained(unfinished: Int) -> Bool { unsafe unfinished == 0 && linked == 0 && releasing == 0 }

    /// Arms the watch when it is not armed and the list holds more than one operation;
    /// true when it did, and the caller then schedules its first tick once unlocked.
    @inline(__always)
    mutating func armWatch() -> Bool {
        guard unsafe watch == nil && linked > 1 else { return false }
        unsafe watch = unsafe nextOrder
        unsafe watchDelay = OperationQueue.watchMinDelay
        return true
    }
}
