import CSpindle
import Synchronization

/// An abstract unit of work, with Foundation's `Operation` semantics, run on Spindle's
/// work-stealing pool.
///
/// Subclass it and override ``main()`` for synchronous work, or override ``start()``,
/// ``isAsynchronous``, ``isExecuting`` and ``isFinished`` for asynchronous work that
/// reports its own completion with `willChangeValue(forKey: "isFinished")` /
/// `didChangeValue(forKey: "isFinished")`, exactly as with Foundation.
///
/// ### Differences from Foundation on Linux (deliberate)
/// - Readiness is tracked by a counter per operation, updated once per dependency
///   edge when the dependency finishes: no queue rescans waiting operations.
/// - ``removeDependency(_:)`` of the last unfinished dependency makes a queued
///   operation start (Foundation on Linux leaves it stuck).
/// - The completion block is cleared after it runs, as on Darwin.
/// - Releasing the last reference to a very long dependency chain does not recurse.
///
/// ### Key-value observing
/// Spindle's `Operation` is not an `NSObject`, so there is no KVO. The notifications
/// that matter to operations — `isExecuting`, `isFinished`, `isReady`, `isCancelled` —
/// are delivered through ``willChangeValue(forKey:)`` / ``didChangeValue(forKey:)``, and
/// anyone can watch them with ``onStateChange(_:)``.
///
/// ### Where things are
/// This file holds the type's stored state and every member a subclass can override
/// (Swift allows overriding only what the class body declares). The machinery lives
/// in `Operations/Internals`, one protocol per file: the start, its phases
/// and the finish (`OperationLifecycle.swift`), readiness and
/// dependencies (`Readiness.swift`), the fields its queue owns (`QueueFields.swift`),
/// waiting (`Waiter.swift`).
@safe
open class Operation: @unchecked Sendable {
    // safety: its unretained links are kept valid by QueueFields.swift's and
    // Dependents.swift's rules.
    // @unchecked: all mutable state is behind `guarded` (a Mutex) or atomics; the
    // queue-owned fields are touched only under the owning queue's lock.

    /// The engine's intrusive task node, through which a queue submits this operation
    /// to the pool without allocating. It must stay the first stored property:
    /// `TaskNode` (Runtime/UnsafeABI.swift) finds it, and the operation from it, by
    /// the object's layout. Swift never reads it.
    @exclusivity(unchecked) var engineTask = unsafe spindle_task(spindle_private: (nil, nil), run: nil)

    /// A change in an operation's state, as delivered to ``onStateChange(_:)``.
    public enum StateChange: Sendable, Equatable {
        /// All dependencies finished (or the operation was cancelled): it may start.
        case ready
        /// It started executing.
        case executing
        /// It finished (ran, or was retired after cancellation).
        case finished
        /// ``cancel()`` was called.
        case cancelled
    }

    // Layout. Every operation is one allocation of this class's size, which the adding
    // thread makes and, when the queue drains on a worker, another thread frees: its bytes
    // are paid in memory traffic, page faults as a backlog grows, and allocator work. So
    // the stored properties are declared where they leave no padding, and the words that
    // need fewer bits are narrower (`priorityWord`, `QueueSync.pins`). Swift lays them out
    // in declaration order; the bench prints a BlockOperation's allocation size.
    //
    // The order also keeps what a worker writes together. The adding thread frees an
    // operation some way behind the workers (`OperationQueue.State.prune`) and makes the
    // next one in the same memory, so every cache line a worker wrote comes back to it:
    // read when the list lets the operation go, written again when the next one is made.
    // The worker writes the engine node's link (when it empties the injector), the phase
    // and finish flags, `execWord`, and `queueSync`'s `done` and `runState` (its first
    // bytes). Declared one after another from the node on, they span 43 bytes: one cache
    // line or two, 1.5 on average over the four places a 16-byte-aligned object can start
    // in a line. With `guarded` between the node and the flags they would span 99 bytes,
    // and two or three lines. The other flags fill the bytes before `execWord` (a worker at
    // most reads them, or sets `queueRunFlags` for a queue that reports progress) and after
    // `guarded`, which ends in bytes. (OperationLayoutTests checks the span.)

    /// ``Phase``: pending → executing → finished (see `OperationLifecycle.swift`).
    let phase = Atomic<UInt8>(Phase.pending.rawValue)
    let cancelledFlag = Atomic<Bool>(false)
    /// Set when the finish protocol begins, and when it has ended (see
    /// `OperationLifecycle.swift`).
    let finishHandled = Atomic<Bool>(false)
    let finishCompleted = Atomic<Bool>(false)
    /// Set while the owning queue is calling `start()`, so a manual `start()` of a
    /// queued operation can be told apart and refused.
    let startedByQueue = Atomic<Bool>(false)
    /// The class a promotion raised this operation to (a `ClassRank`; 0: none), and
    /// where its run stands: submitted at a class, moved to a higher one, running on a
    /// thread at a class, done. See `Promotion.swift` (P1-P7).
    let promotedRank = Atomic<UInt8>(0)
    /// ``queuePriority``, as its raw value (`priorityUnset` until it is assigned): read
    /// on every add, without a lock.
    let priorityWord = Atomic<Int8>(Operation.priorityUnset)
    /// Its queue's flags that are read without the queue's lock (`QueueRunFlags`).
    let queueRunFlags = Atomic<UInt8>(0)
    let execWord = Atomic<UInt64>(0)

    /// The fields that belong to the queue this operation is added to, read from any
    /// thread: which queue, the pins on that link, and who still needs the queue
    /// list's reference (see `QueueFields.swift`).
    let queueSync = QueueSync()

    /// Everything not listed here, under one lock (see `OperationState.swift`).
    let guarded = Mutex(Guarded())
    /// Flags that let the common operation skip a lock: it has no observers, no
    /// waiters, no priority of its own, nothing for the finish to hand on under the
    /// lock, no dependency ever (each is explained where it is read).
    let hasObservers = Atomic<Bool>(false)
    let hasWaiters = Atomic<Bool>(false)
    let hasOwnPriority = Atomic<Bool>(false)
    let needsFinishLock = Atomic<Bool>(false)
    let hadDependencies = Atomic<Bool>(false)
    /// Set once the out-of-line fields are made (`Guarded.extrasWord`): deinit then
    /// releases them.
    let hasExtras = Atomic<Bool>(false)

    /// The fields that belong to its queue and are written only under that queue's
    /// lock: its place in the queue's list and what the queue did with it (see
    /// `QueueFields.swift`). Their synchronisation is that lock, so Swift's dynamic
    /// exclusivity checks are off for them.
    @exclusivity(unchecked) final var queueFields = unsafe QueueFields()
    /// The strong reference behind `queueSync.word`, for an operation that code outside
    /// the queue can reach (see `QueueFields.swift`). Not under the queue's lock: set by
    /// the thread that claimed the operation, dropped by its finish or its last pin.
    @exclusivity(unchecked) var queueReference: OperationQueue?

    /// ``BlockOperation``'s blocks, kept here so that it has no stored properties of its
    /// own (see there). The first block is immutable, so running it takes no lock and no
    /// copy: almost every BlockOperation has exactly this one block.
    ///
    /// Set by BlockOperation's convenience `init(block:)` (after `self.init()`: a second
    /// designated initialiser, here or there, would stop subclasses' implicit
    /// `super.init()` calls) and never changed after, so reading it needs no lock.
    @exclusivity(unchecked) final var blockBody = BlockBody()
    /// ``completionBlock``, read and written only under `guarded`'s lock. Not in
    /// `Guarded`, which holds nothing that costs anything to destroy (see there).
    @exclusivity(unchecked) final var completionStorage: (@Sendable () -> Void)?
    /// Blocks added with `addExecutionBlock(_:)`, in order: made by the first such call.
    /// Out of line, so that the usual one-block operation is small and its deinit has no
    /// lock and no array to destroy. The word holds a retained `MoreBlocks` (0: none),
    /// released by deinit.
    ///
    /// Rejected: Synchronization's `AtomicLazyReference`. Its `load()` is not inlinable
    /// and instantiates generic metadata on every call (BlockOperation.main asks on every
    /// run), and workers block on the runtime's metadata-cache lock when they first
    /// meet it.
    final let moreBlocksWord = Atomic<UInt>(0)

    /// Creates an operation that is ready (no dependencies), not cancelled, in no queue.
    public init() {}

    deinit {
        // Relaxed: deinit is the last access; whoever stored the box happened-before the
        // release that brought us here.
        let boxBits = moreBlocksWord.load(ordering: .relaxed)
        if boxBits != 0 { unsafe MoreBlocks.unmanaged(boxBits).release() }
        // The references in the locked state (`Guarded`): dependencies, released in a
        // loop, not recursively (see ThreadState), and the out-of-line fields. Most
        // operations have neither and skip the lock and the thread-local bookkeeping,
        // which are out of line so that their deinit saves no registers for them.
        // Acquiring: an edge's flag is stored after the lock that listed it; the
        // release that brought us here orders both anyway.
        if hadDependencies.load(ordering: .acquiring) || hasExtras.load(ordering: .acquiring) { dropLockedReferences() }
    }

    // MARK: - Subclassing points

    /// Performs the operation's work. The default does nothing. Called by ``Operation/start()``
    /// unless the operation was cancelled first.
    open func main() {}

    /// Starts the operation: runs ``main()`` on the calling thread and finishes.
    ///
    /// Operations in a queue are started by the queue; call `start()` yourself only on
    /// an operation that is in no queue. A cancelled operation finishes without calling
    /// ``main()``, and one that has already finished is left as it is. Override it
    /// (without calling `super`) for asynchronous operations.
    ///
    /// Traps when the operation is already executing, belongs to a queue, or is not
    /// ready (has unfinished dependencies): Foundation treats each of these as a
    /// programmer error.
    open func start() {
        guard let (cancelled, byQueue) = claimStart() else { return }
        // A plain Operation or BlockOperation — the exact class, which overrides none of
        // the notification methods — gets their effect directly: eight dynamic calls
        // and string comparisons fewer per operation. Subclasses, which may observe
        // the notifications, get the calls, as with Foundation.
        let plain = isPlainClass
        if !cancelled {
            if plain {
                executingChanged()
            } else {
                willChangeValue(forKey: "isExecuting")
                didChangeValue(forKey: "isExecuting") // observers hear `.executing` from here
            }
            if byQueue {
                // The queue's runner has made us the thread's current operation.
                if queueRun.contains(.reportsProgress), let queue = unsafe ownerQueue {
                    unsafe queue.withGuaranteedReference { $0.runReportingProgress(self) }
                } else {
                    main()
                }
            } else {
                let state = ThreadState.current
                let saved = unsafe state.currentOperation
                // safety: unretained while `main()` runs, which `self` outlives; restored
                // right after.
                unsafe state.currentOperation = unsafe Unmanaged.passUnretained(self)
                main()
                unsafe state.currentOperation = unsafe saved
            }
        }
        if plain {
            phase.store(Phase.finished.rawValue, ordering: .releasing)
            finishProtocol()
            return
        }
        completeStart()
    }

    /// Asks the operation to stop. Queued operations that have not started finish
    /// without running ``main()``; a running operation should check ``isCancelled``.
    /// Cancelling an operation that waits on dependencies makes it ready at once (a
    /// custom ``isReady`` condition of its own still holds it). Cancelling one that has
    /// finished has no effect.
    open func cancel() {
        if isFinished || finishHandled.load(ordering: .acquiring) { return }
        // seq_cst: the cancel's side of its pair with an add (QueueMembership.swift, A2):
        // this flag, then evaluateReadiness's load of the queue word; the add's claim,
        // then its load of this flag under the queue's lock. Either the evaluation finds
        // the queue, or the add finds the flag.
        if cancelledFlag.exchange(true, ordering: .sequentiallyConsistent) { return }
        willChangeValue(forKey: "isCancelled")
        didChangeValue(forKey: "isCancelled")
        notify(.cancelled)
        // A cancelled operation is ready regardless of its dependencies.
        evaluateReadiness()
    }

    /// True once ``cancel()`` has been called; an override is what `start()` and `isReady` ask.
    open var isCancelled: Bool { cancelledFlag.load(ordering: .acquiring) }

    /// True while ``start()`` is running the operation.
    open var isExecuting: Bool { phase.load(ordering: .acquiring) == Phase.executing.rawValue }

    /// True once the operation has finished. An override decides, as with Foundation,
    /// also when `start()` ends: a subclass whose work goes on after `super.start()`
    /// returns (Apple's "Advanced NSOperations" does this) finishes when it announces it.
    open var isFinished: Bool { phase.load(ordering: .acquiring) == Phase.finished.rawValue }

    /// False by default: the operation runs synchronously in ``start()``.
    open var isAsynchronous: Bool { false }

    /// The same as ``isAsynchronous`` (the older name).
    open var isConcurrent: Bool { isAsynchronous }

    /// True when every dependency has finished, or the operation is cancelled.
    /// Override to add conditions of your own (call `super`), and report changes with
    /// `willChangeValue(forKey: "isReady")` / `didChangeValue(forKey: "isReady")`.
    /// An override decides alone, as with Foundation: one that leaves out `super.isReady`
    /// is started by its queue when it says true, whatever its dependencies.
    open var isReady: Bool {
        isCancelled || dependenciesFinished
    }

    // MARK: - Notifications (the part of KVO operations depend on)

    /// Announces that the value for `key` is about to change. Kept for Foundation
    /// compatibility; state is evaluated in ``didChangeValue(forKey:)``.
    open func willChangeValue(forKey key: String) {}

    /// Announces that the value for `key` changed. For `"isFinished"`, `"isReady"` and
    /// `"isExecuting"` (also spelled without `is`), Spindle re-reads the state: this is
    /// how a custom asynchronous operation tells its queue and dependents it finished.
    open func didChangeValue(forKey key: String) {
        switch key {
        case "isFinished", "finished":
            if isFinished { finishProtocol() }
        case "isReady", "ready":
            evaluateReadiness()
        case "isExecuting", "executing":
            executingChanged()
        default:
            break
        }
    }

    /// The key-path spelling Foundation also offers: `willChangeValue(for: \.isFinished)`.
    /// Calls ``willChangeValue(forKey:)`` with the property's name.
    open func willChangeValue<Value>(for keyPath: KeyPath<Operation, Value>) {
        willChangeValue(forKey: Operation.key(for: keyPath))
    }

    /// The key-path spelling Foundation also offers: `didChangeValue(for: \.isFinished)`.
    /// Calls ``didChangeValue(forKey:)`` with the property's name, so that the state
    /// keys have the same effect in either spelling.
    open func didChangeValue<Value>(for keyPath: KeyPath<Operation, Value>) {
        didChangeValue(forKey: Operation.key(for: keyPath))
    }

    // MARK: - Properties

    /// A name for debugging and logging.
    open var name: String? {
        get { guarded.locked { $0.extras?.name } }
        set { withExtras { $0.name = newValue } }
    }

    /// Priority relative to the other ready operations of the same queue. Changing it
    /// while the operation waits in its queue for its turn moves it to its new place.
    ///
    /// Until it is assigned, it reads ``QueuePriority/normal``, and on a queue that is
    /// not serial an operation with a ``qualityOfService`` of its own is ordered as
    /// Foundation orders it: userInteractive as veryHigh, userInitiated as high, utility
    /// as low, background as veryLow.
    open var queuePriority: QueuePriority {
        get { QueuePriority(rawValue: Int(priorityWord.load(ordering: .relaxed))) ?? .normal }
        set {
            let old = priorityWord.exchange(Int8(newValue.rawValue), ordering: .relaxed)
            // The operation, which code outside the queue holds, holds its queue
            // (QueueMembership.swift, LT3).
            if old != Int8(newValue.rawValue), inQueue {
                withPinnedQueue { $0.operationPriorityChanged(self) }
            }
        }
    }

    /// The quality of service the operation needs. When left at `.default`, the
    /// queue's quality of service applies, or the one implied by ``threadPriority``.
    ///
    /// It reads back what was set: in Apple's words, "the minimum level of service the
    /// operation needs to execute effectively". Spindle may run the operation at a
    /// higher class than this, never a lower one: when an operation of a higher class
    /// depends on it, or a thread or task of a higher class waits for it, it is
    /// promoted to that class, together with whatever it waits for itself (see
    /// <doc:QualityOfService>). Raising it while the operation waits in a pool or runs
    /// promotes it in place; lowering it does not undo a promotion.
    open var qualityOfService: QualityOfService {
        get { guarded.locked { $0.qualityOfService } }
        set {
            guarded.locked {
                $0.qualityOfService = newValue
                $0.qosExplicit = true
            }
            // seq_cst: a Dekker pair with an add (ownClassChanged).
            hasOwnPriority.store(true, ordering: .sequentiallyConsistent)
            ownClassChanged()
        }
    }

    /// The older, numeric form of priority: 0.0 (lowest) to 1.0 (highest), default 0.5.
    ///
    /// When no ``qualityOfService`` has been set, it selects the nearest class:
    /// below 0.2 `.background`, below 0.4 `.utility`, below 0.6 `.default`, below 0.8
    /// `.userInitiated`, otherwise `.userInteractive`.
    open var threadPriority: Double {
        get { guarded.locked { $0.extras?.threadPriority ?? 0.5 } }
        set {
            withExtras { $0.threadPriority = min(max(newValue, 0), 1) }
            // seq_cst: a Dekker pair with an add (ownClassChanged).
            hasOwnPriority.store(true, ordering: .sequentiallyConsistent)
            ownClassChanged()
        }
    }

    /// Runs once, after the operation has finished (whether it ran or was cancelled),
    /// and is then set to nil. It runs as a task of its own on a worker of the
    /// operation's quality of service, outside any queue (``OperationQueue/current``
    /// is nil there), as Foundation runs it on a secondary thread, and it starts where
    /// Foundation starts it: after the dependents that the operation's finish lets
    /// start at once, and before the next operation its queue starts — on a queue of
    /// width 1, the next operation starts after the completion block. As with
    /// Foundation, nothing waits for it to end: dependents, the queue's next
    /// operation and `waitUntilFinished()` may all go on while it runs, and it may wait
    /// for any of them.
    open var completionBlock: (@Sendable () -> Void)? {
        get {
            // Through a struct, as in finishProtocol: no re-abstraction.
            struct Box { let block: (@Sendable () -> Void)? }
            return guarded.locked { _ in unsafe Box(block: completionStorage) }.block
        }
        set {
            if newValue != nil { needsFinishLock.store(true, ordering: .sequentiallyConsistent) }
            guarded.locked { _ in unsafe completionStorage = newValue }
        }
    }

    /// The operations this one waits for (not the barriers its queue makes it wait for).
    open var dependencies: [Operation] {
        guarded.locked { $0.dependencies.snapshot() }.filter { !($0 is BarrierOperation) }
    }

    // MARK: - Dependencies

    /// Makes this operation wait until `op` has finished. Works across queues, and on
    /// an operation the queue holds as ready but has not started yet: it waits again.
    ///
    /// A dependency cycle, this operation included, is accepted, as by Foundation: none
    /// of its operations becomes ready until one of them is cancelled (a cancelled
    /// operation is ready whatever its dependencies, finishes without running
    /// ``main()``, and so releases the next).
    open func addDependency(_ op: Operation) { addDependencyEdge(op) }

    /// Stops waiting for `op`. If that was the last unfinished dependency of a queued
    /// operation, the queue starts it.
    open func removeDependency(_ op: Operation) {
        let removed = guarded.locked { g -> Bool in
            g.dependencies.remove(op)
        }
        guard removed else { return }
        let wasPending = op.guarded.locked { g -> Bool in
            unsafe g.dependents.remove(key: Dependents.key(self))
        }
        if wasPending { dependencyFinished() }
    }

    // MARK: - Waiting

    /// Blocks the calling thread until the operation has finished.
    ///
    /// A thread of a higher class than the operation's promotes it, and what it waits
    /// for, to the thread's class (<doc:QualityOfService>).
    ///
    /// The thread runs nothing else meanwhile, as Foundation documents: waiting inside an
    /// operation while holding a lock, or with thread-local state, is safe. Called from
    /// one of Spindle's workers, the pool runs a spare worker of the same class while
    /// this one waits (``ThreadPool/Configuration/maxSpareWorkers``), so waits inside
    /// operations cannot starve the pool. Traps when called from inside this same
    /// operation, which would wait forever.
    open func waitUntilFinished() {
        if finishCompleted.load(ordering: .acquiring) { return }
        waitBlocking()
    }

    // MARK: - Identity (what Foundation's Operation inherits from NSObject)

    /// Whether `object` is this operation. NSObject's default, which Foundation's
    /// `Operation` keeps: identity. Overridable; ``==(_:_:)`` calls it.
    open func isEqual(_ object: Any?) -> Bool {
        guard let other = object as? Operation else { return false }
        return other === self
    }

    /// A hash consistent with ``isEqual(_:)``: the object's identity unless overridden.
    open var hash: Int { ObjectIdentifier(self).hashValue }

    /// `<Class: address>`, what Foundation's operations print on Linux (NSObject's form).
    // safety: the address is printed, never dereferenced.
    open var description: String { unsafe "<\(type(of: self)): \(Unmanaged.passUnretained(self).toOpaque())>" }
}

/// Foundation's `Operation` is an NSObject, hence Hashable and printable: code that
/// writes `queue.operations.contains(op)`, keeps operations in a `Set`, or reads
/// `op.description` compiles against Spindle unchanged.
extension Operation: Hashable, CustomStringConvertible {
    /// `lhs.isEqual(rhs)`, as for NSObject.
    public static func == (lhs: Operation, rhs: Operation) -> Bool { lhs.isEqual(rhs) }
    /// Feeds ``hash`` to `hasher`, as for NSObject: an override of `hash` is honoured.
    public func hash(into hasher: inout Hasher) { hasher.combine(hash) }
}
