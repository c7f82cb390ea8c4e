import CSpindle

extension ThreadPool {
    /// Runs `a` on the calling thread while offering `b` to the pool, and returns both
    /// results.
    ///
    /// `b` is pushed on the current worker's deque. If no idle worker has stolen it by
    /// the time `a` returns, it runs here, inline — the common case costs a push and a
    /// pop, no allocation and no wake-up. If it was stolen, this thread runs other pool
    /// work until the thief finishes, so recursive `join`s never block a worker.
    ///
    /// Called from outside the pool, `b` goes to the shared queue and the caller waits
    /// for it after running `a`. If `a` throws, `b` is still waited for before the
    /// error propagates (it may be using memory the caller owns).
    ///
    /// ```swift
    /// func fib(_ n: Int) -> Int {
    ///     if n < 20 { return serialFib(n) }
    ///     let (x, y) = pool.join({ fib(n - 1) }, { fib(n - 2) })
    ///     return x + y
    /// }
    /// ```
    @inlinable
    public func join<A, B: Sendable>(_ a: () throws -> A, _ b: @Sendable () -> B) rethrows -> (A, B) {
        var resultB: B? = nil
        let resultA: A = try withUnsafeMutablePointer(to: &resultB) { out in
            // The literal is passed straight in, so its context stays on the stack:
            // no allocation per join. (Stored in a `let` first, it would escape.)
            try withoutActuallyEscaping({ out.pointee = b() }) { thunk in
                try _forkJoin(a, thunk)
            }
        }
        return (resultA, resultB.unsafelyUnwrapped)
    }

    /// The non-generic-in-B half of ``join(_:_:)``: forks `thunk`, runs `a`, joins.
    @inlinable
    internal func _forkJoin<A>(_ a: () throws -> A, _ thunk: @escaping () -> Void) rethrows -> A {
        // The closure sits in a concrete struct, not directly under a generic pointer:
        // `withUnsafeMutablePointer(to: &closure)` would store it in its most general
        // representation, and the conversion to that allocates a context per join.
        var box = _JoinThunk(call: thunk)
        return try withUnsafeMutablePointer(to: &box) { boxPtr in
            var frame = spindle_join_frame()
            frame.fn = { ctx in ctx.unsafelyUnwrapped.assumingMemoryBound(to: _JoinThunk.self).pointee.call() }
            frame.ctx = UnsafeMutableRawPointer(boxPtr)
            return try withUnsafeMutablePointer(to: &frame) { f in
                spindle_fork(raw, f)
                let ra: A
                do {
                    ra = try a()
                } catch {
                    // `thunk` may be using memory our caller owns: finish it first.
                    if spindle_join(raw, f) { boxPtr.pointee.call() }
                    throw error
                }
                if spindle_join(raw, f) { boxPtr.pointee.call() }
                return ra
            }
        }
    }

    /// Calls `body` once for every index in `0..<iterations`, in parallel on the calling
    /// thread and the pool's workers, and returns when all calls have returned.
    ///
    /// Indices are handed out in contiguous ranges of `grain` (nil: about eight ranges
    /// per worker, which lets idle workers even out uneven iterations). Like
    /// `DispatchQueue.concurrentPerform`, `body` runs concurrently with itself: it must
    /// be safe to call from several threads at once.
    public func concurrentPerform(iterations: Int, grain: Int? = nil, _ body: @Sendable (Int) -> Void) {
        guard iterations > 0 else { return }
        withoutActuallyEscaping(body) { body in
            var fn: @Sendable (Int) -> Void = body
            withUnsafeMutablePointer(to: &fn) { fnPtr in
                let rc = spindle_parallel_for(
                    raw, iterations, max(grain ?? 0, 0),
                    { ctx, begin, end in
                        let f = ctx!.assumingMemoryBound(to: (@Sendable (Int) -> Void).self).pointee
                        for i in begin..<end { f(i) }
                    }, UnsafeMutableRawPointer(fnPtr))
                if rc != 0 {
                    // Out of memory for the shared loop state: run it here, serially,
                    // rather than lose iterations.
                    for i in 0..<iterations { fnPtr.pointee(i) }
                }
            }
        }
    }
}

extension ThreadPool {
    /// Runs `body` on one of the pool's workers and returns its result, blocking the
    /// calling thread meanwhile (rayon's `install`).
    ///
    /// Use it to enter the pool before fork-join work: ``join(_:_:)`` called from a
    /// worker keeps its halves on that worker's deque, while from outside every fork
    /// goes through the shared queue. Called from one of this pool's workers, `body`
    /// simply runs inline. If the pool has shut down, `body` runs on the caller.
    public func run<T: Sendable>(_ body: @Sendable () -> T) -> T {
        if isCurrentThreadWorker { return body() }
        return join({ () }, body).1
    }
}

/// A closure held in a concrete type, so it can be reached through a raw pointer
/// without being reabstracted (see `_forkJoin`).
@usableFromInline
struct _JoinThunk {
    @usableFromInline var call: () -> Void
    @inlinable init(call: @escaping () -> Void) { self.call = call }
}
