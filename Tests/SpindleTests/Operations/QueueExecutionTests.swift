import CSpindle
import Synchronization
import XCTest

@testable import Spindle

/// Where a queue's operations run, what the queue keeps alive, waiting on it and
/// observing it.
final class QueueExecutionTests: XCTestCase {
    // MARK: QoS and the local fast path

    func testQoSSelectsTheWorkerSet() {
        let q = OperationQueue()
        let names = Mutex<[QualityOfService: (String, Int)]>([:])
        let policies = Mutex<[QualityOfService: Int]>([:])
        var ops: [BlockOperation] = []
        for qos in [QualityOfService.background, .utility, .default] {
            let op = BlockOperation {
                let n = (currentThreadName(), currentThreadNice())
                let p = currentThreadPolicy()
                names.locked { $0[qos] = n }
                policies.locked { $0[qos] = p }
            }
            op.qualityOfService = qos
            ops.append(op)
            q.addOperation(op)
        }
        // Queue default applies when the operation sets none.
        let q2 = OperationQueue()
        q2.qualityOfService = .background
        let last = BlockOperation { let n = (currentThreadName(), currentThreadNice()); names.locked { $0[.userInteractive] = n } }
        ops.append(last)
        q2.addOperation(last)
        // Not `waitUntilAllOperationsAreFinished`: a default-class thread that waits
        // promotes background and utility work to its own class.
        XCTAssertTrue(eventually(within: 60) { ops.allSatisfy(\.isFinished) })
        let r = names.locked { $0 }
        XCTAssertTrue(r[.background]!.0.hasPrefix("spindle-bg"), r[.background]!.0)
        XCTAssertEqual(r[.background]!.1, classNice(.background))
        XCTAssertTrue(r[.utility]!.0.hasPrefix("spindle-ut"))
        XCTAssertEqual(r[.utility]!.1, classNice(.utility))
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
        // A semaphore, not `waitUntilAllOperationsAreFinished`: a default-class thread
        // waiting for the queue would promote its utility operations to default.
        let ran = Atomic<Int>(0)
        let all = DispatchSemaphore(value: 0)
        for i in 0..<n {
            let qos: QualityOfService = i % 3 == 0 ? .utility : .default
            let op = BlockOperation {
                if ThreadPool.current !== ThreadPool.forQualityOfService(qos) { wrong.add(1, ordering: .relaxed) }
                if ran.add(1, ordering: .acquiringAndReleasing).newValue == n { all.signal() }
            }
            op.qualityOfService = qos
            q.addOperation(op)
        }
        q.isSuspended = false
        all.wait()
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

    /// The operation is one allocation of at most 208 bytes (a 200-byte object in
    /// glibc's 208-byte chunk), and a suspended queue keeps it in its ready list: one
    /// 8-byte slot, up to twice that while the ring doubles. RSS grows by at most that
    /// much per operation, with a few bytes of slack (less when the heap reuses pages
    /// an earlier test freed). An object in a larger chunk (224 bytes or more) exceeds it.
    func testQueuedBlockOperationCostsAtMost208BytesAndItsSlot() throws {
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
        XCTAssertLessThanOrEqual(perOp, 208 + 16 + 8, "a queued BlockOperation costs \(perOp) bytes")
    }

    // MARK: waits

    func testWaitingInsidePoolWorkDoesNotStarveThePool() {
        // More waiters than workers, all waiting for an operation added after them: if a
        // wait blocked its worker, the awaited operation could never run.
        let q = OperationQueue()
        let target = BlockOperation {}
        let waited = Atomic<Int>(0)
        let entered = Atomic<Int>(0)
        let waiters = ThreadPool.shared.workerCount * 3
        for _ in 0..<waiters {
            q.addOperation {
                entered.add(1, ordering: .relaxed)
                target.waitUntilFinished()
                waited.add(1, ordering: .relaxed)
            }
        }
        // Every regular worker is waiting inside an operation before the target is added.
        XCTAssertTrue(eventually { entered.load(ordering: .relaxed) >= ThreadPool.shared.workerCount })
        q.addOperation(target)
        let done = DispatchSemaphore(value: 0)
        Thread.detachNewThread { q.waitUntilAllOperationsAreFinished(); done.signal() }
        XCTAssertEqual(done.wait(timeout: .now() + 20), .success, "waits inside operations starved the pool")
        XCTAssertEqual(waited.load(ordering: .relaxed), waiters)
    }

    /// Every waiter of one operation — threads blocked in `waitUntilFinished()` and tasks
    /// awaiting `finished()`, more than one of each — is released by its finish, the
    /// first listed and the later ones alike.
    func testEveryWaiterOfAnOperationIsReleasedByItsFinish() {
        let gate = DispatchSemaphore(value: 0)
        let op = BlockOperation { gate.wait() }
        let q = OperationQueue()
        q.addOperation(op)
        let released = Counter()
        let threads = 3, tasks = 4
        for _ in 0..<threads {
            Thread.detachNewThread {
                op.waitUntilFinished()
                XCTAssertTrue(op.isFinished, "a thread's wait returned before the finish")
                released.increment()
            }
        }
        for _ in 0..<tasks {
            Task {
                await op.finished()
                XCTAssertTrue(op.isFinished, "a task's wait returned before the finish")
                released.increment()
            }
        }
        // Every waiter is listed (the first in its own field, the rest after it) before
        // the operation may finish.
        let listed = {
            op.guarded.locked { g in
                guard let extras = g.extras else { return 0 }
                return unsafe (extras.firstWaiter == nil ? 0 : 1) + extras.moreWaiters.count
            }
        }
        XCTAssertTrue(eventually { listed() == threads + tasks }, "\(listed()) waiters listed")
        XCTAssertEqual(released.value, 0, "a wait returned while the operation was running")
        gate.signal()
        XCTAssertTrue(eventually { released.value == threads + tasks },
                      "\(released.value) of \(threads + tasks) waiters were released")
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
}
