import CSpindle

/// Someone waiting for an operation or a queue: a thread on a latch, or a task.
///
/// A task's continuation is unchecked: each waiter is either refused at registration
/// (and its continuation resumed there by the registering code) or listed, and a listed
/// waiter is taken off its list under a lock and signalled once. A checked continuation
/// would allocate a box per wait to verify what this protocol already ensures.
@unsafe
struct Waiter: @unchecked Sendable {
    // safety: the latch pointer is valid until the waiter is woken, which happens once;
    // the continuation is resumed once, by `signal` or by the code whose registration
    // was refused.
    // @unchecked: the latch lives on the waiting thread's stack until it is set, and
    // only the finishing thread sets it, once.
    private let latch: UnsafeMutablePointer<spindle_latch>?
    private let continuation: UnsafeContinuation<Void, Never>?

    init(latch: UnsafeMutablePointer<spindle_latch>) {
        unsafe self.latch = unsafe latch
        unsafe self.continuation = nil
    }

    init(continuation: UnsafeContinuation<Void, Never>) {
        unsafe self.latch = nil
        unsafe self.continuation = continuation
    }

    func signal() {
        if let latch = unsafe latch { unsafe spindle_latch_set(latch) }
        unsafe continuation?.resume()
    }
}

extension Operation {
    /// `waitUntilFinished()` once the operation was seen unfinished: promotes it, then
    /// registers a latch on this thread's stack and blocks on it.
    func waitBlocking() {
        if let current = unsafe ThreadState.current.currentOperation, unsafe current.isIdentical(to: self) {
            fatalError("Operation.waitUntilFinished() was called from inside \(describe()) itself: it would wait forever")
        }
        // The waiting thread's class reaches what it waits for (Promotion.swift, P3).
        promote(to: Promotion.callingThreadRank())
        hasWaiters.store(true, ordering: .sequentiallyConsistent)
        var latch = unsafe spindle_latch()
        unsafe spindle_latch_init(&latch)
        // safety: the latch stays on this stack frame until `spindle_latch_wait_blocking`
        // returns, which is after the finisher has set it (Waiter.signal, once) or after
        // the registration was refused.
        unsafe withUnsafeMutablePointer(to: &latch) { l in
            let registered = guarded.locked { g -> Bool in
                if finishCompleted.load(ordering: .sequentiallyConsistent) { return false }
                unsafe extras(in: &g).addWaiter(Waiter(latch: l))
                return true
            }
            // Blocks this thread, whatever it is; a pool worker is compensated by a spare.
            if registered { unsafe spindle_latch_wait_blocking(l) }
        }
    }
}

extension Unmanaged {
    /// Whether this is an unretained reference to `object`: compares addresses, and
    /// touches neither reference count.
    func isIdentical(to object: Instance) -> Bool {
        // safety: addresses compared, never dereferenced.
        unsafe toOpaque() == Unmanaged.passUnretained(object).toOpaque()
    }
}
