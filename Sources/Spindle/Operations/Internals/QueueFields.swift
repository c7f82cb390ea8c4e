import Synchronization

// The fields of an operation that belong to the queue it is added to, and the one
// protocol among them that code outside the queue uses: pinning the queue.
//
// An operation is claimed by one queue with one CAS on `QueueSync.word`, which is also
// how adding it twice, or to two queues, is detected. From then on:
// - `QueueFields` (a plain struct) is read and written only under that queue's lock,
//   but for the links of operations the list has let go, which the thread releasing
//   them reads after unlocking (QueueRegistry.swift, `release`);
// - `QueueRunFlags` (one atomic byte) is set in order and read from any thread;
// - `QueueSync` (atomics) is read from any thread;
// - `Operation.queueReference`, the strong reference behind the word, is set by the
//   thread that claimed the operation (or by the queue, under its lock, when it
//   hands out one it made) and dropped by the finish or by the last pin.
//
// Pins (Q1-Q3). Code outside the queue's own paths — `cancel()`, a readiness or
// priority change — may run on any thread while the operation finishes, and reaches the
// queue through `withPinnedQueue`:
// Q1. A pin is one RMW on `pins` before `word` is read; the finish clears `word`, then
//     sets `pinsCleared` with one RMW. Both on one word, so in one modification order.
// Q2. A pin taken before `pinsCleared` is seen by the finish, which then leaves the
//     reference to the last pin to go; one taken after reads `word` as 0 and leaves the
//     queue alone.
// Q3. Whoever sets `pinsReleased` (one CAS) drops `queueReference`: the finish when no
//     pin is held, else the last pin.
// Model: Tests/Models/queue_pins.pml checks Q1-Q3 with two pinners against the finish,
// the operation's reference taken to be the queue's last.

/// The atomics an operation's queue reads and writes from any thread.
struct QueueSync: ~Copyable {
    // The bytes first, then `pins` and `word`, without padding: a worker sets `done` and
    // `runState` on every operation, and the operation keeps what workers write within
    // as few cache lines as it can (see its layout note).
    /// Set when the queue takes this operation as ready: exactly once (Readiness.swift,
    /// R3). Written only under the queue's lock (so a plain store suffices); read
    /// anywhere as a hint.
    let readySignalled = Atomic<Bool>(false)
    /// Set when the queue has counted this operation finished; it may then be pruned
    /// from the queue's list by another thread (once its runner is done with it too).
    let done = Atomic<Bool>(false)
    /// Who still needs the queue list's reference to an operation the queue started:
    /// `runnerDone` is set by the thread that ran it, after its last access; `listGone`
    /// by a drain that unlinked it before that. Whoever sets the second bit releases
    /// the list's reference.
    ///
    /// A drain sets `reports` with `listGone` when the runner returns as soon as the
    /// finish does — the operation's `start()` is Spindle's own — so that the queue's
    /// waits can return only once its operations are released: the runner, having
    /// released it, reports to the queue (`OperationQueue.drainedOperationReleased`),
    /// which counted it in `releasing` and gave the runner a reference to itself for
    /// that. A `start()` of a subclass's own may go on after the operation has
    /// finished, for as long as it likes; the queue's waits do not wait for it.
    ///
    /// The runner borrows that reference instead of holding one of its own, which
    /// saves a retain on the adding thread and a release on the worker per operation.
    /// Pruning, which releases most operations, only takes one whose runner is done; a
    /// drain, which releases everything linked, may meet one whose runner is still
    /// returning from it — both sides then use one RMW here, and the later one releases.
    let runState = Atomic<UInt8>(0)
    static let runnerDone: UInt8 = 1
    static let listGone: UInt8 = 2
    static let reports: UInt8 = 4
    /// Set (under the queue's lock) when an operation is added after this one: until
    /// then it is the newest, and its finish, with nothing added since it was, lets go
    /// of what has finished (`OperationQueue.finishLocked`). A hint read without the
    /// lock, decided under it. In the byte the alignment of `pins` leaves free.
    let succeeded = Atomic<Bool>(false)
    /// Pins on `word` (Q1-Q3), in the low bits, and the two flags. A pin is held only
    /// inside `withPinnedQueue`, so the count stays far below the flags.
    let pins = Atomic<UInt32>(0)
    static let pinsCleared: UInt32 = 1 << 30
    static let pinsReleased: UInt32 = 1 << 31
    /// The queue (its address; 0: none). Read without reference counting: valid while
    /// the operation is unfinished (the queue holds itself: QueueMembership.swift), then
    /// for as long as `queueReference` is set. One the program added clears it when it
    /// has finished (`dropQueue`).
    let word = Atomic<UInt>(0)
}

/// The fields an operation's queue reads and writes only under its lock.
@unsafe
struct QueueFields {
    // safety: the list links are unretained; the queue's list holds the one retained
    // reference to each operation it links (QueueRegistry.swift).
    /// Neighbours in the queue's list of operations (which holds the retained
    /// reference; finished ones stay until the list is pruned: QueueRegistry.swift).
    var prev: Unmanaged<Operation>?
    var next: Unmanaged<Operation>?
    /// `order`, `level` and three flags, in one word so that the operation stays within
    /// its allocation size (OperationLayoutTests).
    private var orderAndFlags: UInt64 = 0
    private static let linkedBit: UInt64 = 1, retiredBit: UInt64 = 2, inRingBit: UInt64 = 4
    private static let levelShift: UInt64 = 3, orderShift: UInt64 = 6

    /// Its place in the order in which the queue's operations of one priority start:
    /// the order they were added in, as in Foundation, whose queue starts, among the
    /// ready operations of the highest priority, the one added first. Given by
    /// `link`, and given again (the queue's next) when a change of priority moves the
    /// operation to the end of another level (`operationPriorityChanged`). The ready
    /// lines keep each level in this order (ReadyRings.swift). 58 bits never wrap.
    var order: UInt64 {
        get { unsafe orderAndFlags >> Self.orderShift }
        set { unsafe orderAndFlags = unsafe newValue << Self.orderShift | orderAndFlags & (1 << Self.orderShift - 1) }
    }
    /// The ready line it waits on when ready: decided when it is linked, from its
    /// priority or, on a queue that is not serial, its quality of service, as Foundation
    /// decides it when the operation is added; changed only by a change of its priority.
    var level: Int {
        get { unsafe Int(truncatingIfNeeded: orderAndFlags >> Self.levelShift & 7) }
        set { unsafe orderAndFlags = unsafe orderAndFlags & ~(7 << Self.levelShift) | UInt64(newValue) << Self.levelShift }
    }
    /// Set when the queue has registered this operation (its list and count): until
    /// then a readiness signal from another thread (a concurrent `cancel()`) is left
    /// to `enqueue`, which evaluates readiness itself. Cleared when the list lets it go
    /// (`detach`): a signal that arrives after that is left alone too.
    var linked: Bool {
        get { unsafe orderAndFlags & Self.linkedBit != 0 }
        set { unsafe set(Self.linkedBit, newValue) }
    }
    /// Set when its finish retired it without a start: it may still sit in a ready
    /// list, where it is skipped.
    var retired: Bool {
        get { unsafe orderAndFlags & Self.retiredBit != 0 }
        set { unsafe set(Self.retiredBit, newValue) }
    }
    /// Set while it sits in one of the queue's ready lines, which hold it unretained:
    /// the list keeps it until the line lets it go (ReadyRings.swift).
    var inRing: Bool {
        get { unsafe orderAndFlags & Self.inRingBit != 0 }
        set { unsafe set(Self.inRingBit, newValue) }
    }

    private mutating func set(_ bit: UInt64, _ on: Bool) {
        unsafe orderAndFlags = unsafe on ? orderAndFlags | bit : orderAndFlags & ~bit
    }
}

/// The flags of an operation's queue membership that threads read without the queue's
/// lock (`Operation.queueRunFlags`): the finish reads them, and a runner sets one.
///
/// Each is set once and never cleared, and each set happens after the sets before it:
/// the add sets `held` and `addedByCaller` before the queue links the operation, or sets
/// `held` under the lock; whoever starts it sets `started` under the lock before it
/// runs; its runner sets `reportsProgress` before `start()`. So a set is a load and a
/// store, not a read-modify-write. The byte is atomic so that reading it while another
/// flag of it is set is not a data race.
struct QueueRunFlags: OptionSet {
    let rawValue: UInt8
    /// The queue started it (counted it as running).
    static let started = QueueRunFlags(rawValue: 1)
    /// `queueReference` was set before the operation could start (by the adding thread,
    /// or by the queue when it was not in direct mode), so its finish may decrement the
    /// counts before it takes the queue's lock (`OperationQueue.operationFinished`). Not
    /// set by `operations`, which hands operations out while they may be finishing.
    static let held = QueueRunFlags(rawValue: 2)
    /// Set with `held` for an operation the program made and added: the one kind a
    /// program may keep after it finished, so the one whose finish drops its queue
    /// (`dropQueue`). One made by the block form is reachable only through
    /// `operations`, and otherwise dies with the queue's list.
    static let addedByCaller = QueueRunFlags(rawValue: 4)
    /// Set by the queue's runner, before `start()`, when the queue reports progress:
    /// `start()` then runs `main()` inside a child progress (`runReportingProgress`).
    static let reportsProgress = QueueRunFlags(rawValue: 8)
}

extension Operation {
    /// The queue's flags for this operation that are read without its lock.
    var queueRun: QueueRunFlags { QueueRunFlags(rawValue: queueRunFlags.load(ordering: .relaxed)) }

    /// Sets `flags`: a load and a store (see `QueueRunFlags`). Relaxed: each set is
    /// ordered before its readers by the lock or the hand-off that follows it.
    @inline(__always)
    func setQueueRun(_ flags: QueueRunFlags) {
        queueRunFlags.store(queueRunFlags.load(ordering: .relaxed) | flags.rawValue, ordering: .relaxed)
    }
}

extension Operation {
    /// The queue, if any — alive while this operation is unfinished (the queue holds
    /// itself), and after that as long as `queueReference` is set.
    var ownerQueue: Unmanaged<OperationQueue>? {
        let bits = queueSync.word.load(ordering: .acquiring)
        // safety: a non-zero word is the queue, alive as this property's documentation
        // says.
        return unsafe bits == 0 ? nil : Unmanaged.fromOpaque(UnsafeRawPointer(bitPattern: bits)!)
    }

    /// Whether the operation was added to a queue and has not finished.
    var inQueue: Bool {
        queueSync.word.load(ordering: .acquiring) != 0 && !finishHandled.load(ordering: .acquiring)
    }

    /// Whether the queue's list may release its reference now: the queue never started
    /// it, or its runner is done with it (acquiring: pairs with the runner's RMW, so
    /// its accesses happen before the release).
    var runnerIsDone: Bool {
        !queueRun.contains(.started) || queueSync.runState.load(ordering: .acquiring) & QueueSync.runnerDone != 0
    }

    /// Runs `body` on the operation's queue, if it still has one, for code that may run
    /// while the operation finishes (see `queueSync.pins`).
    func withPinnedQueue(_ body: (OperationQueue) -> Void) {
        // Acquiring: a finish whose RMW on the pins came first cleared the word before it.
        queueSync.pins.wrappingAdd(1, ordering: .acquiringAndReleasing)
        let bits = queueSync.word.load(ordering: .acquiring)
        if bits != 0 {
            // safety: the pin taken above keeps the queue from being freed until it is let
            // go (LT3).
            unsafe Unmanaged<OperationQueue>.fromOpaque(UnsafeRawPointer(bitPattern: bits).unsafelyUnwrapped)
                .withGuaranteedReference(body)
        }
        if queueSync.pins.wrappingSubtract(1, ordering: .acquiringAndReleasing).newValue == QueueSync.pinsCleared {
            releaseQueueReference()
        }
    }

    /// At the end of the finish of an operation that holds its queue: forgets the queue,
    /// so that a program that keeps the operation does not keep the queue (Foundation
    /// drops it too). Its `queueReference` goes now, or with the last pin.
    func dropQueue() {
        // Releasing: a pin that comes after our RMW below acquires it, and so reads 0.
        queueSync.word.store(0, ordering: .releasing)
        // Nobody pinned (the usual case): one CAS sets both flags, and the reference is
        // ours to drop. Otherwise flag the word cleared and let the last pin drop it.
        if queueSync.pins.compareExchange(expected: 0, desired: QueueSync.pinsCleared | QueueSync.pinsReleased,
                                     ordering: .acquiringAndReleasing).exchanged {
            unsafe queueReference = nil
            return
        }
        queueSync.pins.bitwiseOr(QueueSync.pinsCleared, ordering: .acquiringAndReleasing)
        releaseQueueReference()
    }

    /// Drops `queueReference` if the finish has cleared the word and no pin is held:
    /// once, by whoever wins the CAS.
    func releaseQueueReference() {
        guard queueSync.pins.compareExchange(expected: QueueSync.pinsCleared,
                                        desired: QueueSync.pinsCleared | QueueSync.pinsReleased,
                                        ordering: .acquiringAndReleasing).exchanged else { return }
        unsafe queueReference = nil
    }
}
