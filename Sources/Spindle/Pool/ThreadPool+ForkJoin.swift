import CSpindle

extension ThreadPool {
    /// Runs `a` on the calling thread while offering `b` to the pool, and returns both
    /// results.
    ///
    /// `b` is pushed on the current worker's deque. If no idle worker has stolen it by
    /// the time `a` returns, it runs here, inline — the common case costs a push and a
    /// pop, with no allocation, no reference counting and no wake-up. If it was stolen,
    /// this thread runs other pool work until the thief finishes, so recursive `join`s
    /// never block a worker.
    ///
    /// That other work runs on this thread's stack, on top of the waiting `join`. So
    /// that waits nested in waits cannot exhaust it, a worker that has used half its
    /// stack no longer offers `b`: it runs `a` and then `b` itself, and what it runs
    /// there is plain recursion, as deep as the algorithm's own.
    ///
    /// Called from outside the pool, `b` goes to the shared queue and the caller waits
    /// for it after running `a`. If `a` throws, `b` is still waited for before the
    /// error propagates (it may be using memory the caller owns). `a`'s error type is
    /// kept (typed throws); when `a` cannot throw, neither can `join`.
    ///
    /// ```swift
    /// func fib(_ n: Int) -> Int {
    ///     if n < 20 { return serialFib(n) }
    ///     let (x, y) = pool.join({ fib(n - 1) }, { fib(n - 2) })
    ///     return x + y
    /// }
    /// ```
    ///
    /// Why a fork is cheap (the `fork-join` case in docs/performance.md): the closures
    /// are not `@escaping`, so their contexts live on this stack frame; `a` is called
    /// here, inlined into the caller with `join` itself, and the engine borrows `b`
    /// rather than owning it. Rejected on this path: handing both halves to one call
    /// into the engine, which makes `a` a closure call behind a thunk; storing `b` through
    /// `withoutActuallyEscaping` (a heap wrapper, its retains and an escape check per
    /// fork: what `joinPortable` does); a generic runner behind an existential (runtime
    /// metadata lookups); and any form that retains the pool object per fork, which every
    /// worker does at once, so that its reference count's cache line bounces between
    /// cores.
    @inlinable @inline(__always)
    public func join<A, B: Sendable, E: Swift.Error>(
        _ a: () throws(E) -> A, _ b: @Sendable () -> B
    ) throws(E) -> (A, B) {
        var resultA: A? = nil
        var resultB: B? = nil
        var failure: E? = nil
        #if SPINDLE_PORTABLE_JOIN
        joinPortable(
            {
                do throws(E) { resultA = try a() } catch { failure = error }
            },
            { resultB = b() })
        #else
        // `b` becomes a `() -> Void` closure with its context on this stack frame, which
        // the engine borrows until the join (`forkJoin(offering:running:)`): no
        // allocation, no reference counting. `a` runs here, inlined.
        forkJoin(offering: { resultB = b() }) {
            do throws(E) { resultA = try a() } catch { failure = error }
        }
        #endif
        // `b` has finished by now, whether or not `a` threw: it may have been using
        // memory the caller owns.
        if let failure { throw failure }
        return unsafe (resultA.unsafelyUnwrapped, resultB.unsafelyUnwrapped)
    }

    #if !SPINDLE_PORTABLE_JOIN
    /// Forks `offered`, runs `here`, and joins: `offered` runs here too unless a worker
    /// stole it, and has finished either way when this returns.
    ///
    /// Both calls into the engine get the same closure, which keeps its context alive
    /// until the second (see `spindle_swift_fork` in spindle.h). Inlined, so that `here`
    /// is plain code in the caller, with no closure call of its own: the per-fork cost
    /// that rayon's inlined `join` does not pay. So is `offered` when nobody stole it,
    /// the usual case: the join returns true and it is called here, where the compiler
    /// sees which closure it is, rather than from C.
    @usableFromInline @inline(__always)
    func forkJoin(offering offered: () -> Void, running here: () -> Void) {
        var frame = unsafe spindle_join_frame()
        // safety: the frame's address is taken without a stack protector, which
        // `withUnsafeMutablePointer` would put (a canary stored and checked) into every
        // function that forks, this one being inlined into each. The frame is a
        // fixed-size struct that only the engine writes, within its bounds: there is no
        // buffer to overrun.
        unsafe _withUnprotectedUnsafeMutablePointer(to: &frame) { frame in
            unsafe _spindleSwiftFork(raw, frame, offered)
            here()
            if unsafe _spindleSwiftJoin(raw, frame, offered) { offered() }
        }
    }
    #endif

    /// The fork-join of ``join(_:_:)`` through the engine's plain C interface
    /// (`spindle_fork`/`spindle_join`), for a toolchain whose C compiler lacks
    /// `swiftcall` (build with `-D SPINDLE_PORTABLE_JOIN`). It stores `offered` through
    /// `withoutActuallyEscaping`, which allocates a wrapper and checks on return that it
    /// did not escape: correct everywhere, and slower per fork than the `swiftcall`
    /// entry point (Runtime/UnsafeABI.swift), which borrows both closures' words.
    @usableFromInline
    func joinPortable(_ here: () -> Void, _ offered: () -> Void) {
        withoutActuallyEscaping(offered) { offered in
            var stored = offered
            unsafe withUnsafeMutablePointer(to: &stored) { closure in
                var frame = unsafe spindle_join_frame()
                unsafe frame.fn = { ctx in unsafe ctx.unsafelyUnwrapped.assumingMemoryBound(to: (() -> Void).self).pointee() }
                unsafe frame.ctx = UnsafeMutableRawPointer(closure)
                unsafe withUnsafeMutablePointer(to: &frame) { frame in
                    unsafe spindle_fork(raw, frame)
                    here()
                    // Every fork is joined before the frame and the closure go away; a
                    // thief has finished with both when `spindle_join` returns false.
                    if unsafe spindle_join(raw, frame) { unsafe closure.pointee() }
                }
            }
        }
    }

    /// Calls `body` once for every index in `0..<iterations`, in parallel on the calling
    /// thread and the pool's workers, and returns when all calls have returned.
    ///
    /// Indices are handed out in contiguous ranges of `grain` (nil: about eight ranges
    /// per worker, which lets idle workers even out uneven iterations). Like
    /// `DispatchQueue.concurrentPerform`, `body` runs concurrently with itself: it must
    /// be safe to call from several threads at once. On a worker that has used half its
    /// stack, the calling thread runs every index itself, as ``join(_:_:)`` does.
    public func concurrentPerform(iterations: Int, grain: Int? = nil, _ body: @Sendable (Int) -> Void) {
        guard iterations > 0 else { return }
        withoutActuallyEscaping(body) { body in
            var fn: @Sendable (Int) -> Void = body
            unsafe withUnsafeMutablePointer(to: &fn) { fnPtr in
                let rc = unsafe spindle_parallel_for(
                    raw, iterations, max(grain ?? 0, 0),
                    { ctx, begin, end in
                        let f = unsafe ctx!.assumingMemoryBound(to: (@Sendable (Int) -> Void).self).pointee
                        for i in begin..<end { f(i) }
                    }, UnsafeMutableRawPointer(fnPtr))
                if rc != 0 {
                    // Out of memory for the shared loop state: run it here, serially,
                    // rather than lose iterations.
                    for i in 0..<iterations { unsafe fnPtr.pointee(i) }
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
    ///
    /// Not from async code, where it would block a thread of the cooperative pool:
    /// there, `try await pool.run { … }` suspends instead.
    @available(*, noasync, message: "blocks the calling thread; in async code use 'try await pool.run { }', which suspends")
    public func run<T: Sendable>(_ body: @Sendable () -> T) -> T {
        if isCurrentThreadWorker { return body() }
        return join({ () }, body).1
    }
}
