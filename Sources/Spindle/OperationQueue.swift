import CSpindle
import Dispatch
import Synchronization

/// A queue that runs operations on Spindle's work-stealing pool, with the semantics of
/// Foundation's `OperationQueue`.
///
/// Ready operations start in order of ``Operation/queuePriority`` (FIFO within a
/// priority), at most ``maxConcurrentOperationCount`` at a time. An operation becomes
/// ready when its dependencies finish — the queue is told once, by the last dependency
/// to finish; it never rescans waiting operations.
///
/// ### How it schedules
/// The queue keeps five FIFO ready lists (one per priority) under one lock, and its
/// operation and running counts in one atomic word. Starting an operation submits it to the
/// pool for its quality of service; an operation added from inside a running operation
/// goes on the current worker's own deque (no shared cache line).
///
/// A queue at the default width and not suspended is in *direct mode*: a ready
/// operation is submitted as it is added (nothing can be ahead of it), and finishing
/// one takes no lock at all — one CAS on the counts — unless it is the last one
/// unfinished or someone observes the queue's count or progress. Otherwise (a width
/// limit, suspension) a finishing operation takes the lock to start the next ready
/// ones. The queue keeps itself alive while it has unfinished operations (see
/// `counts` for the protocol that makes this safe without a retain per operation).
///
/// The list behind ``operations`` is pruned lazily by the threads that add operations
/// (and emptied when the queue drains), so the workers that finish operations never
/// touch it: in the `operation-throughput` benchmark, the lock shared by the adding
/// thread and the finishing workers was the largest cost after allocation.
///
/// Rejected alternative: Foundation-on-Linux's design, a list of all operations scanned
/// on every scheduling pass for one that is ready. It is O(waiting) per pass, which is
/// what makes a 5 000-operation dependency chain cost ~700 µs per operation there.
open class OperationQueue: @unchecked Sendable {
    // @unchecked: mutable state is in `state` (under its lock) or in atomics.

    /// The default for ``maxConcurrentOperationCount``: as many as the pool's width.
    public static let defaultMaxConcurrentOperationCount: Int = -1

    struct State {
        let ready = ReadyRings()
        /// The operations added, in order: an intrusive doubly linked list through
        /// `Operation.queuePrev/queueNext`, holding one retained reference to each.
        /// Finished ones (`queueDone`) are unlinked lazily by `prune`, by the thread
        /// adding operations, and all at once when the queue drains.
        var head: Unmanaged<Operation>?
        var tail: Unmanaged<Operation>?
        /// How many operations are linked, finished or not.
        var linked = 0
        /// Finishers releasing the list of a drained queue (see `isDrained`).
        var releasing = 0
        /// Whether the queue holds a reference to itself: from the moment it counts an
        /// operation in until it has drained (see ``OperationQueue/counts``).
        var selfRetained = false
        var maxConcurrent = OperationQueue.defaultMaxConcurrentOperationCount
        var suspended = false
        /// Open `addOperations` batches: while any is, nothing starts, so that a batch
        /// is enqueued whole before any of it starts (`addOperations(_:waitUntilFinished:)`).
        var batching = 0
        /// The name given (nil: the default, from the queue's address).
        var name: String?
        /// Operations of custom classes whose own `isReady` held them when nothing else
        /// did (every dependency finished): asked again at each scheduling pass (a
        /// finish, a change of width or suspension), so that a readiness change made
        /// without `didChangeValue(forKey: "isReady")` is noticed as Foundation's queue
        /// notices it. While any is listed the queue is out of direct mode, so that
        /// every finish is such a pass.
        var unannounced: [Operation] = []
        var qualityOfService: QualityOfService = .default
        var underlyingQueue: DispatchQueue?
        var lastBarrier: Operation?
        var waiters: [Waiter] = []
        var countObservers: [(id: Int, handler: @Sendable (Int) -> Void)] = []
        var nextObserverID = 0
        var progress: Progress?

        /// Counts an added operation in (`delta`: one unfinished, plus one running when
        /// it starts directly) and prunes what has finished.
        mutating func count(_ counts: borrowing Atomic<UInt64>, delta: UInt64,
                            released: inout Unmanaged<Operation>?) {
            let now = counts.wrappingAdd(delta, ordering: .sequentiallyConsistent).newValue
            // The running count (at most the unfinished one) must stay below the
            // `scheduledBit`.
            precondition(now >> 32 < OperationQueue.runningMask,
                         "OperationQueue: more than 2^31 - 1 operations unfinished in one queue")
            prune(unfinished: Int(now >> 32), onto: &released)
        }

        /// Appends `op` to the list, which takes over the reference `u` holds.
        mutating func link(_ u: Unmanaged<Operation>, _ op: Operation) {
            op.queueLinked = true
            op.queuePrev = tail
            op.queueNext = nil
            if let t = tail { t._withUnsafeGuaranteedRef { $0.queueNext = u } } else { head = u }
            tail = u
            linked += 1
        }

        /// Takes `op` off the list and pushes it on `released`, a chain (through
        /// `queueNext`) of references for the caller to release outside the lock.
        mutating func unlink(_ op: Operation, onto released: inout Unmanaged<Operation>?) {
            detach(op)
            op.queueNext = released
            released = Unmanaged.passUnretained(op)
        }

        /// Takes `op` off the list, leaving the list's reference to it with the caller.
        mutating func detach(_ op: Operation) {
            let prev = op.queuePrev, next = op.queueNext
            if let prev { prev._withUnsafeGuaranteedRef { $0.queueNext = next } } else { head = next }
            if let next { next._withUnsafeGuaranteedRef { $0.queuePrev = prev } } else { tail = prev }
            op.queuePrev = nil
            op.queueNext = nil
            linked -= 1
        }

        /// Unlinks finished operations, amortised O(1) per operation added, keeping at
        /// most ~2× the unfinished operations (+256) referenced:
        /// - on every call past 64 finished ones, up to two finished operations among
        ///   the first four (operations finish roughly in the order they were added; the
        ///   look-ahead steps over one that runs long, or one a preempted worker holds);
        /// - the whole list once it holds more than twice the unfinished ones plus 256.
        ///   The slack matters: with a threshold of 2× + 64, the count of unfinished
        ///   operations swinging between 0 and a few dozen (two workers keeping up with
        ///   one producer) set off a sweep every few adds — about one cache-missing step
        ///   per operation added in the `operation-throughput` benchmark, against
        ///   0.03-0.1 with this slack (and the look-ahead).
        ///
        /// The finished operations are kept 64 behind the workers, and one is taken
        /// only once its runner is done with it (`Operation.runState`): the release here
        /// is then the last, and the memory is freed on this thread — which allocates
        /// the next operation from the same thread cache. (When runners held references
        /// of their own, pruning right behind them made them free the operations
        /// instead, and glibc then served every allocation here from its slow path: a
        /// quarter of the adding thread's time in the operation-throughput profile.)
        /// The lag also keeps this thread from reading lines the workers still write.
        mutating func prune(unfinished: Int, onto released: inout Unmanaged<Operation>?) {
            if linked > unfinished + 64 {
                var cursor = head, steps = 0, unlinked = 0
                while let u = cursor, steps < 4, unlinked < 2 {
                    cursor = u._withUnsafeGuaranteedRef { op in
                        let next = op.queueNext
                        if op.queueDone.load(ordering: .acquiring) && op.runnerIsDone {
                            unlink(op, onto: &released)
                            unlinked += 1
                        }
                        return next
                    }
                    steps += 1
                }
            }
            guard linked > 2 * unfinished + 256 else { return }
            var cursor = head
            while let u = cursor {
                cursor = u._withUnsafeGuaranteedRef { op in
                    let next = op.queueNext
                    if op.queueDone.load(ordering: .acquiring) && op.runnerIsDone { unlink(op, onto: &released) }
                    return next
                }
            }
        }

        /// Unlinks everything (the queue has drained: all of it has finished). An
        /// operation whose runner has not yet returned from it is left to that runner
        /// to release (`Operation.runState`).
        mutating func unlinkAll(onto released: inout Unmanaged<Operation>?) {
            while let u = head {
                u._withUnsafeGuaranteedRef { op in
                    detach(op)
                    // The last access unless the reference is ours: once `listGone` is
                    // set, the runner may release the operation at any moment.
                    let ours = !op.queueStarted
                        || op.runState.bitwiseOr(Operation.listGone, ordering: .acquiringAndReleasing).oldValue
                            & Operation.runnerDone != 0
                    if ours {
                        op.queueNext = released
                        released = u
                    }
                }
            }
        }

        /// The unfinished operations, in the order they were added.
        var unfinished: [Operation] {
            var out: [Operation] = []
            var cursor = head
            while let u = cursor {
                let op = u.takeUnretainedValue()
                if !op.queueDone.load(ordering: .acquiring) { out.append(op) }
                cursor = op.queueNext
            }
            return out
        }

        var readyIsEmpty: Bool { ready.isEmpty }

        func push(_ op: Operation, level: Int) { ready.push(op, level: level) }

        /// The highest-priority ready operation, skipping retired ones, and handing back
        /// one that has been given an unfinished dependency since it was found ready: it
        /// is signalled again when that dependency finishes (`evaluateReadiness`).
        func popReady() -> Operation? {
            while let op = ready.pop() {
                if op.queueRetired { continue }
                if op.hadDependencies.load(ordering: .relaxed) && State.isWaitingAgain(op) { continue }
                return op
            }
            return nil
        }

        /// Whether `op`, found ready before, has been given an unfinished dependency since
        /// (and is not cancelled); if so it is unsignalled, under its own lock, where its
        /// dependencies are counted down: the dependency that finishes later then finds
        /// it unsignalled and signals it again.
        @inline(never)
        static func isWaitingAgain(_ op: Operation) -> Bool {
            if op.cancelledFlag.load(ordering: .acquiring) { return false }
            return op.guarded.locked { g -> Bool in
                guard g.unfinished > 0 else { return false }
                op.readySignalled.store(false, ordering: .relaxed)
                return true
            }
        }

        /// The ready list `op` belongs on: its queue priority; when none was assigned and
        /// the queue is not serial, its quality of service's (Foundation's rule:
        /// userInteractive as veryHigh, userInitiated high, utility low, background
        /// veryLow).
        func level(of op: Operation) -> Int { op.queueLevel(serial: maxConcurrent == 1) }

        /// Takes the operations that may start now and counts them as running in
        /// `counts` (see ``OperationQueue/counts``).
        mutating func takeStartable(_ counts: borrowing Atomic<UInt64>) -> Startable {
            guard !suspended && batching == 0 else { return .none }
            var out = Startable.none
            // seq_cst load: after the RMW that set `scheduledBit` (see there).
            while maxConcurrent < 0
                    || Int(counts.load(ordering: .sequentiallyConsistent) & OperationQueue.runningMask) < maxConcurrent,
                  let op = popReady() {
                counts.wrappingAdd(1, ordering: .sequentiallyConsistent)
                op.queueStarted = true
                out.append(op)
            }
            return out
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
        func isDrained(unfinished: Int) -> Bool { unfinished == 0 && linked == 0 && releasing == 0 }

        /// Direct mode: see the type's documentation.
        /// Read on every add; kept in `direct`, which `refreshMode()` recomputes wherever
        /// one of its inputs changes (all under the lock).
        var isDirect: Bool { direct }
        private(set) var direct = true

        mutating func refreshMode() {
            direct = maxConcurrent < 0 && !suspended && batching == 0 && unannounced.isEmpty
        }

        /// Takes the operations to ask again (see `unannounced`), and returns the queue to
        /// direct mode if they were all that kept it out. An RMW on `counts`, as every
        /// change of mode (see `scheduledBit`).
        @inline(__always)
        mutating func takeUnannounced(_ counts: borrowing Atomic<UInt64>) -> [Operation]? {
            if unannounced.isEmpty { return nil }
            return takeUnannouncedSlow(counts)
        }

        @inline(never)
        mutating func takeUnannouncedSlow(_ counts: borrowing Atomic<UInt64>) -> [Operation] {
            let all = unannounced
            unannounced = []
            refreshMode()
            if isDirect { counts.bitwiseAnd(~OperationQueue.scheduledBit, ordering: .sequentiallyConsistent) }
            return all
        }
    }

    let state: FutexLocked<State>
    /// Keeps `counts` (which the finishing workers write) off the cache line of the
    /// object header, whose reference count the adding thread changes when it adds an
    /// operation it does not make itself (`Operation.queueReference`): on one line,
    /// every such retain would have to pull the line back from the worker that last
    /// finished an operation.
    private let headerPadding: (UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64) = (0, 0, 0, 0, 0, 0, 0, 0)
    /// Operations added and not finished (``operationCount``), in the high 32 bits;
    /// operations the queue has started that have not finished, in the low 31; and
    /// ``scheduledBit``: one word, so that adding an operation and finishing one are
    /// one atomic RMW each. Both sides write it, so it is the queue's one contended
    /// cache line at the default width; two counters cost a second RMW per side (a
    /// third of `enqueue`'s time).
    ///
    /// ### Lifetime: who may touch the queue, and until when
    /// A queue lives while it has unfinished operations, whoever still refers to it:
    /// `OperationQueue().addOperation { … }`, the queue dropped at once, is ordinary
    /// use. It holds a reference to itself (`State.selfRetained`), taken under the lock
    /// when it counts an operation in and holds none, and given to the finisher that
    /// drains it, which drops it last. What makes that safe:
    /// 1. A finisher touches the queue after its decrement only if it decremented under
    ///    the lock, or its operation holds the queue (rule 3). Every other finisher
    ///    decrements with one CAS that succeeds only when the queue needs nothing more
    ///    from it — another unfinished operation remains, the queue is in direct mode
    ///    (``scheduledBit`` clear), and nobody observes its count or progress — and then
    ///    it touches nothing.
    /// 2. "Drained" is decided under the lock, where operations are counted in: the
    ///    finisher that reads zero there takes the self-reference. A finisher still on
    ///    its way to the lock has its operation counted (rule 1: it decrements there) or
    ///    holds the queue (rule 3), so zero cannot be read while it needs the queue.
    /// 3. An operation that code other than the queue's can reach — one the user made,
    ///    or one `operations` handed out — holds its queue (`Operation.queueReference`):
    ///    its `cancel()` and readiness changes reach the queue from any thread at any
    ///    moment, including while it finishes. So does one made by the block form of
    ///    ``addOperation(_:)-(()->Void)`` while the queue is not in direct mode, where
    ///    every finish takes the lock anyway (`queueHeld`: it decrements first, outside
    ///    the lock). In direct mode that form's operations are reachable only from the
    ///    queue until `operations` hands them out, and skip the retain and its release
    ///    (10-12% of the `operation-throughput` loop, measured in paired runs).
    ///
    /// Rejected: releasing the self-reference when a lock-free decrement reached zero
    /// (a finisher still on its way to the lock could then find the queue freed — the
    /// direct-mode stress test caught it); counting finishers in flight (a second
    /// atomic per finish); decrementing under the lock even when the operation holds
    /// the queue (serial queues ran 6% slower: the adding thread waits on that lock);
    /// batching each worker's decrements (say 32 at a time, flushed before it runs
    /// anything else, waits or parks) to keep this line with the adding thread — an
    /// unsafe build that batched without flushing, the most it could save, measured
    /// 0.961× per pair (12 pairs of the add-and-wait loop), not worth a flush point on
    /// every path a worker takes.
    let counts = Atomic<UInt64>(0)
    static let oneUnfinished: UInt64 = 1 << 32
    static let runningMask: UInt64 = 0x7fff_ffff
    /// Set in `counts` while the queue is not in direct mode (a width limit, or
    /// suspended): a finishing operation must then take the lock to start the next.
    /// Changed under the lock by an RMW, after which that thread reads the running
    /// count (`takeStartable`). In the counts' word so that a finisher's CAS sees it
    /// together with the count it decrements: either the CAS came first, and the
    /// count read after the change includes its decrement, or the CAS fails on the
    /// bit and the finisher takes the lock — no ready operation is stranded.
    static let scheduledBit: UInt64 = 1 << 31

    /// The unfinished operations, from `counts`.
    var unfinishedCount: Int { Int(counts.load(ordering: .sequentiallyConsistent) >> 32) }
    /// Keeps the flags below off the line of `counts`. A finisher reads them before
    /// its CAS; on that line (which the adding thread keeps writing) the reads would
    /// fetch it shared, and the CAS fetch it again to own it.
    private let countsPadding: (UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64) = (0, 0, 0, 0, 0, 0, 0, 0)
    /// Set once ``progress`` is read, so that queues nobody tracks skip the lock.
    let hasProgress = Atomic<Bool>(false)
    /// Set once anyone observes `operationCount`, so unobserved queues skip the work.
    let hasCountObservers = Atomic<Bool>(false)
    /// Barriers added and not finished: counted in `counts` (the queue is not drained
    /// while one waits) but not in ``operationCount``, which lists only what the program
    /// added. Incremented after the barrier is counted in, decremented before it is
    /// counted out, so that `operationCount` errs high, never low.
    let pendingBarriers = Atomic<Int>(0)
    /// Serialises the updates Spindle makes to the progress tree (`runReportingProgress`).
    let progressLock = NSLock()
    /// The quality of service assigned to the queue (its raw value; `Int.min`: none), for
    /// the operations made by ``addOperation(_:)-(()->Void)``, which take it on as theirs,
    /// as with Foundation.
    let assignedQoS = Atomic<Int>(Int.min)
    /// True for ``main``, whose width, suspension, name, quality of service and
    /// underlying queue cannot be changed: it stays serial on the main thread.
    let isMainQueue: Bool

    /// Creates a queue. It starts operations as soon as they are ready.
    public init() {
        isMainQueue = false
        state = FutexLocked(State())
    }

    init(main: Void) {
        var s = State(name: "NSOperationQueue Main Queue")
        s.maxConcurrent = 1
        s.refreshMode()
        s.underlyingQueue = DispatchQueue.main
        s.qualityOfService = .userInteractive
        isMainQueue = true
        state = FutexLocked(s)
        assignedQoS.store(QualityOfService.userInteractive.rawValue, ordering: .relaxed)
        counts.store(OperationQueue.scheduledBit, ordering: .relaxed) // not yet shared
    }

    /// The queue of the main thread: runs its operations there, one at a time.
    public static let main = OperationQueue(main: ())

    /// The queue of the operation the calling thread is running; on the main thread,
    /// outside any operation, the main queue; nil elsewhere.
    public class var current: OperationQueue? {
        if let q = ThreadState.current.currentQueue { return q.takeUnretainedValue() }
        if Thread.isMainThread { return .main }
        return nil
    }

    // MARK: - Adding

    /// Adds an operation. It starts when it is ready and the queue has room.
    ///
    /// Traps when `op` is already in a queue (this one or another), executing or
    /// finished: Foundation treats these as programmer errors.
    open func addOperation(_ op: Operation) {
        enqueue(op)
    }

    /// Wraps `block` in a ``BlockOperation`` and adds it.
    ///
    /// As in Foundation, a subclass that overrides ``addOperation(_:)-(Operation)``
    /// sees the operation made here.
    open func addOperation(_ block: consuming @escaping @Sendable () -> Void) {
        let qos = assignedQoS.load(ordering: .relaxed)
        guard type(of: self) == OperationQueue.self else {
            let op = BlockOperation(block: block)
            if qos != Int.min { op.qualityOfService = QualityOfService(rawValue: qos) ?? .default }
            addOperation(op)
            return
        }
        // An operation made here is seen by no other thread until it is registered: it
        // needs none of the misuse checks (nor the claiming CAS), and the reference it was
        // created with becomes the queue's list reference instead of being retained
        // there and released here. Three atomic read-modify-writes fewer per operation.
        let u = Unmanaged<Operation>.passRetained(BlockOperation(block: block))
        u._withUnsafeGuaranteedRef { op in
            // The queue's assigned quality of service becomes the operation's (it then
            // takes a lock and a flag: only on queues that were given one).
            if qos != Int.min { op.qualityOfService = QualityOfService(rawValue: qos) ?? .default }
            op.queueWord.store(UInt(bitPattern: Unmanaged.passUnretained(self).toOpaque()), ordering: .relaxed)
            register(u, op, readyNow: true, fresh: true, isBarrier: false)
        }
    }

    /// Adds several operations; with `wait`, blocks until they have all finished.
    ///
    /// The batch is enqueued whole before any of it starts, so a queue narrower than the
    /// batch (or one being resumed) starts its operations in priority order, not in the
    /// order of the array.
    open func addOperations(_ ops: [Operation], waitUntilFinished wait: Bool) {
        if ops.count > 1 {
            // Held like a suspension: added operations wait on their ready lists, and
            // finishing ones take the lock (`scheduledBit`) instead of starting more.
            startWhatCan { $0.batching += 1 }
            for op in ops { enqueue(op) }
            startWhatCan { $0.batching -= 1 }
        } else {
            for op in ops { enqueue(op) }
        }
        if wait { for op in ops { op.waitUntilFinished() } }
    }

    /// Adds a barrier: `barrier` runs after every operation added before it has
    /// finished, and operations added after it start only once it has finished.
    ///
    /// The barrier is the queue's own: it is not listed in ``operations``, counted in
    /// ``operationCount``, or listed among the `dependencies` of the operations that wait
    /// for it.
    open func addBarrierBlock(_ barrier: @escaping @Sendable () -> Void) {
        let op = BarrierOperation(block: barrier)
        let before = state.locked { s -> [Operation] in
            s.lastBarrier = op
            // The barrier's `dependencies` will list them.
            return handOut(s.unfinished)
        }
        // Dependencies on operations that finish meanwhile are satisfied at once.
        for p in before { op.addDependency(p) }
        enqueue(op, isBarrier: true)
    }

    func enqueue(_ op: Operation, isBarrier: Bool = false) {
        let me = Unmanaged.passUnretained(self)
        // Claim the operation for this queue with one CAS, or trap on misuse, leaving it
        // untouched. (Finished or executing operations are refused before the claim.)
        let phase = op.phase.load(ordering: .acquiring)
        var problem: String? = nil
        if op.finishHandled.load(ordering: .acquiring) || phase == Operation.Phase.finished.rawValue {
            problem = "has already finished"
        } else if phase == Operation.Phase.executing.rawValue {
            problem = "is executing"
        } else if !op.queueWord.compareExchange(
            expected: 0, desired: UInt(bitPattern: me.toOpaque()), ordering: .acquiringAndReleasing).exchanged {
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
        register(Unmanaged.passRetained(op), op, readyNow: readyNow, fresh: false, isBarrier: isBarrier)
    }

    /// Registers a claimed operation and starts it if it may start. `u` is a reference
    /// the queue's list takes over. `fresh`: `op` was made by the caller, which keeps no
    /// reference of its own.
    ///
    /// The common case — no dependencies, ready — takes the queue lock once: register,
    /// and either start it directly (direct mode, nothing waiting ahead of it) or push
    /// it on its ready list and take what may start.
    ///
    /// Not pursued: a lock-free add for direct mode. The lock's CAS is 14% of the adding
    /// thread's samples in the `operation-throughput` profile, but what it is charged
    /// with is the stores before it — re-initialising memory the worker that ran the
    /// previous occupant wrote last — which would stall the next atomic instead: with
    /// nothing else touching the memory (a suspended queue), adding costs 78–81 ns per
    /// operation with the lock and the same in an unsafe build without it.
    @inline(__always)
    private func register(_ u: Unmanaged<Operation>, _ op: Operation, readyNow: Bool,
                          fresh: Bool, isBarrier: Bool) {
        // An operation the caller holds keeps the queue alive for as long as it lives
        // (see `counts`, rule 3); one made here needs only the queue's own reference.
        // The count goes up under the lock, before the operation can start, so before
        // it can finish; a waiter (which checks the count under the lock) sees it.
        if !fresh {
            op.queueReference = self
            op.queueHeld = true
            op.queueAddedByCaller = true
        }
        // The locked section's results, returned rather than written to captured
        // variables (those would cost dynamic exclusivity checks on every add).
        struct Outcome {
            var barrier: Operation? = nil
            var start = Startable.none
            var config: DispatchConfig? = nil
            var direct = false
            var released: Unmanaged<Operation>? = nil
        }
        let outcome = state.locked { s -> Outcome in
            var out = Outcome()
            s.link(u, op)
            // Which way it goes: behind a pending barrier, not ready yet, straight to the
            // pool (direct mode, nothing ahead of it), or onto its ready list.
            var becomesReady = false
            if !isBarrier, let b = s.lastBarrier, !b.finishHandled.load(ordering: .acquiring) {
                out.barrier = b
            } else {
                if !isBarrier, s.lastBarrier != nil { s.lastBarrier = nil }
                becomesReady = readyNow && !op.readySignalled.load(ordering: .relaxed)
            }
            if becomesReady {
                op.readySignalled.store(true, ordering: .relaxed)
                out.direct = s.isDirect && s.readyIsEmpty
            }
            // Counted in (and, when it starts directly, as running) before it can start.
            s.count(counts, delta: OperationQueue.oneUnfinished | (out.direct ? 1 : 0), released: &out.released)
            if isBarrier { pendingBarriers.add(1, ordering: .sequentiallyConsistent) }
            if !s.selfRetained {
                s.selfRetained = true
                _ = Unmanaged.passUnretained(self).retain()
            }
            // Out of direct mode every finish takes the lock; holding the queue, it can
            // decrement before it does (see operationFinished). Nobody else can write
            // the field yet: `operations` needs our lock.
            if fresh && !s.isDirect {
                op.queueReference = self
                op.queueHeld = true
            }
            if out.direct {
                op.queueStarted = true
                out.config = DispatchConfig(s)
            } else if becomesReady {
                s.push(op, level: s.level(of: op))
                out.start = s.takeStartable(counts)
                out.config = out.start.isEmpty ? nil : DispatchConfig(s)
            }
            // Once the lock is released, only the caller's reference keeps `op` alive:
            // from then on other threads can start, finish and unlink it. A fresh
            // operation has no caller's reference, so it is kept (from here, under the
            // lock) for the steps below that use it after that may have happened
            // (behind a barrier, waiting for room, not ready) — not when it goes
            // straight to the pool, where submitting it is its last use here.
            if fresh && !out.direct { _ = u.retain() }
            return out
        }
        let keep = fresh && !outcome.direct
        OperationQueue.release(outcome.released)
        if hasCountObservers.load(ordering: .acquiring) { notifyCountChange() }
        if let barrier = outcome.barrier { op.addDependency(barrier) }
        if let config = outcome.config {
            if outcome.direct { dispatch(op, config) } else { dispatch(outcome.start, config) }
        } else if !op.readySignalled.load(ordering: .acquiring) {
            // Not found ready when registered (or behind a barrier): its readiness may
            // have changed before `queueLinked` let its notification through.
            op.evaluateReadiness()
        }
        if keep { u.release() }
    }

    /// Releases a chain of references built by `unlink`.
    static func release(_ chain: Unmanaged<Operation>?) {
        var cursor = chain
        while let u = cursor {
            cursor = u._withUnsafeGuaranteedRef { op in
                let next = op.queueNext
                op.queueNext = nil
                return next
            }
            u.release()
        }
    }

    // MARK: - Scheduling

    func operationBecameReady(_ op: Operation) {
        let (start, config) = state.locked { s -> (Startable, DispatchConfig?) in
            // Exactly once, and never before `enqueue` has counted the operation (it
            // re-evaluates readiness itself after registering it). Both checks are
            // under our lock, which is where every write of these fields happens.
            guard op.queueLinked, !op.readySignalled.load(ordering: .relaxed) else { return (.none, nil) }
            op.readySignalled.store(true, ordering: .relaxed)
            s.push(op, level: s.level(of: op))
            return (s.takeStartable(counts), DispatchConfig(s))
        }
        if let config { dispatch(start, config) }
    }

    /// Takes back an operation found ready that has not started, whose readiness turned
    /// false; true when it did (it is then signalled again when it turns ready).
    func operationBecameUnready(_ op: Operation) -> Bool {
        state.locked { s -> Bool in
            guard op.queueLinked, op.readySignalled.load(ordering: .relaxed), !op.queueStarted,
                  !op.queueRetired, s.ready.remove(op) else { return false }
            op.readySignalled.store(false, ordering: .relaxed)
            return true
        }
    }

    /// Moves a ready, unstarted operation to the list of its new priority (at its end,
    /// as Foundation does), so that the queue starts it in that order.
    func operationPriorityChanged(_ op: Operation) {
        let (start, config) = state.locked { s -> (Startable, DispatchConfig?) in
            guard op.queueLinked, op.readySignalled.load(ordering: .relaxed), !op.queueStarted,
                  !op.queueRetired, s.ready.remove(op) else { return (.none, nil) }
            s.push(op, level: s.level(of: op))
            return (s.takeStartable(counts), DispatchConfig(s))
        }
        if let config { dispatch(start, config) }
    }

    func operationFinished(_ op: Operation) {
        // Before it is counted out: see `pendingBarriers`.
        if op is BarrierOperation { pendingBarriers.subtract(1, ordering: .sequentiallyConsistent) }
        // Written under the lock before the operation could start; we run after it did.
        let started = op.queueStarted
        op.queueDone.store(true, ordering: .releasing)
        let delta = OperationQueue.oneUnfinished | (started ? 1 : 0)
        if op.queueHeld {
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
        // The lock-free way (`counts`, rule 1): one CAS, then not another access to the
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
    private func finishLocked(_ op: Operation, started: Bool, delta: UInt64?) {
        // The locked part's results, returned rather than written to captured variables
        // (those would cost dynamic exclusivity checks).
        struct Outcome {
            var start = Startable.none
            var config: DispatchConfig? = nil
            var waiters: [Waiter] = []
            var observers: [@Sendable (Int) -> Void] = []
            /// Unfinished operations, then (with count observers) less pending barriers.
            var remaining = 0
            var released: Unmanaged<Operation>? = nil
            var dropSelf = false
            var unannounced: [Operation]? = nil
        }
        let out = state.locked { s -> Outcome in
            var out = Outcome()
            // Zero, read under the lock where operations are counted in, means drained
            // (`counts`, rule 2).
            if let delta {
                out.remaining = Int(counts.wrappingSubtract(delta, ordering: .sequentiallyConsistent).newValue >> 32)
            } else {
                out.remaining = unfinishedCount
            }
            // Not started by the queue: it may sit in a ready list; skip it there.
            if !started { op.queueRetired = true }
            if out.remaining == 0 {
                out.waiters = s.waiters
                s.waiters = []
                s.unlinkAll(onto: &out.released)
                if out.released != nil { s.releasing += 1 }
                s.lastBarrier = nil
                // The queue's reference to itself is ours now (`counts`, rule 2): it
                // keeps the queue alive until we drop it, last. An operation added
                // meanwhile makes the queue take another.
                out.dropSelf = s.selfRetained
                s.selfRetained = false
            }
            if !s.countObservers.isEmpty {
                out.observers = s.countObservers.map(\.handler)
                // What observers are told, read here: after we unlock, the queue may be
                // freed (see below).
                out.remaining = max(0, out.remaining - pendingBarriers.load(ordering: .sequentiallyConsistent))
            }
            out.unannounced = s.takeUnannounced(counts)
            out.start = s.takeStartable(counts)
            if !out.start.isEmpty { out.config = DispatchConfig(s) }
            return out
        }
        // Release what the queue held before waking waiters: a returning wait then
        // implies the queue no longer keeps any finished operation alive. Waiters that
        // came while we released it (`releasing` kept them waiting) are ours too.
        var waiters = out.waiters
        if out.released != nil {
            OperationQueue.release(out.released)
            waiters += state.locked { s -> [Waiter] in
                s.releasing -= 1
                guard s.isDrained(unfinished: unfinishedCount) else { return [] }
                defer { s.waiters = [] }
                return s.waiters
            }
        }
        for o in out.observers { o(out.remaining) }
        for w in waiters { w.signal() }
        // Nothing starts when it has drained. When nothing starts and it has not
        // drained, this finisher is done with the queue, which may have been freed
        // when we unlocked.
        if let config = out.config { dispatch(out.start, config) }
        // Unfinished, so the queue has not drained; each reaches it through its pin.
        if let unannounced = out.unannounced { OperationQueue.askAgain(unannounced) }
        // Last: this may free the queue.
        if out.dropSelf { Unmanaged.passUnretained(self).release() }
    }

    /// Where started operations go, read under the lock together with them.
    struct DispatchConfig {
        let underlying: DispatchQueue?
        let qualityOfService: QualityOfService
        /// Borrowed: a copy of the whole state would retain and release every
        /// reference in it.
        init(_ s: borrowing State) {
            underlying = s.underlyingQueue
            qualityOfService = s.qualityOfService
        }
    }

    private func dispatch(_ ops: Startable, _ config: DispatchConfig) {
        ops.forEach { dispatch($0, config) }
    }

    private func dispatch(_ op: Operation, _ config: DispatchConfig) {
        if let underlying = config.underlying {
            let run = UncheckedSendableBox((self, op))
            underlying.async {
                run.value.0.run(run.value.1)
                OpTask.runnerDone(Unmanaged.passUnretained(run.value.1))
            }
        } else {
            OpTask.submit(op, pool: QoSPools.engine(for: op.effectiveQoS(queueDefault: config.qualityOfService)))
        }
    }

    /// Takes what may start now and starts it (after a width or suspension change).
    private func startWhatCan(_ change: (inout State) -> Void) {
        let (start, config, unannounced) = state.locked { s -> (Startable, DispatchConfig, [Operation]?) in
            change(&s)
            s.refreshMode()
            let unannounced = s.takeUnannounced(counts)
            // An RMW, before takeStartable reads `counts`: see `scheduledBit`.
            if s.isDirect {
                counts.bitwiseAnd(~OperationQueue.scheduledBit, ordering: .sequentiallyConsistent)
            } else {
                counts.bitwiseOr(OperationQueue.scheduledBit, ordering: .sequentiallyConsistent)
            }
            return (s.takeStartable(counts), DispatchConfig(s), unannounced)
        }
        dispatch(start, config)
        if let unannounced { OperationQueue.askAgain(unannounced) }
    }

    /// Re-evaluates the readiness of operations listed in `State.unannounced` (each
    /// reaches its queue through its pin). Out of line: a rare path, kept out of the
    /// finish it is called from.
    @inline(never)
    static func askAgain(_ ops: [Operation]) {
        for op in ops { op.evaluateReadiness() }
    }

    /// Lists `op`, a custom operation held only by its own `isReady`, to be asked again
    /// at the next scheduling pass (see `State.unannounced`).
    func watchReadiness(_ op: Operation) {
        state.locked { s in
            guard op.queueLinked, !op.readySignalled.load(ordering: .relaxed),
                  !s.unannounced.contains(where: { $0 === op }) else { return }
            s.unannounced.append(op)
            s.refreshMode()
            // Out of direct mode: every finish now takes the lock (see `scheduledBit`).
            counts.bitwiseOr(OperationQueue.scheduledBit, ordering: .sequentiallyConsistent)
        }
    }

    /// Runs one operation on the current thread, as the queue's runner.
    func run(_ op: Operation) {
        let ts = ThreadState.unmanagedCurrent
        let (savedQueue, savedOp) = ts._withUnsafeGuaranteedRef { ts in
            let saved = (ts.currentQueue, ts.currentOperation)
            ts.currentQueue = Unmanaged.passUnretained(self)
            ts.currentOperation = Unmanaged.passUnretained(op)
            return saved
        }
        op.startedByQueue.store(true, ordering: .releasing)
        if hasProgress.load(ordering: .relaxed) { op.queueReportsProgress = true }
        op.start()
        // A custom operation that became finished inside `start()` without announcing it
        // is noticed here, as Foundation's queue notices it.
        // (A plain operation has finished by now, so the first test ends it.)
        if !op.finishHandled.load(ordering: .acquiring) && !op.isPlainClass && op.isFinished {
            op.finishProtocol()
        }
        ts._withUnsafeGuaranteedRef { ts in
            ts.currentQueue = savedQueue
            ts.currentOperation = savedOp
        }
    }

    /// Runs `op`'s `main()` inside a progress of one unit, child of the queue's, when the
    /// queue's progress has a total (see ``progress``).
    func runReportingProgress(_ op: Operation) {
        let parent = op is BarrierOperation ? nil : state.locked { $0.progress }
        guard let parent, parent.totalUnitCount > 0 else {
            op.main()
            return
        }
        // Progress is not thread-safe on Linux: the tree's updates that Spindle makes
        // are serialised by the queue's progress lock.
        let child = progressLock.withLock { () -> Progress in
            let child = Progress(totalUnitCount: 1)
            parent.addChild(child, withPendingUnitCount: 1)
            return child
        }
        child.becomeCurrent(withPendingUnitCount: 1)
        op.main()
        progressLock.withLock { child.resignCurrent() }
    }

    // MARK: - Identity (what Foundation's OperationQueue inherits from NSObject)

    /// Whether `object` is this queue: identity, NSObject's default. Overridable;
    /// ``==(_:_:)`` calls it — so `OperationQueue.current == OperationQueue.main`
    /// works as it does with Foundation.
    open func isEqual(_ object: Any?) -> Bool {
        guard let other = object as? OperationQueue else { return false }
        return other === self
    }

    /// A hash consistent with ``isEqual(_:)``: the object's identity unless overridden.
    open var hash: Int { ObjectIdentifier(self).hashValue }

    /// `<Class: address>`, what Foundation's queues print on Linux (NSObject's form).
    open var description: String { "<\(type(of: self)): \(Unmanaged.passUnretained(self).toOpaque())>" }

    // MARK: - Control

    /// Cancels every operation in the queue. Those not started finish without running
    /// `main()`; their completion blocks still run. Works on ``main`` too.
    ///
    /// Pending barriers are cancelled too, as by Foundation: their blocks do not run,
    /// but they still keep the operations added after them waiting until the ones
    /// before them have finished.
    open func cancelAllOperations() {
        for op in state.locked({ handOut($0.unfinished) }) { op.cancel() }
    }

    /// Blocks the calling thread until the queue has no operations left. It runs nothing
    /// else meanwhile; on one of Spindle's workers, the pool runs a spare worker while
    /// it waits.
    open func waitUntilAllOperationsAreFinished() {
        var latch = spindle_latch()
        spindle_latch_init(&latch)
        withUnsafeMutablePointer(to: &latch) { l in
            // Blocks this thread; a pool worker is compensated by a spare.
            if registerDrainWaiter(Waiter(latch: l)) { spindle_latch_wait_blocking(l) }
        }
    }

    /// Suspends the calling task until the queue has no operations left, without
    /// blocking a thread (Spindle's addition).
    public func allOperationsFinished() async {
        await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
            if !registerDrainWaiter(Waiter(continuation: c)) { c.resume() }
        }
    }

    /// Registers `waiter` to be signalled when the queue has drained (see `isDrained`);
    /// false, registering nothing, when it already has.
    private func registerDrainWaiter(_ waiter: Waiter) -> Bool {
        state.locked { s -> Bool in
            if s.isDrained(unfinished: unfinishedCount) { return false }
            s.waiters.append(waiter)
            return true
        }
    }

    /// The operations in the queue that have not finished, in the order they were added
    /// (barriers, which the queue adds for itself, are not listed).
    open var operations: [Operation] {
        state.locked { handOut($0.unfinished) }.filter { !($0 is BarrierOperation) }
    }

    /// `ops`, from the queue's list, about to be seen by code other than the queue's:
    /// one made by the block form of `addOperation` must now hold its queue like any
    /// other (`counts`, rule 3). Called under the lock, where the list holds them and
    /// nobody else writes the field.
    private func handOut(_ ops: [Operation]) -> [Operation] {
        // An operation that holds its queue already (`queueHeld`) is skipped without
        // reading the reference, which its finish may be dropping (`Operation.dropQueue`).
        for op in ops where !op.queueHeld && op.queueReference == nil { op.queueReference = self }
        return ops
    }

    /// How many operations are in the queue and not finished (barriers not counted).
    open var operationCount: Int {
        // Barriers are counted out before they finish and in after they are added
        // (`pendingBarriers`); reading their count on both sides of the total keeps a
        // barrier that finishes meanwhile from making the result too low.
        while true {
            let barriers = pendingBarriers.load(ordering: .sequentiallyConsistent)
            let total = unfinishedCount
            if pendingBarriers.load(ordering: .sequentiallyConsistent) == barriers { return max(0, total - barriers) }
        }
    }

    /// How many operations may run at once; ``defaultMaxConcurrentOperationCount``
    /// (-1) means as many as the pool runs. 1 makes the queue serial. Lowering it does
    /// not stop running operations. Values below -1 trap, as 0 would stall the queue
    /// only on purpose: use ``isSuspended`` for that.
    open var maxConcurrentOperationCount: Int {
        get { state.locked { $0.maxConcurrent } }
        set {
            precondition(newValue >= -1, "OperationQueue.maxConcurrentOperationCount must be -1 (the default) or >= 0, got \(newValue)")
            if isMainQueue { return } // stays serial, as with Foundation
            startWhatCan { $0.maxConcurrent = newValue }
        }
    }

    /// While true, the queue starts no operation; running ones continue, and added or
    /// cancelled ones wait. Setting it back to false starts what is ready. The main
    /// queue cannot be suspended (setting it has no effect, as with Foundation).
    open var isSuspended: Bool {
        get { state.locked { $0.suspended } }
        set {
            if isMainQueue { return }
            startWhatCan { $0.suspended = newValue }
        }
    }

    /// The queue's name: by default `NSOperationQueue 0x…`, with the queue's address,
    /// as Foundation names it. Setting nil gives the empty name. The main queue's name
    /// cannot be changed.
    open var name: String? {
        get {
            state.locked { $0.name } ?? "NSOperationQueue \(Unmanaged.passUnretained(self).toOpaque())"
        }
        set {
            if isMainQueue { return }
            state.locked { $0.name = newValue ?? "" }
        }
    }

    /// The quality of service for operations that do not set their own; the operations
    /// that ``addOperation(_:)-(()->Void)`` makes take it on. Fixed on the main queue.
    open var qualityOfService: QualityOfService {
        get { state.locked { $0.qualityOfService } }
        set {
            if isMainQueue { return }
            state.locked { s in
                s.qualityOfService = newValue
                assignedQoS.store(newValue.rawValue, ordering: .relaxed)
            }
        }
    }

    /// When set, operations run on this dispatch queue instead of Spindle's pool.
    /// Changing it while the queue holds operations traps (Foundation forbids it too).
    /// The main queue's is always `DispatchQueue.main`.
    open var underlyingQueue: DispatchQueue? {
        get { state.locked { $0.underlyingQueue } }
        set {
            if isMainQueue { return }
            let ok = state.locked { s -> Bool in
                guard unfinishedCount == 0 else { return false }
                s.underlyingQueue = newValue
                return true
            }
            if !ok { fatalError("OperationQueue.underlyingQueue was changed while the queue held operations") }
        }
    }

    /// Progress of the queue. Once `totalUnitCount` is set, every operation whose
    /// `main()` the queue runs to its end adds one completed unit, as with Foundation:
    /// not cancelled operations, barriers, or operations that override `start()`
    /// without calling `super`. While `main()` runs, a progress of one unit, a child
    /// of this one, is current on its thread (`Progress.current()`), so a `Progress`
    /// the operation makes becomes its implicit child.
    open var progress: Progress {
        hasProgress.store(true, ordering: .sequentiallyConsistent)
        return state.locked { s in
            if let p = s.progress { return p }
            let p = Progress(totalUnitCount: 0)
            s.progress = p
            return p
        }
    }

    /// Calls `handler` with the new ``operationCount`` whenever it changes (Spindle's
    /// addition). Runs synchronously on the thread that changed it; keep it quick.
    /// Returns a token; pass it to ``removeOperationCountObserver(_:)`` to stop.
    @discardableResult
    public func onOperationCountChange(_ handler: @escaping @Sendable (Int) -> Void) -> Int {
        hasCountObservers.store(true, ordering: .releasing)
        return state.locked { s in
            s.nextObserverID += 1
            s.countObservers.append((s.nextObserverID, handler))
            return s.nextObserverID
        }
    }

    /// Stops the observer registered under `token`.
    public func removeOperationCountObserver(_ token: Int) {
        state.locked { s in s.countObservers.removeAll { $0.id == token } }
    }

    private func notifyCountChange() {
        let observers = state.locked { s in s.countObservers.map(\.handler) }
        let count = operationCount
        for o in observers { o(count) }
    }
}

/// The operations a scheduling step lets start: almost always none or one, which
/// need no array (and no allocation) on the per-operation path.
enum Startable {
    case none
    case one(Operation)
    case many([Operation])

    mutating func append(_ op: Operation) {
        switch self {
        case .none: self = .one(op)
        case .one(let first): self = .many([first, op])
        case .many(var all):
            self = .none
            all.append(op)
            self = .many(all)
        }
    }

    var isEmpty: Bool { if case .none = self { return true } else { return false } }

    func forEach(_ body: (Operation) -> Void) {
        switch self {
        case .none: break
        case .one(let op): body(op)
        case .many(let all): all.forEach(body)
        }
    }
}

/// The ready operations of a queue: one FIFO ring per priority level, each a buffer of
/// retained references that grows by doubling.
///
/// A class holding plain pointers, mutated in place under the queue's lock. The rings
/// were Swift Arrays in the queue's state struct: Array's copy-on-write check (and, now
/// and then, a copy) on every pop was 7% of a worker's time in the serial-queue
/// profile. One object per queue, made with it.
final class ReadyRings {
    struct Ring {
        var slots: UnsafeMutablePointer<Unmanaged<Operation>>? = nil
        var capacity = 0
        var head = 0
        var count = 0

        mutating func push(_ op: Operation) {
            if count == capacity { grow() }
            slots.unsafelyUnwrapped[(head + count) & (capacity - 1)] = Unmanaged.passRetained(op)
            count += 1
        }

        mutating func pop() -> Operation {
            let u = slots.unsafelyUnwrapped[head]
            head = (head + 1) & (capacity - 1)
            count -= 1
            return u.takeRetainedValue()
        }

        mutating func grow() {
            let newCapacity = max(8, capacity * 2) // a power of two: indices wrap by masking
            let grown = UnsafeMutablePointer<Unmanaged<Operation>>.allocate(capacity: newCapacity)
            for i in 0..<count { (grown + i).initialize(to: slots.unsafelyUnwrapped[(head + i) & (capacity - 1)]) }
            slots?.deallocate()
            slots = grown
            capacity = newCapacity
            head = 0
        }

        mutating func remove(_ op: Operation) -> Bool {
            let target = Unmanaged.passUnretained(op).toOpaque()
            guard let i = (0..<count).first(where: {
                slots.unsafelyUnwrapped[(head + $0) & (capacity - 1)].toOpaque() == target
            }) else { return false }
            let removed = slots.unsafelyUnwrapped[(head + i) & (capacity - 1)]
            for j in i..<(count - 1) {
                slots.unsafelyUnwrapped[(head + j) & (capacity - 1)] = slots.unsafelyUnwrapped[(head + j + 1) & (capacity - 1)]
            }
            count -= 1
            removed.release()
            return true
        }

        mutating func releaseAll() {
            while count > 0 { _ = pop() }
            slots?.deallocate()
            slots = nil
            capacity = 0
        }
    }

    /// How many priority levels there are: 0 (veryLow) ... 4 (veryHigh).
    static let levels = 5
    /// One ring per level, allocated with the object.
    private let rings: UnsafeMutablePointer<Ring> = {
        let p = UnsafeMutablePointer<Ring>.allocate(capacity: ReadyRings.levels)
        p.initialize(repeating: Ring(), count: ReadyRings.levels)
        return p
    }()

    var isEmpty: Bool { (0..<ReadyRings.levels).allSatisfy { rings[$0].count == 0 } }

    func push(_ op: Operation, level: Int) { rings[level].push(op) }

    /// Takes `op` out of whichever ring holds it, keeping the others' order; false when
    /// none does. O(ready operations): for the rare re-prioritisation or readiness
    /// change of an operation that waits for its turn.
    func remove(_ op: Operation) -> Bool {
        for level in 0..<ReadyRings.levels where rings[level].remove(op) { return true }
        return false
    }

    /// The oldest operation of the highest non-empty level.
    func pop() -> Operation? {
        for level in (0..<ReadyRings.levels).reversed() where rings[level].count > 0 {
            return rings[level].pop()
        }
        return nil
    }

    deinit {
        for level in 0..<ReadyRings.levels { rings[level].releaseAll() }
        rings.deinitialize(count: ReadyRings.levels)
        rings.deallocate()
    }
}

/// The operation behind ``OperationQueue/addBarrierBlock(_:)``: the queue's own, so not
/// listed in `operations`, counted in `operationCount`, or listed in `dependencies`.
final class BarrierOperation: BlockOperation, @unchecked Sendable {}

struct UncheckedSendableBox<T>: @unchecked Sendable {
    let value: T
    init(_ v: T) { value = v }
}

/// An operation submitted to the pool, through the task node inside it
/// (`Operation.engineTask`): submitting allocates nothing.
///
/// The task holds no reference to the operation: its runner borrows the one the
/// queue's list holds, which the list does not release before the runner is done
/// (`Operation.runState`). The queue is reached through `ownerQueue`, unretained: it
/// holds itself until the operation is counted finished (see `OperationQueue.counts`).
enum OpTask {
    /// Where the node is: the first stored property, just past the object header.
    @inline(__always)
    static func node(of op: Operation) -> UnsafeMutablePointer<spindle_task> {
        _getUnsafePointerToStoredProperties(op).assumingMemoryBound(to: spindle_task.self)
    }

    /// The object header's size: the node's offset from the object's address.
    static let headerSize = 2 * MemoryLayout<UnsafeRawPointer>.size

    /// The operation whose node `task` is. Unretained: the runner borrows the queue
    /// list's reference until `runnerDone` (see `Operation.runState`).
    @inline(__always)
    static func operation(of task: UnsafeMutablePointer<spindle_task>) -> Unmanaged<Operation> {
        Unmanaged<Operation>.fromOpaque(UnsafeRawPointer(task) - headerSize)
    }

    /// The runner's last access to `op`, which it ran: from here the queue's list may
    /// release it — or, if a drain has already unlinked it, the runner releases it.
    @inline(__always)
    static func runnerDone(_ op: Unmanaged<Operation>) {
        // acq_rel: release orders the runner's accesses before whoever releases the
        // operation; acquire, when the drain came first, orders its unlinking (its
        // writes to the operation) before our release.
        let before = op._withUnsafeGuaranteedRef {
            $0.runState.bitwiseOr(Operation.runnerDone, ordering: .acquiringAndReleasing).oldValue
        }
        if before & Operation.listGone != 0 { op.release() }
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
    static func runChain(_ first: Unmanaged<Operation>) {
        let ts = ThreadState.unmanagedCurrent
        // Saved and restored: a worker waiting inside an operation runs other tasks,
        // and so other chains, nested in this one.
        let saved = ts._withUnsafeGuaranteedRef { ts in
            defer { ts.chainOpen = true; ts.chainBudget = chainLength }
            return (ts.chainOpen, ts.chainBudget)
        }
        var op = first
        while true {
            op._withUnsafeGuaranteedRef { op in
                op.ownerQueue.unsafelyUnwrapped._withUnsafeGuaranteedRef { $0.run(op) }
            }
            runnerDone(op)
            guard let next = ts._withUnsafeGuaranteedRef({ ts -> Unmanaged<Operation>? in
                defer { ts.chainNext = nil }
                return ts.chainNext
            }) else { break }
            op = next
        }
        ts._withUnsafeGuaranteedRef { ts in
            ts.chainOpen = saved.0
            ts.chainBudget = saved.1
        }
    }

    /// Puts `op` in this thread's continuation slot if it is open and `pool` is this
    /// worker's own pool (see `runChain`).
    @inline(__always)
    static func continueOnThisThread(_ op: Operation, pool: OpaquePointer) -> Bool {
        // The pool check first: it is a plain thread-local read, and it turns away the
        // thread adding operations (not a worker) before the pthread-key lookup of its
        // ThreadState, on every add.
        guard spindle_current_pool() == pool else { return false }
        return ThreadState.unmanagedCurrent._withUnsafeGuaranteedRef { ts in
            guard ts.finishing != nil, ts.chainNext == nil else { return false }
            if ts.chainBudget == 0 {
                if spindle_current_worker_has_waiting_work() { return false }
                ts.chainBudget = chainLength
            }
            ts.chainBudget -= 1
            ts.chainNext = Unmanaged.passUnretained(op) // borrowed, as by a task
            return true
        }
    }

    static func submit(_ op: Operation, pool: OpaquePointer) {
        if continueOnThisThread(op, pool: pool) { return }
        // An operation starts once, so its node is submitted once.
        let node = node(of: op)
        node.pointee.run = { task, _ in
            // A pool only cancels tasks when it is destroyed; the pools operations
            // run on live for the whole process, so every task runs.
            OpTask.runChain(OpTask.operation(of: task.unsafelyUnwrapped))
        }
        let rc = spindle_submit_task(pool, node)
        // Process-wide pools refuse shutdown (ThreadPool.Error.processWidePool), so this
        // cannot fail short of a bug in the engine.
        precondition(rc == 0, "Spindle: a process-wide pool refused an operation (engine bug, rc \(rc))")
    }
}

/// Foundation's `OperationQueue` is an NSObject, hence Hashable and printable.
extension OperationQueue: Hashable, CustomStringConvertible {
    /// `lhs.isEqual(rhs)`, as for NSObject.
    public static func == (lhs: OperationQueue, rhs: OperationQueue) -> Bool { lhs.isEqual(rhs) }
    /// Feeds ``hash`` to `hasher`, as for NSObject: an override of `hash` is honoured.
    public func hash(into hasher: inout Hasher) { hasher.combine(hash) }
}
