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
open class Operation: @unchecked Sendable {
    // @unchecked: all mutable state is behind `guarded` (a Mutex) or atomics; the few
    // queue-owned fields are touched only under the owning queue's lock.

    /// The engine's intrusive task node for this operation, when a queue submits it to
    /// the pool (see `OpTask`). It must stay the first stored property: the engine gets
    /// its address from `_getUnsafePointerToStoredProperties`, and the task gets the
    /// operation back by subtracting the object header (a test checks both). Swift
    /// never reads it; between submission and `run` only the engine writes it.
    ///
    /// Rejected: a node allocated per submission. Freed where the task ran, it was a
    /// cross-thread free per operation; freed with the operation, it was still a second
    /// malloc/free pair per operation, and in a producer-bound queue every pair that
    /// glibc's thread cache cannot balance goes to `_int_malloc`/`_int_free` (in the
    /// `operation-throughput` profile, those two fell from about a quarter of the adding
    /// thread's samples to under a tenth when the node moved here).
    @exclusivity(unchecked) var engineTask = spindle_task(spindle_private: (nil, nil), run: nil)

    /// Relative priority among the ready operations of one queue.
    public enum QueuePriority: Int, Sendable, Comparable {
        case veryLow = -8
        case low = -4
        case normal = 0
        case high = 4
        case veryHigh = 8

        /// Orders priorities from ``veryLow`` to ``veryHigh``.
        public static func < (a: Self, b: Self) -> Bool { a.rawValue < b.rawValue }

        /// 0 (veryLow) ... 4 (veryHigh): the index of the queue's ready list.
        var level: Int {
            switch self {
            case .veryLow: return 0
            case .low: return 1
            case .normal: return 2
            case .high: return 3
            case .veryHigh: return 4
            }
        }
    }

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

    enum Phase: UInt8 {
        case pending, executing, finished
    }

    /// Fields used by few operations live out of line, to keep a queued operation small.
    ///
    /// Small for memory (≤ 256 bytes per queued BlockOperation), not for speed. Not
    /// pursued, after measuring what they could gain: ordering the stored properties so
    /// that the ones the workers touch share fewer cache lines, or shrinking the object
    /// further. Paired runs of the `operation-throughput` benchmark, two builds
    /// alternately: a stored property of 128 bytes more, written by the adding thread,
    /// left Spindle/pool-submit within noise (1.00–1.14× before, 1.11–1.18× after, four
    /// pairs), and so did having the worker also read one of its lines after each run
    /// (1.12–1.19× without that read, 1.06–1.15× with it, five pairs). A line more or
    /// less shared with the workers is below what the benchmark resolves, so the layout
    /// stays in the order that reads best, with `engineTask` first.
    final class Extras: @unchecked Sendable {
        var name: String?
        var threadPriority: Double = 0.5
        var observers: [@Sendable (StateChange) -> Void] = []
    }

    struct Guarded {
        var dependencies: [Operation] = []
        /// Dependencies that have not finished yet. Readiness is `== 0`.
        var unfinished = 0
        /// Operations that depend on this one, unretained (as Foundation keeps them): a
        /// dependent dropped by its owner is freed, and takes itself off this list in
        /// its deinit (see `Dependents` for why that is safe).
        var dependents = Dependents.none
        var completionBlock: (@Sendable () -> Void)?
        var waiters: [Waiter] = []
        var qualityOfService: QualityOfService = .default
        var qosExplicit = false
        var extras: Extras?
    }

    let guarded = Mutex(Guarded())
    /// ``Phase``: pending → executing → finished, changed by `start()` with a CAS, so
    /// that starting and finishing a plain operation takes no lock.
    let phase = Atomic<UInt8>(Phase.pending.rawValue)
    let cancelledFlag = Atomic<Bool>(false)
    /// Set when the finish protocol begins (it runs once).
    let finishHandled = Atomic<Bool>(false)
    /// Set when it has ended: dependents released, completion block run, queue told.
    /// Waiters are released only then, so a returning `waitUntilFinished` implies all
    /// of that has happened.
    let finishCompleted = Atomic<Bool>(false)
    /// Set while the owning queue is calling `start()`, so a manual `start()` of a
    /// queued operation can be told apart and refused.
    let startedByQueue = Atomic<Bool>(false)
    /// Set when the queue takes this operation as ready: exactly once. Written only under
    /// the owning queue's lock (so a plain store suffices); read anywhere as a hint.
    let readySignalled = Atomic<Bool>(false)
    /// Set once anyone registers an observer, so that unobserved operations (almost
    /// all) skip the observer bookkeeping.
    let hasObservers = Atomic<Bool>(false)
    /// Set (seq_cst) by a waiter before it registers; read (seq_cst) by the finish
    /// protocol after it sets `finishCompleted`. Dekker: either the waiter sees the
    /// flag it races with and does not wait, or the finisher sees the waiter and takes
    /// the lock to release it. Unwaited operations skip that lock.
    let hasWaiters = Atomic<Bool>(false)
    /// Set when a quality of service or thread priority is assigned, so that the
    /// queue's default applies without a lock for operations that set neither.
    let hasOwnPriority = Atomic<Bool>(false)
    /// Set (seq_cst) before anything is stored that the finish protocol must hand on
    /// under the lock: a dependent, a completion block, an observer. The finish
    /// protocol reads it (seq_cst) after claiming `finishHandled`, and takes the lock
    /// only when it is set. Dekker, as for `hasWaiters`: a dependent registering
    /// concurrently either sees `finishHandled` under the lock and does not register,
    /// or its flag is seen and the finisher drains it under the lock.
    let needsFinishLock = Atomic<Bool>(false)
    /// Set once a dependency is added, so that deinit skips the lock for the (many)
    /// operations that never had one.
    let hadDependencies = Atomic<Bool>(false)

    /// The queue this operation was added to (its address; 0: none), claimed with one
    /// CAS when it is added — which is also how adding it twice, or to two queues, is
    /// detected. Read without reference counting: valid while the operation is
    /// unfinished, then for as long as `queueReference` is set (see `ownerQueue`). One
    /// the program added (`queueAddedByCaller`) clears it when it has finished (see
    /// `dropQueue`).
    let queueWord = Atomic<UInt>(0)
    /// The strong reference behind `queueWord`, for an operation that code outside the
    /// queue can reach: set by the thread that claimed it, or — for one made by the
    /// block form of `addOperation`, which only the queue knows — under the queue's lock
    /// when `operations` hands it out (or when it is added out of direct mode: see
    /// `queueHeld`). Such code may call `cancel()` or change readiness or priority while
    /// the operation finishes, and would then reach a queue kept alive only by its
    /// unfinished operations (see `OperationQueue.counts`, "Lifetime").
    ///
    /// Dropped when the operation has finished (`dropQueue`) if the program made and
    /// added it (`queueAddedByCaller`), so that a program that keeps finished operations
    /// does not keep their queue; otherwise by deinit. The block form of `addOperation`
    /// in direct mode does without it: the retain on the adding thread and the release
    /// where the operation dies are a tenth of the `operation-throughput` loop.
    @exclusivity(unchecked) var queueReference: OperationQueue?
    /// Pins on `queueWord` by code outside the queue's own paths (`withPinnedQueue`), in
    /// the low bits, and two flags: `pinsCleared`, set by the finish once it has cleared
    /// `queueWord`, and `pinsReleased`, set by whoever then drops `queueReference` —
    /// the finish when no pin is held, else the last pin to go. All on one word, so
    /// that every step is one RMW in a single modification order: a pin taken before
    /// the finish's `pinsCleared` is seen by it (and releases the reference itself when
    /// it goes); one taken after reads `queueWord` as 0 and leaves the queue alone.
    let queuePins = Atomic<UInt>(0)
    static let pinsCleared: UInt = 1 << 62
    static let pinsReleased: UInt = 1 << 63
    /// ``queuePriority``, as its raw value (`priorityUnset` until it is assigned): read
    /// on every add, without a lock.
    let priorityWord = Atomic<Int>(Operation.priorityUnset)
    static let priorityUnset = Int.min

    /// The queue, if any — alive while this operation is unfinished (the queue holds
    /// itself), and after that as long as `queueReference` is set.
    var ownerQueue: Unmanaged<OperationQueue>? {
        let bits = queueWord.load(ordering: .acquiring)
        return bits == 0 ? nil : Unmanaged.fromOpaque(UnsafeRawPointer(bitPattern: bits)!)
    }

    // Owned by the queue this operation is in; only touched under that queue's lock (or,
    // for `queueReference`, by the one thread that claimed the operation before the
    // queue's list holds it, and by deinit). Their synchronisation is that lock, so Swift's
    // dynamic exclusivity checks — a runtime call per access on a class property — are
    // turned off for them (`@exclusivity(unchecked)`).
    /// Neighbours in the queue's list of operations (which holds the retained reference;
    /// finished ones stay until the list is pruned).
    @exclusivity(unchecked) var queuePrev: Unmanaged<Operation>?
    @exclusivity(unchecked) var queueNext: Unmanaged<Operation>?
    @exclusivity(unchecked) var queueStarted = false
    /// Set when `queueReference` was set before the operation could start (by the
    /// adding thread, or by the queue when it was not in direct mode), so its finish may
    /// decrement the counts before it takes the queue's lock (see
    /// `OperationQueue.operationFinished`). Not set by `operations`, which hands
    /// operations out while they may be finishing.
    @exclusivity(unchecked) var queueHeld = false
    /// Set with `queueHeld` for an operation the program made and added: the one kind a
    /// program may keep after it finished, so the one whose finish drops its queue
    /// (`dropQueue`). (One made by the block form is reachable only through
    /// `operations`, and otherwise dies with the queue's list.)
    @exclusivity(unchecked) var queueAddedByCaller = false
    /// Set by the queue's runner, before `start()`, when the queue reports progress:
    /// `start()` then runs `main()` inside a child progress (see `OperationQueue.progress`).
    @exclusivity(unchecked) var queueReportsProgress = false
    @exclusivity(unchecked) var queueRetired = false
    /// Set when the queue has registered this operation (its list and count): until
    /// then a readiness signal from another thread (a concurrent `cancel()`) is left
    /// to `enqueue`, which evaluates readiness itself.
    @exclusivity(unchecked) var queueLinked = false
    /// Set when the queue has counted this operation finished; it may then be pruned
    /// from the queue's list, by another thread, without the finishing thread's help
    /// (once its runner is done with it too: see `runState`).
    let queueDone = Atomic<Bool>(false)
    /// Who still needs the queue list's reference to this operation, for one the queue
    /// started: `runnerDone` is set by the thread that ran it, after its last access;
    /// `listGone` by a drain that unlinked it before that. Whoever sets the second bit
    /// releases the list's reference.
    ///
    /// The runner borrows that reference instead of holding one of its own: a retain
    /// on the adding thread and a release on the worker fewer per operation (3-4% of
    /// the adding thread's time in the `operation-throughput` profile). Pruning, which
    /// releases most operations, only takes one whose runner is done; a drain, which
    /// releases everything linked, may meet one whose runner is still returning from
    /// it — both sides then use one RMW here, and the later one releases.
    let runState = Atomic<UInt8>(0)
    static let runnerDone: UInt8 = 1
    static let listGone: UInt8 = 2

    /// Whether the queue's list may release its reference now: the queue never started
    /// it, or its runner is done with it (acquiring: pairs with the runner's RMW, so
    /// its accesses happen before the release).
    var runnerIsDone: Bool {
        !queueStarted || runState.load(ordering: .acquiring) & Operation.runnerDone != 0
    }

    /// ``BlockOperation``'s blocks, kept here so that it has no stored properties of its
    /// own (see there). The first block is immutable, so running it takes no lock and no
    /// copy: almost every BlockOperation has exactly this one block.
    ///
    /// Set by BlockOperation's convenience `init(block:)` (after `self.init()`: a second
    /// designated initialiser, here or there, would stop subclasses' implicit
    /// `super.init()` calls) and never changed after, so reading it needs no lock.
    @exclusivity(unchecked) final var blockBody = BlockBody()
    /// Blocks added with `addExecutionBlock(_:)`, in order: made by the first such call.
    /// Out of line, so that the usual one-block operation is small and its deinit has no
    /// lock and no array to destroy. The word holds a retained `MoreBlocks` (0: none),
    /// released by deinit.
    ///
    /// Rejected: Synchronization's `AtomicLazyReference`. Its `load()` is not inlinable
    /// and instantiates generic metadata on every call: 3% of a worker's time in the
    /// `operation-throughput` profile (BlockOperation.main asks on every run), and
    /// workers blocked on the runtime's metadata-cache lock when they first met it.
    final let moreBlocksWord = Atomic<UInt>(0)

    final class MoreBlocks: Sendable {
        let blocks = Mutex<[@Sendable () -> Void]>([])

        /// The box whose address `moreBlocksWord` holds (non-zero).
        static func unmanaged(_ bits: UInt) -> Unmanaged<MoreBlocks> {
            Unmanaged.fromOpaque(UnsafeRawPointer(bitPattern: bits).unsafelyUnwrapped)
        }
    }

    /// True once a block has been added with `addExecutionBlock(_:)`. Acquiring: pairs
    /// with the publishing CAS in `moreBlocksBox`.
    final var hasMoreBlocks: Bool { moreBlocksWord.load(ordering: .acquiring) != 0 }

    /// The added blocks' box, if any.
    final var moreBlocks: MoreBlocks? {
        let bits = moreBlocksWord.load(ordering: .acquiring)
        return bits == 0 ? nil : MoreBlocks.unmanaged(bits).takeUnretainedValue()
    }

    /// The added blocks' box, made (once, whoever wins the race) if there is none.
    final func moreBlocksBox() -> MoreBlocks {
        if let box = moreBlocks { return box }
        let fresh = Unmanaged.passRetained(MoreBlocks())
        let bits = UInt(bitPattern: fresh.toOpaque())
        // acq_rel: release publishes the new box; acquire, on failure, sees the winner's.
        let (won, current) = moreBlocksWord.compareExchange(
            expected: 0, desired: bits, ordering: .acquiringAndReleasing)
        if won { return fresh.takeUnretainedValue() }
        fresh.release()
        return MoreBlocks.unmanaged(current).takeUnretainedValue()
    }

    /// Creates an operation that is ready (no dependencies), not cancelled, in no queue.
    public init() {}

    deinit {
        // Relaxed: deinit is the last access; whoever stored the box happened-before the
        // release that brought us here.
        let boxBits = moreBlocksWord.load(ordering: .relaxed)
        if boxBits != 0 { MoreBlocks.unmanaged(boxBits).release() }
        // Dependencies are released in a loop, not recursively (see ThreadState). Most
        // operations have none and skip the lock and the thread-local bookkeeping.
        guard hadDependencies.load(ordering: .acquiring) else { return }
        let deps = guarded.locked { g in
            let d = g.dependencies
            g.dependencies = []
            return d
        }
        guard !deps.isEmpty else { return }
        // Take ourselves off each dependency's list of dependents. A dependency that is
        // finishing right now holds its lock while it walks that list and touches us;
        // taking the same lock here waits for it, so nobody touches this object after
        // deinit returns. (We hold no lock of ours meanwhile: the finishing dependency
        // takes ours inside its own.)
        let me = Dependents.key(self)
        for d in deps { _ = d.guarded.locked { $0.dependents.remove(key: me) } }
        ThreadState.releaseIteratively(consume deps)
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
                if queueReportsProgress, let queue = ownerQueue {
                    queue._withUnsafeGuaranteedRef { $0.runReportingProgress(self) }
                } else {
                    main()
                }
            } else {
                let state = ThreadState.current
                let saved = state.currentOperation
                state.currentOperation = Unmanaged.passUnretained(self)
                main()
                state.currentOperation = saved
            }
        }
        if plain {
            phase.store(Phase.finished.rawValue, ordering: .releasing)
            finishProtocol()
            return
        }
        completeStart()
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
    /// finishing does (dependents, completion block, the queue).
    final func completeStart() {
        willChangeValue(forKey: "isFinished")
        willChangeValue(forKey: "isExecuting")
        phase.store(Phase.finished.rawValue, ordering: .releasing)
        didChangeValue(forKey: "isExecuting")
        didChangeValue(forKey: "isFinished")
        finishProtocol()
    }

    /// Asks the operation to stop. Queued operations that have not started finish
    /// without running ``main()``; a running operation should check ``isCancelled``.
    /// Cancelling an operation that waits on dependencies makes it ready at once (a
    /// custom ``isReady`` condition of its own still holds it). Cancelling one that has
    /// finished has no effect.
    open func cancel() {
        if isFinished || finishHandled.load(ordering: .acquiring) { return }
        if cancelledFlag.exchange(true, ordering: .acquiringAndReleasing) { return }
        willChangeValue(forKey: "isCancelled")
        didChangeValue(forKey: "isCancelled")
        notify(.cancelled)
        // A cancelled operation is ready regardless of its dependencies.
        evaluateReadiness()
    }

    /// True once ``cancel()`` has been called.
    open var isCancelled: Bool { cancelledFlag.load(ordering: .acquiring) }

    /// True while ``start()`` is running the operation.
    open var isExecuting: Bool { phase.load(ordering: .acquiring) == Phase.executing.rawValue }

    /// True once the operation has finished.
    open var isFinished: Bool { phase.load(ordering: .acquiring) == Phase.finished.rawValue }

    /// False by default: the operation runs synchronously in ``start()``.
    open var isAsynchronous: Bool { false }

    /// The same as ``isAsynchronous`` (the older name).
    open var isConcurrent: Bool { isAsynchronous }

    /// True when every dependency has finished, or the operation is cancelled.
    /// Override to add conditions of your own (call `super`), and report changes with
    /// `willChangeValue(forKey: "isReady")` / `didChangeValue(forKey: "isReady")`.
    open var isReady: Bool {
        isCancelled || guarded.locked { $0.unfinished == 0 }
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

    /// The KVO key of a key path: the name of the property for the ones the state
    /// machine reacts to (and the others Foundation documents as observable); the key
    /// path's description for anything else.
    static func key<Value>(for keyPath: KeyPath<Operation, Value>) -> String {
        switch keyPath as AnyKeyPath {
        case \Operation.isFinished: return "isFinished"
        case \Operation.isReady: return "isReady"
        case \Operation.isExecuting: return "isExecuting"
        case \Operation.isCancelled: return "isCancelled"
        case \Operation.isAsynchronous: return "isAsynchronous"
        case \Operation.isConcurrent: return "isConcurrent"
        case \Operation.dependencies: return "dependencies"
        case \Operation.queuePriority: return "queuePriority"
        case \Operation.completionBlock: return "completionBlock"
        case \Operation.name: return "name"
        default: return "\(keyPath)"
        }
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
        get { QueuePriority(rawValue: priorityWord.load(ordering: .relaxed)) ?? .normal }
        set {
            priorityWord.store(newValue.rawValue, ordering: .relaxed)
            // The operation, which code outside the queue holds, holds its queue
            // (`OperationQueue.counts`, rule 3).
            if readySignalled.load(ordering: .acquiring), inQueue {
                withPinnedQueue { $0.operationPriorityChanged(self) }
            }
        }
    }

    /// The index of the ready list this operation waits on in its queue (see
    /// ``queuePriority``). Called under the queue's lock.
    @inline(__always)
    func queueLevel(serial: Bool) -> Int {
        let raw = priorityWord.load(ordering: .relaxed)
        if raw == Operation.priorityUnset && (serial || !hasOwnPriority.load(ordering: .acquiring)) {
            return QueuePriority.normal.level
        }
        return queueLevelSlow(raw: raw)
    }

    /// `queueLevel`'s answer for an operation with a priority or a quality of service.
    func queueLevelSlow(raw: Int) -> Int {
        if raw != Operation.priorityUnset { return (QueuePriority(rawValue: raw) ?? .normal).level }
        let (qos, explicit) = guarded.locked { ($0.qualityOfService, $0.qosExplicit) }
        guard explicit else { return QueuePriority.normal.level }
        switch qos {
        case .userInteractive: return QueuePriority.veryHigh.level
        case .userInitiated: return QueuePriority.high.level
        case .utility: return QueuePriority.low.level
        case .background: return QueuePriority.veryLow.level
        default: return QueuePriority.normal.level
        }
    }

    /// The quality of service the operation runs at. When left at `.default`, the
    /// queue's quality of service applies, or the one implied by ``threadPriority``.
    open var qualityOfService: QualityOfService {
        get { guarded.locked { $0.qualityOfService } }
        set {
            guarded.locked {
                $0.qualityOfService = newValue
                $0.qosExplicit = true
            }
            hasOwnPriority.store(true, ordering: .releasing)
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
            hasOwnPriority.store(true, ordering: .releasing)
        }
    }

    /// Runs once, after the operation has finished (whether it ran or was cancelled),
    /// and is then set to nil. It runs after the operation has been retired — its
    /// dependents released, its queue's counts updated, its waiters woken — as a task
    /// of its own on a worker of the operation's quality of service, outside any queue
    /// (``OperationQueue/current`` is nil there), as Foundation runs it on a secondary
    /// thread. So `waitUntilFinished()` may return before it has run.
    open var completionBlock: (@Sendable () -> Void)? {
        get {
            // Through a struct, as in finishProtocol: no re-abstraction.
            struct Box { let block: (@Sendable () -> Void)? }
            return guarded.locked { Box(block: $0.completionBlock) }.block
        }
        set {
            if newValue != nil { needsFinishLock.store(true, ordering: .sequentiallyConsistent) }
            guarded.locked { $0.completionBlock = newValue }
        }
    }

    /// The operations this one waits for (not the barriers its queue makes it wait for).
    open var dependencies: [Operation] {
        guarded.locked { $0.dependencies }.filter { !($0 is BarrierOperation) }
    }

    // MARK: - Dependencies

    /// Makes this operation wait until `op` has finished. Works across queues, and on
    /// an operation the queue holds as ready but has not started yet: it waits again.
    ///
    /// A dependency cycle, this operation included, is accepted, as by Foundation: none
    /// of its operations becomes ready until one of them is cancelled (a cancelled
    /// operation is ready whatever its dependencies, finishes without running
    /// ``main()``, and so releases the next).
    open func addDependency(_ op: Operation) {
        let added = guarded.locked { g -> Bool in
            if g.dependencies.contains(where: { $0 === op }) { return false }
            g.dependencies.append(op)
            return true
        }
        guard added else { return }
        hadDependencies.store(true, ordering: .releasing)
        // Count the edge first, then register with `op`. The other order races: `op`
        // could finish between the two steps and decrement before we increment, and
        // nobody would then notice that we became ready.
        willChangeValue(forKey: "isReady")
        guarded.locked { $0.unfinished += 1 }
        didChangeValue(forKey: "isReady")
        op.needsFinishLock.store(true, ordering: .sequentiallyConsistent)
        let registered = op.guarded.locked { g -> Bool in
            if op.finishHandled.load(ordering: .acquiring) { return false }
            g.dependents.insert(self) // self too, for `op === self`: see finishProtocol
            return true
        }
        // Already finished: the edge is satisfied at once.
        if !registered { dependencyFinished() }
    }

    /// Stops waiting for `op`. If that was the last unfinished dependency of a queued
    /// operation, the queue starts it.
    open func removeDependency(_ op: Operation) {
        let removed = guarded.locked { g -> Bool in
            guard let i = g.dependencies.firstIndex(where: { $0 === op }) else { return false }
            g.dependencies.remove(at: i)
            return true
        }
        guard removed else { return }
        let wasPending = op.guarded.locked { g -> Bool in
            g.dependents.remove(key: Dependents.key(self))
        }
        if wasPending { dependencyFinished() }
    }

    // MARK: - Waiting

    /// Blocks the calling thread until the operation has finished.
    ///
    /// The thread runs nothing else meanwhile, as Foundation documents: waiting inside an
    /// operation while holding a lock, or with thread-local state, is safe. Called from
    /// one of Spindle's workers, the pool runs a spare worker of the same class while
    /// this one waits (``ThreadPool/Configuration/maxSpareWorkers``), so waits inside
    /// operations cannot starve the pool. Traps when called from inside this same
    /// operation, which would wait forever.
    open func waitUntilFinished() {
        if finishCompleted.load(ordering: .acquiring) { return }
        if let current = ThreadState.current.currentOperation, current.toOpaque() == Unmanaged.passUnretained(self).toOpaque() {
            fatalError("Operation.waitUntilFinished() was called from inside \(describe()) itself: it would wait forever")
        }
        hasWaiters.store(true, ordering: .sequentiallyConsistent)
        var latch = spindle_latch()
        spindle_latch_init(&latch)
        withUnsafeMutablePointer(to: &latch) { l in
            let registered = guarded.locked { g -> Bool in
                if finishCompleted.load(ordering: .sequentiallyConsistent) { return false }
                g.waiters.append(Waiter(latch: l))
                return true
            }
            // Blocks this thread, whatever it is; a pool worker is compensated by a spare.
            if registered { spindle_latch_wait_blocking(l) }
        }
    }

    /// Suspends the calling task until the operation has finished, without blocking a
    /// thread (Spindle's addition; `waitUntilFinished()` blocks).
    public func finished() async {
        if finishCompleted.load(ordering: .acquiring) { return }
        hasWaiters.store(true, ordering: .sequentiallyConsistent)
        await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
            let registered = guarded.locked { g -> Bool in
                if finishCompleted.load(ordering: .sequentiallyConsistent) { return false }
                g.waiters.append(Waiter(continuation: c))
                return true
            }
            if !registered { c.resume() }
        }
    }

    // MARK: - Observation (Spindle's addition)

    /// Calls `handler` on every state change of this operation from now on: ready,
    /// executing, finished, cancelled. Handlers run synchronously on the thread that
    /// made the change and must be quick; they are released once the operation has
    /// finished.
    public func onStateChange(_ handler: @escaping @Sendable (StateChange) -> Void) {
        needsFinishLock.store(true, ordering: .sequentiallyConsistent)
        withExtras { $0.observers.append(handler) }
        hasObservers.store(true, ordering: .releasing)
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
    open var description: String { "<\(type(of: self)): \(Unmanaged.passUnretained(self).toOpaque())>" }

    // MARK: - Internals

    func describe() -> String {
        if let n = name { return "operation '\(n)'" }
        return "operation \(type(of: self)) \(ObjectIdentifier(self))"
    }

    /// Runs `body` on the out-of-line fields, creating them on first use, under the lock.
    func withExtras(_ body: (Extras) -> Void) {
        guarded.locked { g in
            if g.extras == nil { g.extras = Extras() }
            body(g.extras!)
        }
    }

    func notify(_ change: StateChange) {
        guard hasObservers.load(ordering: .acquiring) else { return }
        let observers = guarded.locked { $0.extras?.observers ?? [] }
        for o in observers { o(change) }
    }

    /// The effective class this operation runs at, given its queue's.
    func effectiveQoS(queueDefault: QualityOfService) -> QualityOfService {
        if !hasOwnPriority.load(ordering: .acquiring) { return queueDefault }
        let (qos, explicit, tp) = guarded.locked { ($0.qualityOfService, $0.qosExplicit, $0.extras?.threadPriority) }
        if explicit && qos != .default { return qos }
        if let tp, tp != 0.5 {
            switch tp {
            case ..<0.2: return .background
            case ..<0.4: return .utility
            case ..<0.6: return .default
            case ..<0.8: return .userInitiated
            default: return .userInteractive
            }
        }
        return queueDefault
    }

    /// One of our dependencies was removed, or had finished when it was added.
    func dependencyFinished() {
        let nowReady = guarded.locked { g -> Bool in
            g.unfinished -= 1
            return g.unfinished == 0
        }
        if nowReady { dependenciesSatisfied() }
    }

    /// Our last unfinished dependency is gone.
    func dependenciesSatisfied() {
        willChangeValue(forKey: "isReady")
        didChangeValue(forKey: "isReady") // evaluates readiness for the queue
        notify(.ready)
    }

    /// Tells the queue, exactly once, that this operation may start — if it is in a
    /// queue and its (possibly overridden) `isReady` says so.
    ///
    /// The other way too: an operation the queue holds as ready but has not started, whose
    /// `isReady` has turned false (a dependency added, a custom condition), is taken
    /// back, and waits until it is ready again ("not considered ready to execute until
    /// all of its dependent operations have finished"). Cancellation makes an operation
    /// ready through the base ``isReady``, so a custom condition still holds it.
    func evaluateReadiness() {
        let signalled = readySignalled.load(ordering: .acquiring)
        if signalled && !hasOwnReadiness { return }
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
                queue.operationBecameReady(self)
            } else if queue.operationBecameUnready(self) && isReady {
                // It turned ready again while the queue took it back, and its
                // notification found it still signalled: signal it now.
                queue.operationBecameReady(self)
            }
        }
    }

    /// Runs `body` on the operation's queue, if it still has one, for code that may run
    /// while the operation finishes (see `queuePins`).
    func withPinnedQueue(_ body: (OperationQueue) -> Void) {
        // Acquiring: a finish whose RMW on the pins came first cleared the word before it.
        queuePins.wrappingAdd(1, ordering: .acquiringAndReleasing)
        let bits = queueWord.load(ordering: .acquiring)
        if bits != 0 {
            Unmanaged<OperationQueue>.fromOpaque(UnsafeRawPointer(bitPattern: bits).unsafelyUnwrapped)
                ._withUnsafeGuaranteedRef(body)
        }
        if queuePins.wrappingSubtract(1, ordering: .acquiringAndReleasing).newValue == Operation.pinsCleared {
            releaseQueueReference()
        }
    }

    /// At the end of the finish of an operation that holds its queue: forgets the queue,
    /// so that a program that keeps the operation does not keep the queue (Foundation
    /// drops it too). Its `queueReference` goes now, or with the last pin.
    func dropQueue() {
        // Releasing: a pin that comes after our RMW below acquires it, and so reads 0.
        queueWord.store(0, ordering: .releasing)
        // Nobody pinned (the usual case): one CAS sets both flags, and the reference is
        // ours to drop. Otherwise flag the word cleared and let the last pin drop it.
        if queuePins.compareExchange(expected: 0, desired: Operation.pinsCleared | Operation.pinsReleased,
                                     ordering: .acquiringAndReleasing).exchanged {
            queueReference = nil
            return
        }
        queuePins.bitwiseOr(Operation.pinsCleared, ordering: .acquiringAndReleasing)
        releaseQueueReference()
    }

    /// Drops `queueReference` if the finish has cleared the word and no pin is held:
    /// once, by whoever wins the CAS.
    private func releaseQueueReference() {
        guard queuePins.compareExchange(expected: Operation.pinsCleared,
                                        desired: Operation.pinsCleared | Operation.pinsReleased,
                                        ordering: .acquiringAndReleasing).exchanged else { return }
        queueReference = nil
    }

    /// Whether readiness can turn false after the queue took the operation as ready: a
    /// class of its own may override `isReady`, and any operation can be given a new
    /// dependency. (A plain operation without dependencies skips the re-evaluation.)
    var hasOwnReadiness: Bool { !isPlainClass || hadDependencies.load(ordering: .acquiring) }

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

    /// Counts one finished dependency off `d`, under `d`'s lock; true when that was the
    /// last one and `d` is queued and unfinished — then the queue's list holds it, so it
    /// is alive and may be retained. A static function of a guaranteed reference, not a
    /// closure: nothing here may retain `d` (see finishProtocol).
    static func countDownOneEdge(_ d: Operation) -> Bool {
        let last = d.guarded.locked { dg -> Bool in
            dg.unfinished -= 1
            return dg.unfinished == 0
        }
        return last && d.queueWord.load(ordering: .acquiring) != 0 && !d.finishHandled.load(ordering: .acquiring)
    }

    /// Whether the operation was added to a queue and has not finished.
    var inQueue: Bool {
        queueWord.load(ordering: .acquiring) != 0 && !finishHandled.load(ordering: .acquiring)
    }

    /// Runs once, when the operation has finished by whatever path: releases
    /// dependents, tells the queue, drops the queue if it holds it, wakes waiters, and
    /// then hands the completion block to a worker.
    func finishProtocol() {
        guard finishHandled.compareExchange(expected: false, desired: true, ordering: .sequentiallyConsistent).exchanged else { return }
        // A custom asynchronous operation reports `isFinished` through its override;
        // make the base state agree.
        phase.store(Phase.finished.rawValue, ordering: .releasing)
        // What the locked part hands on, in a struct: a closure returned through the
        // lock's generic result in a tuple would be re-abstracted (two allocations).
        struct HandOff {
            var ready: [Operation] = []
            var completion: (@Sendable () -> Void)? = nil
        }
        var handOff = HandOff()
        if needsFinishLock.load(ordering: .sequentiallyConsistent) {
            handOff = guarded.locked { g -> HandOff in
                // Count this edge down in every dependent, under our lock (see Dependents).
                // Only dependents in a queue and unfinished are retained — the queue keeps
                // them alive, so they cannot be mid-deinit — to be told they are ready
                // once we unlock.
                //
                // A dependent may be in its deinit right now (its last reference went away
                // on another thread), blocked on our lock to deregister. It must not be
                // retained even for an instant — a retain and release of an object whose
                // count reached zero runs its deinit a second time — so it is reached
                // only as a guaranteed reference and never captured by a closure (a
                // capture is a retain in unoptimised builds; SPINDLE_STRESS=20 found it).
                var ready: [Operation] = []
                let me = Dependents.key(self)
                g.dependents.forEach { dependent in
                    // An operation that depends on itself (legal, if useless) is counted
                    // down here: its lock is the one we hold. It is finishing, so it
                    // needs no signal.
                    if Dependents.key(dependent) == me {
                        g.unfinished -= 1
                        return
                    }
                    let nowReady = dependent._withUnsafeGuaranteedRef(Operation.countDownOneEdge)
                    if nowReady { ready.append(dependent.takeUnretainedValue()) }
                }
                g.dependents = .none
                let c = g.completionBlock
                g.completionBlock = nil
                return HandOff(ready: ready, completion: c)
            }
        }
        let queue = ownerQueue
        // Operations this finish starts (ready dependents, the next of a width-limited
        // queue) may run next on this thread, without a trip through the pool, when
        // this is the operation the thread's chain runner is running (OpTask.runChain).
        let ts = ThreadState.unmanagedCurrent
        let chained = ts._withUnsafeGuaranteedRef { ts -> Bool in
            guard ts.chainOpen, ts.finishing == nil,
                  ts.currentOperation?.toOpaque() == Unmanaged.passUnretained(self).toOpaque() else { return false }
            ts.finishing = Unmanaged.passUnretained(self)
            return true
        }
        for d in handOff.ready { d.dependenciesSatisfied() }
        notify(.finished)
        // Where the completion block will run, read while the queue is certainly alive.
        let completionPool = handOff.completion == nil ? nil : QoSPools.engine(
            for: effectiveQoS(queueDefault: queue?._withUnsafeGuaranteedRef { $0.qualityOfService } ?? .default))
        // The queue is alive: it has not counted this operation finished (and holds
        // itself until it has). `operationFinished` may free it.
        queue?._withUnsafeGuaranteedRef { $0.operationFinished(self) }
        if chained { ts._withUnsafeGuaranteedRef { $0.finishing = nil } }
        // Written before the operation could start, never after.
        if queue != nil && queueAddedByCaller { dropQueue() }
        // Last: release the waiters. A waiter sets `hasWaiters` and then checks
        // `finishCompleted` under the lock; we set `finishCompleted` and then check
        // `hasWaiters` (all seq_cst): either it sees our flag and does not wait, or we
        // see its flag and take the lock — after its registration or before it, and in
        // the latter case it then sees `finishCompleted` under the lock.
        finishCompleted.store(true, ordering: .sequentiallyConsistent)
        if hasWaiters.load(ordering: .sequentiallyConsistent) || hasObservers.load(ordering: .acquiring) {
            let waiters = guarded.locked { g -> [Waiter] in
                let w = g.waiters
                g.waiters = []
                g.extras?.observers = []
                return w
            }
            for w in waiters { w.signal() }
        }
        if let completion = handOff.completion, let completionPool {
            runCompletionBlock(completion, on: completionPool)
        }
    }

    /// Runs the completion block after the operation has been retired: dependents
    /// released, its queue told, waiters woken. As with Foundation, it runs as a task of
    /// its own (on a worker of the operation's class), not on the thread that finished
    /// the operation, outside any queue: inside it ``OperationQueue/current`` is nil
    /// (on a worker), and it may wait for its operation, a dependent, or the queue —
    /// even a serial queue it adds an operation to — without deadlocking the finish it
    /// would otherwise be part of. The task holds the operation, so a block that
    /// captures it `unowned` finds it alive.
    func runCompletionBlock(_ completion: @escaping @Sendable () -> Void, on pool: OpaquePointer) {
        let task = ClosureTask.make { [self] in
            ThreadState.current.withRunningContext((nil, nil), completion)
            withExtendedLifetime(self) {}
        }
        let rc = spindle_submit_task(pool, task)
        // Process-wide pools refuse shutdown (ThreadPool.Error.processWidePool).
        precondition(rc == 0, "Spindle: a process-wide pool refused a completion block (engine bug, rc \(rc))")
    }
}

/// A ``BlockOperation``'s first block, in a non-copyable box so that running it borrows
/// the closure where it is stored.
///
/// Calling a closure kept in a class's `var` copies it out first — a retain before the
/// call and a release after, on the worker, of a context the adding thread allocated
/// (and later frees): two atomic operations and a cache line pulled across per
/// operation. A `let` would be borrowed, but the block is set after `init()` (see
/// `Operation.blockBody`). A non-copyable value cannot be copied out, so the stored
/// box is borrowed in place for the call, and a `borrowing` method reaches the closure
/// without a copy.
struct BlockBody: ~Copyable {
    var block: (@Sendable () -> Void)?

    init(_ block: (@Sendable () -> Void)? = nil) { self.block = block }

    /// Runs the block, if there is one, without retaining it.
    @inline(__always)
    borrowing func run() { block?() }
}

/// The unretained list of an operation's dependents.
///
/// Why unretained references are safe here. A dependent D is touched through this list
/// only by the dependency finishing, and only while that dependency holds its own lock.
/// D's deinit removes D from every dependency's list under that dependency's lock. So
/// either D deregistered first (and is never touched), or the finishing dependency holds
/// its lock across every touch and D's deinit waits for it: D's memory is valid for as
/// long as anyone uses it. Dependents are retained only when they are in a queue, which
/// keeps them alive (refcount > 0). Nothing is allocated for zero or one dependent (a
/// chain); a wide fan-out uses a dictionary, so removal stays O(1) when many dependents
/// go away at once (cancelAllOperations on thousands waiting for one operation).
///
/// Rejected: weak references. Correct and simple, but each weakly referenced operation
/// gets a side-table allocation: ~400 ns per operation on a dependency chain (measured).
enum Dependents {
    case none
    case one(Unmanaged<Operation>)
    /// Keyed by the object's address, which needs no reference (and no retain) to
    /// compute: a dependent may be in its deinit while we look.
    case many([UInt: Unmanaged<Operation>])

    var isEmpty: Bool { if case .none = self { return true } else { return false } }

    static func key(_ op: Operation) -> UInt { key(Unmanaged.passUnretained(op)) }
    static func key(_ u: Unmanaged<Operation>) -> UInt { UInt(bitPattern: u.toOpaque()) }

    mutating func insert(_ op: Operation) {
        let u = Unmanaged.passUnretained(op)
        switch self {
        case .none: self = .one(u)
        case .one(let first): self = .many([Dependents.key(first): first, Dependents.key(u): u])
        case .many(var all):
            self = .none
            all[Dependents.key(u)] = u
            self = .many(all)
        }
    }

    /// Removes the operation at `key` if present; returns whether it was.
    @discardableResult
    mutating func remove(key: UInt) -> Bool {
        switch self {
        case .none: return false
        case .one(let only):
            guard Dependents.key(only) == key else { return false }
            self = .none
            return true
        case .many(var all):
            self = .none
            let removed = all.removeValue(forKey: key) != nil
            self = all.isEmpty ? .none : .many(all)
            return removed
        }
    }

    func forEach(_ body: (Unmanaged<Operation>) -> Void) {
        switch self {
        case .none: break
        case .one(let only): body(only)
        case .many(let all): all.values.forEach(body)
        }
    }
}

/// Someone waiting for an operation or a queue: a thread on a latch, or a task.
struct Waiter: @unchecked Sendable {
    // @unchecked: the latch lives on the waiting thread's stack until it is set, and
    // only the finishing thread sets it, once.
    private let latch: UnsafeMutablePointer<spindle_latch>?
    private let continuation: CheckedContinuation<Void, Never>?

    init(latch: UnsafeMutablePointer<spindle_latch>) {
        self.latch = latch
        self.continuation = nil
    }

    init(continuation: CheckedContinuation<Void, Never>) {
        self.latch = nil
        self.continuation = continuation
    }

    func signal() {
        if let latch { spindle_latch_set(latch) }
        continuation?.resume()
    }
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
