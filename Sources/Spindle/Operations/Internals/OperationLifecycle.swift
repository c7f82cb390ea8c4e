import Synchronization

// An operation's phases, and how `start()` moves it through them.
//
// pending → executing → finished, in `phase`, changed by `start()` with a CAS so that
// starting and finishing a plain operation takes no lock. `claimStart` is the only
// way from pending to executing: it traps on the misuse Foundation traps on (a manual
// start of a queued, unready or executing operation) and leaves a finished operation
// alone. The way to finished is either the end of Spindle's own `start()` or, for an
// asynchronous subclass, its `didChangeValue(forKey: "isFinished")`; either way it
// leads to the finish protocol (FinishProtocol.swift), which runs once.
//
// A plain `Operation` or `BlockOperation` (the exact class) overrides none of the
// notification methods, so `start()` gives it their effect directly instead of eight
// dynamic calls and string comparisons; a subclass gets the calls, as with Foundation.

extension Operation {
    enum Phase: UInt8 {
        case pending, executing, finished
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
}
