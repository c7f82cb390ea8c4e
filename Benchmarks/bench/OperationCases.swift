import Dispatch
import Foundation
import Spindle

// Foundation's and Spindle's operation types side by side: this file imports both
// modules, so every use is qualified.

/// N `addOperation { }` then `waitUntilAllOperationsAreFinished()`, from one thread.
/// `width`: nil for the default, 1 for the serial variant.
func operationThroughputCase(name: String, tasks: Int, reps: Int, width: Int?) throws -> CaseResult {
    let dispatchName = width == 1 ? "dispatch-serial" : "dispatch"
    return try measure(name, tasks: tasks, reps: reps, reference: dispatchName, alsoVs: ["foundation"], [
        SystemRun(name: "spindle") {
            try addAndWait(tasks, name: name, who: "spindle", queue: Spindle.OperationQueue(), width: width,
                           setWidth: { $0.maxConcurrentOperationCount = $1 },
                           add: { $0.addOperation($1) }, wait: { $0.waitUntilAllOperationsAreFinished() })
        },
        SystemRun(name: "foundation") {
            try addAndWait(tasks, name: name, who: "foundation", queue: Foundation.OperationQueue(), width: width,
                           setWidth: { $0.maxConcurrentOperationCount = $1 },
                           add: { $0.addOperation($1) }, wait: { $0.waitUntilAllOperationsAreFinished() })
        },
        SystemRun(name: dispatchName) {
            try dispatchGroupRun(width == 1 ? DispatchQueue(label: "bench.serial") : .global(), tasks: tasks, name: name)
        },
    ])
}

/// N `add { }` on `queue` from this thread, then `wait`; the same for either queue type.
private func addAndWait<Q>(_ tasks: Int, name: String, who: String, queue: Q, width: Int?,
                           setWidth: (Q, Int) -> Void, add: (Q, @escaping @Sendable () -> Void) -> Void,
                           wait: (Q) -> Void) throws -> Double {
    if let width { setWidth(queue, width) }
    let c = Countdown(tasks)
    let t = timed {
        for _ in 0..<tasks { add(queue) { c.hit() } }
        wait(queue)
    }.ns
    guard c.remaining.load(ordering: .acquiring) == 0 else { throw BenchFailure("\(name): \(who) lost operations") }
    return t
}

/// A chain of N operations, each depending on the previous, added in reverse order
/// (so every operation but the last waits when added). Foundation's Linux queue
/// rescans waiting operations on every pass, and overflows its stack releasing long
/// chains, so it runs at the largest size it survives.
func dependencyChainCase(spindleTasks: Int, foundationTasks: Int, reps: Int) throws -> CaseResult {
    var r = try measure("dependency-chain", tasks: spindleTasks, reps: reps, reference: "foundation", [
        SystemRun(name: "spindle", tasks: spindleTasks) {
            try chain(spindleTasks, make: { Spindle.BlockOperation(block: $0) }, queue: Spindle.OperationQueue(),
                      add: { q, ops in for op in ops.reversed() { q.addOperation(op) } },
                      wait: { $0.waitUntilAllOperationsAreFinished() },
                      depend: { $0.addDependency($1) }, who: "spindle")
        },
        SystemRun(name: "foundation", tasks: foundationTasks) {
            try chain(foundationTasks, make: { Foundation.BlockOperation(block: $0) }, queue: Foundation.OperationQueue(),
                      add: { q, ops in for op in ops.reversed() { q.addOperation(op) } },
                      wait: { $0.waitUntilAllOperationsAreFinished() },
                      depend: { $0.addDependency($1) }, who: "foundation")
        },
    ])
    r.note = "spindle at \(spindleTasks) operations, foundation at \(foundationTasks): per-operation cost"
    return r
}

private func chain<Op: AnyObject, Q>(_ n: Int, make: (@escaping @Sendable () -> Void) -> Op, queue: Q,
                                     add: (Q, [Op]) -> Void, wait: (Q) -> Void,
                                     depend: (Op, Op) -> Void, who: String) throws -> Double {
    let next = SharedCounter()
    var ops: [Op] = []
    ops.reserveCapacity(n)
    let t = timed {
        for i in 0..<n {
            let op = make { next.expect(i) }
            if let prev = ops.last { depend(op, prev) }
            ops.append(op)
        }
        add(queue, ops)
        wait(queue)
    }.ns
    guard next.value == n, next.outOfOrder == 0 else {
        throw BenchFailure("dependency-chain: \(who) ran \(next.value) of \(n), \(next.outOfOrder) out of order")
    }
    // Release the chain outside the timed region, tail first: each released operation
    // then frees only itself (its dependency is still held by the array), so even a
    // recursive deinit (Foundation's) never runs deep.
    while !ops.isEmpty { ops.removeLast() }
    return t
}

/// Counts chain steps; the chain runs strictly one at a time, so plain fields behind
/// the dependency edges' happens-before are enough — but a lock keeps it obviously so.
final class SharedCounter: @unchecked Sendable {
    private let lock = NSLock()
    private(set) var value = 0
    private(set) var outOfOrder = 0
    func expect(_ i: Int) {
        lock.lock()
        if value != i { outOfOrder += 1 }
        value = i + 1
        lock.unlock()
    }
}
