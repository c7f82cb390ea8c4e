import CSpindle
import Foundation
import Synchronization

// Promotion: a higher class never waits on a lower one.
//
// Spindle's classes are real kernel priorities: background work runs under SCHED_IDLE
// and gets almost no CPU while anything else wants it. An operation of a higher class
// that depends on it, or a thread of a higher class that waits for it, would wait as
// long. Apple's OperationQueue resolves this by promotion (Energy Efficiency Guide,
// "Prioritize Work with Quality of Service Classes"), and so does Spindle:
//
// P1. An operation's class only rises. `promotedRank` is a floor under the class it
//     would run at (its own, else its queue's): `effectiveQoS` is the higher of the
//     two. `qualityOfService` reads back what was set — "the minimum level of service
//     the operation needs", in Apple's words; the floor is what Spindle gives it beyond
//     that.
// P2. Promotion is transitive and iterative (a work list, never recursion: a chain may
//     be a million long). An operation raised to r raises its unfinished dependencies
//     (barriers included) to r, and, in a queue of limited width, the unfinished
//     operations added before it, which it may wait behind. A floor already at r stops
//     the walk: the walk that raised it went on from there, and every dependency added
//     since was raised by P3's first rule. Operations reached through the queue do not
//     walk the queue again (their own predecessors are among the ones collected). An
//     operation in no queue cannot start, so the walk raises its floor and leaves its
//     dependencies to its add (A5), which promotes them at its class, floor included:
//     a chain built before it is added costs one floor per add, not a walk per chain.
//     The walk's raise and its reads form Dekker pairs with an add (the queue word)
//     and with a new edge (`hadDependencies`); Tests/Models/promotion_walk.pml checks
//     P2 and P3 against both.
//     The walk skips a queue in which nothing can run below r (`unfinishedAhead`):
//     no operation in it has a class of its own (`ownClassAdded`), and its class has
//     not been below r while it held operations (`lowestRank`), so each operation in
//     it runs at r or above and its dependencies were raised to its class when they
//     became its dependencies (P3). Without the skip every wait on a narrow queue walks
//     everything ahead of its operation, and n waits cost n²/2 visits. For the same
//     reason a queue's walk stops at the first unfinished operation whose floor is
//     already at r: whatever raised it — a walk from it or from behind it, an add's
//     promotion of everything ahead of the added one, a wait for the whole queue —
//     raises everything ahead of it too, and every floor it raised stays. The queue
//     records the highest r it skipped for (`skippedWaitRank`, until it drains), so
//     that what could still go below it afterwards — an operation given a class of its
//     own, the queue given a lower class — is raised to it then. An operation that
//     already has a floor when it is added (a wait or a dependent reached it first)
//     walks what is ahead of it at that floor on its add, skip and record included, as
//     a wait after the add would. A queue of unlimited width has nothing ahead; made
//     narrow, it raises what each operation now waits behind to the highest class
//     asked of one behind it, and records that class as a skipped wait's.
//     Tests/Models/queue_promotion.pml checks the skip, its record and the add's walk
//     against a class given to an operation ahead and the queue's class lowered.
// P3. Who promotes:
//     - a new dependency edge: the dependent's class onto the dependency, when the
//       dependent's class is known (its own, or its queue's);
//     - adding an operation to a queue: its class onto its unfinished dependencies,
//       and, in a queue of limited width, onto the operations ahead of it when its
//       class is above the queue's, and its floor in any case (P2);
//     - a raised `qualityOfService` (or `threadPriority`);
//     - a wait: `waitUntilFinished`, `waitUntilAllOperationsAreFinished`, `finished()`
//       and `allOperationsFinished()`, at the class of the waiting thread or task. A
//       wait for the whole queue registers first, then promotes what the queue holds;
//       from its registration until the queue drains, every operation added rises to
//       its class under the queue's lock, before it can start (`drainWaitRank`).
// P4. Where the run stands is one word, `execWord`: IDLE, SUBMITTED at a class, MOVED
//     to a higher class, RUNNING at a class on a thread, DONE. The dispatcher writes
//     SUBMITTED before the operation reaches a pool. Every runner claims it with a CAS
//     from SUBMITTED or MOVED to RUNNING, so of the runners that reach it exactly one
//     runs it.
// P5. A submitted operation raised above its pool's class is moved: SUBMITTED or MOVED
//     to MOVED at the new class by CAS, and a copy task, holding the operation, goes
//     to the new class's pool. It never waits behind its old class's backlog. The
//     original task node is inside the operation, and a copy may run and finish it
//     first, so the first move retains the operation for the original node, which
//     releases it when it comes to run (won or lost).
// P6. A running operation raised above its thread's class makes that thread take the
//     new class's policy, nice and slice (promote.c): under the operation's lock, the
//     RUNNING word gets the new class and the boosted bit, then sched_setattr. The
//     runner ends with an exchange to DONE; when it finds the bit, it takes the
//     operation's lock — waiting out a promoter still in its system call — and takes
//     back its own pool's priority before it runs anything else.
// P7. Two Dekker pairs keep a raise from being missed. A promoter raises the floor,
//     then reads the word. (a) A runner claims, then reads the floor (seq_cst on both
//     sides): either the promoter sees RUNNING (and boosts it), or the runner sees the
//     new floor and boosts itself (under the lock, as P6). (b) The dispatcher marks
//     SUBMITTED, then reads the floor again: either the promoter sees SUBMITTED (and
//     moves it), or the dispatcher sees the new floor and moves it itself. Without (b),
//     a dispatcher that read the floor before the raise, and a promoter that read the
//     word before the mark, would leave the run queued at the old class, behind all of
//     that class's backlog, until one of its workers came to claim it. The dispatcher
//     runs for every operation, so (b) uses the asymmetric barrier (promote.c, PR4):
//     the dispatcher pays a compiler barrier, and the promoter a membarrier, once per
//     promotion walk and only when a run it raised read IDLE (a run found marked needs
//     none: its mark is there to act on). Tests/Models/promotion.pml checks P4-P7 over
//     every interleaving of a dispatch, two promoters and the runners.
//
// Rejected:
// - Re-queueing a submitted operation instead of copying it. Taking a task back out of
//   a Chase-Lev deque or the injector is not an operation either supports, and adding
//   it would put a second protocol on the engine's hottest paths.
// - Running every class's work on shared workers re-niced per task: two system calls
//   per task, and an unprivileged thread cannot lower its nice again (spawn.c).
// - A persistent floor on the queue. The operations a promoted queue would run higher
//   are those behind the higher-class one; none of them is waited for.

/// `Operation.execWord` (P4): state in bits 0-2, the class it was submitted at in 3-5,
/// the class it is at now (moved to, or running at) in 6-8, the boosted bit, and the
/// running thread's id in the high half.
enum ExecWord {
    static let idle: UInt64 = 0
    static let submitted: UInt64 = 1
    static let moved: UInt64 = 2
    static let running: UInt64 = 3
    static let done: UInt64 = 4
    static let stateMask: UInt64 = 7
    static let boosted: UInt64 = 1 << 9
    static let rankMask: UInt64 = 7 << 6

    @inline(__always)
    static func make(_ state: UInt64, submittedAt: UInt8, at: UInt8, tid: Int32 = 0) -> UInt64 {
        state | UInt64(submittedAt) << 3 | UInt64(at) << 6 | UInt64(UInt32(bitPattern: tid)) << 32
    }
    static func submittedRank(_ w: UInt64) -> UInt8 { UInt8(truncatingIfNeeded: (w >> 3) & 7) }
    static func rank(_ w: UInt64) -> UInt8 { UInt8(truncatingIfNeeded: (w >> 6) & 7) }
    static func tid(_ w: UInt64) -> Int32 { Int32(bitPattern: UInt32(truncatingIfNeeded: w >> 32)) }
}

/// What promotion did, process-wide (``ThreadPool/promotionCounts``).
enum PromotionCounters {
    static let moved = Atomic<Int>(0)
    static let raised = Atomic<Int>(0)
    static let refused = Atomic<Int>(0)
    /// Operations a walk collected from the queues ahead of what it promoted (for the
    /// tests: P2's skip and stop keep it linear in the waits).
    static let walked = Atomic<Int>(0)
}

extension Operation {
    // MARK: P1, P2: the floor and the walk

    /// Raises the floor to `rank`; true when it rose (P1).
    func raiseFloor(to rank: UInt8) -> Bool {
        var current = promotedRank.load(ordering: .relaxed)
        while current < rank {
            // seq_cst: the promoter's side of P7.
            let (done, seen) = promotedRank.compareExchange(
                expected: current, desired: rank, ordering: .sequentiallyConsistent)
            if done { return true }
            current = seen
        }
        return false
    }

    /// Promotes this operation and what it waits for to `rank` (P2). `walkQueue`:
    /// false for an operation reached through its queue.
    func promote(to rank: UInt8, walkQueue: Bool = true) {
        finishPromotion(promoteStep(to: rank), to: rank, walkQueue: walkQueue)
    }

    /// What is left of a promotion after `promoteStep`.
    enum PromotionRest {
        case none
        /// Its run, not idle, is raised (P5-P7).
        case run
        /// P2's walk goes on from it, its floor raised.
        case walkFromRaised
        /// P2's walk, from the start.
        case walk
    }

    /// `promote`'s first step, which takes no lock, so that it may run under one that
    /// keeps this operation alive (`promoteDependencies`). An operation in no queue is
    /// the usual case, a chain built before it is added (each add promotes the next
    /// link, P3): its floor is all the walk would raise, and its run is not marked, so
    /// the step raises the floor and is done, without the walk's lists.
    func promoteStep(to rank: UInt8) -> PromotionRest {
        guard rank > 0, promotedRank.load(ordering: .relaxed) < rank else { return .none }
        guard queueSync.word.load(ordering: .relaxed) == 0 else { return .walk }
        if finishHandled.load(ordering: .acquiring) || !raiseFloor(to: rank) { return .none }
        // The walk's A5 pair (raiseFloors): our floor RMW, then this load of its queue
        // word, both seq_cst. Nothing queued it: its add reads the floor.
        guard queueSync.word.load(ordering: .sequentiallyConsistent) != 0 else {
            // Never queued, its run is IDLE; one just finished and dropped by its queue
            // is not, and is acted on as the walk would.
            return execWord.load(ordering: .relaxed) != ExecWord.idle ? .run : .none
        }
        // An add claimed it in between: the walk goes on from it.
        return .walkFromRaised
    }

    /// The rest of a promotion after `promoteStep`, which may take locks.
    func finishPromotion(_ rest: PromotionRest, to rank: UInt8, walkQueue: Bool = true) {
        switch rest {
        case .none: return
        case .run: promoteRun(to: rank)
        case .walkFromRaised: walk(to: rank, walkQueue: walkQueue, selfRaised: true)
        case .walk: walk(to: rank, walkQueue: walkQueue, selfRaised: false)
        }
    }

    /// P2's walk from this operation, and then its raised runs (P5-P7). Out of line:
    /// its lists make a large frame, which the usual promotion, an operation in no
    /// queue, does without.
    @inline(never)
    private func walk(to rank: UInt8, walkQueue: Bool, selfRaised: Bool) {
        var raised = RaisedRuns()
        raiseFloors(to: rank, walkQueue: walkQueue, into: &raised, selfRaised: selfRaised)
        raised.promoteRuns(to: rank)
    }

    /// P2's walk: raises the floor of this operation and of what it waits for to
    /// `rank`, and collects the operations whose floor rose, whose runs `raised` then
    /// moves or boosts. `selfRaised`: the caller has raised this operation's floor
    /// already, and the walk goes on from it.
    func raiseFloors(to rank: UInt8, walkQueue: Bool, into raised: inout RaisedRuns, selfRaised: Bool = false) {
        // Already there (P2's stop), before the work list is allocated: the usual case
        // for every operation but the first of a chain.
        guard rank > 0, selfRaised || promotedRank.load(ordering: .relaxed) < rank else { return }
        // The first operation is not in the list, which allocates only once there is a
        // second to visit.
        var first: (op: Operation, viaQueue: Bool)? = (self, !walkQueue)
        var raising = !selfRaised
        var work: [(op: Operation, viaQueue: Bool)] = []
        while let (op, viaQueue) = first ?? work.popLast() {
            first = nil
            if raising && (op.finishHandled.load(ordering: .acquiring) || !op.raiseFloor(to: rank)) { continue }
            raising = true
            raised.append(op)
            // An operation in no queue cannot start: its dependencies are promoted when
            // it is added (A5, at its class then, which includes this floor). A Dekker
            // pair with the add: our floor RMW, then this load of its queue word; the
            // add's claiming CAS, then its load of the floor (all seq_cst). Either this
            // sees it queued, or the add sees the floor.
            // And a pair with a new edge (Operation.addDependencyEdge): our floor RMW, then
            // this load of its flag (seq_cst); the edge's flag, then its load of the floor.
            if op.hadDependencies.load(ordering: .sequentiallyConsistent)
                && op.queueSync.word.load(ordering: .sequentiallyConsistent) != 0 {
                for d in op.guarded.locked({ $0.dependencies.snapshot() }) where !d.finishHandled.load(ordering: .acquiring) {
                    work.append((d, false))
                }
            }
            // The same pair with an add: either this walks the queue, or the add's
            // promotion (A5) reads the floor and walks it.
            if !viaQueue && op.queueSync.word.load(ordering: .sequentiallyConsistent) != 0 {
                op.withPinnedQueue { q in
                    for ahead in q.unfinishedAhead(of: op, walkRank: rank) { work.append((ahead, true)) }
                }
            }
        }
    }

    /// Promotes this operation's unfinished dependencies to its class — `known`, or the
    /// floor a promotion gave it if that is higher (P3: a new edge, an add, a raised
    /// class).
    func promoteDependencies(to known: UInt8) {
        guard hadDependencies.load(ordering: .acquiring) else { return }
        let queue = queueSync.word.load(ordering: .acquiring)
        // The floor after the add's claim, seq_cst: the other half of `promote`'s pair.
        let rank = max(known, promotedRank.load(ordering: .sequentiallyConsistent))
        guard rank > 0 else { return }
        // The common case, one dependency, decided under our lock, where our list keeps
        // it alive, so that it is not retained, and without copying the list. Its
        // promotion's first step takes no lock, and is all there is to it for one in no
        // queue (a chain's next link); only what is left, which may take locks, takes it
        // out of our lock, retained.
        let single = guarded.locked { g -> (pending: Operation?, rest: PromotionRest)? in
            guard let u = unsafe g.dependencies.onlyUnretained else { return nil }
            // safety: our list holds it, and cannot let it go while we hold our lock.
            return unsafe u.withGuaranteedReference { d -> (pending: Operation?, rest: PromotionRest) in
                guard !d.finishHandled.load(ordering: .acquiring) && !d.sameClassInSameQueue(as: self, queue: queue)
                else { return (nil, .none) }
                let rest = d.promoteStep(to: rank)
                return rest == .none ? (nil, .none) : (d, rest)
            }
        }
        if let (pending, rest) = single {
            pending?.finishPromotion(rest, to: rank)
            return
        }
        for d in guarded.locked({ $0.dependencies.snapshot() }) where !d.finishHandled.load(ordering: .acquiring) {
            if d.sameClassInSameQueue(as: self, queue: queue) { continue }
            d.promote(to: rank)
        }
    }

    /// Whether this operation, a dependency of `dependent` in `queue` (its address; 0:
    /// none), runs at `dependent`'s class already: the same queue, and neither has a
    /// class of its own or a promotion (a chain in one queue: the usual case).
    func sameClassInSameQueue(as dependent: Operation, queue: UInt) -> Bool {
        queue != 0 && queueSync.word.load(ordering: .relaxed) == queue
            && !hasOwnPriority.load(ordering: .acquiring) && promotedRank.load(ordering: .relaxed) == 0
            && !dependent.hasOwnPriority.load(ordering: .acquiring) && dependent.promotedRank.load(ordering: .relaxed) == 0
    }

    /// Its own class was set (P3): a queued or running operation rises to it in place,
    /// and its unfinished dependencies follow.
    func ownClassChanged() {
        guard !finishHandled.load(ordering: .acquiring) else { return }
        // A Dekker pair with an add (QueueMembership.swift, A3): the setter's flag, then
        // this load of the queue word; the add's claim, then its load of the flag under
        // the queue's lock (all seq_cst). Either this sees the operation queued and
        // notes it, or the add sees the flag and does.
        if queueSync.word.load(ordering: .sequentiallyConsistent) != 0 {
            // The queue now holds an operation with a class of its own, which a wait that
            // skipped it (P2) did not see: raise this one to that wait's class.
            var skipped: UInt8 = 0
            withPinnedQueue { q in skipped = q.noteOwnClass() }
            promote(to: max(knownRank, skipped))
        } else {
            promoteDependencies(to: knownRank)
        }
    }

    /// The class this operation runs at, when it is known: its own, a promotion, or its
    /// queue's; 0 for an operation in no queue with no class of its own.
    ///
    /// An operation in no queue with no class of its own, the usual case for an edge
    /// made before its operation is added, is answered inline; the rest is out of line.
    var knownRank: UInt8 {
        @inline(__always) get {
            // seq_cst: a new edge's side of its pair with the walk (addDependencyEdge).
            let floor = promotedRank.load(ordering: .sequentiallyConsistent)
            if queueSync.word.load(ordering: .acquiring) == 0 && !hasOwnPriority.load(ordering: .acquiring) {
                return floor
            }
            return knownRank(floor: floor)
        }
    }

    @inline(never)
    private func knownRank(floor: UInt8) -> UInt8 {
        var own: UInt8 = 0
        if queueSync.word.load(ordering: .acquiring) != 0 {
            withPinnedQueue { q in own = ClassRank.of(effectiveQoS(queueDefault: q.qualityOfService)) }
        } else if hasOwnPriority.load(ordering: .acquiring) {
            own = ClassRank.of(effectiveQoS(queueDefault: .default))
        }
        return max(own, floor)
    }
}
