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
/// At the default width nothing waits in the queue: a ready operation goes to the pool
/// at once, and while every worker of the pool is busy, the pool's order decides which
/// starts first. Operations added from inside an operation go on that worker's deque,
/// which it runs newest first while idle workers steal the oldest, and workers take
/// what comes from outside the pool in batches, so a later operation can start before
/// an earlier one. Foundation hands them to Dispatch, which starts them in the order it
/// got them. A queue with a ``maxConcurrentOperationCount`` keeps the waiting ones in
/// its ready lists, and starts them by priority, then in the order they were added.
///
/// ### How it schedules
/// The queue keeps five FIFO ready lists (one per priority) under one lock, and its
/// operation and running counts in one atomic word. Starting an operation submits it to
/// the pool for its quality of service; an operation added from inside a running
/// operation goes on the current worker's own deque (no shared cache line).
///
/// A queue at the default width and not suspended is in *direct mode*: a ready
/// operation is submitted as it is added (nothing can be ahead of it), and finishing
/// one takes no lock at all — one CAS on the counts — unless it is the last one
/// unfinished, the newest one, or someone observes the queue's count or progress.
/// Otherwise (a width limit, suspension) a finishing operation takes the lock to start
/// the next ready ones. The queue keeps itself alive while it has unfinished operations.
///
/// The list behind ``operations`` is pruned lazily by the threads that add operations
/// (and emptied when the queue drains), so the workers that finish operations seldom
/// touch it or the lock that guards it. Once nothing more is added, a check behind the
/// pool's queued work, or the queue's watch a few milliseconds later, lets go of what
/// has finished, as Foundation lets go of each operation as it finishes: a queue whose
/// remaining operations run for long does not keep what finished before them, nor what
/// their blocks captured, alive.
///
/// Rejected alternative: Foundation-on-Linux's design, a list of all operations scanned
/// on every scheduling pass for one that is ready. It is O(waiting) per pass, so a long
/// dependency chain costs time quadratic in its length. Its order is kept without the
/// scan: only ready operations wait in the ready lines, each line in the order its
/// operations were added (`ReadyRings.swift`), so the first one there is the one the
/// scan would find.
///
/// ### Where things are
/// This file holds the queue's stored state and every member a subclass can override.
/// The machinery lives in `Operations/Internals`, one protocol per file: adding an
/// operation, the counts and the queue's lifetime (`QueueMembership.swift`), the list of
/// operations (`QueueRegistry.swift`), direct mode and what a
/// change of mode starts (`QueueMode.swift`), readiness (`Readiness.swift`), the ready
/// lists (`ReadyRings.swift`) and the runner that takes a started operation to its
/// pool, from the engine to `start()`, and on to the next (`ChainRunner.swift`). `docs/architecture.md` follows
/// one operation through them.
@safe
open class OperationQueue: @unchecked Sendable {
    // safety: its list of operations holds one retained reference to each
    // (QueueState.swift) and it holds itself while it has work (LT1-LT3,
    // QueueMembership.swift).
    // @unchecked: mutable state is in `state` (under its lock) or in atomics.

    /// The default for ``maxConcurrentOperationCount``: as many as the pool's width.
    public static let defaultMaxConcurrentOperationCount: Int = -1

    /// Everything the queue's lock guards (QueueState.swift).
    let state: FutexLocked<State>
    /// Keeps `counts` (which the finishing workers write) off the cache line of the
    /// object header, whose reference count the adding thread changes when it adds an
    /// operation it does not make itself (`Operation.queueReference`).
    private let headerPadding: (UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64) = (0, 0, 0, 0, 0, 0, 0, 0)
    /// Operations added and not finished, operations started and not finished, and the
    /// `scheduledBit`, in one word: adding an operation and finishing one are one atomic
    /// RMW each. The protocol that lets a finisher touch the queue only while it may is
    /// in QueueMembership.swift (LT1-LT3); the bit's, in QueueMode.swift.
    let counts = Atomic<UInt64>(0)
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
    /// Serialises the updates Spindle makes to the queue's progress: an operation's unit,
    /// added when its `main()` returns (`runReportingProgress`).
    let progressLock = NSLock()
    /// The quality of service assigned to the queue (its raw value; `Int.min`: none), for
    /// the operations made by ``addOperation(_:)-(()->Void)``, which take it on as theirs,
    /// as with Foundation.
    let assignedQoS = Atomic<Int>(Int.min)
    /// True for ``main``, whose width, suspension, name, quality of service and
    /// underlying queue cannot be changed: it stays serial on the main thread.
    let isMainQueue: Bool
    /// The limit of ``admissionLimit`` and the tasks waiting under it (QueueAdmission.swift).
    let admission = QueueAdmission()

    /// Creates a queue. It starts operations as soon as they are ready.
    public init() {
        isMainQueue = false
        unsafe state = unsafe FutexLocked(State())
    }

    init(main: Void) {
        var s = unsafe State(name: "NSOperationQueue Main Queue")
        unsafe s.maxConcurrent = 1
        unsafe s.refreshMode()
        unsafe s.underlyingQueue = DispatchQueue.main
        unsafe s.qualityOfService = .userInteractive
        isMainQueue = true
        unsafe state = unsafe FutexLocked(s)
        assignedQoS.store(QualityOfService.userInteractive.rawValue, ordering: .relaxed)
        counts.store(OperationQueue.scheduledBit, ordering: .relaxed) // not yet shared
    }

    /// The queue of the main thread: runs its operations there, one at a time.
    public static let main = OperationQueue(main: ())

    /// The queue of the operation the calling thread is running; on the main thread,
    /// outside any operation, the main queue; nil elsewhere.
    public class var current: OperationQueue? {
        if let q = unsafe ThreadState.current.currentQueue { return unsafe q.takeUnretainedValue() }
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
        // safety: this reference becomes the queue list's one reference to the operation
        // (QueueState).
        let u = unsafe Unmanaged<Operation>.passRetained(BlockOperation(block: block))
        unsafe u.withGuaranteedReference { op in
            // The queue's assigned quality of service becomes the operation's (it then
            // takes a lock and a flag: only on queues that were given one).
            if qos != Int.min { op.qualityOfService = QualityOfService(rawValue: qos) ?? .default }
            // safety: the word names the queue unretained; the queue holds itself while the
            // operation is unfinished (LT3), and a reader after that pins it
            // (QueueFields.swift).
            unsafe op.queueSync.word.store(UInt(bitPattern: Unmanaged.passUnretained(self).toOpaque()), ordering: .relaxed)
            unsafe register(u, op, readyNow: true, fresh: true, isBarrier: false)
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
            unsafe startWhatCan { unsafe $0.batching += 1 }
            for op in ops { enqueue(op) }
            unsafe startWhatCan { unsafe $0.batching -= 1 }
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
        // Its own ready level, above every priority (Priority.swift).
        op.priorityWord.store(Operation.barrierPriority, ordering: .relaxed)
        // Its edges to the operations ahead of it are counted where it is linked
        // (Readiness.swift, R10).
        enqueue(op, isBarrier: true)
    }

    // MARK: - Control

    /// Cancels every operation in the queue. Those not started finish without running
    /// `main()`; their completion blocks still run. Works on ``main`` too.
    ///
    /// Pending barriers are cancelled too, as by Foundation: their blocks do not run,
    /// but they still keep the operations added after them waiting until the ones
    /// before them have finished.
    open func cancelAllOperations() {
        for op in unsafe state.locked({ unsafe handOut($0.unfinished) }) { op.cancel() }
    }

    /// Blocks the calling thread until the queue has no operations left. It runs nothing
    /// else meanwhile; on one of Spindle's workers, the pool runs a spare worker while
    /// it waits. A thread of a higher class than the queue's operations promotes them
    /// to its class (<doc:QualityOfService>). When it returns, the queue holds none of
    /// its operations: what their blocks captured has been freed, unless the program
    /// holds the operations itself.
    open func waitUntilAllOperationsAreFinished() {
        // The waiting thread's class reaches every operation it waits for
        // (Promotion.swift, P3), those added while it waits included.
        let rank = Promotion.callingThreadRank()
        var latch = unsafe spindle_latch()
        unsafe spindle_latch_init(&latch)
        unsafe withUnsafeMutablePointer(to: &latch) { l in
            // Blocks this thread; a pool worker is compensated by a spare.
            if unsafe registerDrainWaiter(Waiter(latch: l), rank: rank) {
                promoteAll(to: rank)
                unsafe spindle_latch_wait_blocking(l)
            }
        }
    }

    /// The operations in the queue that have not finished, in the order they were added
    /// (barriers, which the queue adds for itself, are not listed).
    open var operations: [Operation] {
        unsafe state.locked { unsafe handOut($0.unfinished) }.filter { !($0 is BarrierOperation) }
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
        get { unsafe state.locked { unsafe $0.maxConcurrent } }
        set {
            // fatalError, not precondition: its message survives release builds.
            if newValue < -1 {
                fatalError("OperationQueue.maxConcurrentOperationCount must be -1 (the default) or >= 0, got \(newValue)")
            }
            if isMainQueue { return } // stays serial, as with Foundation
            var narrowed = false
            unsafe startWhatCan { s in
                narrowed = unsafe s.maxConcurrent < 0 && newValue >= 0 && unfinishedCount > 0
                unsafe s.maxConcurrent = newValue
            }
            // Operations now wait behind others: what waits for them rises (P2).
            if narrowed { promoteOnNarrowing() }
        }
    }

    /// While true, the queue starts no operation; running ones continue, and added or
    /// cancelled ones wait. Setting it back to false starts what is ready. The main
    /// queue cannot be suspended (setting it has no effect, as with Foundation).
    open var isSuspended: Bool {
        get { unsafe state.locked { unsafe $0.suspended } }
        set {
            if isMainQueue { return }
            unsafe startWhatCan { unsafe $0.suspended = newValue }
        }
    }

    /// The queue's name: by default `NSOperationQueue 0x…`, with the queue's address,
    /// as Foundation names it. Setting nil gives the empty name. The main queue's name
    /// cannot be changed.
    open var name: String? {
        get {
            // safety: the address is printed, never dereferenced.
            unsafe state.locked { unsafe $0.name } ?? "NSOperationQueue \(Unmanaged.passUnretained(self).toOpaque())"
        }
        set {
            if isMainQueue { return }
            unsafe state.locked { unsafe $0.name = newValue ?? "" }
        }
    }

    /// The quality of service for operations that do not set their own; the operations
    /// that ``addOperation(_:)-(()->Void)`` makes take it on. Fixed on the main queue.
    open var qualityOfService: QualityOfService {
        get { unsafe state.locked { unsafe $0.qualityOfService } }
        set {
            if isMainQueue { return }
            let rank = ClassRank.of(newValue)
            let skipped = unsafe state.locked { s -> UInt8 in
                unsafe s.qualityOfService = newValue
                assignedQoS.store(newValue.rawValue, ordering: .relaxed)
                // The class's history matters only for the operations it holds
                // (Promotion.swift, P2).
                unsafe s.lowestRank = unsafe s.linked == 0 ? rank : min(s.lowestRank, rank)
                return unsafe max(s.skippedWaitRank, s.drainWaitRank)
            }
            // A wait skipped the queue, or waits for all of it, while its class was
            // higher: what it waits for may now run below it.
            if rank < skipped { promoteAll(to: skipped) }
        }
    }

    /// When set, operations run on this dispatch queue instead of Spindle's pool.
    /// Changing it while the queue holds operations traps (Foundation forbids it too).
    /// The main queue's is always `DispatchQueue.main`.
    open var underlyingQueue: DispatchQueue? {
        get { unsafe state.locked { unsafe $0.underlyingQueue } }
        set {
            if isMainQueue { return }
            let ok = unsafe state.locked { s -> Bool in
                guard unfinishedCount == 0 else { return false }
                unsafe s.underlyingQueue = newValue
                return true
            }
            if !ok { fatalError("OperationQueue.underlyingQueue was changed while the queue held operations") }
        }
    }

    /// Progress of the queue. Once `totalUnitCount` is set, to any value (reading it
    /// sets nothing), every operation whose `main()` the queue runs to its end adds one
    /// completed unit, as with Foundation: not cancelled operations, barriers, or
    /// operations that override `start()` without calling `super`. While `main()` runs,
    /// a progress of one unit is current on its thread (`Progress.current()`), so a
    /// `Progress` the operation makes becomes its implicit child, and the operation's
    /// unit is added here when `main()` returns with that progress complete. A progress
    /// `main()` leaves part-way joins this one as a child then, so that its
    /// `fractionCompleted` shows how far it got.
    ///
    /// The queue's progress moves one operation at a time: the steps an operation
    /// reports inside `main()` stay in its own progress until it returns, and the
    /// operation's progress is cancelled or paused if this one was when `main()` began,
    /// not if this one is cancelled or paused while it runs. Foundation's `Progress` on
    /// Linux has no lock, so a tree shared by operations that run at once would be
    /// updated from several threads; Spindle makes its own updates of this one under a
    /// lock. Change `totalUnitCount` from a barrier block (``addBarrierBlock(_:)``), as
    /// Apple's documentation advises.
    open var progress: Progress {
        hasProgress.store(true, ordering: .sequentiallyConsistent)
        return unsafe state.locked { s in
            if let p = unsafe s.progress { return p }
            let p = QueueProgress()
            unsafe s.progress = p
            return p
        }
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
    // safety: the address is printed, never dereferenced.
    open var description: String { unsafe "<\(type(of: self)): \(Unmanaged.passUnretained(self).toOpaque())>" }
}

/// Foundation's `OperationQueue` is an NSObject, hence Hashable and printable.
extension OperationQueue: Hashable, CustomStringConvertible {
    /// `lhs.isEqual(rhs)`, as for NSObject.
    public static func == (lhs: OperationQueue, rhs: OperationQueue) -> Bool { lhs.isEqual(rhs) }
    /// Feeds ``hash`` to `hasher`, as for NSObject: an override of `hash` is honoured.
    public func hash(into hasher: inout Hasher) { hasher.combine(hash) }
}
