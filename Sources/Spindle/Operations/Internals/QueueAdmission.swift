import Synchronization

// Admission control on an OperationQueue: at most `admissionLimit` operations in the
// queue (its `operationCount`) for the entry points that may say no. Foundation's
// `addOperation` never says no, and still counts: the limit is what the queue holds,
// whoever added it.
//
// QA1. An admitted submitter holds a reservation from the moment it is admitted until
//      its operation has been added (and so is in `operationCount`): the queue has
//      room for one more when its count plus the reservations is below the limit. Two
//      submitters that read the same count cannot both take the last place. Dropping
//      the reservation is a change that may free room (the operation may have finished
//      meanwhile), so it admits waiters as a finish does (QA2).
// QA2. The count is read under the admission lock, and every change of the count that
//      frees room is followed by a call that takes that lock (the queue's count
//      observer, QueueMembership.swift). A submitter that finds no room registers under
//      the same lock, so a finish that comes in between is seen by one or the other: no
//      waiter sleeps while there is room. The observer is registered before the first
//      limit is set. The one exception is a finish already under way then, which may
//      have read that nobody observes the count: a finish that skips the observer is
//      never the queue's last (it takes the lock-free way only while other operations
//      remain, QueueMembership.swift), so waiters see its room at the next finish at the
//      latest.
// QA3. Waiters are admitted first come first served, and while anyone waits a newcomer
//      does not take a place ahead of them. A cancelled waiter leaves the line (the
//      check and the registration are under the lock its cancellation handler takes).
// QA4. Raising or removing the limit admits the waiters it makes room for.
//
// Model: Tests/Models/queue_admission.pml checks QA1-QA3 over every interleaving of
// three submitters, a Foundation addOperation and a cancellation (scripts/model-check.sh).

/// An OperationQueue's admission limit and the tasks waiting for room (QA1-QA4).
final class QueueAdmission: Sendable {
    private struct State {
        var limit: Int?
        var reserved = 0
        var line = WaitingLine<Void>()
        /// The queue's count observer is registered (once, before the first limit).
        var observing = false
    }

    private let state = Mutex(State())

    var limit: Int? { state.locked { $0.limit } }

    /// Tasks waiting for room.
    var waiting: Int { state.locked { $0.line.count } }

    /// True the first time it is called: the caller then registers the queue's count
    /// observer, before the first limit is set (QA2).
    func startObserving() -> Bool {
        state.locked { s in
            defer { s.observing = true }
            return !s.observing
        }
    }

    /// Sets the limit, and admits the waiters a higher limit makes room for (QA4).
    func setLimit(_ limit: Int?, count: () -> Int) {
        let admitted = state.locked { s in
            s.limit = limit
            return admitWaiters(&s, count())
        }
        for w in admitted { w.resume() }
    }

    /// Reserves a place if there is room and nobody waits (QA1, QA3).
    func tryReserve(count: () -> Int) -> Bool {
        state.locked { s in
            guard s.line.isEmpty, hasRoom(s, count()) else { return false }
            s.reserved += 1
            return true
        }
    }

    /// Reserves a place, waiting in line for one (QA2, QA3).
    ///
    /// - Throws: `CancellationError` when the calling task is cancelled while it waits.
    func reserve(count: @escaping @Sendable () -> Int) async throws {
        // The common case, room at once (always, without a limit), needs no suspension.
        if tryReserve(count: count) { return }
        let id = state.locked { $0.line.newID() }
        try await waitInLine(decide: { c in
            state.locked { s -> Result<Void, any Error>? in
                if Task.isCancelled { return .failure(CancellationError()) }
                if s.line.isEmpty && hasRoom(s, count()) {
                    s.reserved += 1
                    return .success(())
                }
                s.line.append(id, c)
                return nil
            }
        }, leave: { state.locked { $0.line.remove(id) } })
    }

    /// The reserved operation has been added, and is counted by the queue (QA1). It may
    /// already have finished: the finish then found its place still reserved, so the
    /// room it left is looked for here (QA2).
    func added(count: () -> Int) {
        let admitted = state.locked { s in
            s.reserved -= 1
            return admitWaiters(&s, count())
        }
        for w in admitted { w.resume() }
    }

    /// The queue's count changed: admits the waiters there is now room for (QA2).
    func countChanged(count: () -> Int) {
        let admitted = state.locked { s in admitWaiters(&s, count()) }
        for w in admitted { w.resume() }
    }

    private func hasRoom(_ s: State, _ count: Int) -> Bool {
        guard let limit = s.limit else { return true }
        return count + s.reserved < limit
    }

    private func admitWaiters(_ s: inout State, _ count: Int) -> [WaitingLine<Void>.Continuation] {
        var admitted: [WaitingLine<Void>.Continuation] = []
        while !s.line.isEmpty, hasRoom(s, count), let w = s.line.popFirst() {
            s.reserved += 1
            admitted.append(w)
        }
        return admitted
    }
}
