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
    // `b` becomes ready after `c`, which was added after it.
    show("order.ready-later-added-first", observedOrder { q in
        let x = logged("x"), b = logged("b"), c = logged("c")
        b.addDependency(x)
        q.addOperations([x, b, c], waitUntilFinished: false)
    })

    // Dependents made ready by one finish start in the order they were added, not in
    // the order the finishing operation lists them.
    show("order.fan-out", observedOrder { q in
        let root = logged("root")
        let dependents = (0..<24).map { logged("d\($0)") }
        for d in dependents { d.addDependency(root) }
        q.addOperations(dependents + [root], waitUntilFinished: false)
    })

    // Raised and lowered back, `a` is at the end of its level; set to the priority it
    // already has, `b` stays where it is.
    show("order.priority-moves-to-end", observedOrder { q in
        let a = logged("a"), b = logged("b"), c = logged("c")
        q.addOperations([a, b, c], waitUntilFinished: false)
        a.queuePriority = .high
        a.queuePriority = .normal
        b.queuePriority = .normal
    })

    // The same for an operation that is not ready yet when its priority changes.
    show("order.priority-moves-waiting-to-end", observedOrder { q in
        let x = logged("x", .veryHigh), a = logged("a"), b = logged("b")
        a.addDependency(x)
        q.addOperations([x, a, b], waitUntilFinished: false)
        a.queuePriority = .low
        a.queuePriority = .normal
    })

    // A barrier starts ahead of a cancelled operation added after it, which is ready at
    // once, so `d`, which waits for that operation, runs after `a`.
    show("order.barrier-ahead-of-cancelled", observedOrder { q in
        q.addOperation(logged("z", .high))
        q.addBarrierBlock { log.add("B") }
        let a = logged("a", .high), c = logged("c", .high), d = logged("d", .veryHigh)
        d.addDependency(c)
        q.addOperations([a, c, d], waitUntilFinished: false)
        c.cancel()
    })

    // An operation with a quality of service of its own and no priority, on a serial
    // queue (where its class gives it no level): a new priority moves it.
    let withClass = BlockOperation { log.add("a") }
    let moved = observedOrder { q in
        withClass.qualityOfService = .userInitiated
        q.addOperations([withClass, logged("b"), logged("c")], waitUntilFinished: false)
        withClass.queuePriority = .low
    }
    show("order.qos-operation-priority-change", [moved, "\(withClass.queuePriority.rawValue)"])

    do {
        // The same on a queue that is not serial, given the priority its class already
        // implies there: the priority reads back as set.
        let a = BlockOperation {}
        a.qualityOfService = .userInteractive
        let q = OperationQueue()
        q.isSuspended = true
        q.addOperation(a)
        a.queuePriority = .veryHigh
        show("order.qos-operation-priority-readback", "\(a.queuePriority.rawValue)")
        q.isSuspended = false
        q.waitUntilAllOperationsAreFinished()
    }

    // Random programs of the same kind: operations of random priorities and classes,
    // dependencies among them, a barrier among the adds, cancellations and priority
    // changes, and the width set to one before the adds or after them, before the
    // queue is resumed.
    for seed in programSeeds {
        show("order.random.\(seed)", randomProgram(seed: seed))
    }

    // Random programs whose operations act on the queue while they run: cancel an
    // operation, change a priority, add an operation (with a dependency or not), give
    // another operation a dependency, read the count or an operation's readiness.
    for seed in programSeeds {
        show("order.acting.\(seed)", ActingProgram(seed: seed).run())
    }
}

private func suspendedSerialQueue() -> OperationQueue {
    let q = OperationQueue()
    q.maxConcurrentOperationCount = 1
    q.isSuspended = true
    return q
}

/// What a suspended serial queue that `fill` filled ran, once resumed.
private func observedOrder(_ fill: (OperationQueue) -> Void) -> String {
    let q = suspendedSerialQueue()
    fill(q)
    resumeAndWait(q)
    return log.take()
}

private func resumeAndWait(_ q: OperationQueue) {
    q.isSuspended = false
    q.waitUntilAllOperationsAreFinished()
}

private func logged(_ name: String, _ priority: Operation.QueuePriority = .normal) -> BlockOperation {
    named(name, priority) { log.add(name) }
}

/// Runs one random program and returns what it did: its operations' priorities, what
/// was done to them, and the order they ran in.
private func randomProgram(seed: Int) -> String {
    var r = Numbers(state: UInt64(seed) &* 7919 &+ 1)
    let n = 2 + r.below(13)
    var what = "["
    let ops = (0..<n).map { i -> BlockOperation in
        let op = BlockOperation { log.add("o\(i)") }
        // Half of them with a priority; a third with a class, which on a queue that is
        // not serial when they are added gives those without a priority their level.
        if r.below(2) == 0 { op.queuePriority = programLevels[r.below(5)] }
        if r.below(3) == 0 { op.qualityOfService = programClasses[r.below(5)] }
        what += "\(i == 0 ? "" : ",")\(op.queuePriority.rawValue)/\(op.qualityOfService)"
        return op
    }
    what += "]"
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
    let widthAfterAdding = r.below(2) == 0
    let q = widthAfterAdding ? OperationQueue() : suspendedSerialQueue()
    q.isSuspended = true
    if r.below(3) == 0 && barrierAt < 0 {
        q.addOperations(ops, waitUntilFinished: false)
    } else {
        for (i, op) in ops.enumerated() {
            if i == barrierAt { q.addBarrierBlock { log.add("B") } }
            q.addOperation(op)
        }
    }
    for _ in 0..<r.below(3) {
        let i = r.below(n), p = programLevels[r.below(5)]
        // Not of one with a class: Foundation on Linux's setter mishandles those
        // (order.qos-operation-priority-change).
        guard ops[i].qualityOfService == .default else { continue }
        ops[i].queuePriority = p
        what += " o\(i)=\(p.rawValue)"
    }
    for i in 0..<n where r.below(6) == 0 {
        ops[i].cancel()
        what += " cancel-o\(i)"
    }
    if widthAfterAdding {
        q.maxConcurrentOperationCount = 1
        what += " width-set-after-adding"
    }
    resumeAndWait(q)
    return "\(what): \(log.take())"
}

/// A program of `randomProgram`'s kind on a serial queue whose operations act on the
/// queue while they run. Some of its operations are asynchronous (they finish on a
/// thread of their own, after their actions), and some have an `isReady` of their own,
/// closed until another operation opens it; some add work to a serial queue of their
/// own and wait for it there, holding their thread. Leaves out two actions that crash
/// Foundation on Linux: an operation cancelling its whole queue, and an operation
/// giving itself a dependency.
private final class ActingProgram: @unchecked Sendable {
    // @unchecked: written before the queue is resumed, then read by one operation at a
    // time (the queue is serial), each after the one before it finished.
    private enum Action {
        case cancel(Int), priority(Int, Operation.QueuePriority), add(Operation.QueuePriority, dependency: Int?)
        case dependency(Int, on: Int), count, readiness(Int), open(Int), wait(Int, QualityOfService)
    }
    private var ops: [Operation] = []
    private var actions: [[Action]] = []
    private let queue = suspendedSerialQueue()
    private let side = OperationQueue()
    private var added = 0, waitedFor = 0
    private var what = ""

    init(seed: Int) {
        var r = Numbers(state: UInt64(seed) &* 104729 &+ 7)
        side.maxConcurrentOperationCount = 1
        let n = 2 + r.below(11)
        // Dependencies, the program's and those added while it runs, and who opens a
        // gate all follow a random order of the operations: each waits only for ones
        // before it there, so nothing waits in a cycle, and every gate is opened.
        var order = Array(0..<n)
        for i in stride(from: n - 1, to: 0, by: -1) { order.swapAt(i, r.below(i + 1)) }
        var rank = [Int](repeating: 0, count: n)
        for (k, i) in order.enumerated() { rank[i] = k }
        var openers = Set<Int>()
        var opens: [Int: Int] = [:]
        for i in 0..<n {
            let kind = rank[i] == 0 ? 0 : r.below(6)
            let opener = kind == 2 ? order[r.below(rank[i])] : nil
            if let opener {
                opens[i] = opener
                openers.insert(opener)
            }
            ops.append(randomOperation(i, kind: kind, openedBy: opener, &r, what: &what) { [unowned self] in self.perform(i) })
        }
        for j in 1..<n where r.below(3) == 0 {
            let k = r.below(j)
            ops[order[j]].addDependency(ops[order[k]])
            what += " o\(order[j])->o\(order[k])"
        }
        for i in 0..<n {
            var acts: [Action] = []
            for _ in 0..<r.below(3) {
                switch r.below(7) {
                case 0:
                    // An opener is never cancelled: its gate would stay closed.
                    let j = r.below(n)
                    guard !openers.contains(j) else { continue }
                    acts.append(.cancel(j))
                    what += " [o\(i): cancel o\(j)]"
                case 1:
                    let (j, p) = randomPriorityChange(by: i, of: n, &r, what: &what)
                    acts.append(.priority(j, p))
                case 2:
                    let p = programLevels[r.below(5)], d: Int? = r.below(2) == 0 ? r.below(n) : nil
                    acts.append(.add(p, dependency: d))
                    what += " [o\(i): add \(p.rawValue) after \(d.map { "o\($0)" } ?? "-")]"
                case 3:
                    let j = r.below(n), k = r.below(n)
                    if rank[k] < rank[j] && j != i {
                        acts.append(.dependency(j, on: k))
                        what += " [o\(i): o\(j)->o\(k)]"
                    }
                case 4:
                    acts.append(.count)
                    what += " [o\(i): count]"
                case 5:
                    let count = 1 + r.below(3), qos = programClasses[r.below(5)]
                    acts.append(.wait(count, qos))
                    what += " [o\(i): wait for \(count) \(qos)]"
                default:
                    let j = r.below(n)
                    acts.append(.readiness(j))
                    what += " [o\(i): ready o\(j)]"
                }
            }
            actions.append(acts)
        }
        for (gated, opener) in opens.sorted(by: { $0.key < $1.key }) {
            actions[opener].insert(.open(gated), at: r.below(actions[opener].count + 1))
        }
        if r.below(2) == 0 {
            queue.addOperations(ops, waitUntilFinished: false)
        } else {
            for op in ops { queue.addOperation(op) }
        }
    }

    private func perform(_ i: Int) {
        log.add("o\(i)")
        for action in actions[i] {
            switch action {
            case .cancel(let j): ops[j].cancel()
            case .priority(let j, let p): ops[j].queuePriority = p
            case .add(let p, let d):
                added += 1
                let name = "n\(added)"
                let op = logged(name, p)
                if let d { op.addDependency(ops[d]) }
                queue.addOperation(op)
            case .dependency(let j, let k): ops[j].addDependency(ops[k])
            case .count: log.add("#\(queue.operationCount)")
            case .readiness(let j): log.add("o\(j)-ready:\(ops[j].isReady)")
            case .open(let j): (ops[j] as? Gated)?.openGate()
            case .wait(let count, let qos):
                let work = (0..<count).map { _ in
                    waitedFor += 1
                    let op = logged("w\(waitedFor)")
                    op.qualityOfService = qos
                    return op
                }
                side.addOperations(work, waitUntilFinished: true)
            }
        }
    }

    /// Runs it; what it was, and what it did: the order, and each operation's end state.
    func run() -> String {
        resumeAndWait(queue)
        let ends = ops.map { ($0.isCancelled ? "c" : "") + ($0.isFinished ? "f" : "") }
        return "\(what): \(log.take()) | \(ends.joined(separator: ","))"
    }
}

/// An asynchronous operation that does its work, then finishes, on a thread of its own.
final class FinishingLater: Operation, @unchecked Sendable {
    // @unchecked: the flags are only touched under `lock`.
    private let lock = NSLock()
    private var executing = false, finished = false
    private let work: @Sendable () -> Void
    init(_ work: @escaping @Sendable () -> Void) { self.work = work }
    override var isAsynchronous: Bool { true }
    override var isExecuting: Bool { lock.lock(); defer { lock.unlock() }; return executing }
    override var isFinished: Bool { lock.lock(); defer { lock.unlock() }; return finished }
    override func start() {
        guard !isCancelled else { return finish() }
        willChangeValue(forKey: "isExecuting")
        lock.lock(); executing = true; lock.unlock()
        didChangeValue(forKey: "isExecuting")
        Thread.detachNewThread { [self] in
            work()
            finish()
        }
    }
    private func finish() {
        willChangeValue(forKey: "isExecuting")
        willChangeValue(forKey: "isFinished")
        lock.lock(); executing = false; finished = true; lock.unlock()
        didChangeValue(forKey: "isExecuting")
        didChangeValue(forKey: "isFinished")
    }
}
