import Synchronization

// The queue's list of operations: what ``OperationQueue/operations`` lists, and what
// keeps every added operation alive until it has finished and its runner is done with
// it.
//
// An intrusive doubly linked list through `QueueFields.prev/next`, under the queue's
// lock, holding one retained reference to each operation: the only one the queue
// holds, which its ready rings and the operations it starts borrow. A worker's finish
// of an operation leaves it alone but for the rare cases below: finished ones
// (`QueueSync.done`) are unlinked
// lazily by the thread adding operations (`prune`) once no ready ring and no runner
// uses them, all at once when the queue drains (`unlinkAll`), and, when nothing has
// been added since the newest operation finished, by a check that runs behind the
// pool's queued work (`OperationQueue.releaseIfQuiet`), or since the queue's watch last
// ticked (`OperationQueue.watchTick`): Foundation lets go of each operation as it
// finishes, and a queue whose remaining operations run for long would otherwise keep
// what finished before them until its next add. References are
// released outside the lock, oldest first, in a chain built through `QueueFields.next`
// (`ReleaseChain`, `OperationQueue.release`), because a release may run a deinit and
// user code.
//
// Rejected: keeping the operations the block form makes for reuse. Nothing outside the
// queue can reach them, so a finished one could be reset and handed to the next block
// added instead of being freed, saving a malloc and a free per operation. But the reset
// writes every line of an object that the worker which ran it wrote last; a drain
// collects them on a worker, far from the threads that add; and every stored property
// of `Operation` would have a second place to be initialised in. With one adding thread
// the operation path got somewhat faster, with sixteen it got slower.
//
// Rejected: pacing what a prune unlinks, released one per add rather than all at once,
// so that the adding thread's frees keep glibc's thread cache stocked for its mallocs.
// The adding thread's slow-path mallocs fell by more than half, but what it no longer
// freed went to the drains on the workers, into glibc's arena locks: faster in
// `operation-throughput`, slower in `contended` at one and sixteen submitters
// (docs/performance.md).

extension OperationQueue.State {
    /// Appends `op` to the list, which takes over the reference `u` holds.
    mutating func link(_ u: Unmanaged<Operation>, _ op: Operation) {
        unsafe op.queueFields.linked = true
        unsafe op.queueFields.order = unsafe nextOrder
        unsafe nextOrder &+= 1
        unsafe op.queueFields.level = unsafe level(of: op)
        unsafe op.queueFields.prev = unsafe tail
        unsafe op.queueFields.next = nil
        if let t = unsafe tail {
            unsafe t.withGuaranteedReference {
                unsafe $0.queueFields.next = unsafe u
                $0.queueSync.succeeded.store(true, ordering: .relaxed)
            }
        } else {
            unsafe head = unsafe u
        }
        unsafe tail = unsafe u
        unsafe linked += 1
    }

    /// Takes `op` off the list and appends it to `chain`, whose reference it takes over.
    mutating func unlink(_ op: Operation, onto chain: inout ReleaseChain) {
        unsafe detach(op)
        // safety: the list's reference moves to the chain, which the caller releases
        // outside the lock.
        unsafe chain.append(Unmanaged.passUnretained(op))
    }

    /// Takes `op` off the list, leaving the list's reference to it with the caller.
    ///
    /// It is no longer `linked`: a signal that reaches the queue after this, from a
    /// thread that found the operation queued before it finished (a readiness change, a
    /// new priority), finds it gone and leaves it alone. Taken, a readiness signal would
    /// put it on a ready line, which holds operations unretained while the list keeps
    /// them.
    mutating func detach(_ op: Operation) {
        let prev = unsafe op.queueFields.prev, next = unsafe op.queueFields.next
        if let prev = unsafe prev { unsafe prev.withGuaranteedReference { unsafe $0.queueFields.next = unsafe next } } else { unsafe head = unsafe next }
        if let next = unsafe next { unsafe next.withGuaranteedReference { unsafe $0.queueFields.prev = unsafe prev } } else { unsafe tail = unsafe prev }
        unsafe op.queueFields.prev = nil
        unsafe op.queueFields.next = nil
        unsafe op.queueFields.linked = false
        unsafe linked -= 1
    }

    /// Whether the list may let `op` go: it has finished, its runner is done with it,
    /// and no ready ring holds it (see `prune`).
    @inline(__always)
    static func mayRelease(_ op: Operation) -> Bool {
        unsafe op.queueSync.done.load(ordering: .acquiring) && op.runnerIsDone && !op.queueFields.inRing
    }

    /// Unlinks finished operations, amortised O(1) per operation added, keeping at
    /// most ~2× the unfinished operations (+256) referenced:
    /// - on every call past 64 finished ones, up to two finished operations among
    ///   the first four (the look-ahead steps over one that runs long, or one a
    ///   preempted worker holds);
    /// - the whole list once it holds more than twice the unfinished ones plus 256.
    ///   The slack matters: when the count of unfinished operations swings between 0
    ///   and a few dozen (two workers keeping up with one producer), a tighter
    ///   threshold sets off a sweep every few adds, each step a cache miss.
    ///
    /// In a queue wider than one, pool workers take operations from both ends of each
    /// batch, so the first four are often unfinished and most operations are released
    /// by sweeps; a sweep bounded per add, resumed at the next, measured slower
    /// (docs/performance.md).
    ///
    /// The finished operations are kept 64 behind the workers, and one is taken
    /// only once its runner is done with it (`QueueSync.runState`) and no ready ring
    /// holds it (one that finished without starting may still sit in one: `retired`,
    /// `inRing`): the release here is then the last, and the memory is freed on this
    /// thread — which allocates the next operation from the same thread cache. Were
    /// the workers to free operations instead, glibc would serve every allocation here
    /// from its slow path (a thread cache that only allocates never gets memory back).
    /// The lag also keeps this thread from reading lines the workers still write.
    ///
    /// Inlined into the add: a list no longer than its unfinished operations and 64
    /// (operations added faster than they run, a graph built before it runs) is left
    /// as it is, without a call. That bound is below the sweep's, so nothing is missed.
    @inline(__always)
    mutating func prune(unfinished: Int, onto released: inout Unmanaged<Operation>?) {
        if unsafe linked > unfinished + 64 { unsafe pruneLong(unfinished: unfinished, onto: &released) }
    }

    @inline(never)
    private mutating func pruneLong(unfinished: Int, onto released: inout Unmanaged<Operation>?) {
        var chain = unsafe ReleaseChain()
        var cursor = unsafe head, steps = 0, unlinked = 0
        while let u = unsafe cursor, steps < 4, unlinked < 2 {
            unsafe cursor = unsafe u.withGuaranteedReference { op in
                let next = unsafe op.queueFields.next
                if unsafe Self.mayRelease(op) {
                    unsafe unlink(op, onto: &chain)
                    unlinked += 1
                }
                return unsafe next
            }
            steps += 1
        }
        if unsafe linked > 2 * unfinished + 256 { unsafe sweep(onto: &chain) }
        unsafe chain.prepend(onto: &released)
    }

    /// Unlinks, onto `chain`, every operation on the list that it may let go now
    /// (`mayRelease`).
    @inline(__always)
    mutating func sweep(onto chain: inout ReleaseChain) {
        var cursor = unsafe head
        while let u = unsafe cursor {
            unsafe cursor = unsafe u.withGuaranteedReference { op in
                let next = unsafe op.queueFields.next
                if unsafe Self.mayRelease(op) { unsafe unlink(op, onto: &chain) }
                return unsafe next
            }
        }
    }

    /// Unlinks everything (the queue has drained: all of it has finished). An
    /// operation whose runner has not yet returned from it is left to that runner
    /// to release (`letGo`); `finishing` is the one whose finish drains the queue.
    /// Returns how many runners will report their release. The ready rings, which can
    /// then hold only operations that finished without starting, are emptied first:
    /// they hold them unretained.
    mutating func unlinkAll(onto released: inout Unmanaged<Operation>?, finishing: Operation? = nil) -> Int {
        unsafe ready.clear()
        var chain = unsafe ReleaseChain()
        var reporting = 0
        while let u = unsafe head {
            unsafe u.withGuaranteedReference { op in
                unsafe detach(op)
                reporting += unsafe Self.letGo(u, op, onto: &chain, finishing: finishing)
            }
        }
        unsafe chain.prepend(onto: &released)
        return reporting
    }

    /// Unlinks every operation the list may let go now (`mayRelease`) and returns
    /// them, counted in `releasing` when there are any, for the caller to release with
    /// `OperationQueue.releaseCounted`: for a queue to which nothing has been added for
    /// a while (`releaseIfQuiet`, `watchTick`), whose finished operations no prune will
    /// let go of while those left unfinished run.
    mutating func releaseFinished() -> Unmanaged<Operation>? {
        var chain = unsafe ReleaseChain()
        unsafe sweep(onto: &chain)
        var released: Unmanaged<Operation>? = nil
        unsafe chain.prepend(onto: &released)
        // A wait returns once these are released (`isDrained`).
        if unsafe released != nil { unsafe releasing += 1 }
        return unsafe released
    }

    /// Whether `op` is the last operation on the list: none has been added after it.
    func isTail(_ op: Operation) -> Bool {
        // safety: an address compared, never dereferenced.
        unsafe tail?.toOpaque() == Unmanaged.passUnretained(op).toOpaque()
    }

    /// Lets go of `op`, just taken off the list, whose reference `u` is the list's:
    /// onto `chain` when the reference is ours to release, else to its runner, which
    /// releases it once it is done with it and, when it returns as soon as the finish
    /// does, reports that it has (`QueueSync.runState`): an operation of the plain
    /// classes, whose `start()` is Spindle's, or `finishing`, when its finish is the
    /// end of Spindle's `start()` on this thread (`ThreadState.endingOwnStart`).
    /// Returns 1 when the runner will report, else 0.
    private static func letGo(_ u: Unmanaged<Operation>, _ op: Operation, onto chain: inout ReleaseChain,
                              finishing: Operation?) -> Int {
        // Ours when the queue did not start it or its runner is done with it (the
        // runner's RMW, seen here, was its last access): no RMW of ours then.
        guard op.queueRun.contains(.started),
              op.queueSync.runState.load(ordering: .acquiring) & QueueSync.runnerDone == 0 else {
            unsafe chain.append(u)
            return 0
        }
        let reports = unsafe op.isPlainClass
            || (op === finishing && ThreadState.current.endingOwnStart?.isIdentical(to: op) == true)
        // The last access unless the reference is ours: once `listGone` is set, the
        // runner may release the operation at any moment.
        let bits = QueueSync.listGone | (reports ? QueueSync.reports : 0)
        if op.queueSync.runState.bitwiseOr(bits, ordering: .acquiringAndReleasing).oldValue
            & QueueSync.runnerDone != 0 {
            unsafe chain.append(u)
            return 0
        }
        return reports ? 1 : 0
    }

    /// The unfinished operations, in the order they were added.
    var unfinished: [Operation] {
        var out: [Operation] = []
        var cursor = unsafe head
        while let u = unsafe cursor {
            let op = unsafe u.takeUnretainedValue()
            if !op.queueSync.done.load(ordering: .acquiring) { out.append(op) }
            unsafe cursor = unsafe op.queueFields.next
        }
        return out
    }
}

/// References taken off the queue's list, linked through `queueFields.next` in the
/// order they were taken — oldest first, as the list holds them — for the caller to
/// release outside the lock (`OperationQueue.release`).
///
/// Why oldest first: releasing one frees the operation, and glibc merges a freed chunk
/// with the free chunks beside it. Operations added one after another sit one after
/// another in the adding thread's heap, the newest often at its top. Freed newest
/// first, each chunk joins the heap's free top as it is freed, and once that top passes
/// glibc's trim threshold every further page of it is returned to the kernel with a
/// system call of its own (`madvise`, or `brk` in the main heap, and a TLB flush on the
/// other CPUs); freed oldest first, they merge below the top and reach it once, with the
/// last. It is also the order Foundation releases finished operations in, each as it
/// finishes.
@unsafe
struct ReleaseChain {
    // safety: each link is a reference the chain owns, released once by whoever
    // releases the chain it is prepended onto.
    private var first: Unmanaged<Operation>? = nil
    private var last: Unmanaged<Operation>? = nil

    /// Appends `u`, whose reference the chain takes over: an operation just taken off
    /// the list (`detach`), whose links are nil.
    mutating func append(_ u: Unmanaged<Operation>) {
        if let l = unsafe last {
            unsafe l.withGuaranteedReference { unsafe $0.queueFields.next = unsafe u }
        } else {
            unsafe first = unsafe u
        }
        unsafe last = unsafe u
    }

    /// Puts the whole chain in front of `released`, which takes over its references.
    mutating func prepend(onto released: inout Unmanaged<Operation>?) {
        guard let l = unsafe last else { return }
        unsafe l.withGuaranteedReference { unsafe $0.queueFields.next = unsafe released }
        unsafe released = unsafe first
        unsafe first = nil
        unsafe last = nil
    }
}

extension OperationQueue {
    /// Releases a chain of references built by a `ReleaseChain`, first to last.
    ///
    /// Outside the lock, so it only reads the links: a thread that still has one of
    /// these operations may read its `QueueFields` under the lock meanwhile (to find it
    /// no longer `linked`), and a write here would race with that read. The link left
    /// in an operation that outlives this is never followed: nothing reaches an
    /// operation's links but the list, and the list no longer holds it.
    static func release(_ chain: Unmanaged<Operation>?) {
        var cursor = unsafe chain
        while let u = unsafe cursor {
            unsafe cursor = unsafe u.withGuaranteedReference { unsafe $0.queueFields.next }
            unsafe u.release()
        }
    }

    /// `ops`, from the queue's list, about to be seen by code other than the queue's:
    /// one made by the block form of `addOperation` must now hold its queue like any
    /// other (QueueMembership.swift, LT3). Called under the lock, where the list holds them and
    /// nobody else writes the field.
    func handOut(_ ops: [Operation]) -> [Operation] {
        // An operation that holds its queue already (`QueueRunFlags.held`) is skipped without
        // reading the reference, which its finish may be dropping (`Operation.dropQueue`).
        for op in ops where unsafe !op.queueRun.contains(.held) && op.queueReference == nil { unsafe op.queueReference = self }
        return ops
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
}
