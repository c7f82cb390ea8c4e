import Synchronization

// The operation's state behind its lock, and the small helpers around it.
//
// Most of an operation's state sits in one `Guarded` struct under one Mutex: its
// dependencies and dependents, its waiters (its completion block, under the same lock,
// is a field of the class: see `Guarded` for why). What the hot paths
// need without a lock is in atomics declared with the class (Operation.swift), each
// documented where its protocol is: the phase (OperationLifecycle.swift), the finish
// flags (OperationLifecycle.swift), the queue's fields (QueueFields.swift).

extension Operation {
    /// Fields used by few operations live out of line, made on first use.
    ///
    /// For memory: every operation carries `Guarded`, so each field here is one that
    /// few operations use (see the layout note in Operation.swift). And for the one
    /// cost per operation that a field adds besides its bytes: each field left in
    /// `Guarded` is destroyed with every operation, and releasing even an empty array
    /// is a call into the runtime.
    @safe
    final class Extras: @unchecked Sendable {
        // safety: each waiter's latch stays valid until the waiter is signalled, once,
        // after it is taken off this list under the operation's lock (Waiter.swift).
        // @unchecked: every field is read and written under the operation's lock.
        var name: String?
        var threadPriority: Double = 0.5
        var observers: [@Sendable (StateChange) -> Void] = []
        /// Threads and tasks waiting for the operation to finish (F6): the first in a
        /// field of its own, so that the usual single wait (`OperationQueue.run`, one
        /// `waitUntilFinished`) allocates no array.
        var firstWaiter: Waiter? = nil
        var moreWaiters: [Waiter] = unsafe []

        func addWaiter(_ w: Waiter) {
            if unsafe firstWaiter == nil { unsafe firstWaiter = unsafe w } else { unsafe moreWaiters.append(w) }
        }

        /// Takes every listed waiter off the list, in the order they came.
        func takeWaiters() -> (first: Waiter?, more: [Waiter]) {
            defer {
                unsafe firstWaiter = nil
                unsafe moreWaiters = unsafe []
            }
            return unsafe (firstWaiter, moreWaiters)
        }
    }

    /// Everything behind the operation's lock.
    ///
    /// Trivially destroyed: every field is a plain value or a word that holds a
    /// reference it releases itself, so freeing an operation costs nothing here. Were
    /// a field an ordinary reference, even a nil one, every operation's deallocation
    /// would destroy the struct through the generic `Mutex`'s value witness and call
    /// the runtime's release once per field: a cost per operation, for fields that
    /// most operations never set. The references live instead in `dependencies` and
    /// `extrasWord`, which own them, and an operation's deinit takes the lock and lets
    /// them go only when `hadDependencies` or `hasExtras` says there is something to
    /// let go; `dependents` holds no reference that outlives its operation's finish.
    /// (The completion block, which many operations set, is outside the struct, in
    /// `Operation.completionStorage`: a closure's context cannot be held as a word.)
    @safe
    struct Guarded {
        // safety: the unretained dependents stay valid while listed: a dependent takes
        // itself off this list, under this lock, in its deinit (Dependents.swift).
        var dependencies = DependencyList()
        /// Dependencies that have not finished yet. Readiness is `== 0`.
        var unfinished = 0
        /// The out-of-line fields (`Extras`), retained once, or nil until first used
        /// (`Operation.extras(in:)`, which sets `hasExtras`); released by deinit.
        var extrasWord: Unmanaged<Extras>?
        // The fields of a byte or so come last, where the ones after them need no
        // padding: every operation carries this struct (see `Operation`'s layout note).
        /// Operations that depend on this one, unretained (as Foundation keeps them): a
        /// dependent dropped by its owner is freed, and takes itself off this list in
        /// its deinit (see `Dependents` for why that is safe).
        var dependents = unsafe Dependents.none
        var qualityOfService: QualityOfService = .default
        var qosExplicit = false

        /// The out-of-line fields, if they were made.
        var extras: Extras? {
            // safety: a non-nil word holds the reference this struct owns.
            unsafe extrasWord?.takeUnretainedValue()
        }
    }

    func describe() -> String {
        if let n = name { return "operation '\(n)'" }
        return "operation \(type(of: self)) \(ObjectIdentifier(self))"
    }

    /// The out-of-line fields of `g`, this operation's locked state, created on first
    /// use. Called under the lock.
    func extras(in g: inout Guarded) -> Extras {
        if let extras = g.extras { return extras }
        let made = Extras()
        // safety: the struct's one reference, released by deinit (`hasExtras`).
        unsafe g.extrasWord = unsafe Unmanaged.passRetained(made)
        // Relaxed: deinit, its only reader, comes after every other access.
        hasExtras.store(true, ordering: .relaxed)
        return made
    }

    /// The deinit of an operation whose locked state holds references: leaves each
    /// dependency's list of dependents, releases the dependencies iteratively, and
    /// releases the out-of-line fields — outside the lock, since their observers'
    /// contexts may run a user's deinit.
    @inline(never)
    func dropLockedReferences() {
        let (deps, extras) = unsafe guarded.locked { g in
            defer { unsafe g.extrasWord = nil }
            return unsafe (g.dependencies.take(), g.extrasWord)
        }
        unsafe extras?.release()
        guard !deps.isEmpty else { return }
        // Take ourselves off each dependency's list of dependents. A dependency that is
        // finishing right now holds its lock while it walks that list and touches us;
        // taking the same lock here waits for it, so nobody touches this object after
        // deinit returns. (We hold no lock of ours meanwhile: the finishing dependency
        // takes ours inside its own.)
        let me = unsafe Dependents.key(self)
        for d in deps { _ = d.guarded.locked { unsafe $0.dependents.remove(key: me) } }
        ThreadState.releaseIteratively(consume deps)
    }

    /// Runs `body` on the out-of-line fields, creating them on first use, under the lock.
    func withExtras(_ body: (Extras) -> Void) {
        guarded.locked { g in body(extras(in: &g)) }
    }

    /// Tells the observers of `change`: inlined, so that an operation nobody observes,
    /// the usual one, pays one load and no call.
    @inline(__always)
    func notify(_ change: StateChange) {
        if hasObservers.load(ordering: .acquiring) { notifyObservers(change) }
    }

    @inline(never)
    private func notifyObservers(_ change: StateChange) {
        let observers = guarded.locked { $0.extras?.observers ?? [] }
        for o in observers { o(change) }
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
}

/// An operation's dependencies, as its locked state holds them: what an `OperationList`
/// holds, in words that cost nothing to destroy (see `Operation.Guarded`). It owns one
/// reference to each dependency — the first's as a retained word, the others' through
/// the box it retains — releases one when `remove` takes it out, and hands the rest to
/// `take()`, which the deinit of an operation that had dependencies calls.
@safe
struct DependencyList {
    // safety: `first` and `more` are retained once each, by `append` and `remove`,
    // and released once each, by `remove` and `take`; no copy of the struct outlives
    // the lock of the operation that holds it but the one in its locked state.
    private var first: Unmanaged<Operation>?
    private var more: Unmanaged<Box>?

    /// The dependencies after the first, in order.
    final class Box {
        var operations: [Operation] = []
    }

    init() {}

    var isEmpty: Bool { unsafe first == nil }
    var count: Int {
        guard unsafe first != nil else { return 0 }
        return unsafe 1 + (more?.takeUnretainedValue().operations.count ?? 0)
    }

    /// The first dependency.
    var head: Operation? { unsafe first?.takeUnretainedValue() }

    /// The dependency when there is exactly one, unretained: for use under the lock of
    /// the operation that holds the list, which keeps it alive meanwhile.
    var onlyUnretained: Unmanaged<Operation>? { unsafe count == 1 ? first : nil }

    // The usual list, of one dependency or none, is handled inline, the box out of
    // line: a function that may allocate or loop saves registers on every call.

    /// Whether `op` is listed (by identity), without retaining any.
    @inline(__always)
    func contains(identical op: Operation) -> Bool {
        // safety: addresses compared, not dereferenced.
        if unsafe first?.toOpaque() == Unmanaged.passUnretained(op).toOpaque() { return true }
        guard let more = unsafe more else { return false }
        return unsafe Self.box(more, contains: op)
    }

    @inline(never)
    private static func box(_ box: Unmanaged<Box>, contains op: Operation) -> Bool {
        unsafe box.takeUnretainedValue().operations.contains(where: { $0 === op })
    }

    @inline(__always)
    mutating func append(_ op: Operation) {
        if unsafe first == nil {
            // safety: the list's reference, released by `remove` or `take`.
            unsafe first = unsafe Unmanaged.passRetained(op)
        } else {
            appendToBox(op)
        }
    }

    @inline(never)
    private mutating func appendToBox(_ op: Operation) {
        if let box = unsafe more?.takeUnretainedValue() {
            box.operations.append(op)
        } else {
            let box = Box()
            box.operations.append(op)
            // safety: the list's reference to the box, released by `dropBox`.
            unsafe more = unsafe Unmanaged.passRetained(box)
        }
    }

    /// Removes `op` (by identity), keeping the others' order; whether it was there.
    mutating func remove(_ op: Operation) -> Bool {
        // safety: addresses compared; the reference released is the list's own, and the
        // one made for the next dependency, taken from the box, becomes the list's.
        if unsafe first?.toOpaque() == Unmanaged.passUnretained(op).toOpaque() {
            unsafe first?.release()
            unsafe first = nil
            if let box = unsafe more?.takeUnretainedValue() {
                // The box holds one at least: it goes once it holds none.
                unsafe first = unsafe Unmanaged.passRetained(box.operations.removeFirst())
                if box.operations.isEmpty { dropBox() }
            }
            return true
        }
        guard let box = unsafe more?.takeUnretainedValue(),
              let i = box.operations.firstIndex(where: { $0 === op }) else { return false }
        box.operations.remove(at: i)
        if box.operations.isEmpty { dropBox() }
        return true
    }

    private mutating func dropBox() {
        unsafe more?.release()
        unsafe more = nil
    }

    /// The dependencies, in order, each retained for the caller; the list keeps them.
    func snapshot() -> OperationList {
        var list = OperationList()
        if let head { list.append(head) }
        if let box = unsafe more?.takeUnretainedValue() { for op in box.operations { list.append(op) } }
        return list
    }

    /// Empties the list, handing its references to the caller.
    mutating func take() -> OperationList {
        var list = OperationList()
        if let f = unsafe first { list.append(unsafe f.takeRetainedValue()) }
        unsafe first = nil
        if let box = unsafe more?.takeUnretainedValue() {
            for op in box.operations { list.append(op) }
            dropBox()
        }
        return list
    }
}

/// Operations in the order they were appended, retained: the first inline, the rest in
/// an array. It holds the dependencies a `DependencyList` hands out. A link of a chain
/// has one, and then allocates nothing for it, where an array would cost a malloc and a
/// free per operation.
struct OperationList: Sequence {
    /// The first operation; nil only when there is none (`rest` is then nil too).
    private(set) var head: Operation?
    /// The others, nil until there is a second and again once none is left: an empty
    /// array would still cost a release, a call into the runtime, when every operation
    /// is destroyed.
    private var rest: [Operation]? = nil

    init() {}

    var isEmpty: Bool { head == nil }
    var count: Int { head == nil ? 0 : 1 + (rest?.count ?? 0) }

    @inline(__always)
    mutating func append(_ op: Operation) {
        if head == nil {
            head = op
        } else if rest == nil {
            rest = [op]
        } else {
            rest!.append(op) // in place: `!` on a stored optional does not copy
        }
    }

    /// Whether `op` is listed (by identity), without iterating, which would retain each.
    func contains(identical op: Operation) -> Bool {
        if head === op { return true }
        return rest?.contains(where: { $0 === op }) ?? false
    }

    /// Removes `op` (by identity), keeping the others' order; whether it was there.
    mutating func remove(_ op: Operation) -> Bool {
        if head === op {
            head = rest?.removeFirst() // `rest` is nil or holds one at least
            if rest?.isEmpty == true { rest = nil }
            return true
        }
        guard let i = rest?.firstIndex(where: { $0 === op }) else { return false }
        rest!.remove(at: i)
        if rest!.isEmpty { rest = nil }
        return true
    }

    struct Iterator: IteratorProtocol {
        fileprivate var head: Operation?
        fileprivate var rest: IndexingIterator<[Operation]>?
        mutating func next() -> Operation? {
            if let h = head { head = nil; return h }
            return rest?.next()
        }
    }

    func makeIterator() -> Iterator { Iterator(head: head, rest: rest?.makeIterator()) }
}
