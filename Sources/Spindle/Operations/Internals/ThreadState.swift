import CSpindle
#if canImport(Glibc)
import Glibc
#endif

/// Per-thread state of the façade: which operation (and queue) the thread is running,
/// and the work list that turns the release of a long dependency chain into a loop.
///
/// Found through a thread-local slot of the engine's (`spindle_facade_state`), and held
/// by a pthread key whose destructor frees it when the thread exits. Only its own
/// thread touches it, so the per-operation fields skip Swift's dynamic exclusivity
/// checks (`@exclusivity(unchecked)`).
@safe
final class ThreadState {
    // safety: one per thread, touched only by its own thread; the unretained fields are
    // kept alive by the runner that set them for as long as they are set.
    /// The operation whose `start()` this thread is inside (unretained: the runner
    /// holds a strong reference for the duration).
    @exclusivity(unchecked) var currentOperation: Unmanaged<Operation>?
    /// The queue that started it (unretained, same reason).
    @exclusivity(unchecked) var currentQueue: Unmanaged<OperationQueue>?
    /// The continuation slot (see `ChainRunner.runChain`): open while a pool worker is
    /// running operations from a task, and how many more it may run from the slot
    /// before it checks for other waiting work.
    @exclusivity(unchecked) var chainOpen = false
    @exclusivity(unchecked) var chainBudget = 0
    /// The operation whose finish protocol this thread is in, when it is the one the
    /// chain runner is running: operations started by that finish may take the slot.
    @exclusivity(unchecked) var finishing: Unmanaged<Operation>?
    /// An operation its queue has started (counted as running), for the chain runner
    /// to run next on this thread instead of submitting it to the pool. Unretained, as
    /// a task is: the runner borrows the queue list's reference (`QueueSync.runState`).
    @exclusivity(unchecked) var chainNext: Unmanaged<Operation>?
    /// The completion block of the operation the chain runner has just run, for the
    /// runner to start before `chainNext` (OperationLifecycle.swift, F7). It holds its
    /// operation.
    @exclusivity(unchecked) var chainCompletion: (@Sendable () -> Void)?
    /// The operation whose `start()`, Spindle's own, is finishing it on this thread
    /// (`Operation.completeStart`): its runner returns right after.
    @exclusivity(unchecked) var endingOwnStart: Unmanaged<Operation>?
    /// A completion block to submit as `chainNext`, a dependent that took the slot
    /// first, starts (F7). It holds its operation.
    @exclusivity(unchecked) var completionOnNextStart: (@Sendable () -> Void)?
    /// The thread's kernel id, read once: a runner records it in the operation it runs,
    /// for a promotion to boost (Promotion.swift, P4).
    let threadID = spindle_thread_id()
    /// The queue and operation this thread is running, as one value.
    var runningContext: (queue: Unmanaged<OperationQueue>?, operation: Unmanaged<Operation>?) {
        unsafe (currentQueue, currentOperation)
    }

    /// Runs `body` with `context` as the running queue and operation, then restores
    /// what was there: for work that runs on another thread on behalf of an operation
    /// (the other blocks of a BlockOperation), or outside any (a completion block). The
    /// references stay valid while the operation runs: its runner holds it, and an
    /// unfinished operation keeps its queue alive (`OperationQueue.counts`).
    func withRunningContext(_ context: (queue: Unmanaged<OperationQueue>?, operation: Unmanaged<Operation>?),
                            _ body: () -> Void) {
        let saved = unsafe runningContext
        unsafe (currentQueue, currentOperation) = unsafe context
        body()
        unsafe (currentQueue, currentOperation) = unsafe saved
    }

    /// True while this thread is inside `releaseIteratively`.
    var draining = false
    /// Dependency arrays waiting to be released by the active drain loop.
    var pendingReleases: [OperationList] = []

    private static let key: pthread_key_t = {
        var k = pthread_key_t()
        let rc = unsafe pthread_key_create(&k) { p in
            // safety: the key's one reference, taken in `makeCurrent`; the destructor
            // runs once per value. The slot is emptied first: code that runs later in
            // the thread's exit (another key's destructor, or this state's own deinit)
            // then makes a fresh state, which the key frees in its next round.
            guard let p = unsafe p else { return }
            spindle_set_facade_state(nil)
            unsafe Unmanaged<ThreadState>.fromOpaque(p).release()
        }
        precondition(rc == 0, "Spindle: pthread_key_create failed (\(rc))")
        return k
    }()

    static var current: ThreadState {
        unsafe unmanagedCurrent.takeUnretainedValue()
    }

    /// The calling thread's state, unretained: the thread's key holds it until the
    /// thread exits, so code on this thread can use it without a retain/release pair
    /// (`_withUnsafeGuaranteedRef`) — one less per operation run.
    @inline(__always)
    static var unmanagedCurrent: Unmanaged<ThreadState> {
        // safety: the slot names this thread's state, which the key holds retained; the
        // key's destructor empties the slot before it releases the state.
        if let p = unsafe spindle_facade_state() {
            return unsafe Unmanaged<ThreadState>.fromOpaque(p)
        }
        return unsafe makeCurrent()
    }

    @inline(never)
    private static func makeCurrent() -> Unmanaged<ThreadState> {
        // safety: the key's one reference, released by its destructor at thread exit.
        let s = unsafe Unmanaged.passRetained(ThreadState())
        unsafe pthread_setspecific(key, s.toOpaque())
        unsafe spindle_set_facade_state(s.toOpaque())
        return unsafe s
    }

    /// Releases `deps` without recursing through chains of dependencies.
    ///
    /// An operation retains its dependencies (as Foundation's does), so dropping the
    /// last reference to the tail of an N-long chain would run N nested deinits and
    /// overflow the stack for large N (Foundation's Linux queue crashes at ~50 000).
    /// Instead, each deinit hands its dependencies here: the outermost call drains
    /// a work list, and deinits triggered while draining only append to it. Stack depth
    /// stays constant; the work is the same.
    static func releaseIteratively(_ deps: consuming OperationList) {
        let state = current
        if state.draining {
            state.pendingReleases.append(deps)
            return
        }
        state.draining = true
        var batch: OperationList? = consume deps // moved: no copy outlives the loop
        while batch != nil {
            batch = nil // releasing here may append more to pendingReleases
            batch = state.pendingReleases.popLast()
        }
        state.draining = false
    }
}
