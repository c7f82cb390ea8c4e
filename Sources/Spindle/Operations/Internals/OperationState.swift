import Synchronization

// The operation's state behind its lock, and the small helpers around it.
//
// Most of an operation's state sits in one `Guarded` struct under one Mutex: its
// dependencies and dependents, its completion block, its waiters. What the hot paths
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

    @safe
    struct Guarded {
        // safety: the unretained dependents stay valid while listed: a dependent takes
        // itself off this list, under this lock, in its deinit (Dependents.swift).
        var dependencies = OperationList()
        /// Dependencies that have not finished yet. Readiness is `== 0`.
        var unfinished = 0
        var completionBlock: (@Sendable () -> Void)?
        var extras: Extras?
        // The fields of a byte or so come last, where the ones after them need no
        // padding: every operation carries this struct (see `Operation`'s layout note).
        /// Operations that depend on this one, unretained (as Foundation keeps them): a
        /// dependent dropped by its owner is freed, and takes itself off this list in
        /// its deinit (see `Dependents` for why that is safe).
        var dependents = unsafe Dependents.none
        var qualityOfService: QualityOfService = .default
        var qosExplicit = false

        /// The out-of-line fields, created on first use.
        mutating func makeExtras() -> Extras {
            if let extras { return extras }
            let made = Extras()
            extras = made
            return made
        }
    }

    func describe() -> String {
        if let n = name { return "operation '\(n)'" }
        return "operation \(type(of: self)) \(ObjectIdentifier(self))"
    }

    /// Runs `body` on the out-of-line fields, creating them on first use, under the lock.
    func withExtras(_ body: (Extras) -> Void) {
        guarded.locked { g in body(g.makeExtras()) }
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

/// Operations in the order they were appended: the first inline, the rest in an
/// array. It holds an operation's dependencies, and the dependents a finishing
/// operation makes ready. Each link of a chain has one of each, and then allocates
/// nothing for either, where an array would cost a malloc and a free per operation.
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

    /// Calls `body` on each, in order, without making an iterator: an empty list then
    /// costs one test, where an iterator's copy of the fields costs retains.
    @inline(__always)
    func forEachInOrder(_ body: (Operation) -> Void) {
        guard let head else { return }
        body(head)
        if let rest { for op in rest { body(op) } }
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
