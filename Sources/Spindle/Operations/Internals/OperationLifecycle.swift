import CSpindle
import Synchronization

// An operation's phases, how `start()` moves it through them, and the finish protocol
// that ends them.
//
// pending → executing → finished, in `phase`, changed by `start()` with a CAS so that
// starting and finishing a plain operation takes no lock. `claimStart` is the only
// way from pending to executing: it traps on the misuse Foundation traps on (a manual
// start of a queued, unready or executing operation) and leaves a finished operation
// alone. The way to finished is either the end of Spindle's own `start()`, when
// `isFinished` then says so, or a subclass's `didChangeValue(forKey: "isFinished")`:
// an asynchronous one's, or one whose work goes on after `super.start()` returns.
// Either way it leads to the finish protocol (below), which runs once.
//
// A plain `Operation` or `BlockOperation` (the exact class) overrides none of the
// notification methods, so `start()` gives it their effect directly instead of eight
// dynamic calls and string comparisons; a subclass gets the calls, as with Foundation.

extension Operation {
    enum Phase: UInt8 {
        case pending, executing, finished
    }

    /// The checks and the claim at the head of ``start()``, shared with the operations
    /// of this module that override it (``AsyncBlockOperation``): traps on the misuse
    /// Foundation traps on, then moves the operation from pending to executing.
    /// Returns whether it was cancelled before it started, and whether its queue is
    /// the caller; nil for an operation that has already finished, which `start()`
    /// then leaves alone (Foundation returns without calling `main()`).
    @inline(__always)
    final func claimStart() -> (cancelled: Bool, byQueue: Bool)? {
        let cancelled = isCancelled
        // The queue starts only operations it found ready; a manual start is checked.
        let byQueue = startedByQueue.load(ordering: .acquiring)
        if !byQueue {
            if phase.load(ordering: .acquiring) == Phase.finished.rawValue || finishHandled.load(ordering: .acquiring) {
                return nil
            }
            if inQueue {
                fatalError("Operation.start() was called on \(describe()), which belongs to an OperationQueue: the queue starts it")
            }
            if !cancelled && !isReady {
                fatalError("Operation.start() was called on \(describe()), which is not ready: it has unfinished dependencies")
            }
        }
        let (started, previous) = phase.compareExchange(
            expected: Phase.pending.rawValue, desired: Phase.executing.rawValue, ordering: .acquiringAndReleasing)
        if !started {
            if previous == Phase.executing.rawValue {
                fatalError("Operation.start() was called on \(describe()), which is already executing")
            }
            return nil // it finished meanwhile
        }
        return (cancelled, byQueue)
    }

    /// The end of ``start()`` for a subclass: the finished notifications, then what
    /// finishing does (dependents, completion block, the queue), if the operation now
    /// says it has finished.
    ///
    /// A subclass that overrides ``isFinished`` decides, as it does with Foundation,
    /// whose `start()` asks `isFinished` at this point and finishes the operation only
    /// when it answers true. One that calls `super.start()` to run `main()` while its
    /// work goes on after `main()` returns (Apple's "Advanced NSOperations" design) says
    /// false here, and finishes when it announces `isFinished` later; finishing it
    /// regardless would start its dependents and count it out of its queue while its
    /// work still runs. `isFinished` is asked here directly, so that the finish does not
    /// depend on an override of `didChangeValue(forKey:)` calling `super`.
    ///
    /// A finish that happens here is the end of a `start()` of Spindle's, whose runner
    /// returns right after it: the thread says so (`ThreadState.endingOwnStart`), for a
    /// drain to leave the operation to the runner to release and report
    /// (`QueueSync.reports`).
    final func completeStart() {
        let ts = unsafe ThreadState.unmanagedCurrent
        let saved = unsafe ts.withGuaranteedReference { ts in
            // safety: unretained, and only compared with an operation, while this call,
            // which `self` outlives, runs.
            defer { unsafe ts.endingOwnStart = unsafe Unmanaged.passUnretained(self) }
            return unsafe ts.endingOwnStart
        }
        defer { unsafe ts.withGuaranteedReference { unsafe $0.endingOwnStart = unsafe saved } }
        willChangeValue(forKey: "isFinished")
        willChangeValue(forKey: "isExecuting")
        phase.store(Phase.finished.rawValue, ordering: .releasing)
        didChangeValue(forKey: "isExecuting")
        didChangeValue(forKey: "isFinished")
        if isFinished { finishProtocol() }
    }

    /// The effect of `didChangeValue(forKey: "isExecuting")`.
    func executingChanged() {
        if hasObservers.load(ordering: .acquiring) && isExecuting { notify(.executing) }
    }

    /// True for instances of exactly `Operation` or `BlockOperation`, whose state
    /// methods are Spindle's own: the queue and `start()` may then skip the dynamic
    /// calls that subclasses can override.
    var isPlainClass: Bool {
        let t = ObjectIdentifier(type(of: self))
        return t == ObjectIdentifier(BlockOperation.self) || t == ObjectIdentifier(Operation.self)
    }
}

// MARK: - The finish protocol
//
// What happens, once, when an operation has finished by whatever path (the end of
// `start()`, an asynchronous subclass announcing `isFinished`, a cancelled operation
// retired by its queue).
//
// F1. `finishHandled` is claimed with a CAS: the protocol runs once.
// F2. Under the operation's lock, only if `needsFinishLock` is set or the operation has
//     had a dependency: every dependent's count is decremented (self-dependency
//     included), the dependents that became ready are collected, the completion block
//     is taken. A dependent that has begun its own finish is passed over. One is
//     retained only when found, under its own lock, queued and not finishing; passing
//     through its own lock at F2 is what makes that test hold until the retain
//     (`countDownOneEdge`).
// F3. The dependents that became ready are told (Readiness.swift); observers hear
//     `.finished`.
// F4. Its queue counts it finished (QueueMembership.swift), which may start the next
//     operation — on this thread, through the chain runner (ChainRunner.swift), when
//     this thread's runner is running this operation.
// F5. An operation the program added drops its queue (QueueFields.swift).
// F6. `finishCompleted` is set, and then the waiters are released: a returning
//     `waitUntilFinished` implies F2-F5 have happened.
// F7. The completion block runs as a task of its own, on a worker of the operation's
//     class, outside any queue. Its place among what the finish starts is
//     Foundation's: after the dependents that can start at once (F3), before what the
//     queue starts once it counts the operation finished (F4), so the next operation
//     of a serial queue starts after it. Nothing waits for it to end.
//
// Two flags let an operation that nobody waits on or depends on skip the lock, each
// a Dekker pair with sequentially consistent accesses on both sides:
// - `needsFinishLock` is set before anything is stored that F2 must hand on (a
//   dependent, a completion block, an observer), and read after F1. A dependent
//   registering concurrently either sees `finishHandled` under the lock and does not
//   register, or its flag is seen and the finisher drains it under the lock.
// - `hasWaiters` is set by a waiter before it registers, and read after F6's store. A
//   waiter either sees `finishCompleted` and does not wait, or is seen and released
//   under the lock (Waiter.swift).
//
// Models: Tests/Models/finish_protocol.pml checks F1, both pairs, F2-F3 and F6 over every
// interleaving of two finish paths, a dependent registering and a waiter;
// Tests/Models/dependent_lifetime.pml, that F2 never retains a dependent that a
// cancellation let finish and be freed meanwhile; Tests/Models/finish_cycle.pml, that
// the operations of a cycle finishing at once do not deadlock in F2.

/// What F2 hands on from under the operation's lock, in a struct: a closure returned
/// through the lock's generic result in a tuple would be re-abstracted (two
/// allocations).
struct FinishHandOff {
    var ready = ReadyDependents()
    var completion: (@Sendable () -> Void)? = nil
}

/// The dependents a finish made ready, in the order it counted them down, each retained
/// once (`countDownOneEdge`) and released once, after it is told (F3). Unmanaged, so
/// that the hand-off, borrowed, gives each its reference without retaining it again
/// around the call, and an empty one costs nothing to destroy. The first inline, the
/// rest in an array allocated only for a second.
@safe
struct ReadyDependents {
    // safety: each element holds the one reference `countDownOneEdge` took, which
    // `tellEach` releases; nothing else reads them.
    private var first: Unmanaged<Operation>? = nil
    private var rest: [Unmanaged<Operation>]? = nil

    init() {}

    mutating func append(_ u: Unmanaged<Operation>) {
        if unsafe first == nil {
            unsafe first = u
        } else if unsafe rest == nil {
            unsafe rest = unsafe [u]
        } else {
            unsafe rest!.append(u) // in place: `!` on a stored optional does not copy
        }
    }

    /// F3: tells each that its dependencies are satisfied, in order, and releases it.
    /// Once: the references are gone after it. The test is inlined into the finish, so
    /// that a finish whose hand-off is the constant empty one calls nothing here.
    @inline(__always)
    func tellEach() {
        guard let first = unsafe first else { return }
        unsafe Self.tellAll(first, rest)
    }

    @inline(never)
    private static func tellAll(_ first: Unmanaged<Operation>, _ rest: [Unmanaged<Operation>]?) {
        unsafe tell(first)
        if let rest = unsafe rest { for unsafe u in unsafe rest { unsafe tell(u) } }
    }

    private static func tell(_ u: Unmanaged<Operation>) {
        unsafe u.withGuaranteedReference { $0.dependenciesSatisfied() }
        unsafe u.release()
    }
}

extension Operation {
    /// Runs once, when the operation has finished by whatever path: releases
    /// dependents, tells the queue, drops the queue if it holds it, wakes waiters, and
    /// then hands the completion block to a worker. The steps are the functions below,
    /// in this order.
    func finishProtocol() {
        // F1.
        guard finishHandled.compareExchange(expected: false, desired: true, ordering: .sequentiallyConsistent).exchanged else { return }
        // A custom asynchronous operation reports `isFinished` through its override;
        // make the base state agree.
        phase.store(Phase.finished.rawValue, ordering: .releasing)
        // F2, only when something was registered that it must hand on, or when a
        // dependency may be counting this operation down: F2's lock then orders this
        // finish after that count-down, which may retain this operation
        // (`countDownOneEdge`). The rest is inlined into each branch: in the usual one
        // the hand-off is a constant, empty, and destroying it costs nothing, where one
        // value for both branches would release its two fields on every finish.
        if needsFinishLock.load(ordering: .sequentiallyConsistent) || hadDependencies.load(ordering: .sequentiallyConsistent) {
            #if DEBUG
            unsafe OperationSeams.reach(.finishLock, Dependents.key(self))
            #endif
            finishSteps(takeHandOff())
        } else {
            finishSteps(FinishHandOff())
        }
    }

    /// F3-F7, with what F2 handed on.
    ///
    /// Transparent, not `@inline(__always)`: the optimizer then inlines one branch's
    /// copy and calls the other, which reads the hand-off it is given where the usual
    /// branch's constant empty one would fold away.
    @_transparent
    private func finishSteps(_ handOff: borrowing FinishHandOff) {
        let queue = unsafe ownerQueue
        let ts = unsafe ThreadState.unmanagedCurrent
        let chained = unsafe joinChain(ts)
        // F3.
        handOff.ready.tellEach()
        notify(.finished)
        // F7's place, before F4.
        let completionLast = unsafe placeCompletion(handOff.completion, queue: queue, chained: chained, ts)
        // F4. The queue is alive: it has not counted this operation finished (and holds
        // itself until it has). `operationFinished` may free it.
        unsafe queue?.withGuaranteedReference { $0.operationFinished(self) }
        if chained { unsafe ts.withGuaranteedReference { unsafe $0.finishing = nil } }
        // F5. Written before the operation could start, never after.
        if unsafe queue != nil && queueRun.contains(.addedByCaller) { dropQueue() }
        // F6.
        releaseWaiters()
        if let (completion, pool) = unsafe completionLast { unsafe runCompletionBlock(completion, on: pool) }
    }

    /// F2, under the operation's lock: every dependent counted down, those that became
    /// ready collected, the completion block taken.
    @inline(__always)
    private func takeHandOff() -> FinishHandOff {
        guarded.locked { g -> FinishHandOff in
            // Count this edge down in every dependent, under our lock (see Dependents).
            // Only dependents found in a queue and not finishing, under their own lock,
            // are retained (`countDownOneEdge`): their queue keeps them alive until
            // then, so they cannot be mid-deinit. They are told they are ready once we
            // unlock.
            //
            // A dependent may be in its deinit right now (its last reference went away
            // on another thread), blocked on our lock to deregister. It must not be
            // retained even for an instant — a retain and release of an object whose
            // count reached zero runs its deinit a second time — so it is reached
            // only as a guaranteed reference and never captured by a closure (a
            // capture is a retain in unoptimised builds).
            var ready = ReadyDependents()
            let me = unsafe Dependents.key(self)
            unsafe g.dependents.forEach { dependent in
                // An operation that depends on itself (legal, if useless) is counted
                // down here: its lock is the one we hold. It is finishing, so it
                // needs no signal.
                if unsafe Dependents.key(dependent) == me {
                    g.unfinished -= 1
                    return
                }
                // A dependent that has begun its own finish is passed over, its lock not
                // taken: it will not be told it is ready, and taking it could deadlock.
                // In a dependency cycle whose operations finish at once (cancelled
                // together), each holds its own lock here and would wait for the next
                // one's. Each stores its F1 and then loads the next one's (seq_cst), so
                // at least one of them sees the next one finishing: no cycle of waits.
                if unsafe dependent.withGuaranteedReference(Operation.isFinishing) { return }
                #if DEBUG
                unsafe OperationSeams.reach(.countingDown, Dependents.key(dependent))
                #endif
                if let nowReady = unsafe dependent.withGuaranteedReference(Operation.countDownOneEdge) {
                    unsafe ready.append(nowReady)
                }
            }
            unsafe g.dependents.removeAll()
            let c = unsafe completionStorage
            unsafe completionStorage = nil
            return FinishHandOff(ready: ready, completion: c)
        }
    }

    /// Whether the operations this finish starts (ready dependents, the next of a
    /// width-limited queue) may run next on this thread, without a trip through the
    /// pool: when this is the operation the thread's chain runner is running
    /// (ChainRunner.runChain). This operation is then the thread's `finishing` until
    /// F4 is done.
    @inline(__always)
    private func joinChain(_ ts: Unmanaged<ThreadState>) -> Bool {
        unsafe ts.withGuaranteedReference { ts -> Bool in
            guard unsafe ts.chainOpen, unsafe ts.finishing == nil,
                  unsafe ts.currentOperation?.isIdentical(to: self) == true else { return false }
            // safety: unretained while this thread finishes `self`, which its runner holds.
            unsafe ts.finishing = unsafe Unmanaged.passUnretained(self)
            return true
        }
    }

    /// F7's place: after the dependents that could start at once (F3), before what the
    /// queue starts once it counts this operation finished (F4), so that the next
    /// operation of a serial queue starts after the completion block, as Foundation
    /// orders them. On this thread's chain runner the runner orders the two
    /// (ChainRunner.runChain): a dependent already in the continuation slot first, else
    /// the block first. Otherwise the block is queued now when it goes to an injector
    /// (first in, first out), and after the queue has started its next operation when
    /// it goes on this worker's own deque, whose owner takes the newest first: that
    /// block, with its pool, is returned, to be queued last.
    @inline(__always)
    private func placeCompletion(_ completion: (@Sendable () -> Void)?, queue: Unmanaged<OperationQueue>?,
                                 chained: Bool, _ ts: Unmanaged<ThreadState>)
        -> (@Sendable () -> Void, OpaquePointer)? {
        guard let completion else { return nil }
        // Where the completion block will run, read while the queue is certainly alive.
        let pool = unsafe QoSPools.engine(
            for: effectiveQoS(queueDefault: queue?.withGuaranteedReference { $0.qualityOfService } ?? .default))
        let onThisWorker = unsafe spindle_current_pool() == pool
        if chained && onThisWorker {
            let holding = holdingSelf(completion)
            unsafe ts.withGuaranteedReference { ts in
                if unsafe ts.chainNext == nil { unsafe ts.chainCompletion = holding } else { unsafe ts.completionOnNextStart = holding }
            }
            return nil
        }
        if onThisWorker { return unsafe (completion, pool) }
        unsafe runCompletionBlock(completion, on: pool)
        return nil
    }

    /// F6: `finishCompleted`, then the waiters released. A waiter sets `hasWaiters` and
    /// then checks `finishCompleted` under the lock; we set `finishCompleted` and then
    /// check `hasWaiters` (all seq_cst): either it sees our flag and does not wait, or
    /// we see its flag and take the lock — after its registration or before it, and in
    /// the latter case it then sees `finishCompleted` under the lock.
    @inline(__always)
    private func releaseWaiters() {
        finishCompleted.store(true, ordering: .sequentiallyConsistent)
        guard hasWaiters.load(ordering: .sequentiallyConsistent) || hasObservers.load(ordering: .acquiring) else { return }
        let waiters = unsafe guarded.locked { g -> (first: Waiter?, more: [Waiter]) in
            guard let extras = g.extras else { return unsafe (nil, []) }
            extras.observers = []
            return unsafe extras.takeWaiters()
        }
        unsafe waiters.first?.signal()
        for unsafe w in unsafe waiters.more { unsafe w.signal() }
    }

    /// Whether `d` has begun its finish (F1). A static function of a guaranteed
    /// reference, like `countDownOneEdge`: `d` may be in its deinit.
    static func isFinishing(_ d: Operation) -> Bool {
        d.finishHandled.load(ordering: .sequentiallyConsistent)
    }

    /// Counts one finished dependency off `d`, under `d`'s lock. When that was the last
    /// one and `d` is queued and has not begun to finish, returns `d` retained, to be
    /// told it is ready (F3); otherwise nil.
    ///
    /// The test and the retain are one critical section under `d`'s lock, and `d`'s own
    /// finish, when `d` has ever had a dependency, passes through that lock after its
    /// F1 (`finishProtocol`). So either this section runs first, and `d`'s queue, which
    /// lets `d` go only after `d` has finished, still holds it while it is retained; or
    /// `d`'s finish passed through the lock first, and this section sees
    /// `finishHandled` and retains nothing. Testing outside the lock would leave a
    /// window: a cancelled `d` is ready whatever its dependencies, so it can finish, be
    /// let go by its queue and begin its deinit between the test and the retain.
    ///
    /// A static function of a guaranteed reference, not a closure: nothing here may
    /// retain `d` before the test (see `takeHandOff`), so the locked body reaches it
    /// unretained.
    static func countDownOneEdge(_ d: Operation) -> Unmanaged<Operation>? {
        // safety: `d` stays allocated while this runs: its deinit waits for the lock
        // the caller holds (Dependents.swift). It is retained only once found alive.
        let u = unsafe Unmanaged.passUnretained(d)
        #if DEBUG
        let key = unsafe Dependents.key(u)
        #endif
        return unsafe d.guarded.locked { dg -> Unmanaged<Operation>? in
            dg.unfinished -= 1
            guard dg.unfinished == 0 else { return nil }
            // seq_cst, for the one case where `d`'s finish may not pass through the lock:
            // its F1 read `hadDependencies` false, because the edge was being added
            // while `d` finished; that read then precedes the edge's store in the
            // single order of seq_cst accesses, and this load follows it (through our
            // lock), so it sees F1's store.
            let alive = unsafe u.withGuaranteedReference { d in
                d.queueSync.word.load(ordering: .acquiring) != 0
                    && !d.finishHandled.load(ordering: .sequentiallyConsistent)
            }
            guard alive else { return nil }
            #if DEBUG
            OperationSeams.reach(.retainingReadyDependent, key)
            #endif
            return unsafe u.retain()
        }
    }

    /// Queues the completion block as a task of its own, on a worker of the
    /// operation's class: not on the thread that finished the operation, and outside
    /// any queue — inside it ``OperationQueue/current`` is nil — so it may wait for its
    /// operation, a dependent, or the queue, even a serial queue it adds an operation
    /// to, without deadlocking the finish it would otherwise be part of. The task holds
    /// the operation, so a block that captures it `unowned` finds it alive.
    func runCompletionBlock(_ completion: @escaping @Sendable () -> Void, on pool: OpaquePointer) {
        unsafe ChainRunner.submitCompletion(holdingSelf(completion), on: pool)
    }

    /// `completion`, holding the operation until it has run.
    private func holdingSelf(_ completion: @escaping @Sendable () -> Void) -> @Sendable () -> Void {
        { [self] in
            completion()
            withExtendedLifetime(self) {}
        }
    }
}
