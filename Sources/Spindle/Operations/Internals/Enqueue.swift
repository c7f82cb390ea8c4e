import Synchronization

// Adding an operation: claim it, register it, and start it if it may start.
//
// A1. The claim: one CAS on the operation's `QueueSync.word`, after refusing, with a
//     trap naming the misuse, an operation that is finished, executing or already in a
//     queue. The claim is the last thing checked, so a refused operation is untouched.
// A2. Readiness is read before the lock (a custom `isReady` is user code).
// A3. Under the lock, once: link it into the list (QueueRegistry.swift), count it in
//     (QueueLifetime.swift), and either start it at once (direct mode: D1) or put it
//     behind a pending barrier, on its ready list, or nowhere until it is ready.
// A4. After the lock: start what may start, or, if it was not found ready, evaluate
//     its readiness again — a readiness change between A2 and A3 was held back until
//     `QueueFields.linked` let it through.
// A5. Its class is promoted onto what it waits for (Promotion.swift, P3).

extension OperationQueue {
    func enqueue(_ op: Operation, isBarrier: Bool = false) {
        // safety: stored unretained in the operation's queue word; the queue holds itself
        // from this add until the operation finishes (LT3).
        let me = unsafe Unmanaged.passUnretained(self)
        // Claim the operation for this queue with one CAS, or trap on misuse, leaving it
        // untouched. (Finished or executing operations are refused before the claim.)
        let phase = op.phase.load(ordering: .acquiring)
        var problem: String? = nil
        if op.finishHandled.load(ordering: .acquiring) || phase == Operation.Phase.finished.rawValue {
            problem = "has already finished"
        } else if phase == Operation.Phase.executing.rawValue {
            problem = "is executing"
        } else if unsafe !op.queueSync.word.compareExchange(
            // seq_cst: the add's side of the Dekker pair with a promotion's walk
            // (Promotion.swift, `promote`): claim, then (A5) read the floor.
            // safety: the word names the queue unretained, as `me` above says.
            expected: 0, desired: UInt(bitPattern: me.toOpaque()), ordering: .sequentiallyConsistent).exchanged {
            problem = "is already in an operation queue"
        }
        if let problem {
            fatalError("OperationQueue.addOperation: \(op.describe()) \(problem); an operation can be added to one queue, once, before it starts")
        }
        // An operation that never had a dependency has none now; only others need the
        // lock to read their count.
        let noDependencies = !op.hadDependencies.load(ordering: .acquiring) || op.guarded.locked { $0.unfinished == 0 }
        // A plain operation's readiness is "no dependencies" (it overrides nothing);
        // other classes may override `isReady`, so ask them.
        // (Cancellation makes the base `isReady` true; a custom condition still holds.)
        let readyNow = noDependencies && (op.isPlainClass || op.isReady)
        // safety: the queue list's one reference, released when the list unlinks it
        // (QueueRegistry).
        unsafe register(Unmanaged.passRetained(op), op, readyNow: readyNow, fresh: false, isBarrier: isBarrier)
        // A5. Its class reaches what it waits for (Promotion.swift, P3). Not a barrier's:
        // the queue's own, which no class waits on until an operation is added behind it.
        if (!isBarrier || op.promotedRank.load(ordering: .relaxed) != 0)
            && (!noDependencies || op.hasOwnPriority.load(ordering: .relaxed) || op.promotedRank.load(ordering: .relaxed) != 0) {
            promoteOnAdd(op)
        }
    }

    /// Registers a claimed operation and starts it if it may start. `u` is a reference
    /// the queue's list takes over. `fresh`: `op` was made by the caller, which keeps no
    /// reference of its own.
    ///
    /// The common case — no dependencies, ready — takes the queue lock once: register,
    /// and either start it directly (direct mode, nothing waiting ahead of it) or push
    /// it on its ready list and take what may start.
    ///
    /// Rejected: a lock-free add for direct mode. The lock's CAS is where a profile of the
    /// adding thread charges the stores before it — re-initialising memory that the
    /// worker which ran the previous occupant wrote last — and without the lock the next
    /// atomic would stall on them instead: on a suspended queue, where nothing else
    /// touches that memory, adding costs the same with the lock as without it.
    @inline(__always)
    func register(_ u: Unmanaged<Operation>, _ op: Operation, readyNow: Bool,
                          fresh: Bool, isBarrier: Bool) {
        // An operation the caller holds keeps the queue alive for as long as it lives
        // (QueueLifetime.swift, LT3); one made here needs only the queue's own reference.
        // The count goes up under the lock, before the operation can start, so before
        // it can finish; a waiter (which checks the count under the lock) sees it.
        if !fresh {
            unsafe op.queueReference = self
            unsafe op.queueFields.held = true
            unsafe op.queueFields.addedByCaller = true
        }
        // The locked section's results, returned rather than written to captured
        // variables (those would cost dynamic exclusivity checks on every add).
        @unsafe
        struct Outcome {
            // safety: carries an unretained operation out of the locked section; the caller
            // releases it once.
            var barrier: Operation? = nil
            var start = Startable.none
            var config: DispatchConfig? = nil
            var direct = false
            var released: Unmanaged<Operation>? = nil
        }
        let outcome = unsafe state.locked { s -> Outcome in
            var out = unsafe Outcome()
            unsafe s.link(u, op)
            if unsafe !s.ownClassAdded && op.hasOwnPriority.load(ordering: .relaxed) { unsafe s.ownClassAdded = true }
            // Which way it goes: behind a pending barrier, not ready yet, straight to the
            // pool (direct mode, nothing ahead of it), or onto its ready list.
            var becomesReady = false
            if !isBarrier, let b = unsafe s.lastBarrier, !b.finishHandled.load(ordering: .acquiring) {
                unsafe out.barrier = b
            } else {
                if !isBarrier, unsafe s.lastBarrier != nil { unsafe s.lastBarrier = nil }
                becomesReady = readyNow && !op.queueSync.readySignalled.load(ordering: .relaxed)
            }
            if becomesReady {
                op.queueSync.readySignalled.store(true, ordering: .relaxed)
                unsafe out.direct = unsafe s.isDirect && s.readyIsEmpty
            }
            // Counted in (and, when it starts directly, as running) before it can start.
            unsafe s.count(counts, delta: OperationQueue.oneUnfinished | (out.direct ? 1 : 0), released: &out.released)
            if isBarrier { pendingBarriers.add(1, ordering: .sequentiallyConsistent) }
            if unsafe !s.selfRetained {
                unsafe s.selfRetained = true
                // safety: the queue's reference to itself (LT1-LT3), dropped once, when it
                // drains.
                _ = unsafe Unmanaged.passUnretained(self).retain()
            }
            // Out of direct mode every finish takes the lock; holding the queue, it can
            // decrement before it does (see operationFinished). Nobody else can write
            // the field yet: `operations` needs our lock.
            if unsafe fresh && !s.isDirect {
                unsafe op.queueReference = self
                unsafe op.queueFields.held = true
            }
            if unsafe out.direct {
                unsafe op.queueFields.started = true
                unsafe out.config = unsafe DispatchConfig(s)
            } else if becomesReady {
                unsafe s.push(op, level: s.level(of: op))
                unsafe out.start = unsafe s.takeStartable(counts)
                unsafe out.config = unsafe out.start.isEmpty ? nil : DispatchConfig(s)
            }
            // Once the lock is released, only the caller's reference keeps `op` alive:
            // from then on other threads can start, finish and unlink it. A fresh
            // operation has no caller's reference, so it is kept (from here, under the
            // lock) for the steps below that use it after that may have happened
            // (behind a barrier, waiting for room, not ready) — not when it goes
            // straight to the pool, where submitting it is its last use here.
            if unsafe fresh && !out.direct { _ = unsafe u.retain() }
            return unsafe out
        }
        let keep = unsafe fresh && !outcome.direct
        unsafe OperationQueue.release(outcome.released)
        if hasCountObservers.load(ordering: .acquiring) { notifyCountChange() }
        if let barrier = unsafe outcome.barrier { op.addDependencyEdge(barrier) }
        if let config = unsafe outcome.config {
            if unsafe outcome.direct { dispatch(op, config) } else { unsafe dispatch(outcome.start, config) }
        } else if !op.queueSync.readySignalled.load(ordering: .acquiring) {
            // Not found ready when registered (or behind a barrier): its readiness may
            // have changed before `queueFields.linked` let its notification through.
            op.evaluateReadiness()
        }
        if keep { unsafe u.release() }
    }
}
