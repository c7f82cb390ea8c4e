import CSpindle
import Foundation

// Promotion as the waiting side sees it (Promotion.swift, P3 and P6): the class a wait
// promotes to — the waiting thread's or task's — and a running operation's thread
// taking a promoted class's priority.

/// The class of whoever waits (P3).
enum Promotion {
    /// The calling thread's class: the class of the operation it runs (with its
    /// promotions), or of the Spindle pool it works for; a class the program gave the
    /// thread through Foundation's `Thread.qualityOfService`; otherwise the class its
    /// policy and nice correspond to, around the process's nice as the pools place them.
    static func callingThreadRank() -> UInt8 {
        if let op = unsafe ThreadState.current.currentOperation {
            let w = unsafe op.withGuaranteedReference { $0.execWord.load(ordering: .acquiring) }
            if w & ExecWord.stateMask == ExecWord.running, ExecWord.rank(w) > 0 { return ExecWord.rank(w) }
        }
        if let raw = unsafe spindle_current_pool(), let rank = unsafe QoSPools.rank(ofEngine: raw) { return rank }
        let set = Thread.current.qualityOfService
        if set != .default { return ClassRank.of(set) }
        var nice: Int32 = 0
        let policy = unsafe spindle_thread_class_of_caller(&nice)
        if policy == Int32(SPINDLE_POLICY_IDLE) { return 1 }
        if policy == Int32(SPINDLE_POLICY_BATCH) { return 2 }
        for rank: UInt8 in [5, 4, 3, 2] where nice <= QoSPools.nice(for: ClassRank.qos(rank)) { return rank }
        return 1
    }

    /// The calling task's class, for the async waits.
    static func callingTaskRank() -> UInt8 {
        // One lookup of the current task, where `Task.currentPriority` after a test for
        // a task would make two.
        unsafe withUnsafeCurrentTask { unsafe $0.map { unsafe ClassRank.of($0.priority) } } ?? callingThreadRank()
    }

    /// P6: thread `tid` to `rank`'s priority, counted and, when refused, said once.
    static func adopt(thread tid: Int32, rank: UInt8) {
        let qos = ClassRank.qos(rank)
        var got: Int32 = 0
        let error = unsafe spindle_thread_adopt_pool_priority(tid, QoSPools.engine(for: qos), &got)
        if error == 0 {
            PromotionCounters.raised.add(1, ordering: .relaxed)
            return
        }
        PromotionCounters.refused.add(1, ordering: .relaxed)
        let what = error == EPERM || error == EACCES
            ? "a lower nice or leaving SCHED_IDLE needs CAP_SYS_NICE or RLIMIT_NICE" : "errno \(error)"
        QoSPools.report("a running operation promoted to \(QoSPools.label(for: qos)) could not take that class's priority (\(what)); "
            + "it runs at its own class's until it finishes, and promotions of queued work are unaffected")
    }
}
