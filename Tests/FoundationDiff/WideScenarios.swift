#if SPINDLE
import Spindle
#else
import Foundation
#endif
import Dispatch

/// Queues wider than one. Their order depends on timing on both sides, so a program here
/// is observed only through what cannot race: which operations ran their work and how
/// often, each one's end state, whether its completion block ran, what the queue holds
/// once drained, and whether the queue ever broke a rule that holds in every order — more
/// operations running at once than its width, work begun before one of its dependencies
/// finished, a barrier begun before the work added ahead of it finished, work added
/// behind a barrier begun before the barrier finished, anything run beside a barrier —
/// whether the barrier was added before the queue was resumed or by its operations,
/// several at once, while it ran.
func wideScenarios() {
    for seed in programSeeds {
        show("wide.random.\(seed)", WideProgram(seed: seed).run())
    }
}

/// A random program on a suspended queue of width 2 to 4 or the default: operations of
/// random priorities and classes, some asynchronous and some with an `isReady` of their
/// own, dependencies among them, a barrier among the adds, cancellations; resumed, its
/// operations act on the queue while they run — add work or barriers to it, suspend it
/// for a moment, change its width or an operation's priority — or add work to another
/// queue and wait for it there, holding their thread. Every action has one outcome in
/// every order: an operation cancels only one that waits for it, gives a dependency only
/// to one that waits for it, adds operations and barriers that nothing waits for, and
/// resumes the queue it suspended.
private final class WideProgram: @unchecked Sendable {
    // @unchecked: the fields above `all` are written before the queue is resumed and
    // only read after; `all` and those below it only under `lock`.
    private enum Action {
        case cancel(Int), add(dependency: Int?), dependency(Int, on: Int), width(Int), open(Int)
        case wait(Int, QualityOfService), barrier, suspend(UInt32), priority(Int, Operation.QueuePriority)
    }
    private let lock = NSLock()
    private let queue = OperationQueue()
    /// Where operations add work and wait for it, blocking a thread of `queue`'s.
    private let side = OperationQueue()
    private var ops: [Operation] = []
    private var actions: [[Action]] = []
    private var pauses: [UInt32] = []
    private var beforeBarrier: [Operation] = []
    private var afterBarrier = Set<Int>()
    private var hasBarrier = false
    private var what = ""
    /// The largest width the queue is given; nil: the default width, which bounds nothing
    /// the program can check.
    private var widest: Int?
    // Under `lock`:
    private var all: [Operation] = []
    private var runs: [Int] = []
    /// Where each operation's work last ran, as ``OperationQueue/current`` says: `q` the
    /// program's queue, `s` the other queue, `-` none (an asynchronous operation's
    /// thread), a space when it did not run.
    private var currents: [Character] = []
    private var completions: [Int] = []
    private var running = 0, mostRunning = 0
    private var barrierDone = false
    /// Barriers running now.
    private var barriersRunning = 0
    /// The indices in `all` of what was added to `queue`, each once its add returned.
    private var queued: [Int] = []
    /// The barriers operations added while the program ran: what `queued` held when the
    /// add began (all of it ahead of the barrier), whether the add has returned, and
    /// whether the barrier has run.
    private var barriers: [(ahead: [Int], returned: Bool, done: Bool)] = []
    /// For each operation added while the program ran, the barriers whose adds had
    /// returned when its add began: all of them ahead of it.
    private var behind: [Int: [Int]] = [:]
    private var broken: [String] = []

    init(seed: Int) {
        var r = Numbers(state: UInt64(seed) &* 15485863 &+ 11)
        let widths = [2, 3, 4, -1]
        let width = widths[r.below(4)]
        widest = width > 0 ? width : nil
        queue.isSuspended = true
        let widthAfterAdding = r.below(3) == 0
        if !widthAfterAdding { queue.maxConcurrentOperationCount = width }
        what = "width \(width)\(widthAfterAdding ? " set after adding" : "")"
        let n = 3 + r.below(14)
        // Dependencies, those of the program and those given while it runs, and who
        // opens a gate all follow a random order of the operations: each waits only for
        // ones before it there, so nothing waits in a cycle. Nothing added ahead of the
        // barrier waits for something added behind it, which waits for the barrier.
        var order = Array(0..<n)
        for i in stride(from: n - 1, to: 0, by: -1) { order.swapAt(i, r.below(i + 1)) }
        var rank = [Int](repeating: 0, count: n)
        for (k, i) in order.enumerated() { rank[i] = k }
        let barrierAt = r.below(2) == 0 ? r.below(n) : n
        if barrierAt < n { what += " barrier-before-o\(barrierAt)" }
        func mayWait(_ j: Int, on k: Int) -> Bool { rank[k] < rank[j] && !(j < barrierAt && k >= barrierAt) }
        var openers = Set<Int>()
        var opens: [Int: Int] = [:]
        for i in 0..<n {
            let candidates = (0..<n).filter { mayWait(i, on: $0) }
            var kind = r.below(5)
            if kind == 2 && candidates.isEmpty { kind = 0 }
            let opener = kind == 2 ? candidates[r.below(candidates.count)] : nil
            if let opener {
                opens[i] = opener
                openers.insert(opener)
            }
            let op = randomOperation(i, kind: kind, openedBy: opener, &r, what: &what) { [unowned self] in self.perform(i) }
            if r.below(3) == 0 {
                op.qualityOfService = programClasses[r.below(5)]
                what += " o\(i):\(op.qualityOfService)"
            }
            op.completionBlock = { [self] in lock.lock(); completions[i] += 1; lock.unlock() }
            ops.append(op)
            pauses.append(r.below(2) == 0 ? UInt32(200 + r.below(1000)) : 0)
            if i >= barrierAt { afterBarrier.insert(i) }
        }
        beforeBarrier = Array(ops[..<barrierAt])
        var dependents = [[Int]](repeating: [], count: n)
        // Few dependencies each, so that more operations are ready at once than the
        // queue's width.
        for j in 0..<n {
            let candidates = (0..<n).filter { mayWait(j, on: $0) }
            for _ in 0..<(candidates.isEmpty ? 0 : r.below(3)) {
                let k = candidates[r.below(candidates.count)]
                guard !dependents[k].contains(j) else { continue }
                ops[j].addDependency(ops[k])
                dependents[k].append(j)
                what += " o\(j)->o\(k)"
            }
        }
        for i in 0..<n {
            var acts: [Action] = []
            for _ in 0..<r.below(3) {
                switch r.below(8) {
                case 0:
                    // Only one that waits for this one has not begun, whatever the order;
                    // an opener is never cancelled, or its gate would stay closed.
                    let waiting = dependents[i].filter { !openers.contains($0) }
                    guard !waiting.isEmpty else { continue }
                    let j = waiting[r.below(waiting.count)]
                    acts.append(.cancel(j))
                    what += " [o\(i): cancel o\(j)]"
                case 1:
                    let d: Int? = r.below(2) == 0 ? r.below(n) : nil
                    acts.append(.add(dependency: d))
                    what += " [o\(i): add after \(d.map { "o\($0)" } ?? "-")]"
                case 2:
                    guard !dependents[i].isEmpty else { continue }
                    let j = dependents[i][r.below(dependents[i].count)], k = r.below(n)
                    guard mayWait(j, on: k) else { continue }
                    acts.append(.dependency(j, on: k))
                    what += " [o\(i): o\(j)->o\(k)]"
                case 3:
                    let count = 1 + r.below(3), qos = programClasses[r.below(5)]
                    acts.append(.wait(count, qos))
                    what += " [o\(i): wait for \(count) \(qos)]"
                case 4:
                    acts.append(.barrier)
                    what += " [o\(i): barrier]"
                case 5:
                    let pause = UInt32(100 + r.below(500))
                    acts.append(.suspend(pause))
                    what += " [o\(i): suspend \(pause)]"
                case 6:
                    let (j, p) = randomPriorityChange(by: i, of: n, &r, what: &what)
                    acts.append(.priority(j, p))
                default:
                    let w = 1 + r.below(4)
                    acts.append(.width(w))
                    widest = widest.map { max($0, w) }
                    what += " [o\(i): width \(w)]"
                }
            }
            actions.append(acts)
        }
        for (gated, opener) in opens.sorted(by: { $0.key < $1.key }) {
            actions[opener].insert(.open(gated), at: r.below(actions[opener].count + 1))
        }
        all = ops
        queued = Array(0..<n)
        runs = [Int](repeating: 0, count: n)
        completions = runs
        currents = [Character](repeating: " ", count: n)
        for (i, op) in ops.enumerated() {
            if i == barrierAt {
                hasBarrier = true
                queue.addBarrierBlock { [self] in barrier() }
            }
            queue.addOperation(op)
        }
        // Cancelled once added: Foundation on Linux deadlocks adding a cancelled operation
        // behind a barrier (barrier.cancelled-added-behind).
        for i in 0..<n where !openers.contains(i) && r.below(6) == 0 {
            ops[i].cancel()
            what += " cancel-o\(i)"
        }
        if widthAfterAdding { queue.maxConcurrentOperationCount = width }
    }

    /// The work of operation `i` (an index into `all`).
    private func perform(_ i: Int) {
        lock.lock()
        let op = all[i]
        runs[i] += 1
        currents[i] = current()
        running += 1
        mostRunning = max(mostRunning, running)
        if hasBarrier && !barrierDone && (i >= ops.count || afterBarrier.contains(i)) { broken.append("\(i) before the barrier") }
        for b in behind[i] ?? [] where !barriers[b].done { broken.append("\(i) before barrier \(b)") }
        if barriersRunning > 0 { broken.append("\(i) beside a barrier") }
        lock.unlock()
        let early = op.dependencies.filter { !$0.isFinished }.count
        if early > 0 { lock.lock(); broken.append("\(i) before \(early) of its dependencies"); lock.unlock() }
        if i < ops.count {
            if pauses[i] > 0 { usleep(pauses[i]) }
            for action in actions[i] { act(action) }
        }
        lock.lock(); running -= 1; lock.unlock()
    }

    private func barrier() {
        runAlone("the barrier") {
            let early = beforeBarrier.filter { !$0.isFinished }.count
            if early > 0 { broken.append("barrier before \(early) ahead of it") }
        } end: {
            barrierDone = true
        }
    }

    /// Barrier `b` of those operations add while the program runs.
    private func addedBarrier(_ b: Int) {
        runAlone("barrier \(b)") {
            let early = barriers[b].ahead.filter { !all[$0].isFinished }.count
            if early > 0 { broken.append("barrier \(b) before \(early) ahead of it") }
            if hasBarrier && !barrierDone { broken.append("barrier \(b) before the barrier") }
        } end: {
            barriers[b].done = true
        }
    }

    /// A barrier's run, which nothing else of the queue's may run beside: `start` and
    /// `end` under `lock`, and between them a moment in which an operation started
    /// beside it would be seen.
    private func runAlone(_ name: String, _ start: () -> Void, end: () -> Void) {
        lock.lock()
        if running > 0 { broken.append("\(name) beside \(running) running") }
        running += 1
        barriersRunning += 1
        mostRunning = max(mostRunning, running)
        start()
        lock.unlock()
        usleep(100)
        lock.lock()
        running -= 1
        barriersRunning -= 1
        end()
        lock.unlock()
    }

    private func act(_ action: Action) {
        switch action {
        case .cancel(let j): ops[j].cancel()
        case .add(let d):
            let (op, index) = extra { [unowned self] in perform($0) }
            if let d { op.addDependency(ops[d]) }
            lock.lock()
            behind[index] = barriers.indices.filter { barriers[$0].returned }
            lock.unlock()
            queue.addOperation(op)
            lock.lock(); queued.append(index); lock.unlock()
        case .barrier:
            lock.lock()
            let b = barriers.count
            barriers.append((ahead: queued, returned: false, done: false))
            lock.unlock()
            queue.addBarrierBlock { [unowned self] in addedBarrier(b) }
            lock.lock(); barriers[b].returned = true; lock.unlock()
        case .suspend(let pause):
            queue.isSuspended = true
            usleep(pause)
            queue.isSuspended = false
        case .priority(let j, let p): ops[j].queuePriority = p
        case .dependency(let j, let k): ops[j].addDependency(ops[k])
        case .width(let w): queue.maxConcurrentOperationCount = w
        case .open(let j): (ops[j] as? Gated)?.openGate()
        case .wait(let count, let qos):
            let work = (0..<count).map { _ in
                let (op, _) = extra { [self] index in lock.lock(); runs[index] += 1; currents[index] = current(); lock.unlock() }
                op.qualityOfService = qos
                return op
            }
            side.addOperations(work, waitUntilFinished: true)
        }
    }

    private func current() -> Character {
        let current = OperationQueue.current
        return current === queue ? "q" : current === side ? "s" : current == nil ? "-" : "?"
    }

    /// An operation made while the program runs, counted as the program's own are, and its
    /// index in `all`; its work is `body`, given that index.
    private func extra(_ body: @escaping @Sendable (Int) -> Void) -> (BlockOperation, Int) {
        let op = BlockOperation()
        lock.lock()
        let index = all.count
        all.append(op)
        runs.append(0)
        currents.append(" ")
        completions.append(0)
        lock.unlock()
        op.addExecutionBlock { body(index) }
        op.completionBlock = { [self] in lock.lock(); completions[index] += 1; lock.unlock() }
        return (op, index)
    }

    /// Runs it; what it was, and what it did.
    func run() -> String {
        queue.isSuspended = false
        queue.waitUntilAllOperationsAreFinished()
        let drained = "\(queue.operationCount)/\(queue.operations.count)"
        // Completion blocks run after their operations finish, so possibly after the wait.
        let deadline = DispatchTime.now() + 10
        while DispatchTime.now() < deadline {
            lock.lock(); let done = completions.allSatisfy { $0 > 0 }; lock.unlock()
            if done { break }
            usleep(1000)
        }
        lock.lock()
        defer { lock.unlock() }
        let ends = all.map { ($0.isCancelled ? "c" : "") + ($0.isFinished ? "f" : "") }
        let bound = widest.map { mostRunning <= $0 ? "within" : "over (\(mostRunning) > \($0))" } ?? "-"
        // The operations made while it runs are numbered in the order their makers ran,
        // which timing decides: what they say, they say as a set.
        let on = String(currents[..<ops.count]) + "+" + String(currents[ops.count...].sorted())
        return "\(what): runs \(runs.map(String.init).joined()) | on \(on)"
            + " | completions \(completions.map(String.init).joined())"
            + " | \(ends.joined(separator: ",")) | width \(bound) | drained \(drained) | broken \(broken)"
    }
}
