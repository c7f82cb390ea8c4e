import Dispatch
import Synchronization

// Admission control: a pool that holds at most a given number of closures queued, or
// refuses more while its queued closures have waited too long.
//
// Every peer queues without bound — `NIOThreadPool`, Dispatch, tokio's `spawn_blocking`
// — so under overload a server's queueing delay grows until requests time out. A pool
// with a limit says no instead: a synchronous submitter at once (`trySubmit`, or
// `submit` throwing `overloaded`), an async one by suspending until there is room, or at
// once if it asks to (`run(ifFull: .fail)`). A server turns the refusal into a fast
// 503.
//
// The limit is a depth (`queueLimit`), a delay (`queueDelayLimit`), or both. A depth is
// easy to reason about but means different waits for different work; a delay is what a
// server's clients feel. The delay is measured at the head of the queue, as CoDel
// measures it: the time the oldest closure still queued has waited so far. It needs no
// estimate of how long work takes, and it rises as soon as the workers stop keeping
// up, even when nothing starts at all.
//
// AD1. A place is taken when a closure is accepted and given back when it leaves the
//      queue: when it starts, when its awaiting task is cancelled before it starts, or
//      when a cancelling shutdown discards it. Whoever moves an offload out of its
//      pending state gives the place back, once, with the ticket it was admitted with.
// AD2. A place given back while submitters wait goes to the first of them directly:
//      the count does not drop, so nobody who arrives later takes it first (FIFO, no
//      barging). `tryTake` fails while anyone waits.
// AD3. A waiting submitter whose task is cancelled leaves the line and throws
//      `CancellationError`. The check of `Task.isCancelled` and the registration are
//      under the lock that the cancellation handler takes, so a cancellation that
//      comes in between is seen by one or the other.
// AD4. Closing (shutdown) fails every waiter, and every later submitter, with
//      `ThreadPool.Error.shutDown`. Nothing accepted is dropped: what was accepted runs
//      or, under a cancelling shutdown, its awaiting task is told.
// AD5. With a delay limit, each admission is a ticket, queued in admission order with
//      its time. A ticket given back at the head of the queue leaves it, with every
//      ticket behind it that left out of order; one given back elsewhere is noted as
//      gone. The head is then always the oldest closure still queued. The pool is full
//      while the head has waited longer than the limit; the first waiter is admitted
//      at the first give-back that finds it otherwise (AD2), and the queue holds a
//      ticket whose give-back will come whenever a waiter is left in line.
//
// Model: Tests/Models/pool_admission.pml checks AD1-AD4 over every interleaving of
// three submitters, a cancellation and a shutdown or none (scripts/model-check.sh).

/// A pool's admission limits and the submitters waiting for room (AD1-AD5).
final class Admission: Sendable {
    /// The most closures queued (accepted, not started) at once.
    let limit: Int
    /// The longest the oldest queued closure may have waited, in nanoseconds, for the
    /// pool to admit more (nil: no delay limit).
    let delayLimit: UInt64?

    /// What a submitter was admitted with, to give back (AD5; 0 without a delay limit).
    typealias Ticket = UInt64

    private struct Queued {
        let ticket: Ticket
        let admittedAt: UInt64
    }

    private struct State {
        var queued = 0
        /// The line, first come first served.
        var line = WaitingLine<Ticket>()
        var closed = false
        /// AD5: the queued tickets in admission order, and those that left out of order.
        var tickets = FIFO<Queued>()
        var leftEarly = Set<Ticket>()
        var nextTicket: Ticket = 0
    }

    private let state = Mutex(State())

    init(limit: Int?, delayLimit: Duration?) {
        self.limit = limit ?? .max
        self.delayLimit = delayLimit.map { UInt64($0.wholeNanoseconds) }
    }

    /// Closures accepted and not yet started.
    var queued: Int { state.locked { $0.queued } }

    /// Submitters waiting in line for a place.
    var waiting: Int { state.locked { $0.line.count } }

    /// How long the oldest queued closure has waited so far, in nanoseconds (0 without a
    /// delay limit, or when nothing is queued).
    var headDelay: UInt64 {
        let now = Admission.now()
        return state.locked { s in s.tickets.first.map { now &- $0.admittedAt } ?? 0 }
    }

    /// Takes a place if one is free and nobody waits for one (AD2); nil otherwise, and
    /// when the pool has shut down.
    func tryTake() -> Ticket? {
        let now = delayLimit == nil ? 0 : Admission.now()
        return state.locked { s in
            guard !s.closed, s.line.isEmpty, hasRoom(s, now) else { return nil }
            return admit(&s, now)
        }
    }

    /// Takes a place, waiting in line for one if the pool is full (AD2, AD3).
    ///
    /// - Throws: `CancellationError` when the calling task is cancelled while it waits;
    ///   ``ThreadPool/Error/shutDown`` when the pool shuts down.
    func take() async throws -> Ticket {
        let id = state.locked { $0.line.newID() }
        return try await waitInLine(decide: { c in
            let now = delayLimit == nil ? 0 : Admission.now()
            return state.locked { s -> Result<Ticket, any Error>? in
                if s.closed { return .failure(ThreadPool.Error.shutDown) }
                if Task.isCancelled { return .failure(CancellationError()) }
                if s.line.isEmpty && hasRoom(s, now) { return .success(admit(&s, now)) }
                s.line.append(id, c)
                return nil
            }
        }, leave: { state.locked { $0.line.remove(id) } })
    }

    /// Gives a place back (AD1): to the first waiter, or to the pool.
    func giveBack(_ ticket: Ticket) {
        let now = delayLimit == nil ? 0 : Admission.now()
        let next = state.locked { s -> (WaitingLine<Ticket>.Continuation, Ticket)? in
            s.queued -= 1
            if delayLimit != nil { leave(&s, ticket) }
            // The place passes to the first waiter if the pool now has room for it.
            guard !s.line.isEmpty, hasRoom(s, now), let w = s.line.popFirst() else { return nil }
            return (w, admit(&s, now))
        }
        if let (waiter, ticket) = next { waiter.resume(returning: ticket) }
    }

    /// Refuses every waiter and every later submitter (AD4).
    func close() {
        let waiters = state.locked { s in
            s.closed = true
            return s.line.removeAll()
        }
        for w in waiters { w.resume(throwing: ThreadPool.Error.shutDown) }
    }

    /// Under the lock: the depth is below its limit and the head has not waited past
    /// the delay limit (AD5).
    private func hasRoom(_ s: State, _ now: UInt64) -> Bool {
        guard s.queued < limit else { return false }
        guard let delayLimit, let head = s.tickets.first else { return true }
        return now &- head.admittedAt <= delayLimit
    }

    /// Under the lock: one more queued closure, and its ticket (AD5).
    private func admit(_ s: inout State, _ now: UInt64) -> Ticket {
        s.queued += 1
        guard delayLimit != nil else { return 0 }
        s.nextTicket &+= 1
        s.tickets.append(Queued(ticket: s.nextTicket, admittedAt: now))
        return s.nextTicket
    }

    /// Under the lock: `ticket` has left the queue (AD5).
    private func leave(_ s: inout State, _ ticket: Ticket) {
        guard s.tickets.first?.ticket == ticket else {
            s.leftEarly.insert(ticket)
            return
        }
        _ = s.tickets.popFirst()
        while let head = s.tickets.first, s.leftEarly.remove(head.ticket) != nil { _ = s.tickets.popFirst() }
    }

    private static func now() -> UInt64 { DispatchTime.now().uptimeNanoseconds }
}
