import CSpindle
import Synchronization
import XCTest

@testable import Spindle

/// Records the order things happened in, from any thread.
final class Log: Sendable {
    let entries = Mutex<[String]>([])
    func add(_ s: String) { entries.locked { $0.append(s) } }
    var all: [String] { entries.locked { $0 } }
}

/// Tracks how many closures run at once.
final class Concurrency: Sendable {
    let now = Atomic<Int>(0)
    let peak = Atomic<Int>(0)
    func enter() {
        let n = now.add(1, ordering: .acquiringAndReleasing).newValue
        var p = peak.load(ordering: .relaxed)
        while n > p {
            let (ok, cur) = peak.compareExchange(expected: p, desired: n, ordering: .relaxed)
            if ok { break }
            p = cur
        }
    }
    func leave() { now.subtract(1, ordering: .acquiringAndReleasing) }
}

func currentThreadName() -> String {
    (try? String(contentsOfFile: "/proc/thread-self/comm", encoding: .utf8))?
        .trimmingCharacters(in: .whitespacesAndNewlines) ?? "?"
}

/// Field `n` (1-based, as in proc(5)) of /proc/thread-self/stat.
func threadStatField(_ n: Int) -> Int {
    guard let s = try? String(contentsOfFile: "/proc/thread-self/stat", encoding: .utf8),
          let close = s.lastIndex(of: ")") else { return Int.min }
    let fields = s[s.index(after: close)...].split(separator: " ")
    // After the comm field (2), fields start at 3.
    return Int(fields[n - 3]) ?? Int.min
}

/// The calling thread's nice value (field 19) and scheduling policy (field 41).
func currentThreadNice() -> Int { threadStatField(19) }
func currentThreadPolicy() -> Int { threadStatField(41) }
/// A field of a thread's /proc status file ("" if absent).
func threadStatus(_ field: String, of status: String = "/proc/thread-self/status") -> String {
    let text = (try? String(contentsOfFile: status, encoding: .utf8)) ?? ""
    let line = text.split(separator: "\n").first { $0.hasPrefix(field + ":") } ?? ""
    return line.dropFirst(field.count + 1).trimmingCharacters(in: .whitespaces)
}
/// The calling thread's CPU mask as the kernel lists it ("0-1", "0").
func currentThreadAllowedCPUs() -> String { threadStatus("Cpus_allowed_list") }
/// The calling thread's blocked signals, as the kernel prints them (hex, bit n-1 for signal n).
func currentThreadBlockedSignals() -> UInt64 { UInt64(threadStatus("SigBlk"), radix: 16) ?? 0 }

final class OperationQueueTests: XCTestCase {
    // MARK: lifecycle

    func testStartOnQueuelessReadyOperationRunsMainOnCallingThread() {
        let caller = UncheckedBox(Thread.current)
        let onCaller = Atomic<Bool>(false)
        let op = BlockOperation { onCaller.store(Thread.current == caller.value, ordering: .relaxed) }
        XCTAssertTrue(op.isReady)
        op.start()
        XCTAssertTrue(onCaller.load(ordering: .relaxed))
        XCTAssertTrue(op.isFinished)
        XCTAssertFalse(op.isExecuting)
    }

    func testStartOnCancelledOperationFinishesWithoutMain() {
        let ran = Atomic<Bool>(false)
        let op = BlockOperation { ran.store(true, ordering: .relaxed) }
        op.cancel()
        op.start()
        XCTAssertFalse(ran.load(ordering: .relaxed))
        XCTAssertTrue(op.isFinished)
        XCTAssertTrue(op.isCancelled)
    }

    // MARK: dependencies

    func testDependenciesAcrossQueues() {
        let q1 = OperationQueue(), q2 = OperationQueue()
        let log = Log()
        let a = BlockOperation { usleep(10_000); log.add("a") }
        let b = BlockOperation { log.add("b") }
        let c = BlockOperation { log.add("c") }
        b.addDependency(a)
        c.addDependency(b)
        q2.addOperation(c)
        q1.addOperation(b)
        q2.addOperation(a)
        c.waitUntilFinished()
        XCTAssertEqual(log.all, ["a", "b", "c"])
    }

    func testCancelledAndFinishedDependenciesSatisfy() {
        let q = OperationQueue()
        let finished = BlockOperation {}
        finished.start()
        let cancelled = BlockOperation {}
        cancelled.cancel()
        let ran = Atomic<Bool>(false)
        let op = BlockOperation { ran.store(true, ordering: .relaxed) }
        op.addDependency(finished)
        op.addDependency(cancelled)
        q.addOperation(cancelled) // the queue retires it
        q.addOperation(op)
        op.waitUntilFinished()
        XCTAssertTrue(ran.load(ordering: .relaxed))
        XCTAssertEqual(op.dependencies.count, 2)
    }

    func testCancellingAWaitingOperationMakesItReadyAtOnce() {
        let q = OperationQueue()
        let never = BlockOperation {} // never added anywhere: would block forever
        let ran = Atomic<Bool>(false)
        let op = BlockOperation { ran.store(true, ordering: .relaxed) }
        let completion = Atomic<Int>(0)
        op.completionBlock = { completion.add(1, ordering: .relaxed) }
        op.addDependency(never)
        q.addOperation(op)
        XCTAssertFalse(op.isReady)
        op.cancel()
        XCTAssertTrue(op.isReady)
        op.waitUntilFinished()
        XCTAssertFalse(ran.load(ordering: .relaxed))
        XCTAssertTrue(eventually { completion.load(ordering: .acquiring) == 1 })
        XCTAssertEqual(q.operationCount, 0)
    }

    func testRemovingTheLastDependencyStartsTheOperation() {
        let q = OperationQueue()
        let never = BlockOperation {}
        let ran = Atomic<Bool>(false)
        let op = BlockOperation { ran.store(true, ordering: .relaxed) }
        op.addDependency(never)
        q.addOperation(op)
        usleep(10_000)
        XCTAssertFalse(ran.load(ordering: .relaxed))
        op.removeDependency(never)
        op.waitUntilFinished()
        XCTAssertTrue(ran.load(ordering: .relaxed))
        XCTAssertTrue(op.dependencies.isEmpty)
    }

    func testLongChainAddedInReverseRunsInOrder() {
        let n = Stress.count(100_000)
        let q = OperationQueue()
        let next = Atomic<Int>(0)
        let outOfOrder = Atomic<Int>(0)
        var ops: [Operation] = []
        ops.reserveCapacity(n)
        for i in 0..<n {
            let op = BlockOperation {
                if next.load(ordering: .relaxed) != i { outOfOrder.add(1, ordering: .relaxed) }
                next.store(i + 1, ordering: .relaxed)
            }
            if let prev = ops.last { op.addDependency(prev) }
            ops.append(op)
        }
        for op in ops.reversed() { q.addOperation(op) }
        ops.last!.waitUntilFinished()
        XCTAssertEqual(next.load(ordering: .relaxed), n)
        XCTAssertEqual(outOfOrder.load(ordering: .relaxed), 0)
    }

    func testReleasingAMillionLongChainDoesNotRecurse() {
        // A recursive deinit would need ~100+ bytes of stack per link: 10^6 links is far
        // beyond any thread's stack, so this crashes unless teardown is iterative.
        let n = Stress.isTSan ? 100_000 : 1_000_000
        var tail: Operation? = BlockOperation {}
        for _ in 1..<n {
            let op = BlockOperation {}
            op.addDependency(tail!)
            tail = op
        }
        tail = nil
        XCTAssertNil(tail)
    }

    func testCustomIsReadyIsHonouredAndReEvaluatedOnNotification() {
        final class Gated: Spindle.Operation, @unchecked Sendable {
            let open = Atomic<Bool>(false)
            let ran = Atomic<Bool>(false)
            override var isReady: Bool { super.isReady && open.load(ordering: .acquiring) }
            override func main() { ran.store(true, ordering: .relaxed) }
            func openGate() {
                willChangeValue(forKey: "isReady")
                open.store(true, ordering: .releasing)
                didChangeValue(forKey: "isReady")
            }
        }
        let q = OperationQueue()
        let op = Gated()
        q.addOperation(op)
        usleep(10_000)
        XCTAssertFalse(op.ran.load(ordering: .relaxed))
        op.openGate()
        op.waitUntilFinished()
        XCTAssertTrue(op.ran.load(ordering: .relaxed))
    }

    // MARK: order and width

    func testPriorityThenFIFOOnASerialQueue() {
        let q = OperationQueue()
        q.maxConcurrentOperationCount = 1
        q.isSuspended = true
        let log = Log()
        let specs: [(String, Operation.QueuePriority)] = [
            ("n1", .normal), ("l1", .low), ("h1", .high), ("n2", .normal), ("vh", .veryHigh),
            ("h2", .high), ("vl", .veryLow), ("l2", .low), ("n3", .normal),
        ]
        for (name, p) in specs {
            let op = BlockOperation { log.add(name) }
            op.queuePriority = p
            q.addOperation(op)
        }
        q.isSuspended = false
        q.waitUntilAllOperationsAreFinished()
        XCTAssertEqual(log.all, ["vh", "h1", "h2", "n1", "n2", "n3", "l1", "l2", "vl"])
    }

    func testSerialQueueNeverRunsTwoAtOnceAndKeepsFIFO() {
        let q = OperationQueue()
        q.maxConcurrentOperationCount = 1
        let c = Concurrency()
        let log = Log()
        for i in 0..<200 {
            q.addOperation {
                c.enter()
                log.add("\(i)")
                if i % 50 == 0 { usleep(1000) }
                c.leave()
            }
        }
        q.waitUntilAllOperationsAreFinished()
        XCTAssertEqual(c.peak.load(ordering: .relaxed), 1)
        XCTAssertEqual(log.all, (0..<200).map { "\($0)" })
    }

    func testWidthCapsConcurrencyAndLoweringItDoesNotStopRunningOps() throws {
        let q = OperationQueue()
        q.maxConcurrentOperationCount = 3
        let c = Concurrency()
        // A dedicated pool is not needed: waits inside ops help rather than block, and
        // the sleeps here are short.
        for _ in 0..<30 { q.addOperation { c.enter(); usleep(2000); c.leave() } }
        q.waitUntilAllOperationsAreFinished()
        XCTAssertLessThanOrEqual(c.peak.load(ordering: .relaxed), 3)
        XCTAssertEqual(OperationQueue.defaultMaxConcurrentOperationCount, -1)

        let gate = DispatchSemaphore(value: 0)
        let started = DispatchSemaphore(value: 0)
        let q2 = OperationQueue()
        q2.maxConcurrentOperationCount = 2
        let finishedCount = Atomic<Int>(0)
        for _ in 0..<2 { q2.addOperation { started.signal(); gate.wait(); finishedCount.add(1, ordering: .relaxed) } }
        started.wait(); started.wait()
        q2.maxConcurrentOperationCount = 1
        gate.signal(); gate.signal()
        q2.waitUntilAllOperationsAreFinished()
        XCTAssertEqual(finishedCount.load(ordering: .relaxed), 2, "lowering the width must not stop running operations")
    }

    func testSwitchingOutOfDirectModeWhileOperationsFinishStrandsNothing() {
        // At the default width, finishing takes no lock; lowering the width or
        // suspending switches the queue to scheduling under the lock. Operations queued
        // across the switch must still all run, however the finishes interleave.
        let rounds = Stress.count(200)
        for round in 0..<rounds {
            let q = OperationQueue()
            let ran = Atomic<Int>(0)
            let n = 64
            for i in 0..<n {
                q.addOperation { ran.add(1, ordering: .relaxed) }
                if i == n / 4 { q.maxConcurrentOperationCount = 1 + round % 3 }
                if i == n / 2 { q.isSuspended = true }
                if i == 3 * n / 4 { q.isSuspended = false }
            }
            q.maxConcurrentOperationCount = round % 2 == 0 ? -1 : 2
            let done = DispatchSemaphore(value: 0)
            DispatchQueue.global().async { q.waitUntilAllOperationsAreFinished(); done.signal() }
            XCTAssertEqual(done.wait(timeout: .now() + 10), .success, "round \(round): operations stranded")
            XCTAssertEqual(ran.load(ordering: .relaxed), n)
        }
    }

    func testCancelRacingAddOperationCountsTheOperationOnce() {
        // A cancel() on another thread makes an operation ready while addOperation is
        // registering it: both sides try to hand it to the queue. It must start exactly
        // once (twice traps "already executing"), finish once, and be counted before it
        // can finish (finished first, the count would wrap below zero). The narrowest
        // interleaving — cancel's whole path inside the few instructions between the
        // claim and the registration — needs the adder preempted there, so this test
        // mostly guards the wider overlaps; the ordering argument is in
        // OperationQueue.operationBecameReady.
        let q = OperationQueue()
        let rounds = Stress.count(5_000)
        let completions = Atomic<Int>(0)
        let ran = Atomic<Int>(0)
        let ops = (0..<rounds).map { _ in
            let op = BlockOperation { ran.add(1, ordering: .relaxed) }
            op.completionBlock = { completions.add(1, ordering: .relaxed) }
            return op
        }
        // The canceller spins until the adder announces round i, then cancels op i at
        // once: the two calls overlap as closely as two threads can make them.
        let announced = Atomic<Int>(-1)
        let largestCount = Atomic<Int>(0)
        let canceller = Thread {
            for i in 0..<rounds {
                while announced.load(ordering: .acquiring) < i {}
                ops[i].cancel()
                // An operation finished before it was counted shows as a count that
                // wrapped below zero: far more operations than were ever added.
                let c = q.operationCount
                if c > largestCount.load(ordering: .relaxed) { largestCount.store(c, ordering: .relaxed) }
            }
        }
        canceller.start()
        for i in 0..<rounds {
            announced.store(i, ordering: .releasing)
            q.addOperation(ops[i])
        }
        let done = DispatchSemaphore(value: 0)
        DispatchQueue.global().async { q.waitUntilAllOperationsAreFinished(); done.signal() }
        XCTAssertEqual(done.wait(timeout: .now() + 30), .success, "the queue never drained")
        XCTAssertEqual(q.operationCount, 0)
        XCTAssertLessThanOrEqual(largestCount.load(ordering: .relaxed), rounds, "the count went below zero")
        XCTAssertTrue(eventually { completions.load(ordering: .acquiring) >= rounds })
        XCTAssertEqual(completions.load(ordering: .acquiring), rounds, "every operation finishes exactly once")
        XCTAssertLessThanOrEqual(ran.load(ordering: .relaxed), rounds)
    }

    func testFinishedOperationsAreReleasedAndNotListed() {
        let counter = ReleaseCounter()
        let q = OperationQueue()
        // One operation stays unfinished while many others come and go.
        let gate = DispatchSemaphore(value: 0)
        let blocker = BlockOperation { gate.wait() }
        q.addOperation(blocker)
        let n = Stress.count(20_000)
        for _ in 0..<n {
            let token = Token(counter)
            q.addOperation { withExtendedLifetime(token) {} }
        }
        while q.operationCount > 1 { usleep(1000) }
        XCTAssertEqual(q.operations.count, 1, "finished operations are still listed")
        XCTAssertTrue(q.operations.first === blocker)
        // The queue prunes what finished as operations are added: it may hold a bounded
        // number of finished ones (twice the unfinished plus 256), never all of them.
        q.addOperation {}
        q.addOperation {}
        XCTAssertGreaterThanOrEqual(counter.released.load(ordering: .relaxed), n - (2 * 3 + 256))
        gate.signal()
        q.waitUntilAllOperationsAreFinished()
        // Once the queue drains, it keeps nothing: every token is gone when the wait returns.
        XCTAssertEqual(counter.released.load(ordering: .relaxed), n)
        XCTAssertEqual(q.operationCount, 0)
        XCTAssertTrue(q.operations.isEmpty)
    }

    func testASubclassOverridingAddOperationSeesBlocksAdded() {
        // Foundation's addOperation(_ block:) goes through addOperation(_ op:); the fast
        // path for blocks must not bypass a subclass's override.
        final class Logging: OperationQueue, @unchecked Sendable {
            let seen = Atomic<Int>(0)
            override func addOperation(_ op: Operation) {
                seen.add(1, ordering: .relaxed)
                super.addOperation(op)
            }
        }
        let q = Logging()
        let ran = Atomic<Int>(0)
        for _ in 0..<10 { q.addOperation { ran.add(1, ordering: .relaxed) } }
        q.waitUntilAllOperationsAreFinished()
        XCTAssertEqual(q.seen.load(ordering: .relaxed), 10)
        XCTAssertEqual(ran.load(ordering: .relaxed), 10)
    }

    func testTheEngineTaskNodeIsTheFirstStoredPropertyOfAnOperation() {
        // ChainRunner finds the node with _getUnsafePointerToStoredProperties and the operation
        // from the node by subtracting the header: both must hold for every subclass.
        for op in [Operation(), BlockOperation {}, InvocationOperation({ (x: Int) in x }, argument: 1)] as [Operation] {
            let sentinel: spindle_task_fn = { _, _ in }
            op.engineTask.run = sentinel
            let node = TaskNode.node(of: op)
            XCTAssertNotNil(node.pointee.run, "the node ChainRunner computes is not `engineTask`")
            node.pointee.run = nil
            XCTAssertNil(op.engineTask.run, "the node ChainRunner computes is not `engineTask`")
            XCTAssertTrue(TaskNode.operation(of: node).takeUnretainedValue() === op, "the header size is wrong")
        }
    }

    func testAQueueDroppedWithPendingOperationsRunsThemAndIsThenFreed() {
        weak var weakQueue: OperationQueue?
        let gate = DispatchSemaphore(value: 0)
        let ran = Atomic<Int>(0)
        let finished = DispatchSemaphore(value: 0)
        do {
            let q = OperationQueue()
            weakQueue = q
            for _ in 0..<8 { q.addOperation { gate.wait(); ran.add(1, ordering: .relaxed); finished.signal() } }
        }
        XCTAssertNotNil(weakQueue, "a queue with unfinished operations keeps itself alive")
        for _ in 0..<8 { gate.signal() }
        for _ in 0..<8 { finished.wait() }
        XCTAssertEqual(ran.load(ordering: .relaxed), 8)
        // The last finish drops the queue's reference to itself, just after the block.
        var spins = 0
        while weakQueue != nil && spins < 5000 { usleep(1000); spins += 1 }
        XCTAssertNil(weakQueue, "an emptied queue nobody references must be freed")
    }

    func testAnOperationFinishedBeforeItsStartReturnsLivesUntilItReturnsAndIsThenFreed() {
        // The worker running an operation borrows the queue list's reference to it. Here
        // the operation finishes inside its own `start()`, so the queue drains — and
        // unlinks everything — while that `start()` has not returned: the drain must
        // leave the reference to the runner, which releases it once `start()` returns.
        // Released at the drain, it could be freed under its own `start()` — though a
        // debug build's retain around that call can hide it (the next test checks the
        // protocol itself); never released, it leaks (the last check fails).
        final class Lingering: Operation, @unchecked Sendable {
            let gate: DispatchSemaphore
            let done = Atomic<Bool>(false)
            var touchedAfterFinishing = 0
            init(gate: DispatchSemaphore) { self.gate = gate }
            override var isAsynchronous: Bool { true }
            override var isFinished: Bool { done.load(ordering: .acquiring) }
            override func start() {
                willChangeValue(forKey: "isFinished")
                done.store(true, ordering: .releasing)
                didChangeValue(forKey: "isFinished")
                gate.wait()
                touchedAfterFinishing += 1
            }
        }
        let gate = DispatchSemaphore(value: 0)
        let weak = Weak<Operation>()
        let q = OperationQueue()
        do {
            let op = Lingering(gate: gate)
            weak.value = op
            q.addOperation(op)
        }
        q.waitUntilAllOperationsAreFinished()
        XCTAssertEqual(q.operationCount, 0)
        XCTAssertNotNil(weak.value, "freed while its start() was still running")
        gate.signal()
        var spins = 0
        while weak.value != nil && spins < 5000 { usleep(1000); spins += 1 }
        XCTAssertNil(weak.value, "the runner did not release the reference the drain left it")
    }

    func testTheListReleasesAStartedOperationOnlyOnceItsRunnerIsDone() {
        // The protocol behind the test above, step by step and without the scheduler (a
        // debug build's extra retains around `start()` can hide an early release there).
        for runnerFirst in [false, true] {
            let weak = Weak<Operation>()
            var state = OperationQueue.State(name: "drain-protocol")
            let u = Unmanaged<Operation>.passRetained(BlockOperation {}) // the list's reference
            u.withGuaranteedReference { op in
                weak.value = op
                state.link(u, op)
                op.queueSlot.started = true
            }
            if runnerFirst { ChainRunner.runnerDone(u) }
            var released: Unmanaged<Operation>? = nil
            state.unlinkAll(onto: &released)
            XCTAssertEqual(state.linked, 0)
            XCTAssertNil(state.head)
            if runnerFirst {
                XCTAssertNotNil(released, "the runner was done: the drain releases the operation")
                OperationQueue.release(released)
                XCTAssertNil(weak.value)
            } else {
                XCTAssertNil(released, "the drain released an operation its runner still borrows")
                XCTAssertNotNil(weak.value)
                ChainRunner.runnerDone(u)
                XCTAssertNil(weak.value, "the runner did not release the reference the drain left it")
            }
        }
        // Pruning takes only operations whose runner is done, however many have finished.
        var state = OperationQueue.State(name: "prune-protocol")
        var ops: [Unmanaged<Operation>] = []
        for _ in 0..<400 {
            let u = Unmanaged<Operation>.passRetained(BlockOperation {})
            u.withGuaranteedReference { op in
                state.link(u, op)
                op.queueSlot.started = true
                op.queueSync.done.store(true, ordering: .releasing)
            }
            ops.append(u)
        }
        var released: Unmanaged<Operation>? = nil
        state.prune(unfinished: 0, onto: &released)
        XCTAssertNil(released, "pruned operations whose runners still borrow them")
        XCTAssertEqual(state.linked, 400)
        for u in ops { ChainRunner.runnerDone(u) }
        state.prune(unfinished: 0, onto: &released)
        XCTAssertEqual(state.linked, 0, "finished operations whose runners are done stay linked")
        OperationQueue.release(released)
    }

    func testQueuesDroppedWhileTheirOperationsFinishAreFreedAfterTheLastOne() {
        // A queue holds itself while it has unfinished operations; the operations made by
        // `addOperation { }` do not hold it. The finisher that drains it frees it, while
        // other finishers may still be on their way through its lock (a width limit,
        // a count observer, progress), an operation may add another from inside, the
        // queue may drain and be refilled, and handed-out operations may be cancelled
        // from another thread after the queue was dropped. A use-after-free here is
        // reported under AddressSanitizer (CI runs it; a variant that dropped the
        // reference before its finisher's last access was caught at once), and may be
        // a crash or a lost operation without it; a queue that never drops its own
        // reference fails the last check.
        let rounds = Stress.count(5_000)
        let ran = Atomic<Int>(0)
        let cancellers = DispatchGroup()
        var expected = 0
        var queues: [Weak<OperationQueue>] = []
        for round in 0..<rounds {
            let q = OperationQueue()
            let kind = round % 5
            switch kind {
            case 1: q.maxConcurrentOperationCount = 2
            case 2: q.onOperationCountChange { _ in }
            case 3: q.progress.totalUnitCount = 1_000
            default: break
            }
            let n = 1 + round % 16
            for i in 0..<n {
                // (Those of kind 4 may be cancelled before they run: not counted.)
                q.addOperation {
                    guard kind != 4 else { return }
                    ran.add(1, ordering: .relaxed)
                    if i == 0 { OperationQueue.current!.addOperation { ran.add(1, ordering: .relaxed) } }
                }
            }
            expected += kind == 4 ? 0 : n + 1
            if kind == 4 {
                // Handed out: these must now keep the queue alive themselves.
                let handedOut = UncheckedBox(q.operations)
                DispatchQueue.global().async(group: cancellers) {
                    for op in handedOut.value { op.cancel() }
                }
            }
            if round % 3 == 0 {
                // Drained, its reference to itself is dropped; refilled, taken again.
                q.waitUntilAllOperationsAreFinished()
                q.addOperation { ran.add(1, ordering: .relaxed) }
                expected += 1
            }
            queues.append(Weak(q))
        }
        XCTAssertEqual(cancellers.wait(timeout: .now() + 20), .success)
        var spins = 0
        while ran.load(ordering: .relaxed) < expected && spins < 20_000 { usleep(1000); spins += 1 }
        XCTAssertEqual(ran.load(ordering: .relaxed), expected, "operations of dropped queues were lost")
        while queues.contains(where: { $0.value != nil }) && spins < 20_000 { usleep(1000); spins += 1 }
        XCTAssertEqual(queues.filter { $0.value != nil }.count, 0, "drained queues nobody references must be freed")
    }

    // MARK: suspension and cancellation

    func testSuspendedQueueStartsNothingUntilResumed() {
        let q = OperationQueue()
        q.isSuspended = true
        let ran = Atomic<Int>(0)
        let ops = (0..<10).map { _ in BlockOperation { ran.add(1, ordering: .relaxed) } }
        for op in ops { q.addOperation(op) }
        ops[3].cancel()
        usleep(20_000)
        XCTAssertEqual(ran.load(ordering: .relaxed), 0)
        XCTAssertEqual(q.operationCount, 10, "added and cancelled operations stay queued while suspended")
        q.isSuspended = false
        q.waitUntilAllOperationsAreFinished()
        XCTAssertEqual(ran.load(ordering: .relaxed), 9)
    }

    func testCancelAllFinishesQueuedOpsWithoutMainAndRunsCompletionBlocks() {
        let q = OperationQueue()
        q.isSuspended = true
        let ran = Atomic<Int>(0), completed = Atomic<Int>(0)
        for _ in 0..<100 {
            let op = BlockOperation { ran.add(1, ordering: .relaxed) }
            op.completionBlock = { completed.add(1, ordering: .relaxed) }
            q.addOperation(op)
        }
        q.cancelAllOperations()
        q.isSuspended = false
        q.waitUntilAllOperationsAreFinished()
        XCTAssertEqual(ran.load(ordering: .relaxed), 0)
        XCTAssertTrue(eventually { completed.load(ordering: .acquiring) == 100 })
    }

    func testCompletionBlockRunsOnceAfterFinishThenIsNil() {
        let q = OperationQueue()
        let count = Atomic<Int>(0)
        let sawFinished = Atomic<Bool>(false)
        let op = BlockOperation {}
        let ref = UncheckedBox(op)
        op.completionBlock = {
            count.add(1, ordering: .relaxed)
            sawFinished.store(ref.value.isFinished, ordering: .relaxed)
        }
        q.addOperation(op)
        op.waitUntilFinished()
        XCTAssertTrue(eventually { count.load(ordering: .acquiring) == 1 })
        XCTAssertTrue(sawFinished.load(ordering: .relaxed))
        XCTAssertNil(op.completionBlock)
        usleep(20_000)
        XCTAssertEqual(count.load(ordering: .acquiring), 1, "it runs once")
    }

    // MARK: block operations, barriers, progress

    func testBlockOperationRunsItsBlocksConcurrently() {
        // Two blocks that can only both return if they run at the same time.
        let a = DispatchSemaphore(value: 0), b = DispatchSemaphore(value: 0)
        let met = Atomic<Int>(0)
        let op = BlockOperation {
            a.signal()
            if b.wait(timeout: .now() + 5) == .success { met.add(1, ordering: .relaxed) }
        }
        op.addExecutionBlock {
            b.signal()
            if a.wait(timeout: .now() + 5) == .success { met.add(1, ordering: .relaxed) }
        }
        XCTAssertEqual(op.executionBlocks.count, 2)
        let q = OperationQueue()
        q.addOperation(op)
        op.waitUntilFinished()
        XCTAssertEqual(met.load(ordering: .relaxed), 2)
    }

    func testBarrierRunsAfterEarlierOpsAndBeforeLaterOnes() {
        let q = OperationQueue()
        let log = Log()
        for i in 0..<5 { q.addOperation { usleep(UInt32(1000 * (5 - i))); log.add("before") } }
        q.addBarrierBlock { log.add("barrier") }
        for _ in 0..<5 { q.addOperation { log.add("after") } }
        q.waitUntilAllOperationsAreFinished()
        XCTAssertEqual(log.all, Array(repeating: "before", count: 5) + ["barrier"] + Array(repeating: "after", count: 5))
    }

    func testProgressCountsFinishedOperations() {
        let q = OperationQueue()
        q.progress.totalUnitCount = 10
        for _ in 0..<10 { q.addOperation {} }
        q.waitUntilAllOperationsAreFinished()
        XCTAssertEqual(q.progress.completedUnitCount, 10)
        XCTAssertEqual(q.progress.fractionCompleted, 1.0, accuracy: 1e-9)
    }

    // MARK: current, main, underlying queue

    func testCurrentQueueInsideAndOutside() {
        let q = OperationQueue()
        let inside = Mutex<OperationQueue?>(nil)
        q.addOperation { let c = OperationQueue.current; inside.locked { $0 = c } }
        q.waitUntilAllOperationsAreFinished()
        XCTAssertTrue(inside.locked { $0 } === q)
        let offMain = Mutex<Bool>(false)
        Thread.detachNewThread { let c = OperationQueue.current; offMain.locked { $0 = c == nil } }
        let deadline = Date().addingTimeInterval(5)
        while !offMain.locked({ $0 }) && Date() < deadline { usleep(1000) }
        XCTAssertTrue(offMain.locked { $0 }, "OperationQueue.current must be nil outside any operation")
        if Thread.isMainThread { XCTAssertTrue(OperationQueue.current === OperationQueue.main) }
    }

    func testMainQueueRunsOnTheMainThreadOneAtATime() {
        guard Thread.isMainThread else { return }
        let c = Concurrency()
        let onMain = Atomic<Int>(0)
        for _ in 0..<5 {
            OperationQueue.main.addOperation {
                c.enter()
                if Thread.isMainThread { onMain.add(1, ordering: .relaxed) }
                c.leave()
            }
        }
        let deadline = Date().addingTimeInterval(10)
        while OperationQueue.main.operationCount > 0 && Date() < deadline {
            RunLoop.main.run(until: Date().addingTimeInterval(0.01))
        }
        XCTAssertEqual(onMain.load(ordering: .relaxed), 5)
        XCTAssertEqual(c.peak.load(ordering: .relaxed), 1)
    }

    func testUnderlyingQueueRoutesExecution() {
        let key = DispatchSpecificKey<String>()
        let dq = DispatchQueue(label: "spindle.test.underlying")
        dq.setSpecific(key: key, value: "mine")
        let q = OperationQueue()
        q.underlyingQueue = dq
        let seen = Mutex<String?>(nil)
        q.addOperation { let v = DispatchQueue.getSpecific(key: key); seen.locked { $0 = v } }
        q.waitUntilAllOperationsAreFinished()
        XCTAssertEqual(seen.locked { $0 }, "mine")
    }

    // MARK: QoS and the local fast path

    func testQoSSelectsTheWorkerSet() {
        let q = OperationQueue()
        let names = Mutex<[QualityOfService: (String, Int)]>([:])
        let policies = Mutex<[QualityOfService: Int]>([:])
        for qos in [QualityOfService.background, .utility, .default] {
            let op = BlockOperation {
                let n = (currentThreadName(), currentThreadNice())
                let p = currentThreadPolicy()
                names.locked { $0[qos] = n }
                policies.locked { $0[qos] = p }
            }
            op.qualityOfService = qos
            q.addOperation(op)
        }
        // Queue default applies when the operation sets none.
        let q2 = OperationQueue()
        q2.qualityOfService = .background
        q2.addOperation { let n = (currentThreadName(), currentThreadNice()); names.locked { $0[.userInteractive] = n } }
        q.waitUntilAllOperationsAreFinished()
        q2.waitUntilAllOperationsAreFinished()
        let r = names.locked { $0 }
        XCTAssertTrue(r[.background]!.0.hasPrefix("spindle-bg"), r[.background]!.0)
        XCTAssertEqual(r[.background]!.1, 10)
        XCTAssertTrue(r[.utility]!.0.hasPrefix("spindle-ut"))
        XCTAssertEqual(r[.utility]!.1, 2)
        XCTAssertTrue(r[.default]!.0.hasPrefix("spindle-w"))
        XCTAssertTrue(r[.userInteractive]!.0.hasPrefix("spindle-bg"), "queue QoS applies to operations without their own")
        let p = policies.locked { $0 }
        XCTAssertEqual(p[.background], 5, "background runs under SCHED_IDLE")
        XCTAssertEqual(p[.utility], 3, "utility runs under SCHED_BATCH")
        XCTAssertEqual(p[.default], 0)
    }

    func testASerialQueueRunsItsOperationsAsChainsOnOneWorker() {
        // Each finish hands the next operation to the same worker (ChainRunner.runChain):
        // far fewer pool tasks than operations. Without the slot every operation is
        // one task.
        let pool = ThreadPool.forQualityOfService(.default)
        let before = pool.stats.reduce(0) { $0 + $1.executed }
        let q = OperationQueue()
        q.maxConcurrentOperationCount = 1
        q.isSuspended = true
        let n = Stress.count(2_000)
        let order = Mutex<[Int]>([])
        for i in 0..<n { q.addOperation { order.locked { $0.append(i) } } }
        q.isSuspended = false
        q.waitUntilAllOperationsAreFinished()
        let tasks = pool.stats.reduce(0) { $0 + $1.executed } - before
        XCTAssertEqual(order.locked { $0 }, Array(0..<n), "a serial queue runs in FIFO order")
        XCTAssertLessThan(tasks, UInt64(n / 4), "\(tasks) pool tasks for \(n) chained operations")
    }

    func testAChainedOperationStillRunsOnItsOwnQualityOfService() {
        // Only an operation for the finishing worker's own pool takes the slot.
        let q = OperationQueue()
        q.maxConcurrentOperationCount = 1
        q.isSuspended = true
        let wrong = Atomic<Int>(0)
        let n = Stress.count(400)
        for i in 0..<n {
            let qos: QualityOfService = i % 3 == 0 ? .utility : .default
            let op = BlockOperation {
                if ThreadPool.current !== ThreadPool.forQualityOfService(qos) { wrong.add(1, ordering: .relaxed) }
            }
            op.qualityOfService = qos
            q.addOperation(op)
        }
        q.isSuspended = false
        q.waitUntilAllOperationsAreFinished()
        XCTAssertEqual(wrong.load(ordering: .relaxed), 0, "operations ran on another class's workers")
    }

    func testADependencyChainIsRunByChainsAndInOrder() {
        let pool = ThreadPool.forQualityOfService(.default)
        let before = pool.stats.reduce(0) { $0 + $1.executed }
        let n = Stress.count(2_000)
        let next = Atomic<Int>(0)
        let bad = Atomic<Int>(0)
        var ops: [BlockOperation] = []
        for i in 0..<n {
            let op = BlockOperation { if next.exchange(i + 1, ordering: .relaxed) != i { bad.add(1, ordering: .relaxed) } }
            if let prev = ops.last { op.addDependency(prev) }
            ops.append(op)
        }
        let q = OperationQueue()
        q.addOperations(ops.reversed(), waitUntilFinished: true)
        XCTAssertEqual(bad.load(ordering: .relaxed), 0)
        XCTAssertEqual(next.load(ordering: .relaxed), n)
        let tasks = pool.stats.reduce(0) { $0 + $1.executed } - before
        XCTAssertLessThan(tasks, UInt64(n / 4), "\(tasks) pool tasks for a \(n)-long chain")
    }

    func testOperationsAddedFromInsideAnOperationStayLocal() {
        let q = OperationQueue()
        let pool = ThreadPool.shared
        // Fewer than one deque holds (256), so no overflow batch goes to the injector.
        let n = 200
        let done = Atomic<Int>(0)
        let before = pool.stats.reduce(0) { $0 + $1.injectorPops }
        q.addOperation {
            for _ in 0..<n { q.addOperation { done.add(1, ordering: .relaxed) } }
        }
        q.waitUntilAllOperationsAreFinished()
        let viaInjector = pool.stats.reduce(0) { $0 + $1.injectorPops } - before
        XCTAssertEqual(done.load(ordering: .relaxed), n)
        XCTAssertLessThan(viaInjector, UInt64(n / 4), "operations added inside an operation should go to the worker's own deque")
    }

    // MARK: memory

    func testQueuedBlockOperationCostsAtMost256Bytes() throws {
        // ThreadSanitizer's allocator and shadow memory inflate RSS: measure without it.
        if Stress.isTSan || Stress.isASan { throw XCTSkip("memory is measured in builds without a sanitizer") }
        let n = 200_000 * min(Stress.scale, 5)
        let q = OperationQueue()
        q.isSuspended = true
        let before = residentBytes()
        for _ in 0..<n { q.addOperation {} }
        let perOp = Double(residentBytes() - before) / Double(n)
        q.cancelAllOperations()
        q.isSuspended = false
        q.waitUntilAllOperationsAreFinished()
        print("a queued BlockOperation costs \(perOp) bytes of RSS")
        XCTAssertLessThanOrEqual(perOp, 256, "a queued BlockOperation costs \(perOp) bytes")
    }

    // MARK: waits

    func testWaitingInsidePoolWorkDoesNotStarveThePool() {
        // More waiters than workers, all waiting for an operation added after them: if a
        // wait blocked its worker, the awaited operation could never run.
        let q = OperationQueue()
        let target = BlockOperation {}
        let waited = Atomic<Int>(0)
        let waiters = ThreadPool.shared.workerCount * 3
        for _ in 0..<waiters {
            q.addOperation { target.waitUntilFinished(); waited.add(1, ordering: .relaxed) }
        }
        usleep(10_000)
        q.addOperation(target)
        let done = DispatchSemaphore(value: 0)
        Thread.detachNewThread { q.waitUntilAllOperationsAreFinished(); done.signal() }
        XCTAssertEqual(done.wait(timeout: .now() + 20), .success, "waits inside operations starved the pool")
        XCTAssertEqual(waited.load(ordering: .relaxed), waiters)
    }

    func testAsyncWaitsDoNotBlock() async {
        let q = OperationQueue()
        let op = BlockOperation { usleep(5000) }
        q.addOperation(op)
        for _ in 0..<10 { q.addOperation { usleep(1000) } }
        await op.finished()
        XCTAssertTrue(op.isFinished)
        await q.allOperationsFinished()
        XCTAssertEqual(q.operationCount, 0)
    }

    // MARK: observation

    func testStateAndCountObservation() {
        let q = OperationQueue()
        q.isSuspended = true
        let log = Log()
        let counts = Mutex<[Int]>([])
        let token = q.onOperationCountChange { c in counts.locked { $0.append(c) } }
        let op = BlockOperation {}
        op.onStateChange { log.add("\($0)") }
        q.addOperation(op)
        q.isSuspended = false
        op.waitUntilFinished()
        q.waitUntilAllOperationsAreFinished()
        q.removeOperationCountObserver(token)
        XCTAssertEqual(log.all, ["executing", "finished"])
        XCTAssertEqual(counts.locked { $0 }, [1, 0])
    }

    // MARK: InvocationOperation

    func testInvocationOperationResults() throws {
        struct Parse: Error, Equatable {}
        let q = OperationQueue()
        let ok = InvocationOperation({ (s: String) in s.count }, argument: "spindle")
        let void = InvocationOperation({ (_: Int) in }, argument: 1)
        let failing = InvocationOperation({ (_: Int) throws -> Int in throw Parse() }, argument: 1)
        let cancelled = InvocationOperation({ (x: Int) in x }, argument: 1)
        final class Target { func twice(_ x: Int) -> Int { 2 * x } }
        let method = InvocationOperation(target: Target(), method: Target.twice, object: 21)
        XCTAssertThrowsError(try ok.result) { XCTAssertEqual($0 as? InvocationOperationError, .notFinished) }
        cancelled.cancel()
        q.addOperations([ok, void, failing, cancelled, method], waitUntilFinished: true)
        XCTAssertEqual(try ok.result(as: Int.self), 7)
        XCTAssertEqual(try method.result(as: Int.self), 42)
        XCTAssertThrowsError(try void.result) { XCTAssertEqual($0 as? InvocationOperationError, .voidResult) }
        XCTAssertThrowsError(try failing.result) { XCTAssertEqual($0 as? Parse, Parse()) }
        XCTAssertThrowsError(try cancelled.result) { XCTAssertEqual($0 as? InvocationOperationError, .cancelled) }
    }

    func testQueueNamesAreUniqueByDefault() {
        let a = OperationQueue(), b = OperationQueue()
        XCTAssertNotNil(a.name)
        XCTAssertNotEqual(a.name, b.name)
    }

    func testThreadPriorityMapsToNearestClassWhenNoQoSIsSet() {
        let op = BlockOperation {}
        op.threadPriority = 0.1
        XCTAssertEqual(op.effectiveQoS(queueDefault: .default), .background)
        op.threadPriority = 0.9
        XCTAssertEqual(op.effectiveQoS(queueDefault: .default), .userInteractive)
        op.qualityOfService = .utility
        XCTAssertEqual(op.effectiveQoS(queueDefault: .default), .utility, "an explicit QoS wins")
    }
}
