#if SPINDLE
import Spindle
#else
import Foundation
#endif
import Dispatch

/// The order in which a serial queue starts its ready operations: among those of the
/// highest priority, the one added first, however late it became ready; a change of
/// priority moves an operation to the end of its new level; a barrier starts ahead of
/// any other ready operation. Each queue is suspended while it is filled and resumed
/// once, so what it runs next never depends on timing.
func orderScenarios() {
    do {
        // `b` becomes ready after `c`, which was added after it.
        let q = suspendedSerialQueue()
        let x = logged("x"), b = logged("b"), c = logged("c")
        b.addDependency(x)
        q.addOperations([x, b, c], waitUntilFinished: false)
        resumeAndWait(q)
        show("order.ready-later-added-first", log.take())
    }

    do {
        // Dependents made ready by one finish start in the order they were added, not in
        // the order the finishing operation lists them.
        let q = suspendedSerialQueue()
        let root = logged("root")
        let dependents = (0..<24).map { logged("d\($0)") }
        for d in dependents { d.addDependency(root) }
        q.addOperations(dependents + [root], waitUntilFinished: false)
        resumeAndWait(q)
        show("order.fan-out", log.take())
    }

    do {
        // Raised and lowered back, `a` is at the end of its level; set to the priority it
        // already has, `b` stays where it is.
        let q = suspendedSerialQueue()
        let a = logged("a"), b = logged("b"), c = logged("c")
        q.addOperations([a, b, c], waitUntilFinished: false)
        a.queuePriority = .high
        a.queuePriority = .normal
        b.queuePriority = .normal
        resumeAndWait(q)
        show("order.priority-moves-to-end", log.take())
    }

    do {
        // The same for an operation that is not ready yet when its priority changes.
        let q = suspendedSerialQueue()
        let x = logged("x", .veryHigh), a = logged("a"), b = logged("b")
        a.addDependency(x)
        q.addOperations([x, a, b], waitUntilFinished: false)
        a.queuePriority = .low
        a.queuePriority = .normal
        resumeAndWait(q)
        show("order.priority-moves-waiting-to-end", log.take())
    }

    do {
        // A barrier starts ahead of a cancelled operation added after it, which is ready
        // at once, so `d`, which waits for that operation, runs after `a`.
        let q = suspendedSerialQueue()
        let z = logged("z", .high)
        q.addOperation(z)
        q.addBarrierBlock { log.add("B") }
        let a = logged("a", .high), c = logged("c", .high), d = logged("d", .veryHigh)
        d.addDependency(c)
        q.addOperations([a, c, d], waitUntilFinished: false)
        c.cancel()
        resumeAndWait(q)
        show("order.barrier-ahead-of-cancelled", log.take())
    }

    // Random programs of the same kind: operations of random priorities, dependencies
    // among them, a barrier among the adds, cancellations and priority changes before
    // the queue is resumed.
    for seed in 0..<300 {
        show("order.random.\(seed)", randomProgram(seed: seed))
    }
}

private func suspendedSerialQueue() -> OperationQueue {
    let q = OperationQueue()
    q.maxConcurrentOperationCount = 1
    q.isSuspended = true
    return q
}

private func resumeAndWait(_ q: OperationQueue) {
    q.isSuspended = false
    q.waitUntilAllOperationsAreFinished()
}

private func logged(_ name: String, _ priority: Operation.QueuePriority = .normal) -> BlockOperation {
    named(name, priority) { log.add(name) }
}

/// A linear congruential generator: the same numbers on both sides.
private struct Numbers {
    var state: UInt64
    mutating func below(_ n: Int) -> Int {
        state = state &* 6364136223846793005 &+ 1442695040888963407
        return Int((state >> 33) % UInt64(n))
    }
}

/// Runs one random program and returns what it did: its operations' priorities, what
/// was done to them, and the order they ran in.
private func randomProgram(seed: Int) -> String {
    var r = Numbers(state: UInt64(seed) &* 7919 &+ 1)
    let levels: [Operation.QueuePriority] = [.veryLow, .low, .normal, .high, .veryHigh]
    let n = 2 + r.below(13)
    let ops = (0..<n).map { logged("o\($0)", levels[r.below(5)]) }
    var what = "[\(ops.map { "\($0.queuePriority.rawValue)" }.joined(separator: ","))]"
    // Dependencies follow a random order of the operations, so they make no cycle; none
    // from an operation added before the barrier to one added after it, which waits for
    // the barrier, which waits for the first.
    var order = Array(0..<n)
    for i in stride(from: n - 1, to: 0, by: -1) { order.swapAt(i, r.below(i + 1)) }
    let barrierAt = r.below(3) == 0 ? r.below(n) : -1
    if barrierAt >= 0 { what += " barrier-before-o\(barrierAt)" }
    for j in 1..<n where r.below(3) == 0 {
        let k = r.below(j)
        if barrierAt >= 0 && order[j] < barrierAt && order[k] >= barrierAt { continue }
        ops[order[j]].addDependency(ops[order[k]])
        what += " o\(order[j])->o\(order[k])"
    }
    let q = suspendedSerialQueue()
    if r.below(3) == 0 && barrierAt < 0 {
        q.addOperations(ops, waitUntilFinished: false)
    } else {
        for (i, op) in ops.enumerated() {
            if i == barrierAt { q.addBarrierBlock { log.add("B") } }
            q.addOperation(op)
        }
    }
    for _ in 0..<r.below(3) {
        let i = r.below(n), p = levels[r.below(5)]
        ops[i].queuePriority = p
        what += " o\(i)=\(p.rawValue)"
    }
    for i in 0..<n where r.below(6) == 0 {
        ops[i].cancel()
        what += " cancel-o\(i)"
    }
    resumeAndWait(q)
    return "\(what): \(log.take())"
}
