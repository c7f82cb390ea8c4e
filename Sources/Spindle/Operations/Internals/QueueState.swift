import Dispatch
import Synchronization

// What an OperationQueue's lock guards, and the scheduling steps taken under it.
//
// One lock per queue (a futex mutex: Runtime/Locking.swift) guards this struct and the
// `QueueFields` of every operation in the queue. The counts are outside it, in one atomic
// word (QueueMembership.swift), so that the common add and finish need no second RMW.

extension OperationQueue {
    @unsafe
    struct State {
        // safety: head and tail are the queue list's retained references, released only
        // when unlinked (QueueRegistry.swift); the rings hold operations the list keeps
        // (ReadyRings.swift).
        let ready = ReadyRings()
        /// The operations added, in order: an intrusive doubly linked list through
        /// `Operation.queueFields.prev/queueFields.next`, holding one retained reference to each.
        /// Finished ones (`queueSync.done`) are unlinked lazily by `prune`, by the thread
        /// adding operations, and all at once when the queue drains.
        var head: Unmanaged<Operation>?
        var tail: Unmanaged<Operation>?
        /// How many operations are linked, finished or not.
        var linked = 0
        /// The next `QueueFields.order` to give: one per operation linked or moved to
        /// another priority level. The 58 bits an order is kept in never wrap.
        var nextOrder: UInt64 = 0
        /// Threads releasing operations the queue let go of, other than the adding
        /// thread's prunes: a wait returns after the last (QueueRelease.swift).
        var releasing = 0
        /// `nextOrder` when the newest operation finished and a check for a queue to
        /// which nothing is being added was scheduled (`releaseIfQuiet`); nil when none
        /// is.
        var quietCheck: UInt64? = nil
        /// `nextOrder` when the queue's watch was last armed (`watchTick`); nil when it
        /// is not armed.
        var watch: UInt64? = nil
        /// Milliseconds until the watch's next tick: the first after an add, doubled
        /// at each tick that finds nothing added, up to `OperationQueue.watchMaxDelay`.
        var watchDelay = OperationQueue.watchMinDelay
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
        /// Set once an operation with a class of its own is added: a wait for the whole
        /// queue must then look for operations below the waiter's class even when the
        /// queue's own class is not (Promotion.swift, `promoteAll`).
        var ownClassAdded = false
        /// The lowest class the queue has had while it held operations (a `ClassRank`),
        /// and the highest class a promotion's walk skipped the queue for since it last
        /// drained (Promotion.swift, P2).
        var lowestRank = ClassRank.of(QualityOfService.default)
        var skippedWaitRank: UInt8 = 0
        /// The highest class of a wait for the whole queue since it last drained: an
        /// operation added meanwhile rises to it on its add (Promotion.swift, P3).
        var drainWaitRank: UInt8 = 0
        var underlyingQueue: DispatchQueue?
        var lastBarrier: Operation?
        var waiters: [Waiter] = unsafe []
        var countObservers: [(id: Int, handler: @Sendable (Int) -> Void)] = []
        var nextObserverID = 0
        var progress: QueueProgress?
        /// Whether the queue is in direct mode (QueueMode.swift, D1-D3): read on every
        /// add, recomputed by `refreshMode()` wherever one of its inputs changes.
        var direct = true
    }
}

extension OperationQueue.State {
    var readyIsEmpty: Bool { unsafe ready.isEmpty }

    /// Puts `op` on its ready line (`QueueFields.level`).
    @inline(__always)
    func push(_ op: Operation) { unsafe ready.push(op, level: op.queueFields.level) }

    /// The highest-priority ready operation, skipping retired ones, and handing back a
    /// plain one that has been given an unfinished dependency since it was found ready:
    /// it is signalled again when that dependency finishes (`evaluateReadiness`). A
    /// subclass's readiness is its own `isReady`, which may not count dependencies
    /// (R7); the `evaluateReadiness` that follows a new dependency takes it back if
    /// that says so.
    /// Static, on the rings alone: as a method of the state, called from the mutating
    /// `takeStartable`, it would have the whole state copied for each call.
    @inline(__always)
    static func popReady(_ ready: ReadyRings) -> Unmanaged<Operation>? {
        while let u = unsafe ready.pop() {
            if unsafe !u.withGuaranteedReference(Self.isPassedOver) { return unsafe u }
        }
        return nil
    }

    /// Whether a ready operation the queue comes to is not started after all: retired,
    /// or a plain one given an unfinished dependency since it was found ready.
    @inline(__always)
    static func isPassedOver(_ op: Operation) -> Bool {
        unsafe op.queueFields.retired
            || (op.hadDependencies.load(ordering: .relaxed) && op.isPlainClass && Self.isWaitingAgain(op))
    }

    /// Whether a queue of width `maxConcurrent` may start one more operation now.
    /// seq_cst load: after the RMW that set `scheduledBit` (see there).
    @inline(__always)
    static func hasRoom(_ maxConcurrent: Int, _ counts: borrowing Atomic<UInt64>) -> Bool {
        maxConcurrent < 0 || Int(counts.load(ordering: .sequentiallyConsistent) & OperationQueue.runningMask) < maxConcurrent
    }

    /// Counts `op` running and marks it started, as the queue takes it.
    @inline(__always)
    static func countStarted(_ op: Operation, _ counts: borrowing Atomic<UInt64>) {
        counts.wrappingAdd(1, ordering: .sequentiallyConsistent)
        op.setQueueRun(.started)
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
            op.queueSync.readySignalled.store(false, ordering: .relaxed)
            return true
        }
    }

    /// Whether a plain operation has unfinished dependencies, under its lock: the
    /// add's read (QueueMembership.swift, A2), taken under the queue's lock as
    /// `isWaitingAgain` is. Out of line: only operations with dependencies take it.
    @inline(never)
    static func countsUnfinished(_ op: Operation) -> Bool { op.guarded.locked { $0.unfinished > 0 } }

    /// The ready line `op` belongs on, decided as it is linked: its queue priority; when
    /// none was assigned and the queue is not serial, its quality of service's
    /// (Foundation's rule: userInteractive as veryHigh, userInitiated high, utility
    /// low, background veryLow).
    func level(of op: Operation) -> Int { unsafe op.queueLevel(serial: maxConcurrent == 1) }

    /// Takes the operations that may start now and counts them as running in
    /// `counts` (see ``OperationQueue/counts``).
    mutating func takeStartable(_ counts: borrowing Atomic<UInt64>) -> Startable {
        guard unsafe !suspended && batching == 0 else { return .none }
        var out = Startable.none
        let ready = unsafe ready
        while unsafe Self.hasRoom(maxConcurrent, counts), let u = unsafe Self.popReady(ready) {
            unsafe u.withGuaranteedReference { unsafe Self.countStarted($0, counts) }
            unsafe out.append(u)
        }
        return out
    }

    /// `op`, just signalled ready, started if it may start now while no other operation
    /// is ready: what pushing it and `takeStartable` would do, since the rings would
    /// hand back this very operation, without the trip through them. nil when the queue
    /// cannot start anything now (suspended, batching, full): the caller pushes it.
    mutating func takeAlone(_ op: Operation, _ counts: borrowing Atomic<UInt64>) -> Startable? {
        guard unsafe !suspended && batching == 0 && ready.isEmpty && Self.hasRoom(maxConcurrent, counts) else { return nil }
        if unsafe Self.isPassedOver(op) { return Startable.none }
        unsafe Self.countStarted(op, counts)
        // safety: started; the list keeps it until its runner is done (`Startable`).
        return unsafe .one(Unmanaged.passUnretained(op))
    }
}

/// The operations a scheduling step lets start: almost always none or one, which
/// need no array (and no allocation) on the per-operation path.
///
/// Unretained, as they came from the ready rings. Trivial, so that the add's path
/// destroys no `Startable` it made: several operations sit in a batch that the value
/// retains and `OperationQueue.dispatch`, which every non-empty one reaches, releases.
@safe
enum Startable {
    // safety: each operation has been started (counted as running), and the queue's
    // list does not release a started operation before its runner is done with it
    // (`QueueSync.runState`), which is after it is dispatched. The batch is retained
    // once, by `append`, and released once, by `dispatch`.
    case none
    case one(Unmanaged<Operation>)
    case many(Unmanaged<Batch>)

    @safe
    final class Batch {
        // safety: unretained, as the enum's cases.
        var operations: [Unmanaged<Operation>] = unsafe []
    }

    mutating func append(_ u: Unmanaged<Operation>) {
        switch self {
        case .none: unsafe self = .one(u)
        case .one(let first):
            let batch = Batch()
            unsafe batch.operations = unsafe [first, u]
            unsafe self = .many(Unmanaged.passRetained(batch))
        case .many(let batch): unsafe batch.takeUnretainedValue().operations.append(u)
        }
    }

    var isEmpty: Bool { if case .none = self { return true } else { return false } }
}
