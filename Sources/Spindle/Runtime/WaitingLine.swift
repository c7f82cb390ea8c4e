/// Tasks waiting, first come first served, for something granted under their owner's
/// lock: a pool's admission place (Admission.swift), a place in a queue
/// (QueueAdmission.swift). Kept in the owner's locked state, so
/// that deciding whether a newcomer may go ahead and joining the line are one step.
///
/// Each waiter is resumed exactly once, by whoever takes it off the line: with what it
/// was granted, with `CancellationError` when its task is cancelled while it waits, or
/// with the owner's error when the owner closes.
struct WaitingLine<Granted: Sendable> {
    typealias Continuation = CheckedContinuation<Granted, any Error>

    private struct Waiter {
        let id: UInt64
        let continuation: Continuation
    }

    private var waiters = FIFO<Waiter>()
    private var lastID: UInt64 = 0

    var count: Int { waiters.count }
    var isEmpty: Bool { waiters.isEmpty }

    /// A name for a waiter that is about to join, for leaving the line by.
    mutating func newID() -> UInt64 {
        lastID &+= 1
        return lastID
    }

    mutating func append(_ id: UInt64, _ continuation: Continuation) {
        waiters.append(Waiter(id: id, continuation: continuation))
    }

    /// The first waiter, taken off the line, for the caller to resume.
    mutating func popFirst() -> Continuation? { waiters.popFirst()?.continuation }

    /// The waiter named `id`, if it is still in line, taken off it.
    mutating func remove(_ id: UInt64) -> Continuation? { waiters.remove { $0.id == id }?.continuation }

    /// Every waiter, taken off the line.
    mutating func removeAll() -> [Continuation] {
        var all: [Continuation] = []
        while let c = popFirst() { all.append(c) }
        return all
    }
}

/// Suspends the calling task until it is granted a `Granted`, waiting in a
/// ``WaitingLine`` if it must.
///
/// - `decide` runs once, with the continuation, and takes the owner's lock: it returns
///   the outcome at once (granted, cancelled, closed), or nil having put the
///   continuation in line under the name the caller took from `newID()`.
/// - `leave` runs if the task is cancelled, and takes the same lock: it takes the waiter
///   of that name off the line, if it is still there, to be resumed with
///   `CancellationError`. `decide` checks `Task.isCancelled` under that lock, so a
///   cancellation that comes between is seen by one or the other.
func waitInLine<Granted: Sendable>(
    decide: (WaitingLine<Granted>.Continuation) -> Result<Granted, any Error>?,
    leave: @Sendable () -> WaitingLine<Granted>.Continuation?
) async throws -> Granted {
    try await withTaskCancellationHandler {
        try await withCheckedThrowingContinuation { (c: WaitingLine<Granted>.Continuation) in
            if let now = decide(c) { c.resume(with: now) }
        }
    } onCancel: {
        leave()?.resume(throwing: CancellationError())
    }
}
