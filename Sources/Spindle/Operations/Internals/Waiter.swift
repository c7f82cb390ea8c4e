import CSpindle

/// Someone waiting for an operation or a queue: a thread on a latch, or a task.
struct Waiter: @unchecked Sendable {
    // @unchecked: the latch lives on the waiting thread's stack until it is set, and
    // only the finishing thread sets it, once.
    private let latch: UnsafeMutablePointer<spindle_latch>?
    private let continuation: CheckedContinuation<Void, Never>?

    init(latch: UnsafeMutablePointer<spindle_latch>) {
        self.latch = latch
        self.continuation = nil
    }

    init(continuation: CheckedContinuation<Void, Never>) {
        self.latch = nil
        self.continuation = continuation
    }

    func signal() {
        if let latch { spindle_latch_set(latch) }
        continuation?.resume()
    }
}
