import Synchronization

// Readiness: when an operation may start, and how its queue hears of it.
//
// R1. Each operation counts its unfinished dependencies (`Guarded.unfinished`). An
//     edge is counted before it is registered with the dependency, so a dependency
//     that finishes in between cannot decrement before the increment.
// R2. A finishing dependency counts its edge down in every dependent, under its own
//     lock (OperationLifecycle.swift, F2); the one that brings a count to zero tells the
//     dependent. No queue ever rescans its waiting operations.
// R3. An operation tells its queue it is ready exactly once (`queueSync.readySignalled`,
//     written under the queue's lock). The queue decides, under its lock, whether a
//     signal is that one.
// R4. Readiness can turn false again: a new dependency, or a custom `isReady`. The
//     queue then takes a ready, unstarted operation back (`operationBecameUnready`),
//     and it is signalled again when it turns ready.
// R5. A custom `isReady` that turns true without announcing it is asked again at the
//     queue's next scheduling pass (`State.unannounced`), as Foundation's queue asks.
// R6. Cancellation makes the base `isReady` true whatever the dependencies; a custom
//     condition of the subclass still holds the operation.
// R7. A subclass that overrides `isReady` decides its readiness alone, as with
//     Foundation's queue, which asks `isReady` and nothing else: one that leaves out
//     `super.isReady` starts with its dependencies unfinished. Only a plain operation
//     is held back by its count of unfinished dependencies when the queue takes it.
// R8. A plain operation whose count reaches zero is signalled without its readiness
//     read again (`signalReady`): a dependency added between the count and the signal
//     is found by R7's check, when the queue takes the operation.
// R9. An operation added behind a pending barrier waits for it as for a dependency,
//     and that edge is counted under the queue's lock, where the add links the
//     operation (QueueMembership.swift, A3); only its registration with the barrier
//     comes after. Linked with the edge not yet counted, an operation whose last other
//     dependency finished in between would be signalled and started before the
//     barrier.
// R10. A barrier's own edges, to every operation its queue holds unfinished, are
//     counted in the same locked section that links the barrier, counts it in and
//     makes it the queue's last barrier; only their registration with those
//     operations comes after. Counted in a section of its own, the barrier would miss
//     a barrier added concurrently, which would miss it too, and the two would run
//     side by side; and the queue could drain in between, forget the barrier, and
//     start an operation added meanwhile beside it.
// R11. A barrier is ready once everything ahead of it has finished, cancelled or not
//     (`BarrierOperation.isReady`): the exception to R6. Cancelled, it does not run its
//     block, but it still finishes only after what is ahead of it, and what is added
//     behind it still waits for it.
//
// Model: Tests/Models/readiness.pml checks R1-R4 and R8, with the add's reads
// (QueueMembership.swift, A2-A4), for a plain operation added to a suspended queue and
// given a dependency, in either order, and then a second one, against both
// dependencies' finishes, a cancellation and the queue's resumption: readiness never
// lost, never taken twice, taken back in time, never started with a dependency
// unfinished; as a variant, for a subclass's operation; and, as another (R9), for one
// added behind a barrier that finishes at any moment: never started before it.
// Tests/Models/barrier_add.pml checks R9-R11 for two barriers and a plain operation
// added at once, against the queue draining and `cancelAllOperations()`.

extension Operation {
    /// What ``addDependency(_:)`` does, also for the queue's own edges (a barrier's),
    /// which a subclass's override of ``addDependency(_:)`` does not see, as with
    /// Foundation.
    final func addDependencyEdge(_ op: Operation) {
        // Count the edge first, then register with `op`. The other order races: `op`
        // could finish between the two steps and decrement before we increment, and
        // nobody would then notice that we became ready. A plain operation, which
        // overrides none of the notification methods, counts it with the append, under
        // one lock, and gets the notification's effect directly (as `start()` does).
        let plain = isPlainClass
        let added = guarded.locked { g -> Bool in
            if g.dependencies.contains(identical: op) { return false }
            g.dependencies.append(op)
            if plain { g.unfinished += 1 }
            return true
        }
        guard added else { return }
        // seq_cst: the edge's side of a Dekker pair with a promotion's walk (Promotion.swift,
        // P2): this flag, then (`knownRank`) the floor; the walk raises the floor, then
        // reads this flag. Either the walk reads the list, or the edge sees the floor.
        hadDependencies.store(true, ordering: .sequentiallyConsistent)
        if plain {
            evaluateReadiness()
        } else {
            willChangeValue(forKey: "isReady")
            guarded.locked { $0.unfinished += 1 }
            didChangeValue(forKey: "isReady")
        }
        registerEdge(with: op)
    }

    /// The first half of the edge to a pending barrier that an operation added behind it
    /// waits for (R9): lists and counts it, under the queue's lock, where the add links
    /// the operation. The lock order is the queue's, then the operation's.
    final func countBarrierEdge(_ barrier: Operation) {
        guarded.locked { g in
            g.dependencies.append(barrier)
            g.unfinished += 1
        }
        // seq_cst: as in `addDependencyEdge`; and a take (`State.isPassedOver`) reads the
        // count only when this is set.
        hadDependencies.store(true, ordering: .sequentiallyConsistent)
    }

    /// The second half, once the queue's lock is released: what `addDependencyEdge` does
    /// after counting an edge. A subclass hears of it as of any other edge, after the
    /// count has changed.
    final func completeBarrierEdge(_ barrier: Operation) {
        #if DEBUG
        unsafe OperationSeams.reach(.behindBarrier, Dependents.key(self))
        #endif
        if isPlainClass {
            evaluateReadiness()
        } else {
            willChangeValue(forKey: "isReady")
            didChangeValue(forKey: "isReady")
        }
        registerEdge(with: barrier)
    }

    /// The first half of a barrier's edges to the operations ahead of it (R10): lists
    /// and counts them, under the queue's lock, where the add links the barrier. The
    /// lock order is the queue's, then the operation's.
    final func countEdges(to ahead: [Operation]) {
        guarded.locked { g in
            for p in ahead { g.dependencies.append(p) }
            g.unfinished += ahead.count
        }
        // seq_cst: as in `addDependencyEdge`.
        hadDependencies.store(true, ordering: .sequentiallyConsistent)
    }

    /// The second half, once the queue's lock is released: registers each edge with its
    /// operation, or satisfies it at once when that one has finished meanwhile; the last
    /// satisfied makes the barrier ready. Nothing else gives the barrier a dependency
    /// (the queue's own operation, out of the program's reach), so its list is the one
    /// `countEdges` made. The operations ahead keep their classes: the barrier runs at
    /// its queue's, and what is added behind it at a higher class raises them through it
    /// (Promotion.swift).
    final func completeEdges() {
        #if DEBUG
        unsafe OperationSeams.reach(.barrierEdges, Dependents.key(self))
        #endif
        guard hadDependencies.load(ordering: .relaxed) else { return }
        for p in guarded.locked({ $0.dependencies.snapshot() }) { registerEdge(with: p, promoting: false) }
    }

    /// Registers a counted edge with its dependency `op`, or satisfies it at once when
    /// `op` has finished, and, `promoting`, promotes `op` to this operation's class.
    @inline(__always)
    private final func registerEdge(with op: Operation, promoting: Bool = true) {
        op.needsFinishLock.store(true, ordering: .sequentiallyConsistent)
        let registered = op.guarded.locked { g -> Bool in
            if op.finishHandled.load(ordering: .acquiring) { return false }
            unsafe g.dependents.insert(self) // self too, for `op === self`: see finishProtocol
            return true
        }
        // Already finished: the edge is satisfied at once.
        if !registered {
            dependencyFinished()
        } else if promoting && op !== self {
            // A dependency waited for by a higher class rises to it (Promotion.swift, P3).
            // Class 0, unknown yet (in no queue, no class of its own), raises nothing.
            let rank = knownRank
            if rank > 0 { op.promote(to: rank) }
        }
    }

    /// One of our dependencies was removed, or had finished when it was added.
    func dependencyFinished() {
        let nowReady = guarded.locked { g -> Bool in
            g.unfinished -= 1
            return g.unfinished == 0
        }
        if nowReady { dependenciesSatisfied() }
    }

    /// Our last unfinished dependency is gone. Observers hear `.ready` first: the
    /// signal may start the operation on another thread, and they hear `.executing`
    /// after it. A plain `Operation` or `BlockOperation` overrides none of the
    /// notification methods, so it gets their effect directly, as in `start()`: two
    /// dynamic calls and a string switch fewer per link of a chain. A subclass, which
    /// may observe the notifications, gets the calls.
    func dependenciesSatisfied() {
        notify(.ready)
        if isPlainClass {
            signalReady()
        } else {
            willChangeValue(forKey: "isReady")
            didChangeValue(forKey: "isReady") // evaluates readiness for the queue
        }
    }

    /// A plain operation whose count of unfinished dependencies has just reached zero
    /// tells its queue it is ready without asking `isReady` again (R8): a plain
    /// operation is ready when its count is zero or it is cancelled, so the count just
    /// read is the answer, unless a dependency is added meanwhile. The queue finds that
    /// one when it takes the operation (`State.isPassedOver`, under the operation's
    /// lock), hands it back unsignalled, and that dependency's finish signals it again.
    /// Already signalled: nothing to tell (a dependency added meanwhile took it back or
    /// leaves it to the take).
    func signalReady() {
        if queueSync.readySignalled.load(ordering: .acquiring) { return }
        // In no queue: its add reads the count under the queue's lock (A2). Reading 0
        // here is what a pin taken now would read (Q2), without the pin's two RMWs.
        if queueSync.word.load(ordering: .sequentiallyConsistent) == 0 { return }
        withPinnedQueue { queue in
            guard !finishHandled.load(ordering: .acquiring) else { return }
            #if DEBUG
            unsafe OperationSeams.reach(.signallingReady, Dependents.key(self))
            #endif
            queue.operationBecameReady(self)
        }
    }

    /// Tells the queue, exactly once, that this operation may start — if it is in a
    /// queue and its (possibly overridden) `isReady` says so.
    ///
    /// The other way too: an operation the queue holds as ready but has not started, whose
    /// `isReady` has turned false (a dependency added, a custom condition), is taken
    /// back, and waits until it is ready again ("not considered ready to execute until
    /// all of its dependent operations have finished"). Cancellation makes an operation
    /// ready through the base ``isReady``, so a custom condition still holds it.
    ///
    /// The two tests that usually end it are inlined into the caller; the rest is out of
    /// line.
    @inline(__always)
    final func evaluateReadiness() {
        let signalled = queueSync.readySignalled.load(ordering: .acquiring)
        if signalled && !hasOwnReadiness { return }
        // In no queue (a graph built before it is added): its add reads its readiness
        // under the queue's lock or after it (A2, A4), and reading 0 here is what a pin
        // taken now would read (Q2), without the pin's two RMWs.
        if queueSync.word.load(ordering: .sequentiallyConsistent) == 0 { return }
        evaluateReadinessInQueue(signalled: signalled)
    }

    @inline(never)
    private final func evaluateReadinessInQueue(signalled: Bool) {
        withPinnedQueue { queue in
            guard !finishHandled.load(ordering: .acquiring) else { return }
            // The dynamic `isReady` is read outside our lock: overrides call `super`.
            let ready = isReady
            if !ready && !signalled && !isPlainClass && guarded.locked({ $0.unfinished == 0 }) {
                // Only its own condition holds it: ask again at the queue's next pass, in
                // case it turns true without announcing it.
                queue.watchReadiness(self)
            }
            if ready == signalled { return }
            // The queue decides, under its lock, whether this is the one signal.
            if ready {
                #if DEBUG
                unsafe OperationSeams.reach(.signallingReady, Dependents.key(self))
                #endif
                queue.operationBecameReady(self)
            } else if queue.operationBecameUnready(self) && isReady {
                // It turned ready again while the queue took it back, and its
                // notification found it still signalled: signal it now.
                queue.operationBecameReady(self)
            }
        }
    }

    /// Whether every dependency has finished (`isReady` without the cancellation): the
    /// count, or, for an operation that has begun its finish, the dependencies
    /// themselves. The finish of a dependency added to it meanwhile passes it over (F2)
    /// and leaves it counted; it is ready, as with Foundation, once each has finished.
    var dependenciesFinished: Bool {
        let (counted, late) = guarded.locked { g -> (Bool, OperationList?) in
            if g.unfinished == 0 { return (true, nil) }
            return (false, finishHandled.load(ordering: .acquiring) ? g.dependencies.snapshot() : nil)
        }
        guard !counted, let late else { return counted }
        return late.allSatisfy { $0.isFinished }
    }

    /// Whether readiness can turn false after the queue took the operation as ready: a
    /// class of its own may override `isReady`, and any operation can be given a new
    /// dependency. (A plain operation without dependencies skips the re-evaluation.)
    var hasOwnReadiness: Bool { !isPlainClass || hadDependencies.load(ordering: .acquiring) }
}

extension OperationQueue {
    func operationBecameReady(_ op: Operation) {
        let (start, config) = unsafe state.locked { s -> (Startable, DispatchConfig?) in
            // Exactly once, and never before `enqueue` has counted the operation (it
            // re-evaluates readiness itself after registering it). Both checks are
            // under our lock, which is where every write of these fields happens.
            guard unsafe op.queueFields.linked, !op.queueSync.readySignalled.load(ordering: .relaxed) else { return (.none, nil) }
            op.queueSync.readySignalled.store(true, ordering: .relaxed)
            // Nothing else ready: the next link of a chain, or a dependent made ready while
            // its queue has room, starts without a trip through the rings.
            if let alone = unsafe s.takeAlone(op, counts) { return unsafe (alone, DispatchConfig(s)) }
            unsafe s.push(op)
            return unsafe (s.takeStartable(counts), DispatchConfig(s))
        }
        if let config { dispatch(start, config) }
    }

    /// Takes back an operation found ready that has not started, whose readiness turned
    /// false; true when it did (it is then signalled again when it turns ready).
    func operationBecameUnready(_ op: Operation) -> Bool {
        unsafe state.locked { s -> Bool in
            guard unsafe op.queueFields.linked, op.queueSync.readySignalled.load(ordering: .relaxed), !op.queueRun.contains(.started),
                  unsafe !op.queueFields.retired, unsafe s.ready.remove(op) else { return false }
            op.queueSync.readySignalled.store(false, ordering: .relaxed)
            return true
        }
    }

    /// Moves an unstarted operation whose priority changed to the end of its new level,
    /// as Foundation does: it is given that level and the queue's next `order`, and,
    /// when it waits ready, moved to that level's line, so that the queue starts it in
    /// that order. A change that leaves it on its level moves nothing.
    func operationPriorityChanged(_ op: Operation) {
        let (start, config) = unsafe state.locked { s -> (Startable, DispatchConfig?) in
            guard unsafe op.queueFields.linked, !op.queueRun.contains(.started), unsafe !op.queueFields.retired else { return (.none, nil) }
            let level = unsafe s.level(of: op)
            guard unsafe level != op.queueFields.level else { return (.none, nil) }
            let ready = unsafe op.queueSync.readySignalled.load(ordering: .relaxed) && s.ready.remove(op)
            unsafe op.queueFields.level = level
            unsafe op.queueFields.order = unsafe s.nextOrder
            unsafe s.nextOrder &+= 1
            guard ready else { return (.none, nil) }
            unsafe s.push(op)
            return unsafe (s.takeStartable(counts), DispatchConfig(s))
        }
        if let config { dispatch(start, config) }
    }

    /// Lists `op`, a custom operation held only by its own `isReady`, to be asked again
    /// at the next scheduling pass (see `State.unannounced`).
    func watchReadiness(_ op: Operation) {
        unsafe state.locked { s in
            guard unsafe op.queueFields.linked, !op.queueSync.readySignalled.load(ordering: .relaxed),
                  unsafe !s.unannounced.contains(where: { $0 === op }) else { return }
            unsafe s.unannounced.append(op)
            unsafe s.refreshMode()
            // Out of direct mode: every finish now takes the lock (see `scheduledBit`).
            counts.bitwiseOr(OperationQueue.scheduledBit, ordering: .sequentiallyConsistent)
        }
    }

    /// Re-evaluates the readiness of operations listed in `State.unannounced` (each
    /// reaches its queue through its pin). Out of line: a rare path, kept out of the
    /// finish it is called from.
    @inline(never)
    static func askAgain(_ ops: [Operation]) {
        for op in ops { op.evaluateReadiness() }
    }
}
