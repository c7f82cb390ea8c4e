import CSpindleTesting
import Foundation
import Glibc
import Synchronization
import XCTest

@testable import Spindle

/// Work that blocks its thread: Spindle's waits block (nothing runs nested on a waiting
/// thread), and the pool runs spare workers meanwhile, so that the CPUs stay busy, no
/// pool deadlocks on work queued behind its blocked workers, and a queue's width means
/// that many operations at once.
final class BlockingTests: XCTestCase {
    // MARK: waits block, and nothing runs nested on the waiting thread

    func testAnOperationWaitingWhileHoldingAPlainLockNeverDeadlocksOnOneThatTakesIt() {
        XCTAssertTrue(completes {
            let q = OperationQueue()
            let lock = NSLock()
            let inner = BlockOperation { usleep(1_000) }
            let holder = BlockOperation {
                lock.lock()
                q.addOperation(inner)
                // Queued behind `inner` on the pool: run nested on this thread, it
                // would take the lock this thread holds.
                for _ in 0..<8 { q.addOperation { lock.lock(); lock.unlock() } }
                inner.waitUntilFinished()
                lock.unlock()
            }
            q.addOperation(holder)
            q.waitUntilAllOperationsAreFinished()
        }, "an operation waiting with a plain lock held deadlocked")
    }

    func testARecursiveLockKeepsItsExclusionAcrossAWait() {
        let q = OperationQueue()
        let lock = NSRecursiveLock()
        let holding = Atomic<Bool>(false)
        let intrusions = Atomic<Int>(0)
        let inner = BlockOperation { usleep(2_000) }
        let holder = BlockOperation {
            lock.lock()
            holding.store(true, ordering: .releasing)
            q.addOperation(inner)
            for _ in 0..<8 {
                q.addOperation {
                    lock.lock()
                    if holding.load(ordering: .acquiring) { intrusions.add(1, ordering: .relaxed) }
                    lock.unlock()
                }
            }
            inner.waitUntilFinished()
            holding.store(false, ordering: .releasing)
            lock.unlock()
        }
        q.addOperation(holder)
        XCTAssertTrue(completes { q.waitUntilAllOperationsAreFinished() })
        XCTAssertEqual(intrusions.load(ordering: .relaxed), 0, "an operation entered the waiter's critical section")
    }

    func testNothingRunsOnTheThreadOfAWaitingOperation() {
        let q = OperationQueue()
        let waiterThread = Atomic<UInt>(0)
        let waiting = Atomic<Bool>(false)
        let nested = Atomic<Int>(0)
        let inner = BlockOperation { usleep(5_000) }
        let waiter = BlockOperation {
            waiterThread.store(UInt(pthread_self()), ordering: .releasing)
            waiting.store(true, ordering: .releasing)
            inner.waitUntilFinished()
            waiting.store(false, ordering: .releasing)
        }
        q.addOperation(waiter)
        while !waiting.load(ordering: .acquiring) { usleep(100) }
        q.addOperation(inner)
        for _ in 0..<50 {
            q.addOperation {
                if waiting.load(ordering: .acquiring) && UInt(pthread_self()) == waiterThread.load(ordering: .acquiring) {
                    nested.add(1, ordering: .relaxed)
                }
            }
        }
        XCTAssertTrue(completes { q.waitUntilAllOperationsAreFinished() })
        XCTAssertEqual(nested.load(ordering: .relaxed), 0, "operations ran nested on a waiting thread")
    }

    // MARK: width means that many at once, when operations block

    /// `n` operations that each wait until all `n` have arrived (blocking Spindle cannot
    /// see: a condition variable). They meet only if `n` run at once.
    func rendezvous(_ n: Int, width: Int) -> Bool {
        let q = OperationQueue()
        q.maxConcurrentOperationCount = width
        let cond = NSCondition()
        let arrived = Mutex<Int>(0)
        let met = Atomic<Int>(0)
        for _ in 0..<n {
            q.addOperation {
                cond.lock()
                let now = arrived.locked { $0 += 1; return $0 }
                if now == n { cond.broadcast() }
                let deadline = Date().addingTimeInterval(15)
                while arrived.locked({ $0 }) < n && cond.wait(until: deadline) {}
                cond.unlock()
                if arrived.locked({ $0 }) == n { met.add(1, ordering: .relaxed) }
            }
        }
        q.waitUntilAllOperationsAreFinished()
        return met.load(ordering: .relaxed) == n
    }

    func testARendezvousOfFourMeetsAtWidthFour() { XCTAssertTrue(rendezvous(4, width: 4)) }
    func testARendezvousOfEightMeetsAtWidthEight() { XCTAssertTrue(rendezvous(8, width: 8)) }
    func testARendezvousOfThirtyTwoMeetsAtWidthThirtyTwo() { XCTAssertTrue(rendezvous(32, width: 32)) }
    func testARendezvousOfEightMeetsAtTheDefaultWidth() {
        XCTAssertTrue(rendezvous(8, width: OperationQueue.defaultMaxConcurrentOperationCount))
    }

    // MARK: spares

    func testSparesAreCappedAndRetireWhenIdle() throws {
        var config = ThreadPool.Configuration(workers: 1)
        config.maxSpareWorkers = 3
        config.spareIdleTimeout = .milliseconds(100)
        config.name = "spindle-cap"
        let pool = try ThreadPool(configuration: config)
        defer { try? pool.shutdown() }
        let baseline = threadNames().filter { $0.hasPrefix("spindle-cap") }.count
        XCTAssertEqual(baseline, 1)
        let gate = DispatchSemaphore(value: 0)
        let started = Counter()
        let peak = Atomic<Int>(0)
        for _ in 0..<10 {
            try pool.submit {
                started.increment()
                ThreadPool.blocking { gate.wait() }
            }
        }
        // One worker and three spares block; six tasks wait for one to return.
        XCTAssertTrue(eventually { started.value == 4 })
        usleep(50_000)
        XCTAssertEqual(started.value, 4, "more spares ran than the cap allows")
        let running = threadNames().filter { $0.hasPrefix("spindle-cap") }.count
        peak.store(running, ordering: .relaxed)
        XCTAssertLessThanOrEqual(running, 1 + 3)
        XCTAssertEqual(pool.spareWorkerCount, 3)
        for _ in 0..<10 { gate.signal() }
        XCTAssertTrue(eventually { started.value == 10 })
        // Idle spares exit: the pool's threads return to their baseline.
        XCTAssertTrue(eventually(within: 60) { pool.spareWorkerCount == 0 })
        XCTAssertTrue(eventually(within: 60) {
            threadNames().filter { $0.hasPrefix("spindle-cap") }.count == baseline
        }, "spare threads did not exit")
    }

    func testASpareRunsAtItsPoolsNiceValue() throws {
        var config = ThreadPool.Configuration(workers: 1)
        config.nice = 7
        config.maxSpareWorkers = 2
        let pool = try ThreadPool(configuration: config)
        defer { try? pool.shutdown() }
        let gate = DispatchSemaphore(value: 0)
        let seen = Mutex<Int32?>(nil)
        let done = DispatchSemaphore(value: 0)
        try pool.submit { ThreadPool.blocking { gate.wait() } } // the pool's worker blocks
        try pool.submit {
            // Runs on a spare: the only worker is blocked.
            let nice = Int32(threadNice())
            seen.locked { $0 = nice }
            done.signal()
        }
        XCTAssertEqual(done.wait(timeout: .now() + 60), .success)
        gate.signal()
        XCTAssertEqual(seen.locked { $0 }, 7, "a spare did not take its pool's nice")
    }

    /// `currentWorkerIndex` promises `0..<workerCount`: code that indexes a per-worker
    /// array with it must not get a spare's slot number.
    func testASpareHasNoWorkerIndexAndTheWorkersKeepTheirs() throws {
        var config = ThreadPool.Configuration(workers: 2)
        config.maxSpareWorkers = 4
        let pool = try ThreadPool(configuration: config)
        defer { try? pool.shutdown() }
        let gate = DispatchSemaphore(value: 0)
        let arrived = DispatchSemaphore(value: 0)
        let seen = Mutex<Set<Int>>([])
        // Both workers block, so the next closures can only run on spares. A closure
        // may itself land on a spare (a worker slow to wake, a spare still searching):
        // that one does not block, and another is submitted, until both workers block.
        let deadline = DispatchTime.now() + 60
        while seen.locked({ $0.count }) < 2 && DispatchTime.now() < deadline {
            try pool.submit {
                guard let index = pool.currentWorkerIndex else {
                    arrived.signal()
                    return
                }
                seen.locked { s in _ = s.insert(index) }
                ThreadPool.blocking { arrived.signal(); gate.wait() }
            }
            XCTAssertEqual(arrived.wait(timeout: .now() + 60), .success)
        }
        let onSpares = Mutex<[(isWorker: Bool, index: Int?)]>([])
        let done = DispatchSemaphore(value: 0)
        for _ in 0..<4 {
            try pool.submit {
                onSpares.locked { $0.append((pool.isCurrentThreadWorker, pool.currentWorkerIndex)) }
                done.signal()
            }
        }
        for _ in 0..<4 { XCTAssertEqual(done.wait(timeout: .now() + 60), .success) }
        gate.signal()
        gate.signal()
        XCTAssertEqual(seen.locked { $0 }, [0, 1], "the workers' own indices")
        for (isWorker, index) in onSpares.locked({ $0 }) {
            XCTAssertTrue(isWorker, "a spare is one of the pool's threads")
            XCTAssertNil(index, "a spare reported index \(index.map(String.init) ?? "nil") on a 2-worker pool")
        }
    }

    func testThreadPoolBlockingCompensatesAtOnce() throws {
        let pool = try ThreadPool(workers: 1)
        defer { try? pool.shutdown() }
        let sem = DispatchSemaphore(value: 0)
        let done = DispatchSemaphore(value: 0)
        try pool.submit {
            ThreadPool.blocking { sem.wait() }
            done.signal()
        }
        try pool.submit { sem.signal() }
        XCTAssertEqual(done.wait(timeout: .now() + 60), .success, "the blocked worker was not compensated")
    }

    /// What a spare submits goes to the injector, not to the spare's own deque, which
    /// nobody steals from: here the spare then blocks until that task has run, which
    /// only another thread can do.
    func testATaskASpareSubmitsRunsWhileTheSpareBlocks() throws {
        var c = ThreadPool.Configuration(workers: 1)
        c.maxSpareWorkers = 2
        let pool = try ThreadPool(configuration: c)
        let started = DispatchSemaphore(value: 0), release = DispatchSemaphore(value: 0)
        try pool.submit { ThreadPool.blocking { started.signal(); release.wait() } }
        started.wait()
        let ran = DispatchSemaphore(value: 0), done = DispatchSemaphore(value: 0)
        let onSpare = Atomic<Bool>(false), innerRan = Atomic<Bool>(false)
        try pool.submit {
            onSpare.store(pool.spareWorkerCount > 0, ordering: .relaxed)
            try! pool.submit { ran.signal() }
            ThreadPool.blocking { innerRan.store(ran.wait(timeout: .now() + 30) == .success, ordering: .relaxed) }
            done.signal()
        }
        XCTAssertEqual(done.wait(timeout: .now() + 60), .success)
        XCTAssertTrue(onSpare.load(ordering: .relaxed), "the outer task was to run on a spare")
        XCTAssertTrue(innerRan.load(ordering: .relaxed), "the task the spare submitted waited behind it")
        release.signal()
        try pool.shutdown()
    }

    func testTheMonitorCompensatesBlockingSpindleIsNotToldOf() throws {
        let pool = try ThreadPool(workers: 1)
        defer { try? pool.shutdown() }
        let sem = DispatchSemaphore(value: 0)
        let done = DispatchSemaphore(value: 0)
        let entered = DispatchSemaphore(value: 0)
        try pool.submit {
            entered.signal()
            sem.wait() // blocks the pool's only worker; Spindle is not told
            done.signal()
        }
        entered.wait() // the only worker is inside the task: the next one needs a spare
        try pool.submit { sem.signal() }
        XCTAssertEqual(done.wait(timeout: .now() + 60), .success, "the blocked worker was not compensated")
    }

    /// The monitor sleeps while every worker is parked or retired (spare.c, MI1). A
    /// worker back from retirement, as when a container's CPU limit rises, runs again and
    /// must be watched: with nothing else happening in the process (a forked child), its
    /// return alone wakes the monitor.
    func testAWorkerBackFromRetirementWakesTheMonitor() throws {
        if Stress.isTSan { throw XCTSkip("ThreadSanitizer does not allow threads after fork") }
        let status = spindle_test_resumed_worker_wakes_monitor_in_forked_child(120_000)
        XCTAssertEqual(status, 0, [53: "the two workers did not each run a task", 55: "worker 1 did not retire",
                                   56: "the monitor did not go to sleep", 58: "the monitor slept on"][status]
                           ?? "child status \(status)")
    }

    func testWithoutSparesAPoolStillRunsWhatItCan() throws {
        var config = ThreadPool.Configuration(workers: 2)
        config.maxSpareWorkers = 0
        let pool = try ThreadPool(configuration: config)
        defer { try? pool.shutdown() }
        let sem = DispatchSemaphore(value: 0)
        let ran = Counter()
        try pool.submit { ThreadPool.blocking { sem.wait() } }
        for _ in 0..<100 { try pool.submit { ran.increment() } }
        XCTAssertTrue(eventually { ran.value == 100 }, "the other worker did not run the work")
        XCTAssertEqual(pool.spareWorkerCount, 0)
        sem.signal()
    }

    // MARK: waits across pools

    /// A worker of one pool that waits on work sent to another never deadlocks its own
    /// pool: it is counted out, and a spare keeps its pool's work moving.
    func testCrossPoolWaitsInBothDirectionsComplete() throws {
        let a = try ThreadPool(workers: 1), b = try ThreadPool(workers: 1)
        defer { try? a.shutdown(); try? b.shutdown() }
        let done = Counter()
        for _ in 0..<4 {
            try a.submit { b.run { a.run { done.increment() } } }
            try b.submit { a.run { b.run { done.increment() } } }
        }
        XCTAssertTrue(eventually(within: 20) { done.value == 8 }, "cross-pool waits deadlocked (\(done.value) of 8)")
    }

    func testJoinStillHelpsInsteadOfBlocking() throws {
        let pool = try ThreadPool(workers: 2)
        defer { try? pool.shutdown() }
        XCTAssertEqual(pool.run { fib(pool, 20) }, 6765)
        // (Under ThreadSanitizer a worker can block on the sanitizer's own locks for
        // long enough that the monitor rightly compensates it.)
        if !Stress.isTSan { XCTAssertEqual(pool.spareWorkerCount, 0, "join waits started spares") }
    }
}
