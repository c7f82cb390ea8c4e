import Dispatch
import Synchronization

// A queue's mode: direct mode, the way of a queue at the default width, and what a
// change of mode starts (`startWhatCan`: a width, a suspension or a batch changed).
//
// A queue at the default width, not suspended, with no `addOperations` batch open and
// no operation whose custom readiness must be asked again, is in direct mode:
// D1. A ready operation is started as it is added, under the lock that registers it,
//     when no ready operation waits ahead of it (the ready lists are empty).
// D2. A finishing operation takes no lock: one CAS on `counts` (QueueMembership.swift,
//     LT1), unless it is the last one unfinished or someone observes the queue.
// D3. Out of direct mode, `scheduledBit` is set in `counts`, and every finish takes
//     the lock to start the next ready operations. The bit changes under the lock by an
//     RMW, after which that thread reads the running count (`takeStartable`). In the
//     counts' word so that a finisher's CAS sees it together with the count it
//     decrements: either the CAS came first, and the count read after the change
//     includes its decrement, or the CAS fails on the bit and the finisher takes the
//     lock. No ready operation is stranded.
//
// Model: Tests/Models/queue_mode.pml checks D1-D3 over every interleaving of adds, a
// width set and taken away again, and finishers with and without the lock: no ready
// operation is stranded, and an operation started under a width of one starts alone.
//
// Started operations go to the pool of their quality of service, or to the queue's
// `underlyingQueue` when it has one (ChainRunner.swift, `dispatch`).

extension OperationQueue {
    /// Set in `counts` while the queue is not in direct mode (a width limit, or
    /// suspended): a finishing operation must then take the lock to start the next
    /// (D3).
    static let scheduledBit: UInt64 = 1 << 31

    /// Takes what may start now and starts it (after a width or suspension change).
    func startWhatCan(_ change: (inout State) -> Void) {
        let (start, config, unannounced, watch) = unsafe state.locked { s -> (Startable, DispatchConfig, [Operation]?, Bool) in
            unsafe change(&s)
            unsafe s.refreshMode()
            let unannounced = unsafe s.takeUnannounced(counts)
            // An RMW, before takeStartable reads `counts`: see `scheduledBit`.
            if unsafe s.isDirect {
                counts.bitwiseAnd(~OperationQueue.scheduledBit, ordering: .sequentiallyConsistent)
            } else {
                counts.bitwiseOr(OperationQueue.scheduledBit, ordering: .sequentiallyConsistent)
            }
            let start = unsafe s.takeStartable(counts)
            // What starts here may leave others finished behind it (a queue resumed, or
            // made wider): the watch lets go of them while it runs.
            return unsafe (start, DispatchConfig(s), unannounced, !start.isEmpty && s.armWatch())
        }
        dispatch(start, config)
        if watch { scheduleWatch(afterMilliseconds: OperationQueue.watchMinDelay) }
        if let unannounced { OperationQueue.askAgain(unannounced) }
    }
}

extension OperationQueue.State {
    /// Direct mode: see the type's documentation.
    /// Read on every add; kept in `direct`, which `refreshMode()` recomputes wherever
    /// one of its inputs changes (all under the lock).
    var isDirect: Bool { unsafe direct }

    mutating func refreshMode() {
        unsafe direct = unsafe maxConcurrent < 0 && !suspended && batching == 0 && unannounced.isEmpty
    }

    /// Takes the operations to ask again (see `unannounced`), and returns the queue to
    /// direct mode if they were all that kept it out. An RMW on `counts`, as every
    /// change of mode (see `scheduledBit`).
    @inline(__always)
    mutating func takeUnannounced(_ counts: borrowing Atomic<UInt64>) -> [Operation]? {
        if unsafe unannounced.isEmpty { return nil }
        return unsafe takeUnannouncedSlow(counts)
    }

    @inline(never)
    mutating func takeUnannouncedSlow(_ counts: borrowing Atomic<UInt64>) -> [Operation] {
        let all = unsafe unannounced
        unsafe unannounced = []
        unsafe refreshMode()
        if unsafe isDirect { counts.bitwiseAnd(~OperationQueue.scheduledBit, ordering: .sequentiallyConsistent) }
        return all
    }
}
