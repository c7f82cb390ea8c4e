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
            try withoutActuallyEscaping(b) { b in
                // `b` and the result pointer travel in a generic struct behind an
                // existential: three words, which fit the existential's inline buffer,
                // so no allocation (a closure literal capturing them would need one).
                var runner: any _JoinRunnable = _JoinRunner(body: b, out: out)
                return try _forkJoin(a, &runner)
            }
        }
        return (resultA, resultB.unsafelyUnwrapped)
    }

    /// The non-generic-in-B half of ``join(_:_:)``: forks `runner`, runs `a`, joins.
    @inlinable
    internal func _forkJoin<A>(_ a: () throws -> A, _ runner: inout any _JoinRunnable) rethrows -> A {
        try withUnsafeMutablePointer(to: &runner) { runnerPtr in
            var frame = spindle_join_frame()
            frame.fn = { ctx in ctx.unsafelyUnwrapped.assumingMemoryBound(to: (any _JoinRunnable).self).pointee.run() }
            frame.ctx = UnsafeMutableRawPointer(runnerPtr)
            return try withUnsafeMutablePointer(to: &frame) { f in
                spindle_fork(raw, f)
                let ra: A
                do {
                    ra = try a()
                } catch {
                    // The other half may be using memory our caller owns: finish it first.
                    if spindle_join(raw, f) { runnerPtr.pointee.run() }
                    throw error
                }
                if spindle_join(raw, f) { runnerPtr.pointee.run() }
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

/// The offered half of a join, type-erased for the C trampoline.
@usableFromInline
protocol _JoinRunnable {
    func run()
}

/// Runs the offered half and stores its result where `join` will read it.
@usableFromInline
struct _JoinRunner<B>: _JoinRunnable {
    @usableFromInline let body: () -> B
    @usableFromInline let out: UnsafeMutablePointer<B?>
    @inlinable init(body: @escaping () -> B, out: UnsafeMutablePointer<B?>) {
        self.body = body
        self.out = out
    }
    @inlinable func run() { out.pointee = body() }
}
