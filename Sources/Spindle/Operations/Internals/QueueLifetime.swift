import Synchronization

// The queue's counts, and its lifetime: who may touch the queue, and until when.
//
// `counts` holds the operations added and not finished in its high 32 bits, the
// operations the queue started that have not finished in the low 31, and
// `scheduledBit` (QueueMode.swift, D1-D3) between them: one word, so that adding an
// operation and finishing one are one atomic RMW each. Both sides write it, so it is the queue's
// one contended cache line at the default width; two counters would cost a second RMW
// per side.
//
// A queue lives while it has unfinished operations, whoever still refers to it:
// `OperationQueue().addOperation { … }`, the queue dropped at once, is ordinary use.
// It holds a reference to itself (`State.selfRetained`), taken under the lock when it
// counts an operation in and holds none, and given to the finisher that drains it,
// which drops it last. What makes that safe:
//
// LT1. A finisher touches the queue after its decrement only if it decremented under
//     the lock, or its operation holds the queue (LT3). Every other finisher decrements
//     with one CAS that succeeds only when the queue needs nothing more from it —
//     another unfinished operation remains, the queue is in direct mode
//     (`scheduledBit` clear), and nobody observes its count or progress — and then it
//     touches nothing.
// LT2. "Drained" is decided under the lock, where operations are counted in: the
//     finisher that reads zero there takes the self-reference. A finisher still on its
//     way to the lock has its operation counted (LT1: it decrements there) or holds the
//     queue (LT3), so zero cannot be read while it needs the queue.
// LT3. An operation that code other than the queue's can reach — one the program made,
//     or one `operations` handed out — holds its queue (`Operation.queueReference`):
//     its `cancel()` and readiness changes reach the queue from any thread at any
//     moment, including while it finishes. So does one made by the block form of
//     `addOperation` while the queue is not in direct mode, where every finish takes
//     the lock anyway (`QueueFields.held`: it decrements first, outside the lock). In
//     direct mode that form's operations are reachable only from the queue until
//     `operations` hands them out, and skip the retain and its release.
//
// Tests/Models/queue_lifetime.pml checks LT1-LT3 over every interleaving of three adds,
// their finishers, a change of mode and the program's release of the queue.
//
// Rejected:
// - Releasing the self-reference when a lock-free decrement reached zero. A finisher
//   still on its way to the lock could then find the queue freed.
// - Counting finishers in flight: a second atomic RMW per finish.
// - Decrementing under the lock even when the operation holds the queue: the adding
//   thread waits on that lock, and serial queues slow down.
// - Batching each worker's decrements to keep the line with the adding thread: it
//   needs a flush on every path a worker takes (before it runs anything else, waits
//   or parks), and the most it could save is within the benchmark's noise
//   (docs/performance.md).

extension OperationQueue {
    static let oneUnfinished: UInt64 = 1 << 32
    static let runningMask: UInt64 = 0x7fff_ffff

    /// The unfinished operations, from `counts`.
    var unfinishedCount: Int { Int(counts.load(ordering: .sequentiallyConsistent) >> 32) }

    func operationFinished(_ op: Operation) {
        // Before it is counted out: see `pendingBarriers`.
        if op is BarrierOperation { pendingBarriers.subtract(1, ordering: .sequentiallyConsistent) }
        // Written under the lock before the operation could start; we run after it did.
        let started = unsafe op.queueFields.started
        op.queueSync.done.store(true, ordering: .releasing)
        let delta = OperationQueue.oneUnfinished | (started ? 1 : 0)
        if unsafe op.queueFields.held {
            // The operation holds the queue, which therefore outlives this call: one RMW
            // outside the lock (not lengthening the section the adding thread waits
            // on), then the lock only when there is something to do under it.
            // seq_cst: pairs with the RMW that sets `scheduledBit` (see there).
            let now = counts.wrappingSubtract(delta, ordering: .sequentiallyConsistent).newValue
            guard !started || now >> 32 == 0 || now & OperationQueue.scheduledBit != 0
                    || hasProgress.load(ordering: .acquiring) || hasCountObservers.load(ordering: .acquiring)
            else { return }
            finishLocked(op, started: started, delta: nil)
            return
        }
        // The lock-free way (LT1): one CAS, then not another access to the
        // queue, which another finisher may drain and free the moment it succeeds.
        // The flags are read before it, while the queue is certainly alive. (Out of
        // direct mode the CAS fails on `scheduledBit`: only operations added in direct
        // mode get here, and those that finish after a switch are rare.)
        if started && !hasProgress.load(ordering: .acquiring) && !hasCountObservers.load(ordering: .acquiring) {
            // A guess, not a load: a failed CAS returns the value and leaves the line
            // exclusive here, where a load would fetch it shared and the CAS fetch it
            // again. (The adding thread writes this line on every add.)
            var current = OperationQueue.oneUnfinished * 2 | 1
            while current & OperationQueue.scheduledBit == 0 && current >> 32 >= 2 {
                // seq_cst: pairs with the RMW that sets `scheduledBit` (see there) and
                // with the adding thread's count.
                let (done, now) = counts.compareExchange(
                    expected: current, desired: current &- delta, ordering: .sequentiallyConsistent)
                if done { return }
                current = now
            }
        }
        finishLocked(op, started: started, delta: delta)
    }

    /// The part of a finish done under the lock, and after it: retiring an operation
    /// the queue did not start, progress, draining, starting what may start now.
    /// `delta`: what to take off `counts` under the lock (nil: already taken).
    func finishLocked(_ op: Operation, started: Bool, delta: UInt64?) {
        // The locked part's results, returned rather than written to captured variables
        // (those would cost dynamic exclusivity checks).
        @unsafe
        struct Outcome {
            // safety: carries an unretained operation out of the locked section; the caller
            // releases it once.
            var start = Startable.none
            var config: DispatchConfig? = nil
            var waiters: [Waiter] = unsafe []
            var observers: [@Sendable (Int) -> Void] = []
            /// Unfinished operations, then (with count observers) less pending barriers.
            var remaining = 0
            var released: Unmanaged<Operation>? = nil
            var dropSelf = false
            var unannounced: [Operation]? = nil
        }
        let out = unsafe state.locked { s -> Outcome in
            var out = unsafe Outcome()
            // Zero, read under the lock where operations are counted in, means drained
            // (LT2).
            if let delta {
                unsafe out.remaining = Int(counts.wrappingSubtract(delta, ordering: .sequentiallyConsistent).newValue >> 32)
            } else {
                unsafe out.remaining = unfinishedCount
            }
            // Not started by the queue: it may sit in a ready list; skip it there.
            if !started { unsafe op.queueFields.retired = true }
            if unsafe out.remaining == 0 {
                unsafe out.waiters = unsafe s.waiters
                unsafe s.waiters = unsafe []
                unsafe s.unlinkAll(onto: &out.released)
                if unsafe out.released != nil { unsafe s.releasing += 1 }
                unsafe s.lastBarrier = nil
                // The queue's reference to itself is ours now (LT2): it
                // keeps the queue alive until we drop it, last. An operation added
                // meanwhile makes the queue take another.
                unsafe out.dropSelf = unsafe s.selfRetained
                unsafe s.selfRetained = false
            }
            if unsafe !s.countObservers.isEmpty {
                unsafe out.observers = unsafe s.countObservers.map(\.handler)
                // What observers are told, read here: after we unlock, the queue may be
                // freed (see below).
                unsafe out.remaining = unsafe max(0, out.remaining - pendingBarriers.load(ordering: .sequentiallyConsistent))
            }
            unsafe out.unannounced = unsafe s.takeUnannounced(counts)
            unsafe out.start = unsafe s.takeStartable(counts)
            if unsafe !out.start.isEmpty { unsafe out.config = unsafe DispatchConfig(s) }
            return unsafe out
        }
        // Release what the queue held before waking waiters: a returning wait then
        // implies the queue no longer keeps any finished operation alive. Waiters that
        // came while we released it (`releasing` kept them waiting) are ours too.
        var waiters = unsafe out.waiters
        if unsafe out.released != nil {
            unsafe OperationQueue.release(out.released)
            unsafe waiters += state.locked { s -> [Waiter] in
                unsafe s.releasing -= 1
                guard unsafe s.isDrained(unfinished: unfinishedCount) else { return unsafe [] }
                defer { unsafe s.waiters = unsafe [] }
                return unsafe s.waiters
            }
        }
        for o in unsafe out.observers { unsafe o(out.remaining) }
        for unsafe w in unsafe waiters { unsafe w.signal() }
        // Nothing starts when it has drained. When nothing starts and it has not
        // drained, this finisher is done with the queue, which may have been freed
        // when we unlocked.
        if let config = unsafe out.config { unsafe dispatch(out.start, config) }
        // Unfinished, so the queue has not drained; each reaches it through its pin.
        if let unannounced = unsafe out.unannounced { OperationQueue.askAgain(unannounced) }
        // Last: this may free the queue.
        // safety: the queue's reference to itself, taken once per busy period (LT2 decides
        // it is dropped once).
        if unsafe out.dropSelf { unsafe Unmanaged.passUnretained(self).release() }
    }

    /// Registers `waiter` to be signalled when the queue has drained (see `isDrained`);
    /// false, registering nothing, when it already has.
    func registerDrainWaiter(_ waiter: Waiter) -> Bool {
        unsafe state.locked { s -> Bool in
            if unsafe s.isDrained(unfinished: unfinishedCount) { return false }
            unsafe s.waiters.append(waiter)
            return true
        }
    }
}

extension OperationQueue.State {
    /// Counts an added operation in (`delta`: one unfinished, plus one running when
    /// it starts directly) and prunes what has finished.
    mutating func count(_ counts: borrowing Atomic<UInt64>, delta: UInt64,
                        released: inout Unmanaged<Operation>?) {
        let now = counts.wrappingAdd(delta, ordering: .sequentiallyConsistent).newValue
        // The running count (at most the unfinished one) must stay below the
        // `scheduledBit`.
        precondition(now >> 32 < OperationQueue.runningMask,
                     "OperationQueue: more than 2^31 - 1 operations unfinished in one queue")
        unsafe prune(unfinished: Int(now >> 32), onto: &released)
    }

    /// True when the queue has no operations left and has released those it held.
    ///
    /// The count reaches zero before the finisher that brought it there takes the
    /// lock to empty the list; a wait that returned in between would return while
    /// finished operations (and what their blocks captured) were still referenced.
    /// Zero unfinished with a non-empty list means that finisher is on its way, and
    /// it signals the waiters once it has released them.
    ///
    /// Likewise, a finisher releasing what a drained queue held (outside the lock:
    /// deinits run user code) makes waiters wait until it has.
    func isDrained(unfinished: Int) -> Bool { unsafe unfinished == 0 && linked == 0 && releasing == 0 }
}
