import CSpindle
import Synchronization
import XCTest

@testable import Spindle

/// The order operations start in, and how many run at once.
final class QueueSchedulingTests: XCTestCase {

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
            XCTAssertEqual(done.wait(timeout: .now() + 60), .success, "round \(round): operations stranded")
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
        // (A check behind the pool's queued work may have taken them first, once the
        // newest finished with nothing added after it, and be releasing them on a
        // worker: waited for.)
        q.addOperation {}
        q.addOperation {}
        XCTAssertTrue(eventually { counter.released.load(ordering: .relaxed) >= n - (2 * 3 + 256) },
                      "the queue kept \(n - counter.released.load(ordering: .relaxed)) finished operations")
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
        // The queue the runner reports to once it has released what a drain left it: the
        // drain counts the operation in `releasing` and gives the runner a reference.
        let queue = OperationQueue()
        let unmanagedQueue = Unmanaged.passUnretained(queue)
        for runnerFirst in [false, true] {
            let weak = Weak<Operation>()
            var state = OperationQueue.State(name: "drain-protocol")
            let u = Unmanaged<Operation>.passRetained(BlockOperation {}) // the list's reference
            u.withGuaranteedReference { op in
                weak.value = op
                state.link(u, op)
                op.setQueueRun(.started)
            }
            if runnerFirst { ChainRunner.runnerDone(u, queue: unmanagedQueue) }
            var released: Unmanaged<Operation>? = nil
            let leftToRunner = state.unlinkAll(onto: &released)
            XCTAssertEqual(leftToRunner, runnerFirst ? 0 : 1)
            XCTAssertEqual(state.linked, 0)
            XCTAssertNil(state.head)
            if runnerFirst {
                XCTAssertNotNil(released, "the runner was done: the drain releases the operation")
                OperationQueue.release(released)
                XCTAssertNil(weak.value)
            } else {
                XCTAssertNil(released, "the drain released an operation its runner still borrows")
                XCTAssertNotNil(weak.value)
                queue.state.locked { $0.releasing += 1 }
                _ = unmanagedQueue.retain()
                ChainRunner.runnerDone(u, queue: unmanagedQueue)
                XCTAssertNil(weak.value, "the runner did not release the reference the drain left it")
                XCTAssertEqual(queue.state.locked { $0.releasing }, 0, "the runner did not report its release")
            }
        }
        // Pruning takes only operations whose runner is done, however many have finished.
        var state = OperationQueue.State(name: "prune-protocol")
        var ops: [Unmanaged<Operation>] = []
        for _ in 0..<400 {
            let u = Unmanaged<Operation>.passRetained(BlockOperation {})
            u.withGuaranteedReference { op in
                state.link(u, op)
                op.setQueueRun(.started)
                op.queueSync.done.store(true, ordering: .releasing)
            }
            ops.append(u)
        }
        var released: Unmanaged<Operation>? = nil
        state.prune(unfinished: 0, onto: &released)
        XCTAssertNil(released, "pruned operations whose runners still borrow them")
        XCTAssertEqual(state.linked, 400)
        for u in ops { ChainRunner.runnerDone(u, queue: unmanagedQueue) }
        state.prune(unfinished: 0, onto: &released)
        XCTAssertEqual(state.linked, 0, "finished operations whose runners are done stay linked")
        OperationQueue.release(released)
    }

    func testPrunedAndDrainedOperationsAreReleasedOldestFirst() {
        // Finished operations are released in the order they were added, by a prune's
        // sweep and by a drain alike, as Foundation releases each as it finishes: deinits
        // that run the program's code see that order, and the allocator merges the freed
        // memory below the top of the adding thread's heap instead of giving that top
        // back to the kernel a page at a time (QueueRegistry.swift, `ReleaseChain`).
        final class Tag: Sendable {
            let index: Int, log: Log
            init(_ index: Int, _ log: Log) { self.index = index; self.log = log }
            deinit { log.add("\(index)") }
        }
        for drain in [false, true] {
            let log = Log()
            var state = OperationQueue.State(name: drain ? "drain-order" : "prune-order")
            for i in 0..<400 {
                let tag = Tag(i, log)
                let u = Unmanaged<Operation>.passRetained(BlockOperation { _ = tag })
                u.withGuaranteedReference { op in
                    state.link(u, op)
                    op.queueSync.done.store(true, ordering: .releasing)
                }
            }
            var released: Unmanaged<Operation>? = nil
            // 400 finished and none unfinished: the prune takes two, then sweeps the rest.
            if drain { _ = state.unlinkAll(onto: &released) } else { state.prune(unfinished: 0, onto: &released) }
            XCTAssertEqual(state.linked, 0)
            OperationQueue.release(released)
            XCTAssertEqual(log.all, (0..<400).map { "\($0)" },
                           "\(drain ? "a drain" : "a prune") released finished operations out of order")
        }
    }

    func testTheListKeepsAnOperationWhileAReadyRingHoldsIt() {
        // The ready rings hold operations unretained; an operation that finishes
        // without starting while it waits there (one of a class that reports itself
        // finished: `retired`) stays in its ring until a scheduling pass skips it. Step
        // by step, without the scheduler: pruning must not release it meanwhile, and a
        // drain empties the rings before it releases.
        var state = OperationQueue.State(name: "ring-protocol")
        var weaks: [Weak<Operation>] = []
        for _ in 0..<400 {
            let u = Unmanaged<Operation>.passRetained(BlockOperation {}) // the list's reference
            u.withGuaranteedReference { op in
                weaks.append(Weak(op))
                state.link(u, op)
                state.push(op)
                op.queueFields.retired = true
                op.queueSync.done.store(true, ordering: .releasing)
            }
        }
        var released: Unmanaged<Operation>? = nil
        state.prune(unfinished: 0, onto: &released)
        XCTAssertNil(released, "pruned operations a ready ring still holds")
        XCTAssertEqual(state.linked, 400)
        XCTAssertFalse(state.readyIsEmpty)
        _ = state.unlinkAll(onto: &released)
        XCTAssertTrue(state.readyIsEmpty, "the drain left unretained operations in the rings")
        XCTAssertEqual(state.linked, 0)
        OperationQueue.release(released)
        released = nil
        XCTAssertTrue(weaks.allSatisfy { $0.value == nil }, "the drain kept operations alive")

        // Popped from its ring (skipped: it is retired), an operation may be pruned.
        let u = Unmanaged<Operation>.passRetained(BlockOperation {})
        let weak = Weak<Operation>()
        u.withGuaranteedReference { op in
            weak.value = op
            state.link(u, op)
            state.push(op)
            op.queueFields.retired = true
            op.queueSync.done.store(true, ordering: .releasing)
        }
        let counts = Atomic<UInt64>(0)
        XCTAssertTrue(state.takeStartable(counts).isEmpty, "a retired operation was started")
        XCTAssertTrue(state.readyIsEmpty)
        for _ in 0..<300 {
            let filler = Unmanaged<Operation>.passRetained(BlockOperation {})
            filler.withGuaranteedReference { state.link(filler, $0) }
        }
        state.prune(unfinished: 300, onto: &released)
        state.prune(unfinished: 0, onto: &released)
        OperationQueue.release(released)
        XCTAssertNil(weak.value, "a retired operation out of its ring was never pruned")
        XCTAssertEqual(state.linked, 300)
        released = nil
        _ = state.unlinkAll(onto: &released)
        OperationQueue.release(released)
    }

    func testOperationsFinishedInTheirReadyRingAreSkippedAfterThePruneThatFollows() {
        // The same, through the queue: on a serial queue, operations wait in their ring
        // behind a running one; operations of a class that reports itself finished
        // before it starts finish there without starting; the adds that follow prune
        // the list (it then holds far more finished operations than unfinished ones);
        // the next scheduling pass must still find the ring's entries alive, and skip
        // them. Under AddressSanitizer an early release is a use-after-free here.
        final class FinishesItself: FinishesOnItsOwn, @unchecked Sendable {
            let counter: ReleaseCounter
            init(_ counter: ReleaseCounter) { self.counter = counter }
            deinit { counter.released.add(1, ordering: .relaxed) }
            override func main() { XCTFail("an operation that had finished was started") }
        }
        let q = OperationQueue()
        q.maxConcurrentOperationCount = 1
        let counter = ReleaseCounter(), laterRan = ReleaseCounter()
        let gate = DispatchSemaphore(value: 0)
        let started = DispatchSemaphore(value: 0)
        q.addOperation { started.signal(); gate.wait() }
        started.wait()
        for _ in 0..<400 {
            // Only the queue holds it once this iteration ends.
            let op = FinishesItself(counter)
            q.addOperation(op)
            op.finishWithoutStarting()
        }
        // (A counter that is a class: an escaping closure cannot capture an Atomic.)
        for _ in 0..<20 { q.addOperation { _ = laterRan.released.add(1, ordering: .relaxed) } }
        gate.signal()
        q.waitUntilAllOperationsAreFinished()
        XCTAssertEqual(laterRan.released.load(ordering: .relaxed), 20)
        XCTAssertEqual(counter.released.load(ordering: .relaxed), 400, "the drained queue kept finished operations")
        XCTAssertEqual(q.operationCount, 0)
    }

    func testQueuesDroppedWhileTheirOperationsFinishAreFreedAfterTheLastOne() {
        // A queue holds itself while it has unfinished operations; the operations made by
        // `addOperation { }` do not hold it. The finisher that drains it frees it, while
        // other finishers may still be on their way through its lock (a width limit,
        // a count observer, progress), an operation may add another from inside, the
        // queue may drain and be refilled, and handed-out operations may be cancelled
        // from another thread after the queue was dropped. A use-after-free here is
        // reported under AddressSanitizer (CI runs it; a queue that dropped its
        // reference before its finisher's last access fails there at once), and may be
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
}
