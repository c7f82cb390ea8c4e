import CSpindle
import Dispatch
import Synchronization

// The runner: how an operation goes from the engine to `start()`, and on to the next.
//
// CR1. A started operation is submitted to the pool of its class through the task node
//     inside it (Runtime/UnsafeABI.swift): submitting allocates nothing. The task
//     holds no reference: the runner borrows the one the queue's list holds, which the
//     list does not release before the runner is done (`QueueSync.runState`).
// CR2. The runner makes the operation and its queue the thread's current ones, calls
//     `start()`, and notices an unannounced finish when `start()` returns, as
//     Foundation's queue does.
// CR3. When an operation finishes on a pool worker, the one its finish starts — the
//     next of a serial queue, a dependent that became ready — takes this thread's
//     continuation slot instead of a trip through the pool (`runChain`). Only one per
//     finish, only for this worker's own pool, and only while the finish of the
//     operation this runner is running is under way; every `chainLength` operations
//     the runner yields if other work waits for its worker. The finished operation's
//     completion block is ordered against the one in the slot here (F7): whichever
//     starts second goes to the pool as the first starts, so that the two may run
//     side by side.
// CR4. The runner's last access to an operation is `runnerDone`; from there the queue's
//     list may release it. If a drain unlinked it first, the runner releases it, then
//     reports to the queue, whose waits return only after that.
// Model: Tests/Models/run_state.pml checks CR4 against a prune and a drain, on the
// runner's thread or another: released once, and never while still touched.

/// The chain runner (CR1-CR4).
enum ChainRunner {
    /// The runner's last access to `op`, which it ran for `queue`: from here the queue's
    /// list may release it — or, if a drain has already unlinked it, the runner releases
    /// it and reports to `queue`, which the drain keeps alive for that.
    @inline(__always)
    static func runnerDone(_ op: Unmanaged<Operation>, queue: Unmanaged<OperationQueue>) {
        // acq_rel: release orders the runner's accesses before whoever releases the
        // operation; acquire, when the drain came first, orders its unlinking (its
        // writes to the operation) before our release.
        let before = unsafe op.withGuaranteedReference {
            $0.queueSync.runState.bitwiseOr(QueueSync.runnerDone, ordering: .acquiringAndReleasing).oldValue
        }
        if before & QueueSync.listGone != 0 {
            unsafe releaseDrained(op, reportingTo: before & QueueSync.reports != 0 ? queue : nil)
        }
    }

    /// The release of an operation a drain left to its runner, then, when the drain
    /// asked for it, the report: a wait for the queue returns only once the operation
    /// (and what its blocks hold) is no longer kept alive by the queue.
    @inline(never)
    static func releaseDrained(_ op: Unmanaged<Operation>, reportingTo queue: Unmanaged<OperationQueue>?) {
        unsafe op.release()
        // safety: the drain gave this runner a reference to the queue (`finishLocked`).
        unsafe queue?.withGuaranteedReference { $0.drainedOperationReleased() }
    }

    /// How many operations a chain runner runs from the continuation slot between
    /// checks for other work waiting for its worker (its deque, the injector): when
    /// there is some, the next operation goes through the pool instead, behind it.
    /// W1 in worker.c counts tasks, and a chain is one task.
    static let chainLength = 32

    /// Runs `first`, then whatever its finish hands to this thread's continuation slot,
    /// and so on.
    ///
    /// When an operation finishes on a pool worker, the operation its finish starts —
    /// the next one of a serial queue, a dependent that became ready — would otherwise
    /// be submitted to this worker's deque, announced to sleeping workers, and popped
    /// again, or stolen: then the queue's lock and counters move to another core for
    /// one operation, and on a small machine the woken worker's search takes CPU from
    /// the thread adding operations. A serial DispatchQueue drains on one thread too.
    /// Only an operation for this worker's own pool takes the slot (the worker set of
    /// its quality of service), only one per finish, and the slot is open only while
    /// finishing the operation this runner is running — not while its `main()` runs, so
    /// an operation that becomes ready then is not made to wait for it. Every
    /// `chainLength` operations the runner yields if anything else waits.
    ///
    /// `copyRank`: `first` is a promoted operation's copy on that class's pool
    /// (Promotion.swift, P5). Whichever runner claims an operation runs it (P4); one that
    /// finds it claimed does nothing with it.
    static func runChain(_ first: Unmanaged<Operation>, copyRank: UInt8? = nil) {
        let ts = unsafe ThreadState.unmanagedCurrent
        // Saved and restored: a worker waiting inside an operation runs other tasks,
        // and so other chains, nested in this one.
        let saved = unsafe ts.withGuaranteedReference { ts in
            defer { unsafe ts.chainOpen = true; unsafe ts.chainBudget = chainLength }
            return unsafe (ts.chainOpen, ts.chainBudget)
        }
        let tid = unsafe ts.withGuaranteedReference { $0.threadID }
        var op = unsafe first
        var copy = copyRank
        while true {
            let claim = unsafe op.withGuaranteedReference { $0.claimRun(copyRank: copy, tid: tid) }
            copy = nil
            if claim.won {
                let queue = unsafe op.withGuaranteedReference { op in
                    let queue = unsafe op.ownerQueue.unsafelyUnwrapped
                    unsafe queue.withGuaranteedReference { $0.run(op) }
                    op.endRun()
                    return unsafe queue
                }
                unsafe runnerDone(op, queue: queue)
            }
            // The original node's reference, which a move took (P5); ours to drop now.
            if claim.releaseNodeReference { unsafe op.release() }
            // Its completion block, when its finish left it here to start before the
            // operation in the slot (OperationLifecycle.swift, F7): that operation goes to
            // the pool first, so that it may run beside the block — a completion block
            // may wait for the operation its finish started, and that operation for
            // anything.
            // Tested before it is taken: taking an empty slot would still store nil and
            // destroy what was there, a call into the runtime on every operation.
            if unsafe ts.withGuaranteedReference({ unsafe $0.chainCompletion != nil }),
               let completion = unsafe ts.withGuaranteedReference({ ts -> (@Sendable () -> Void)? in
                   defer { unsafe ts.chainCompletion = nil }
                   return unsafe ts.chainCompletion
               }) {
                let next = unsafe ts.withGuaranteedReference { ts in
                    defer { unsafe ts.chainNext = nil }
                    return unsafe ts.chainNext
                }
                // The slot only takes operations for this worker's own pool.
                if let next = unsafe next { unsafe submitToPool(next.takeUnretainedValue(), pool: spindle_current_pool()!) }
                unsafe ThreadState.current.withRunningContext((nil, nil), completion)
            }
            guard let next = unsafe ts.withGuaranteedReference({ ts -> Unmanaged<Operation>? in
                defer { unsafe ts.chainNext = nil }
                return unsafe ts.chainNext
            }) else { break }
            unsafe op = unsafe next
        }
        unsafe ts.withGuaranteedReference { ts in
            unsafe ts.chainOpen = saved.0
            unsafe ts.chainBudget = saved.1
        }
        // Taken by the start of the operation in the slot, which always follows; a
        // completion block must never be left behind.
        unsafe submitCompletionOnNextStart(ts)
    }

    /// Submits the completion block that a finish on this worker ordered after the
    /// operation in the continuation slot (OperationLifecycle.swift, F7), if there is one:
    /// called as that operation starts, so that the two may run side by side.
    ///
    /// Inlined into every start: the usual case, no such block, is one load and a
    /// test, with the taking and submitting out of line.
    @inline(__always)
    static func submitCompletionOnNextStart(_ ts: Unmanaged<ThreadState>) {
        if unsafe ts.withGuaranteedReference({ unsafe $0.completionOnNextStart != nil }) {
            unsafe takeCompletionOnNextStart(ts)
        }
    }

    @inline(never)
    private static func takeCompletionOnNextStart(_ ts: Unmanaged<ThreadState>) {
        if let completion = unsafe ts.withGuaranteedReference({ ts -> (@Sendable () -> Void)? in
            defer { unsafe ts.completionOnNextStart = nil }
            return unsafe ts.completionOnNextStart
        }) {
            unsafe submitCompletion(completion, on: spindle_current_pool()!)
        }
    }

    /// Puts `op` in this thread's continuation slot if it is open and `pool` is this
    /// worker's own pool (see `runChain`).
    @inline(__always)
    static func continueOnThisThread(_ op: Operation, pool: OpaquePointer) -> Bool {
        // The pool check first: it is a plain thread-local read, and it turns away the
        // thread adding operations (not a worker) before the pthread-key lookup of its
        // ThreadState, on every add.
        guard unsafe spindle_current_pool() == pool else { return false }
        return unsafe ThreadState.unmanagedCurrent.withGuaranteedReference { ts in
            guard unsafe ts.finishing != nil, unsafe ts.chainNext == nil else { return false }
            if unsafe ts.chainBudget == 0 {
                if spindle_current_worker_has_waiting_work() { return false }
                unsafe ts.chainBudget = chainLength
            }
            unsafe ts.chainBudget -= 1
            // safety: borrowed, as a task borrows it: the queue list's reference keeps it
            // until it runs.
            unsafe ts.chainNext = unsafe Unmanaged.passUnretained(op) // borrowed, as by a task
            return true
        }
    }

    /// Submits a started operation to `pool`, the pool of class `rank`, or to this
    /// thread's continuation slot.
    static func submit(_ op: Operation, pool: OpaquePointer, rank: UInt8) {
        op.markSubmitted(rank: rank)
        op.recheckFloorAfterMark(rank: rank)
        if unsafe continueOnThisThread(op, pool: pool) { return }
        unsafe submitToPool(op, pool: pool)
    }

    /// Submits a started operation to `pool` as a task.
    static func submitToPool(_ op: Operation, pool: OpaquePointer) {
        // An operation starts once, so its node is submitted once.
        let node = unsafe TaskNode.node(of: op)
        unsafe node.pointee.run = { task, _ in
            // A pool only cancels tasks when it is destroyed; the pools operations
            // run on live for the whole process, so every task runs.
            unsafe ChainRunner.runChain(TaskNode.operation(of: task.unsafelyUnwrapped))
        }
        let rc = unsafe spindle_submit_task(pool, node)
        // Process-wide pools refuse shutdown (ThreadPool.Error.processWidePool), so this
        // cannot fail short of a bug in the engine.
        precondition(rc == 0, "Spindle: a process-wide pool refused an operation (engine bug, rc \(rc))")
    }
}

extension OperationQueue {
    /// Where started operations go, read under the lock together with them.
    ///
    /// Trivial, so that making one and dropping it costs no reference counting on the
    /// add's path: the underlying queue is held unretained.
    @safe
    struct DispatchConfig {
        // safety: `underlying` is unretained. The queue's state holds it and cannot let
        // it go while the config is in use: a config is read under the lock with the
        // operations it started, each is dispatched while it is unfinished (started,
        // it finishes only by running), and `underlyingQueue` refuses a change while
        // any operation is unfinished (the main queue's never changes).
        let underlying: Unmanaged<DispatchQueue>?
        let qualityOfService: QualityOfService
        /// Borrowed: a copy of the whole state would retain and release every
        /// reference in it.
        init(_ s: borrowing State) {
            unsafe underlying = unsafe s.underlyingQueue.map { unsafe Unmanaged.passUnretained($0) }
            qualityOfService = unsafe s.qualityOfService
        }
    }

    /// Dispatches each operation a scheduling step started: a switch, where a
    /// `forEach` taking a closure would cost two calls for every operation of a
    /// serial queue.
    func dispatch(_ ops: Startable, _ config: DispatchConfig) {
        switch ops {
        case .none: break
        case .one(let u): unsafe u.withGuaranteedReference { dispatch($0, config) }
        case .many(let batch):
            for unsafe u in unsafe batch.takeUnretainedValue().operations { unsafe u.withGuaranteedReference { dispatch($0, config) } }
            unsafe batch.release()
        }
    }

    func dispatch(_ op: Operation, _ config: DispatchConfig) {
        if let underlying = unsafe config.underlying {
            // safety: valid while `op` is unfinished (DispatchConfig).
            unsafe underlying.takeUnretainedValue().async { [self] in
                run(op)
                // safety: the closure holds the operation and the queue for as long as it
                // runs.
                unsafe ChainRunner.runnerDone(Unmanaged.passUnretained(op), queue: Unmanaged.passUnretained(self))
            }
        } else {
            let qos = op.effectiveQoS(queueDefault: config.qualityOfService)
            unsafe ChainRunner.submit(op, pool: QoSPools.engine(for: qos), rank: ClassRank.of(qos))
        }
    }

    /// Runs one operation on the current thread, as the queue's runner.
    func run(_ op: Operation) {
        let ts = unsafe ThreadState.unmanagedCurrent
        let (savedQueue, savedOp) = unsafe ts.withGuaranteedReference { ts in
            let saved = unsafe (ts.currentQueue, ts.currentOperation)
            // safety: unretained while `op` runs: the queue holds itself and the list holds
            // `op` (LT3).
            unsafe ts.currentQueue = unsafe Unmanaged.passUnretained(self)
            unsafe ts.currentOperation = unsafe Unmanaged.passUnretained(op)
            return unsafe saved
        }
        op.startedByQueue.store(true, ordering: .releasing)
        if hasProgress.load(ordering: .relaxed) { op.setQueueRun(.reportsProgress) }
        unsafe ChainRunner.submitCompletionOnNextStart(ts)
        op.start()
        // A custom operation that became finished inside `start()` without announcing it
        // is noticed here, as Foundation's queue notices it.
        // (A plain operation has finished by now, so the first test ends it.)
        if !op.finishHandled.load(ordering: .acquiring) && !op.isPlainClass && op.isFinished {
            op.finishProtocol()
        }
        unsafe ts.withGuaranteedReference { ts in
            unsafe ts.currentQueue = unsafe savedQueue
            unsafe ts.currentOperation = unsafe savedOp
        }
    }

    /// Runs `op`'s `main()` with a progress of one unit current on its thread, when the
    /// queue's progress has had its total set, and adds that unit to the queue's
    /// progress once `main()` has returned with it complete, or the progress itself as
    /// a child when `main()` left it part-way (see ``progress``).
    ///
    /// The operation's progress is not a child of the queue's while `main()` runs.
    /// Foundation's `Progress` on Linux takes no lock, and a child passes each of its
    /// updates up to its parent on the thread that makes it: operations that run at once
    /// and step progress of their own would then update the queue's progress from
    /// several threads, unserialised, losing updates or corrupting its set of children.
    /// So each operation's tree stays its own, updated only by its own code, and only
    /// the completed unit crosses to the queue's progress, under `progressLock`.
    /// Rejected: attaching the child under the lock, as Foundation does without one;
    /// the lock then covers the attachment but not the updates the operation makes.
    func runReportingProgress(_ op: Operation) {
        let parent = unsafe op is BarrierOperation ? nil : state.locked { unsafe $0.progress }
        guard let parent, parent.reporting.load(ordering: .acquiring) else {
            op.main()
            return
        }
        // `parent: nil`: never an implicit child of whatever progress is current here.
        let own = Progress(parent: nil)
        own.totalUnitCount = 1
        // What a child takes from its parent when it is added: a queue's progress
        // cancelled or paused before main() starts is seen from inside it.
        let (cancelled, paused) = progressLock.withLock { (parent.isCancelled, parent.isPaused) }
        if cancelled { own.cancel() }
        if paused { own.pause() }
        own.becomeCurrent(withPendingUnitCount: 1)
        op.main()
        own.resignCurrent()
        progressLock.withLock {
            // Complete when main() made no progress of its own, or when what it made
            // finished. Left part-way, it joins the queue's tree as a child, as with
            // Foundation: the queue's fraction shows how far it got, and its unit is
            // not counted.
            if own.completedUnitCount >= own.totalUnitCount {
                parent.completedUnitCount += 1
            } else {
                parent.addChild(own, withPendingUnitCount: 1)
            }
        }
    }
}

extension ChainRunner {
    /// Submits a completion block to `pool` as a task of its own, run outside any
    /// queue (``OperationQueue/current`` is nil inside it).
    static func submitCompletion(_ completion: @escaping @Sendable () -> Void, on pool: OpaquePointer) {
        let task = unsafe ClosureTask.make {
            unsafe ThreadState.current.withRunningContext((nil, nil), completion)
        }
        let rc = unsafe spindle_submit_task(pool, task)
        // Process-wide pools refuse shutdown (ThreadPool.Error.processWidePool).
        precondition(rc == 0, "Spindle: a process-wide pool refused a completion block (engine bug, rc \(rc))")
    }
}

extension TaskNode {
    // safety: `task` must be the `engineTask` of a live Operation, one the queue's list
    // still holds (`QueueSync.runState`); the result is unretained.
    /// The operation whose node `task` is. Unretained: the runner borrows the queue
    /// list's reference until `runnerDone` (see `Operation.queueSync.runState`).
    @inline(__always)
    static func operation(of task: UnsafeMutablePointer<spindle_task>) -> Unmanaged<Operation> {
        unsafe object(of: task, as: Operation.self)
    }
}
