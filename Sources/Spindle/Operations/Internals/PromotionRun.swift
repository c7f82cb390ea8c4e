import CSpindle
import Foundation
import Synchronization

// Promotion's second half (Promotion.swift has the protocols, P1-P7, and the first
// half, the floor and the walk): the run of an operation, which a promotion moves to a
// higher class's pool while it waits (P4, P5) or raises while it runs (P6, P7), and the
// runs one promotion raised.

extension Operation {
    // MARK: P4-P6: the run

    /// P4: the dispatcher's mark, before the operation reaches `rank`'s pool (or the
    /// continuation slot of a worker of that pool). Relaxed: the runner reads it after
    /// the submission's release; a promoter acts on it only by CAS.
    @inline(__always)
    func markSubmitted(rank: UInt8) {
        execWord.store(ExecWord.make(ExecWord.submitted, submittedAt: rank, at: rank), ordering: .relaxed)
    }

    /// P4: claims the run for the calling thread. `copyRank`: the class of the pool a
    /// moved copy runs on (P5); nil for the original task node or continuation slot.
    /// Returns whether this thread runs the operation, and whether it must release the
    /// reference the first move took for the original node. `tid`: the calling thread's
    /// id (`ThreadState.threadID`), which a promoter boosts.
    @inline(__always)
    func claimRun(copyRank: UInt8?, tid: Int32) -> (won: Bool, releaseNodeReference: Bool) {
        var w = execWord.load(ordering: .relaxed)
        while true {
            let state = w & ExecWord.stateMask
            guard state == ExecWord.submitted || state == ExecWord.moved else {
                // The other runner has it (a copy exists, so the original node was
                // retained by the move).
                return (false, copyRank == nil)
            }
            let rank = copyRank ?? ExecWord.submittedRank(w)
            let desired = ExecWord.make(ExecWord.running, submittedAt: rank, at: rank, tid: tid)
            // seq_cst: the runner's side of P7.
            let (done, seen) = execWord.compareExchange(expected: w, desired: desired, ordering: .sequentiallyConsistent)
            if done {
                if promotedRank.load(ordering: .sequentiallyConsistent) > rank { boostSelf() }
                return (true, state == ExecWord.moved && copyRank == nil)
            }
            w = seen
        }
    }

    /// P6: the runner's end. Before `runnerDone`, while the runner's borrowed
    /// reference is still good.
    @inline(__always)
    func endRun() {
        let before = execWord.exchange(ExecWord.done, ordering: .acquiringAndReleasing)
        if before & ExecWord.boosted != 0 { endBoost() }
    }

    @inline(never)
    func endBoost() {
        // A promoter that set the bit holds the lock until its system call is done.
        guarded.locked { _ in }
        if let own = unsafe spindle_current_pool() { _ = unsafe spindle_thread_adopt_pool_priority(0, own, nil) }
    }

    @inline(never)
    func boostSelf() {
        guarded.locked { _ in boostRunningLocked(to: promotedRank.load(ordering: .acquiring)) }
    }

    /// P5, P6: moves a submitted run, or boosts a running one, up to `rank`. False when
    /// the run is not marked yet (IDLE), which P7's second pair must then settle.
    @discardableResult
    func promoteRun(to rank: UInt8) -> Bool {
        var w = execWord.load(ordering: .sequentiallyConsistent)
        while true {
            let state = w & ExecWord.stateMask
            if state == ExecWord.submitted || state == ExecWord.moved {
                guard ExecWord.rank(w) < rank else { return true }
                let first = state == ExecWord.submitted
                // safety: the node's reference is taken below (P5) before any runner can
                // see the move.
                let me = unsafe Unmanaged.passUnretained(self)
                // The original node's reference (P5), taken before the move is visible.
                if first { _ = unsafe me.retain() }
                let desired = ExecWord.make(ExecWord.moved, submittedAt: ExecWord.submittedRank(w), at: rank)
                let (done, seen) = execWord.compareExchange(expected: w, desired: desired, ordering: .sequentiallyConsistent)
                guard done else {
                    if first { unsafe me.release() }
                    w = seen
                    continue
                }
                submitCopy(at: rank)
                PromotionCounters.moved.add(1, ordering: .relaxed)
                return true
            }
            if state == ExecWord.running {
                guard ExecWord.rank(w) < rank else { return true }
                guarded.locked { _ in boostRunningLocked(to: rank) }
            }
            // IDLE: the dispatch that follows reads the floor, or its runner does (P7).
            // DONE: nothing to do.
            return state != ExecWord.idle
        }
    }

    /// P6, under the operation's lock: the RUNNING word to `rank` with the boosted bit,
    /// then the running thread to that class's priority.
    func boostRunningLocked(to rank: UInt8) {
        var w = execWord.load(ordering: .sequentiallyConsistent)
        while w & ExecWord.stateMask == ExecWord.running && ExecWord.rank(w) < rank {
            let desired = (w & ~ExecWord.rankMask) | UInt64(rank) << 6 | ExecWord.boosted
            let (done, seen) = execWord.compareExchange(expected: w, desired: desired, ordering: .sequentiallyConsistent)
            if done {
                Promotion.adopt(thread: ExecWord.tid(w), rank: rank)
                return
            }
            w = seen
        }
    }

    /// P7's second pair, the dispatcher's side: after the mark, a look at the floor.
    /// A promoter that raised it before the mark may have found no run to move; then
    /// the dispatcher moves it (or boosts it, if a runner has claimed it already).
    @inline(__always)
    func recheckFloorAfterMark(rank: UInt8) {
        spindle_barrier_light()
        let floor = promotedRank.load(ordering: .relaxed)
        if floor > rank { promoteRunLate(to: floor) }
    }

    @inline(never)
    func promoteRunLate(to rank: UInt8) { promoteRun(to: rank) }

    /// Whether an add has claimed this operation for a queue (seq_cst: the promoter's
    /// side of the A5 pair, after its raise of the floor).
    var isInAQueue: Bool { queueSync.word.load(ordering: .sequentiallyConsistent) != 0 }

    /// P5: a task on `rank`'s pool that claims and runs this operation, holding it.
    func submitCopy(at rank: UInt8) {
        let task = unsafe ClosureTask.make { [self] in
            // safety: the closure holds `self` for as long as the chain runs.
            unsafe ChainRunner.runChain(Unmanaged.passUnretained(self), copyRank: rank)
        }
        // Through the injector: the promoter is often a worker of that class about to
        // wait for this very operation, and its own deque would hold the copy until a
        // sibling steals it.
        let rc = unsafe spindle_submit_task_shared(QoSPools.engine(for: ClassRank.qos(rank)), task)
        // Process-wide pools refuse shutdown (ThreadPool.Error.processWidePool).
        precondition(rc == 0, "Spindle: a process-wide pool refused a promoted operation (engine bug, rc \(rc))")
    }
}

/// The operations whose floor a promotion raised, whose runs it then moves or boosts
/// (P5, P6).
struct RaisedRuns {
    // The first without an array: most promotions raise one operation.
    private var first: Operation?
    private var rest: [Operation] = []

    mutating func append(_ op: Operation) {
        if first == nil { first = op } else { rest.append(op) }
    }

    /// P7's second pair, the promoter's side: the raises, then a look at each word. A
    /// run found marked is acted on at once: the mark is there to see. One found IDLE
    /// in a queue may be between its dispatcher's mark and the dispatcher's look at the
    /// floor, so after one heavy barrier for all such runs, each word is read again. One
    /// in no queue needs none: its add reads the floor after claiming the queue word,
    /// which the promoter reads after its raise (the A5 pair, in `raiseFloors`), so its
    /// dispatch comes at the raised class — the common case of a chain built before it
    /// is added, where a barrier per add would cost more than the operation.
    func promoteRuns(to rank: UInt8) {
        guard let first else { return }
        var unmarked: [Operation] = []
        if !first.promoteRun(to: rank) && first.isInAQueue { unmarked.append(first) }
        for op in rest where !op.promoteRun(to: rank) && op.isInAQueue { unmarked.append(op) }
        guard !unmarked.isEmpty else { return }
        spindle_barrier_heavy()
        for op in unmarked { op.promoteRun(to: rank) }
    }
}
