import Synchronization

// Admission control: a pool that holds at most a given number of closures queued.
//
// Every peer queues without bound — `NIOThreadPool`, Dispatch, tokio's `spawn_blocking`
// — so under overload a server's queueing delay grows until requests time out. A pool
// with a limit says no instead: a synchronous submitter at once (`trySubmit`, or
// `submit` throwing `overloaded`), an async one by suspending until there is room, or at
// once if it asks to (`run(ifFull: .fail)`). A server turns the refusal into a fast
// 503.
//
// AD1. A slot is taken when a closure is accepted and given back when it leaves the
//      queue: when it starts, when its awaiting task is cancelled before it starts, or
//      when a cancelling shutdown discards it. Whoever moves an offload out of its
//      pending state gives the slot back, once.
// AD2. A slot given back while submitters wait goes to the first of them directly:
//      the count does not drop, so nobody who arrives later takes it first (FIFO, no
//      barging). `tryTake` fails while anyone waits.
// AD3. A waiting submitter whose task is cancelled leaves the line and throws
//      `CancellationError`. The check of `Task.isCancelled` and the registration are
//      under the lock that the cancellation handler takes, so a cancellation that
//      comes in between is seen by one or the other.
// AD4. Closing (shutdown) fails every waiter, and every later submitter, with
//      `ThreadPool.Error.shutDown`. Nothing accepted is dropped: what was accepted runs
//      or, under a cancelling shutdown, its awaiting task is told.

/// A pool's admission limit and the submitters waiting for room (AD1-AD4).
final class Admission: Sendable {
    /// The most closures queued (accepted, not started) at once.
    let limit: Int

    private struct Waiter {
        let id: UInt64
        let continuation: CheckedContinuation<Void, any Error>
    }

    private struct State {
        var queued = 0
        /// The line, first come first served.
        var line = FIFO<Waiter>()
        var nextID: UInt64 = 0
        var closed = false
    }

    private let state = Mutex(State())

    init(limit: Int) { self.limit = limit }

    /// Closures accepted and not yet started.
    var queued: Int { state.locked { $0.queued } }

    /// Submitters waiting in line for a slot.
    var waiting: Int { state.locked { $0.line.count } }

    /// Takes a slot if one is free and nobody waits for one (AD2); false otherwise, and
    /// when the pool has shut down.
    func tryTake() -> Bool {
        state.locked { s in
            guard !s.closed, s.queued < limit, s.line.isEmpty else { return false }
            s.queued += 1
            return true
        }
    }

    /// Takes a slot, waiting in line for one if the pool is full (AD2, AD3).
    ///
    /// - Throws: `CancellationError` when the calling task is cancelled while it waits;
    ///   ``ThreadPool/Error/shutDown`` when the pool shuts down.
    func take() async throws {
        let id = state.locked { s -> UInt64 in
            s.nextID &+= 1
            return s.nextID
        }
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (c: CheckedContinuation<Void, any Error>) in
                let now = state.locked { s -> Result<Void, any Error>? in
                    if s.closed { return .failure(ThreadPool.Error.shutDown) }
                    if Task.isCancelled { return .failure(CancellationError()) }
                    if s.queued < limit && s.line.isEmpty {
                        s.queued += 1
                        return .success(())
                    }
                    s.line.append(Waiter(id: id, continuation: c))
                    return nil
                }
                if let now { c.resume(with: now) }
            }
        } onCancel: {
            let waiter = state.locked { s in s.line.remove { $0.id == id } }
            waiter?.continuation.resume(throwing: CancellationError())
        }
    }

    /// Gives a slot back (AD1): to the first waiter, or to the pool.
    func giveBack() {
        let next = state.locked { s -> Waiter? in
            if let w = s.line.popFirst() { return w } // the slot passes to it: `queued` stays
            s.queued -= 1
            return nil
        }
        next?.continuation.resume()
    }

    /// Refuses every waiter and every later submitter (AD4).
    func close() {
        let waiters = state.locked { s -> [Waiter] in
            s.closed = true
            var all: [Waiter] = []
            while let w = s.line.popFirst() { all.append(w) }
            return all
        }
        for w in waiters { w.continuation.resume(throwing: ThreadPool.Error.shutDown) }
    }
}
