import Synchronization

// An operation's membership of its queue: how it is added (A1-A5), how the queue counts
// it in and out, and how long the queue lives (LT1-LT3).
//
// MARK: - Adding an operation
//
// An operation is claimed, registered, and started if it may start.
//
// A1. The claim: one CAS on the operation's `QueueSync.word`, after refusing, with a
//     trap naming the misuse, an operation that is finished, executing or already in a
//     queue. The claim is the last thing checked, so a refused operation is untouched.
// A2. Readiness is read before the lock when it is user code: a subclass's `isReady`.
//     A plain operation's is its count of unfinished dependencies (or its
//     cancellation), read in A3, under the queue's lock, when it has had a dependency.
// A3. Under the lock, once: link it into the list (QueueRegistry.swift), count it in
//     (below), and either start it at once (direct mode: D1) or put it behind a
//     pending barrier (Readiness.swift, R9), on its ready list, or nowhere until ready.
//     A barrier is given its edges to what is ahead of it there too (R10).
// A4. After the lock: start what may start, or, for a subclass not found ready,
//     evaluate its readiness again — a readiness change between A2 and A3 was held
//     back until `QueueFields.linked` let it through. A plain operation needs no second
//     look: a count-down or a cancellation that A3 did not see signals it after A3, as
//     its signal waits for the queue's lock and then finds it linked.
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
        // A2. An operation that never had a dependency has none now. A plain one is then
        // ready (it overrides nothing); with dependencies, A3 reads its count. Other
        // classes may override `isReady`, so ask them, after their count, here.
        // (Cancellation makes the base `isReady` true; a custom condition still holds.)
        // A barrier's readiness is decided where it is linked (R10), so it is not asked.
        let hadDependencies = op.hadDependencies.load(ordering: .acquiring)
        let plain = op.isPlainClass
        let subclassWaits = hadDependencies && !plain && op.guarded.locked { $0.unfinished > 0 }
        let readyNow = !subclassWaits && (plain || isBarrier || op.isReady)
        #if DEBUG
        unsafe OperationSeams.reach(.registering, Dependents.key(op))
        #endif
        // safety: the queue list's one reference, released when the list unlinks it
        // (QueueRegistry).
        let (narrow, plainWaits) = unsafe register(Unmanaged.passRetained(op), op, readyNow: readyNow,
                                                   readsCount: plain && hadDependencies, fresh: false, isBarrier: isBarrier)
        // A5. Its class reaches what it waits for (Promotion.swift, P3). Not a barrier's:
        // the queue's own, which no class waits on until an operation is added behind it.
        // The flag and the floor after the claim, seq_cst: the add's side of its pairs
        // with a class set meanwhile and with a promotion's walk.
        if (!isBarrier || op.promotedRank.load(ordering: .sequentiallyConsistent) != 0)
            && (subclassWaits || plainWaits || op.hasOwnPriority.load(ordering: .sequentiallyConsistent)
                || op.promotedRank.load(ordering: .sequentiallyConsistent) != 0) {
            promoteOnAdd(op, narrow: narrow)
        }
    }

    /// Registers a claimed operation and starts it if it may start. `u` is a reference
    /// the queue's list takes over. `readsCount`: `op` is plain and has had a
    /// dependency, and its readiness is read under the lock (A2), not taken from
    /// `readyNow`. `fresh`: `op` was made by the caller, which keeps no reference of its
    /// own. Returns whether the queue limited its width when `op` was linked (A5 then
    /// promotes what is ahead of it; a queue made narrow later does), and, with
    /// `readsCount`, whether its count was not zero then.
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
    @discardableResult
    func register(_ u: Unmanaged<Operation>, _ op: Operation, readyNow: Bool, readsCount: Bool = false,
                  fresh: Bool, isBarrier: Bool) -> (narrow: Bool, waits: Bool) {
        // An operation the caller holds keeps the queue alive for as long as it lives
        // (LT3); one made here needs only the queue's own reference.
        // The count goes up under the lock, before the operation can start, so before
        // it can finish; a waiter (which checks the count under the lock) sees it.
        if !fresh {
            unsafe op.queueReference = self
            op.setQueueRun([.held, .addedByCaller])
        }
        let outcome = unsafe state.locked { s in
            unsafe registerLocked(&s, u, op, readyNow: readyNow, readsCount: readsCount, fresh: fresh, isBarrier: isBarrier)
        }
        unsafe OperationQueue.release(outcome.released)
        if unsafe outcome.armedWatch { scheduleWatch(afterMilliseconds: OperationQueue.watchMinDelay) }
        if hasCountObservers.load(ordering: .acquiring) { notifyCountChange() }
        if let barrier = unsafe outcome.barrier { op.completeBarrierEdge(unsafe barrier.takeRetainedValue()) }
        if isBarrier { op.completeEdges() }
        if let config = unsafe outcome.config {
            if unsafe outcome.direct { dispatch(op, config) } else { unsafe dispatch(outcome.start, config) }
        } else if unsafe !outcome.signalled {
            // A4. A subclass not found ready when registered (or behind a barrier): its
            // readiness may have changed before `queueFields.linked` let its
            // notification through. A plain operation needs no second look (A4, at the
            // top of this file); behind a barrier, the edge just made looks at it.
            // (A separate test, not `&&`: `op` may have been freed when it was
            // signalled, and an unoptimised build retains what `&&`'s autoclosure
            // captures before it evaluates the left side.)
            if !op.isPlainClass && !op.queueSync.readySignalled.load(ordering: .acquiring) {
                op.evaluateReadiness()
            }
        }
        if unsafe fresh && !outcome.signalled { unsafe u.release() }
        return unsafe (outcome.narrow, outcome.waits)
    }

    /// What `register` does under the queue's lock, returned rather than written to
    /// captured variables (those would cost dynamic exclusivity checks on every add).
    @unsafe
    struct RegisterOutcome {
        // safety: carries an unretained operation out of the locked section; the caller
        // releases it once. `barrier` is retained once, under the lock, and released by
        // `register`: a word, so that the usual outcome, without one, costs nothing to
        // destroy.
        var barrier: Unmanaged<Operation>? = nil
        var start = Startable.none
        var config: DispatchConfig? = nil
        var released: Unmanaged<Operation>? = nil
        /// `direct`, `signalled` and `narrow`, in one byte: a field more makes the
        /// outcome a struct the optimizer copies.
        private var flags: UInt8 = 0
        /// Started directly: it goes straight to the pool.
        var direct: Bool {
            get { unsafe flags & 1 != 0 }
            set { unsafe flags = unsafe newValue ? flags | 1 : flags & ~1 }
        }
        /// Signalled ready under the lock: `register` has nothing left to do with it
        /// unless it starts it directly. (A fresh one that was not is kept for it.)
        var signalled: Bool {
            get { unsafe flags & 2 != 0 }
            set { unsafe flags = unsafe newValue ? flags | 2 : flags & ~2 }
        }
        /// The queue limited its width (`maxConcurrent >= 0`) when the operation was
        /// linked.
        var narrow: Bool {
            get { unsafe flags & 4 != 0 }
            set { unsafe flags = unsafe newValue ? flags | 4 : flags & ~4 }
        }
        /// The add armed the queue's watch, which `register` schedules once unlocked.
        var armedWatch: Bool {
            get { unsafe flags & 8 != 0 }
            set { unsafe flags = unsafe newValue ? flags | 8 : flags & ~8 }
        }
        /// A plain operation's count, read under the lock (A2), was not zero.
        var waits: Bool {
            get { unsafe flags & 16 != 0 }
            set { unsafe flags = unsafe newValue ? flags | 16 : flags & ~16 }
        }
    }

    /// `register`'s locked section (A3).
    @inline(__always)
    private func registerLocked(_ s: inout State, _ u: Unmanaged<Operation>, _ op: Operation, readyNow: Bool,
                                readsCount: Bool, fresh: Bool, isBarrier: Bool) -> RegisterOutcome {
        var out = unsafe RegisterOutcome()
        var readyNow = readyNow
        if isBarrier {
            // R10: in the section that links it and counts it in, a barrier waits for
            // everything the list holds unfinished, a pending barrier included, and
            // becomes the one that later adds wait for. Its edges are registered with
            // those operations once the lock is released (`register`).
            let ahead = unsafe handOut(s.unfinished)
            if !ahead.isEmpty { op.countEdges(to: ahead) }
            readyNow = ahead.isEmpty
            unsafe s.lastBarrier = op
        }
        unsafe s.link(u, op)
        if readsCount {
            // A2 for a plain operation that has had a dependency, here where a signal of
            // its readiness (a count-down's, R8, or a cancellation's) waits for the lock
            // and then finds it linked: no change can fall between this read and
            // `linked`. The lock order is the queue's, then the operation's, as in the
            // take's check (State.isWaitingAgain). seq_cst: the add's side of its pair
            // with `cancel()` (its flag, then evaluateReadiness's load of the queue word;
            // the claim, then this load).
            let waits = unsafe State.countsUnfinished(op)
            unsafe out.waits = waits
            readyNow = !waits || op.cancelledFlag.load(ordering: .sequentiallyConsistent)
        }
        if !fresh { unsafe out.narrow = unsafe s.maxConcurrent >= 0 }
        // A wait for the whole queue is waiting: the operation rises to its class before
        // it can start, here, where a fresh one is certainly alive; a caller's has its
        // dependencies promoted at that floor by A5.
        if unsafe s.drainWaitRank != 0 { _ = unsafe op.raiseFloor(to: s.drainWaitRank) }
        // seq_cst: the add's side of its pair with a class set meanwhile (ownClassChanged).
        if unsafe !s.ownClassAdded && op.hasOwnPriority.load(ordering: .sequentiallyConsistent) { unsafe s.ownClassAdded = true }
        // Which way it goes: behind a pending barrier, not ready yet, straight to the
        // pool (direct mode, nothing ahead of it), or onto its ready list.
        var becomesReady = false
        if !isBarrier, let b = unsafe s.lastBarrier, !b.finishHandled.load(ordering: .acquiring) {
            op.countBarrierEdge(b) // before a signal of its readiness can pass (R9)
            // safety: released by `register`, which registers the edge with it.
            unsafe out.barrier = unsafe Unmanaged.passRetained(b)
        } else {
            if !isBarrier, unsafe s.lastBarrier != nil { unsafe s.lastBarrier = nil }
            becomesReady = readyNow && !op.queueSync.readySignalled.load(ordering: .relaxed)
        }
        if becomesReady {
            op.queueSync.readySignalled.store(true, ordering: .relaxed)
            unsafe out.signalled = true
            unsafe out.direct = unsafe s.isDirect && s.readyIsEmpty
        }
        // Counted in (and, when it starts directly, as running) before it can start.
        unsafe s.count(counts, delta: OperationQueue.oneUnfinished | (out.direct ? 1 : 0), released: &out.released)
        // Another operation is listed, running or finished: watch for the queue going
        // quiet while some still run (QueueRelease.swift).
        if unsafe s.armWatch() { unsafe out.armedWatch = true }
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
            op.setQueueRun(.held)
        }
        if unsafe out.direct {
            op.setQueueRun(.started)
            unsafe out.config = unsafe DispatchConfig(s)
        } else if becomesReady {
            unsafe s.push(op)
            unsafe out.start = unsafe s.takeStartable(counts)
            unsafe out.config = unsafe out.start.isEmpty ? nil : DispatchConfig(s)
        }
        // Once the lock is released, only the caller's reference keeps `op` alive:
        // from then on other threads can start, finish and unlink it. A fresh
        // operation has no caller's reference, so it is kept (from here, under the
        // lock) for the steps `register` takes with it after that may have happened:
        // behind a barrier or not ready, its readiness is evaluated again. Not when it
        // goes straight to the pool, where submitting it is its last use there, nor
        // when it was signalled ready: it is on a ready list, or started from there by
        // `takeStartable`, which `register` dispatches as it dispatches any other.
        if fresh && !becomesReady { _ = unsafe u.retain() }
        return unsafe out
    }
}

// MARK: - The queue's counts, and its lifetime
//
// Who may touch the queue, and until when.
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
//     the lock anyway (`QueueRunFlags.held`: it decrements first, outside the lock). In
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
        let run = op.queueRun
        let started = run.contains(.started)
        op.queueSync.done.store(true, ordering: .releasing)
        let delta = OperationQueue.oneUnfinished | (started ? 1 : 0)
        if run.contains(.held) {
            // The operation holds the queue, which therefore outlives this call: one RMW
            // outside the lock (not lengthening the section the adding thread waits
            // on), then the lock only when there is something to do under it.
            // seq_cst: pairs with the RMW that sets `scheduledBit` (see there).
            let now = counts.wrappingSubtract(delta, ordering: .sequentiallyConsistent).newValue
            guard !started || now >> 32 == 0 || now & OperationQueue.scheduledBit != 0
                    || !op.queueSync.succeeded.load(ordering: .relaxed)
                    || hasProgress.load(ordering: .acquiring) || hasCountObservers.load(ordering: .acquiring)
            else { return }
            finishLocked(op, started: started, delta: nil)
            return
        }
        // The lock-free way (LT1): one CAS, then not another access to the
        // queue, which another finisher may drain and free the moment it succeeds.
        // The flags are read before it, while the queue is certainly alive. (Out of
        // direct mode the CAS fails on `scheduledBit`: only operations added in direct
        // mode get here, and those that finish after a switch are rare.) Not for the
        // newest operation, which the lock lets go of with what has finished
        // (`finishLocked`).
        if started && !hasProgress.load(ordering: .acquiring) && !hasCountObservers.load(ordering: .acquiring)
            && op.queueSync.succeeded.load(ordering: .relaxed) {
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
    /// the queue did not start, progress, draining, letting go of what has finished
    /// when nothing has been added since the finishing operation was, starting what may
    /// start now.
    /// `delta`: what to take off `counts` under the lock (nil: already taken).
    func finishLocked(_ op: Operation, started: Bool, delta: UInt64?) {
        let out = unsafe state.locked { s -> FinishOutcome in
            var out = unsafe FinishOutcome()
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
                unsafe out.rare = unsafe drainLocked(&s, finishing: op)
            } else if unsafe s.quietCheck == nil && s.isTail(op) {
                // Nothing has been added since this operation was, and the ones left may
                // run for long: if nothing is added meanwhile either, the finished ones
                // are let go of once the pool has run what it holds now
                // (`releaseIfQuiet`), rather than at the next add. (Foundation lets go
                // of each operation as it finishes.)
                unsafe s.quietCheck = unsafe s.nextOrder
                var rare = unsafe FinishOutcome.Rare()
                // safety: the check's reference to the queue, which the check drops.
                unsafe rare.quietCheck = unsafe Unmanaged.passUnretained(self).retain()
                unsafe rare.quietCheckClass = unsafe s.qualityOfService
                unsafe out.rare = unsafe rare
            }
            // Out of direct mode the watch stops while operations run (`watchTick`):
            // every finish passes here, and arms it again.
            if unsafe out.remaining > 0 && s.armWatch() {
                if unsafe out.rare == nil { unsafe out.rare = unsafe FinishOutcome.Rare() }
                // safety: the watch's reference to the queue, which its timer takes over.
                unsafe out.rare!.watch = unsafe Unmanaged.passUnretained(self).retain()
            }
            if unsafe !s.countObservers.isEmpty {
                if unsafe out.rare == nil { unsafe out.rare = unsafe FinishOutcome.Rare() }
                unsafe out.rare!.observers = unsafe s.countObservers.map(\.handler)
                // What observers are told, read here: after we unlock, the queue may be
                // freed (see below).
                unsafe out.remaining = unsafe max(0, out.remaining - pendingBarriers.load(ordering: .sequentiallyConsistent))
            }
            if let unannounced = unsafe s.takeUnannounced(counts) {
                if unsafe out.rare == nil { unsafe out.rare = unsafe FinishOutcome.Rare() }
                unsafe out.rare!.unannounced = unannounced
            }
            unsafe out.start = unsafe s.takeStartable(counts)
            if unsafe !out.start.isEmpty { unsafe out.config = unsafe DispatchConfig(s) }
            return unsafe out
        }
        if let rare = unsafe out.rare {
            // Release what the queue held before waking waiters: a returning wait then
            // implies the queue no longer keeps any finished operation alive. Waiters that
            // came while we released it (`releasing` kept them waiting) are ours too.
            var waiters = unsafe rare.waiters
            if unsafe rare.released != nil {
                unsafe OperationQueue.release(rare.released)
                unsafe waiters += unsafe doneReleasing()
            }
            for o in unsafe rare.observers { unsafe o(out.remaining) }
            for unsafe w in unsafe waiters { unsafe w.signal() }
        }
        // Nothing starts when it has drained. When nothing starts and it has not
        // drained, this finisher is done with the queue, which may have been freed
        // when we unlocked.
        if let config = unsafe out.config { unsafe dispatch(out.start, config) }
        guard let rare = unsafe out.rare else { return }
        if let queue = unsafe rare.quietCheck {
            unsafe OperationQueue.scheduleQuietCheck(queue.takeRetainedValue(), class: rare.quietCheckClass)
        }
        if let queue = unsafe rare.watch {
            unsafe queue.takeRetainedValue().scheduleWatch(afterMilliseconds: OperationQueue.watchMinDelay)
        }
        // Unfinished, so the queue has not drained; each reaches it through its pin.
        if let unannounced = unsafe rare.unannounced { OperationQueue.askAgain(unannounced) }
        // Last: this may free the queue.
        // safety: the queue's reference to itself, taken once per busy period (LT2 decides
        // it is dropped once).
        if unsafe rare.dropSelf { unsafe Unmanaged.passUnretained(self).release() }
    }

    /// What `finishLocked` takes out of its locked section, returned rather than
    /// written to captured variables (those would cost dynamic exclusivity checks).
    @unsafe
    struct FinishOutcome {
        // safety: carries an unretained operation out of the locked section; the caller
        // releases it once.
        var start = Startable.none
        var config: DispatchConfig? = nil
        /// Unfinished operations, then (with count observers) less pending barriers.
        var remaining = 0
        /// What only a drain, count observers or unannounced operations need: nil on a
        /// common finish, which then destroys one empty optional, not each field.
        var rare: Rare? = nil

        @unsafe
        struct Rare {
            var waiters: [Waiter] = unsafe []
            var observers: [@Sendable (Int) -> Void] = []
            var released: Unmanaged<Operation>? = nil
            var dropSelf = false
            var unannounced: [Operation]? = nil
            // safety: retained once, under the lock, for `scheduleQuietCheck`.
            var quietCheck: Unmanaged<OperationQueue>? = nil
            var quietCheckClass = QualityOfService.default
            // safety: retained once, under the lock, for `scheduleWatch`.
            var watch: Unmanaged<OperationQueue>? = nil
        }
    }

    /// Registers `waiter`, a wait at class `rank`, to be signalled when the queue has
    /// drained (see `isDrained`); false, registering nothing, when it already has. The
    /// operations added from now until then rise to `rank` on their add (P3); the
    /// caller promotes those already in the queue (`promoteAll`).
    func registerDrainWaiter(_ waiter: Waiter, rank: UInt8) -> Bool {
        unsafe state.locked { s -> Bool in
            if unsafe s.isDrained(unfinished: unfinishedCount) { return false }
            unsafe s.waiters.append(waiter)
            unsafe s.drainWaitRank = unsafe max(s.drainWaitRank, rank)
            return true
        }
    }
}
