import Synchronization

// Promotion as a queue takes part in it (Promotion.swift, P2 and P3): the operations
// ahead of one in a narrow queue, an add's promotion, a wait for the whole queue, and
// what a wait that skipped the queue leaves it to do.

extension OperationQueue {
    /// The queue's class, read without its lock (`assignedQoS`): default until one is
    /// set. What a promotion onto the queue's operations and the watch's tick use.
    var assignedClass: QualityOfService {
        let raw = assignedQoS.load(ordering: .relaxed)
        return raw == Int.min ? .default : QualityOfService(rawValue: raw) ?? .default
    }

    /// The unfinished operations added before `op`, when the queue limits its width (P2):
    /// those are the ones `op` may wait behind. `walkRank`: the class a promotion's walk
    /// raises them to, which skips the queue when nothing in it can be below that class
    /// (P2); nil for an add's promotion (P3), which is above the queue's class.
    func unfinishedAhead(of op: Operation, walkRank: UInt8? = nil) -> [Operation] {
        unsafe state.locked { s -> [Operation] in
            guard unsafe s.maxConcurrent >= 0, unsafe op.queueFields.linked else { return [] }
            if let walkRank, unsafe !s.ownClassAdded && s.lowestRank >= walkRank {
                unsafe s.skippedWaitRank = unsafe max(s.skippedWaitRank, walkRank)
                return []
            }
            var out: [Operation] = []
            var cursor = unsafe op.queueFields.prev
            while let c = unsafe cursor {
                let o = unsafe c.takeUnretainedValue()
                if !o.queueSync.done.load(ordering: .acquiring) {
                    // A floor already at the walk's class stops it (P2): whatever raised
                    // that floor raises, or has raised, everything ahead of it too.
                    if let walkRank, o.promotedRank.load(ordering: .relaxed) >= walkRank { break }
                    out.append(o)
                }
                unsafe cursor = unsafe o.queueFields.prev
            }
            PromotionCounters.walked.add(out.count, ordering: .relaxed)
            return out
        }
    }

    /// An operation was added (P3): its class reaches its unfinished dependencies, and
    /// the operations ahead of it in a narrow queue rise to its class when that is above
    /// the queue's, and to its floor in any case: a wait or a dependent that reached it
    /// before its add waits behind them as a wait's walk does (P2), skip, stop and
    /// record included.
    /// `narrow`: the queue limited its width when `op` was linked.
    func promoteOnAdd(_ op: Operation, narrow: Bool) {
        let queueQoS = assignedClass
        let rank = ClassRank.of(op.effectiveQoS(queueDefault: queueQoS))
        op.promoteDependencies(to: rank)
        guard narrow else { return }
        // The class read above may be stale: the walk decides under the queue's lock,
        // against `lowestRank`, which a lowered class has already lowered.
        let aheadRank = rank > ClassRank.of(queueQoS) ? rank : op.promotedRank.load(ordering: .sequentiallyConsistent)
        guard aheadRank > 0 else { return }
        for ahead in unfinishedAhead(of: op, walkRank: aheadRank) { ahead.promote(to: aheadRank, walkQueue: false) }
    }

    /// The queue was made narrow (P2): each operation now waits behind the ones added
    /// before it, which none of the walks so far collected (a queue of unlimited width
    /// has nothing ahead). Each of those rises to the highest class asked of one behind
    /// it — a floor, or a class of its own above the queue's — and the queue records
    /// that class as one it stands in for, as for a skipped wait, so that lowering its
    /// class later raises them.
    func promoteOnNarrowing() {
        let (ops, queueQoS) = unsafe state.locked { s -> ([Operation], QualityOfService) in
            var out: [Operation] = []
            var cursor = unsafe s.head
            while let u = unsafe cursor {
                let op = unsafe u.takeUnretainedValue()
                if !op.queueSync.done.load(ordering: .acquiring) { out.append(op) }
                unsafe cursor = unsafe op.queueFields.next
            }
            return unsafe (out, s.qualityOfService)
        }
        let queueRank = ClassRank.of(queueQoS)
        var asked: UInt8 = 0
        var raise: [(Operation, UInt8)] = []
        for op in ops.reversed() {
            let floor = op.promotedRank.load(ordering: .sequentiallyConsistent)
            let natural = ClassRank.of(op.naturalQoS(queueDefault: queueQoS))
            if max(floor, natural) < asked { raise.append((op, asked)) }
            asked = max(asked, floor, natural > queueRank ? natural : 0)
        }
        guard asked > 0 else { return }
        let lowered = unsafe state.locked { s -> Bool in
            unsafe s.skippedWaitRank = unsafe max(s.skippedWaitRank, asked)
            return unsafe ClassRank.of(s.qualityOfService) < queueRank
        }
        for (op, rank) in raise { op.promote(to: rank, walkQueue: false) }
        // Lowered while the operations were read: that change did not see the record.
        if lowered { promoteAll(to: asked) }
    }

    /// Promotes every unfinished operation of the queue below `rank` to it (a wait for
    /// all of them: P3). Only those can be below it: every operation, when the queue's
    /// class is below `rank`; else those with a class of their own. They are collected
    /// under the lock with plain references (the list holds them), not handed out as
    /// `operations` does, which would make each of them hold its queue.
    func promoteAll(to rank: UInt8) {
        guard rank > 0, unfinishedCount > 0 else { return }
        let queueRank = ClassRank.of(assignedClass)
        let below = unsafe state.locked { s -> [Operation] in
            guard unsafe queueRank < rank || s.ownClassAdded else { return [] }
            var out: [Operation] = []
            var cursor = unsafe s.head
            while let u = unsafe cursor {
                let op = unsafe u.takeUnretainedValue()
                if !op.queueSync.done.load(ordering: .acquiring) && op.promotedRank.load(ordering: .relaxed) < rank
                    && (queueRank < rank || op.hasOwnPriority.load(ordering: .relaxed)) {
                    out.append(op)
                }
                unsafe cursor = unsafe op.queueFields.next
            }
            return out
        }
        var raised = RaisedRuns()
        for op in below { op.raiseFloors(to: rank, walkQueue: false, into: &raised) }
        raised.promoteRuns(to: rank)
    }
}

extension OperationQueue {
    /// An operation of this queue was given a class of its own: notes it (P2's skip no
    /// longer applies) and returns the class a skipped wait, or a wait for the whole
    /// queue, needs it at (0: none).
    func noteOwnClass() -> UInt8 {
        unsafe state.locked { s -> UInt8 in
            unsafe s.ownClassAdded = true
            return unsafe max(s.skippedWaitRank, s.drainWaitRank)
        }
    }
}
