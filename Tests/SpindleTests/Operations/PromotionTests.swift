import CSpindle
import CSpindleTesting
import Dispatch
import Foundation
import Synchronization
import XCTest

@testable import Spindle

/// A higher class never waits on a lower one: what a higher class depends on or waits
/// for is promoted to it (Promotion.swift, P1-P7).
///
/// None of these tests depends on timing. The background workers are held (the engine's
/// test seam `spindle_test_hold_pool`): a worker that takes a task waits before running
/// it, as if every worker were busy. Without promotion, background work never runs, and
/// the wait for it ends only at its generous deadline, as a failure. The hold needs no
/// background worker to get a CPU, which a busy machine may deny SCHED_IDLE threads for
/// seconds at a time.
final class PromotionTests: XCTestCase {
    /// The thread an operation ran on, as it saw itself.
    struct Seen: Sendable, Equatable {
        var name: String
        var policy: Int
        var nice: Int
        static func here() -> Seen { Seen(name: currentThreadName(), policy: currentThreadPolicy(), nice: currentThreadNice()) }
    }

    final class Recorder: Sendable {
        let seen = Mutex<[Seen]>([])
        let runs = Atomic<Int>(0)
        func record() {
            runs.add(1, ordering: .relaxed)
            seen.locked { $0.append(.here()) }
        }
        var first: Seen? { seen.locked { $0.first } }
    }

    /// How long to wait for what only a background worker can do: a busy machine may keep
    /// a SCHED_IDLE thread off the CPU for tens of seconds.
    static let backgroundPatience: Double = 300

    /// What `qos`'s own workers run at, as a `Seen` without the name's index.
    func expected(_ qos: QualityOfService) -> (prefix: String, policy: Int, nice: Int) {
        let pool = ThreadPool.forQualityOfService(qos)
        return (QoSPools.name(for: qos), Int(pool.effectivePolicy), Int(pool.effectiveNice))
    }

    func assertRan(_ r: Recorder, at qos: QualityOfService, _ what: String, file: StaticString = #filePath, line: UInt = #line) {
        XCTAssertEqual(r.runs.load(ordering: .relaxed), 1, "\(what) ran once", file: file, line: line)
        guard let s = r.first else { return XCTFail("\(what) did not run", file: file, line: line) }
        let e = expected(qos)
        XCTAssertTrue(s.name.hasPrefix(e.prefix), "\(what) ran on \(s.name), not on a \(qos) worker", file: file, line: line)
        XCTAssertEqual(s.policy, e.policy, "\(what)'s policy", file: file, line: line)
        XCTAssertEqual(s.nice, e.nice, "\(what)'s nice", file: file, line: line)
    }

    /// Holds every worker of `qos`'s pool until the returned closure is called: what
    /// they take from now on, they do not run. A task of an earlier test that one of
    /// them had already taken may still run; none of this test's can.
    func holdWorkers(of qos: QualityOfService) -> @Sendable () -> Void {
        let pool = ThreadPool.forQualityOfService(qos)
        spindle_test_hold_pool(pool.raw, true)
        return { spindle_test_hold_pool(pool.raw, false) }
    }

    func wait(_ s: DispatchSemaphore, _ what: String, file: StaticString = #filePath, line: UInt = #line) {
        XCTAssertEqual(s.wait(timeout: .now() + 60), .success, "\(what): it waited behind lower-class work", file: file, line: line)
    }

    /// A worker of `qos`'s pool calls `waitUntilFinished()` on `op`; returns when it has.
    func waitFromAWorker(of qos: QualityOfService, for op: Operation,
                         file: StaticString = #filePath, line: UInt = #line) throws {
        let done = DispatchSemaphore(value: 0)
        try ThreadPool.forQualityOfService(qos).submit {
            op.waitUntilFinished()
            done.signal()
        }
        wait(done, "a \(qos) worker's wait", file: file, line: line)
    }

    /// A userInteractive operation that depends on `op`, added to a queue of its own;
    /// returns once it has run.
    func runAnInteractiveDependent(on op: Operation, file: StaticString = #filePath, line: UInt = #line) {
        let u = BlockOperation {}
        u.qualityOfService = .userInteractive
        let done = DispatchSemaphore(value: 0)
        u.completionBlock = { done.signal() }
        u.addDependency(op)
        OperationQueue().addOperation(u)
        wait(done, "the interactive operation", file: file, line: line)
    }

    func backgroundQueue() -> OperationQueue {
        let q = OperationQueue()
        q.qualityOfService = .background
        return q
    }

    // MARK: - A dependency

    /// An operation of a higher class that comes to depend on a queued background one:
    /// the background one moves to the higher class's workers (P3, P5), and still reads
    /// back the class it was given (P1).
    func testAQueuedDependencyOfAnInteractiveOperationRunsAtTheInteractiveClass() throws {
        let release = holdWorkers(of: .background)
        defer { release() }
        let r = Recorder()
        let b = BlockOperation { r.record() }
        b.qualityOfService = .background
        backgroundQueue().addOperation(b)
        runAnInteractiveDependent(on: b) // promotes at the edge: its class is its own
        assertRan(r, at: .userInteractive, "the background dependency")
        XCTAssertEqual(b.qualityOfService, .background, "a promotion does not change what was set")
    }

    /// The same when the dependent's class is its queue's: the promotion happens when
    /// the dependent is added (P3).
    func testADependentsQueueClassPromotesItsDependencyWhenItIsAdded() throws {
        let release = holdWorkers(of: .background)
        defer { release() }
        let r = Recorder()
        let b = BlockOperation { r.record() }
        backgroundQueue().addOperation(b)
        let u = BlockOperation {}
        let done = DispatchSemaphore(value: 0)
        u.completionBlock = { done.signal() }
        u.addDependency(b) // no class known yet: nothing happens here
        let uiQueue = OperationQueue()
        uiQueue.qualityOfService = .userInitiated
        uiQueue.addOperation(u)
        wait(done, "the userInitiated operation")
        assertRan(r, at: .userInitiated, "the background dependency")
    }

    /// Transitively: the dependency's own dependencies rise too, including one that is
    /// not ready yet when promoted (it is dispatched at the promoted class), and each
    /// runs once.
    func testPromotionReachesTheDependenciesOfADependency() throws {
        let release = holdWorkers(of: .background)
        defer { release() }
        let rc = Recorder(), rb = Recorder()
        let c = BlockOperation { rc.record() }
        let b = BlockOperation { rb.record() }
        b.addDependency(c)
        let q = backgroundQueue()
        q.addOperations([b, c], waitUntilFinished: false)
        runAnInteractiveDependent(on: b)
        assertRan(rc, at: .userInteractive, "the dependency's dependency")
        assertRan(rb, at: .userInteractive, "the dependency")
    }

    /// A custom asynchronous operation: its `start()` records where the queue started it,
    /// and it finishes on a thread of its own, as code wrapping a callback API does.
    final class AsyncRecorded: Operation, @unchecked Sendable {
        let recorder: Recorder
        let state = Mutex<(executing: Bool, finished: Bool)>((false, false))
        init(_ recorder: Recorder) { self.recorder = recorder }
        override var isAsynchronous: Bool { true }
        override var isExecuting: Bool { state.locked { $0.executing } }
        override var isFinished: Bool { state.locked { $0.finished } }
        override func start() {
            recorder.record()
            willChangeValue(forKey: "isExecuting")
            state.locked { $0.executing = true }
            didChangeValue(forKey: "isExecuting")
            Thread.detachNewThread { [self] in
                willChangeValue(forKey: "isFinished")
                willChangeValue(forKey: "isExecuting")
                state.locked { $0 = (false, true) }
                didChangeValue(forKey: "isExecuting")
                didChangeValue(forKey: "isFinished")
            }
        }
    }

    /// The same for a custom asynchronous subclass, and transitively through a custom
    /// synchronous one: what the queue starts runs at the promoted class.
    func testCustomAndAsynchronousSubclassesArePromoted() throws {
        let release = holdWorkers(of: .background)
        defer { release() }
        final class Sync: Operation, @unchecked Sendable {
            let recorder: Recorder
            init(_ recorder: Recorder) { self.recorder = recorder }
            override func main() { recorder.record() }
        }
        let ra = Recorder(), rs = Recorder()
        let a = AsyncRecorded(ra), s = Sync(rs)
        s.addDependency(a)
        let q = backgroundQueue()
        q.addOperations([a, s], waitUntilFinished: false)
        runAnInteractiveDependent(on: s)
        assertRan(ra, at: .userInteractive, "the asynchronous subclass's start()")
        assertRan(rs, at: .userInteractive, "the synchronous subclass's main()")
    }

    // MARK: - A raised class

    /// Raising a queued operation's class moves it in place (P3, P5); it reads back the
    /// new class.
    func testRaisingAQueuedOperationsClassMovesItToThatClassesWorkers() throws {
        let release = holdWorkers(of: .background)
        defer { release() }
        let r = Recorder()
        let done = DispatchSemaphore(value: 0)
        let b = BlockOperation { r.record() }
        b.completionBlock = { done.signal() }
        b.qualityOfService = .background
        backgroundQueue().addOperation(b)
        let metrics = testMetrics // bootstrapped before the publisher makes its counters
        let publisher = PoolMetrics(every: .milliseconds(5))
        b.qualityOfService = .userInitiated
        wait(done, "the raised operation")
        assertRan(r, at: .userInitiated, "the raised operation")
        XCTAssertEqual(b.qualityOfService, .userInitiated)
        // The move is counted, and published.
        let moved = ThreadPool.promotionCounts.moved
        XCTAssertGreaterThanOrEqual(moved, 1)
        publisher.stop() // publishes once more, on its own thread
        let published = { (try? metrics.expectCounter("spindle_promotions_total", [("kind", "moved")]).totalValue) ?? 0 }
        XCTAssertTrue(eventually(within: 60) { published() >= Int64(moved) }, "published \(published()) of \(moved)")
    }

    /// In a serial queue, an operation of a higher class added behind lower-class ones
    /// raises them: it waits for them (P2, P3). They still run in order.
    func testAnInteractiveOperationRaisesTheOperationsAheadOfItInASerialQueue() throws {
        let release = holdWorkers(of: .background)
        defer { release() }
        let q = backgroundQueue()
        q.maxConcurrentOperationCount = 1
        let order = Mutex<[Int]>([])
        let recorders = (0..<3).map { _ in Recorder() }
        for (i, r) in recorders.enumerated() {
            q.addOperation(BlockOperation { r.record(); order.locked { $0.append(i) } })
        }
        let done = DispatchSemaphore(value: 0)
        let u = BlockOperation { order.locked { $0.append(3) } }
        u.qualityOfService = .userInteractive
        u.completionBlock = { done.signal() }
        q.addOperation(u)
        wait(done, "the interactive operation")
        XCTAssertEqual(order.locked { $0 }, [0, 1, 2, 3])
        for (i, r) in recorders.enumerated() { assertRan(r, at: .userInteractive, "operation \(i) ahead of it") }
    }

    // MARK: - A wait

    /// A thread of a higher class that waits promotes what it waits for to its class:
    /// a Spindle worker's class, or the class the program gave a Foundation thread.
    func testABlockingWaitPromotesToTheWaitingThreadsClass() throws {
        let release = holdWorkers(of: .background)
        defer { release() }
        // From a userInitiated worker.
        let r1 = Recorder()
        let b1 = BlockOperation { r1.record() }
        backgroundQueue().addOperation(b1)
        try waitFromAWorker(of: .userInitiated, for: b1)
        assertRan(r1, at: .userInitiated, "the operation a userInitiated worker waited for")
        // From a thread whose Foundation quality of service is userInteractive.
        let r2 = Recorder()
        let b2 = BlockOperation { r2.record() }
        backgroundQueue().addOperation(b2)
        let done = DispatchSemaphore(value: 0)
        let t = Thread {
            b2.waitUntilFinished()
            done.signal()
        }
        t.qualityOfService = .userInteractive
        t.start()
        wait(done, "a userInteractive thread's wait")
        assertRan(r2, at: .userInteractive, "the operation a userInteractive thread waited for")
    }

    /// `waitUntilAllOperationsAreFinished` promotes every operation of the queue, and
    /// `finished()` and `allOperationsFinished()` promote from the awaiting task's
    /// priority.
    func testQueueWaitsAndAsyncWaitsPromote() async throws {
        let release = holdWorkers(of: .background)
        defer { release() }
        // The queue's wait, from a userInitiated worker.
        let q = backgroundQueue()
        let rs = (0..<3).map { _ in Recorder() }
        for r in rs { q.addOperation { r.record() } }
        let done = DispatchSemaphore(value: 0)
        try ThreadPool.forQualityOfService(.userInitiated).submit {
            q.waitUntilAllOperationsAreFinished()
            done.signal()
        }
        let waited = await Task.detached { done.wait(timeout: .now() + 60) }.value
        XCTAssertEqual(waited, .success, "the queue's wait: it waited behind lower-class work")
        for r in rs { assertRan(r, at: .userInitiated, "an operation of the queue waited for") }
        // `finished()` from a high-priority task.
        let r = Recorder()
        let b = BlockOperation { r.record() }
        backgroundQueue().addOperation(b)
        let awaiting = Task(priority: .high) { await b.finished() }
        let ran = await Task.detached { eventually(within: 60) { b.isFinished } }.value
        XCTAssertTrue(ran, "the operation a high-priority task awaited waited behind lower-class work")
        if !ran { release() } // so that the await below ends
        await awaiting.value
        assertRan(r, at: .userInitiated, "the operation a high-priority task awaited")
        // `allOperationsFinished()` from a high-priority task.
        let q2 = backgroundQueue()
        let r2 = Recorder()
        q2.addOperation { r2.record() }
        let awaitingAll = Task(priority: .high) { await q2.allOperationsFinished() }
        let ranAll = await Task.detached { eventually(within: 60) { q2.operationCount == 0 } }.value
        XCTAssertTrue(ranAll, "the queue a high-priority task awaited waited behind lower-class work")
        if !ranAll { release() }
        await awaitingAll.value
        assertRan(r2, at: .userInitiated, "the operation of a queue a high-priority task awaited")
    }

    /// A wait from a thread of a lower class changes nothing.
    func testAWaitFromALowerClassDoesNotLowerAnything() throws {
        let r = Recorder()
        let b = BlockOperation { r.record() }
        b.qualityOfService = .userInitiated
        OperationQueue().addOperation(b)
        try waitFromAWorker(of: .background, for: b)
        assertRan(r, at: .userInitiated, "the operation")
        XCTAssertLessThanOrEqual(b.promotedRank.load(ordering: .relaxed), ClassRank.of(QualityOfService.userInitiated))
    }

    // MARK: - A running operation

    /// A running background operation that an interactive one comes to depend on runs
    /// at the interactive class until it finishes; its worker then returns to its own
    /// class (P6). As root (CI); the unprivileged case is the next test.
    func testARunningOperationIsRaisedAndItsWorkerReturnsToItsClass() throws {
        guard getuid() == 0 else { throw XCTSkip("raising a running thread needs CAP_SYS_NICE") }
        let (tid, seenRaised) = try raiseARunningBackgroundOperation()
        let ui = expected(.userInteractive)
        XCTAssertEqual(seenRaised, Seen(name: seenRaised.name, policy: ui.policy, nice: ui.nice), "inside the raised operation")
        let bg = expected(.background)
        XCTAssertTrue(eventually(within: 60) {
            threadStat(tid, 41) == bg.policy && threadStat(tid, 19) == bg.nice
        }, "the worker did not return to the background class: policy \(threadStat(tid, 41)), nice \(threadStat(tid, 19))")
    }

    /// Runs a background operation, makes an interactive one depend on it while it
    /// runs, and returns its thread's id and what it saw of itself once raised (or,
    /// when nothing raised it, once the interactive operation was added).
    func raiseARunningBackgroundOperation() throws -> (tid: Int32, seen: Seen) {
        let tid = Atomic<Int32>(0)
        let go = Atomic<Bool>(false)
        let seen = Mutex<Seen?>(nil)
        let before = ThreadPool.promotionCounts
        let b = BlockOperation {
            tid.store(spindle_thread_id(), ordering: .releasing)
            // Until the promotion has been applied (or refused), then what it left.
            while !go.load(ordering: .acquiring) && ThreadPool.promotionCounts.raised == before.raised
                    && ThreadPool.promotionCounts.refused == before.refused { sched_yield() }
            seen.locked { $0 = .here() }
        }
        backgroundQueue().addOperation(b)
        XCTAssertTrue(eventually(within: Self.backgroundPatience) { tid.load(ordering: .acquiring) != 0 },
                      "the background operation did not start")
        let u = BlockOperation {}
        u.qualityOfService = .userInteractive
        u.addDependency(b)
        let done = DispatchSemaphore(value: 0)
        u.completionBlock = { done.signal() }
        OperationQueue().addOperation(u)
        let finished = done.wait(timeout: .now() + 60)
        go.store(true, ordering: .releasing)
        XCTAssertEqual(finished, .success, "the interactive operation did not finish")
        // Not `waitUntilFinished`, which would promote it again.
        XCTAssertTrue(eventually(within: Self.backgroundPatience) { seen.locked { $0 } != nil })
        return (tid.load(ordering: .acquiring), seen.locked { $0 } ?? Seen(name: "", policy: -1, nice: -99))
    }

    /// Unprivileged, the kernel refuses to raise a SCHED_IDLE thread: the operation
    /// runs on at its class and finishes, the refusal is counted and said once.
    func testAnUnprivilegedProcessCountsAndReportsARefusedRaise() throws {
        if ProcessInfo.processInfo.environment["SPINDLE_PROMOTION_PROBE"] != nil {
            let (_, seen) = try raiseARunningBackgroundOperation()
            let c = ThreadPool.promotionCounts
            print("PROBE policy=\(seen.policy) refused=\(c.refused) raised=\(c.raised)")
            return
        }
        let (status, text) = try runTestAsNobody(
            "SpindleTests.PromotionTests/testAnUnprivilegedProcessCountsAndReportsARefusedRaise",
            environment: ["SPINDLE_PROMOTION_PROBE": "1"])
        XCTAssertEqual(status, 0, text)
        let probe = text.split(separator: "\n").first { $0.hasPrefix("PROBE ") }.map(String.init)
        XCTAssertEqual(probe, "PROBE policy=5 refused=1 raised=0", text)
        let said = text.split(separator: "\n").filter { $0.contains("could not take that class's priority") }
        XCTAssertEqual(said.count, 1, text)
        XCTAssertTrue(said.first?.contains("CAP_SYS_NICE or RLIMIT_NICE") ?? false, text)
    }

    // MARK: - Races

    /// Promotions racing the dependency's own start and finish, from several threads:
    /// every operation runs exactly once and every dependent finishes. Under
    /// ThreadSanitizer in CI.
    func testPromotionsRacingTheDependencysRunLoseNothingAndRunNothingTwice() {
        let n = Stress.count(400)
        let runs = Mutex<[Int]>(Array(repeating: 0, count: n))
        let all = DispatchSemaphore(value: 0)
        let finished = Atomic<Int>(0)
        let bg = backgroundQueue()
        let ui = OperationQueue()
        ui.qualityOfService = .userInteractive
        onThreads(2) { t in
            for i in stride(from: t, to: n, by: 2) {
                let b = BlockOperation { runs.locked { $0[i] += 1 } }
                bg.addOperation(b)
                switch i % 3 {
                case 0:
                    let u = BlockOperation {}
                    u.addDependency(b)
                    u.completionBlock = { if finished.add(1, ordering: .relaxed).newValue == n { all.signal() } }
                    ui.addOperation(u)
                case 1:
                    b.qualityOfService = .userInitiated
                    b.waitUntilFinished()
                    if finished.add(1, ordering: .relaxed).newValue == n { all.signal() }
                default:
                    try? ThreadPool.forQualityOfService(.userInteractive).submit {
                        b.waitUntilFinished()
                        if finished.add(1, ordering: .relaxed).newValue == n { all.signal() }
                    }
                }
            }
        }
        XCTAssertEqual(all.wait(timeout: .now() + 120), .success, "\(finished.load(ordering: .relaxed)) of \(n) finished")
        XCTAssertTrue(eventually { runs.locked { $0.allSatisfy { $0 == 1 } } },
                      "runs: \(runs.locked { Set($0) })")
    }
}

/// Field `n` (1-based, as in proc(5)) of thread `tid`'s stat file in this process.
func threadStat(_ tid: Int32, _ n: Int) -> Int {
    guard let s = try? String(contentsOfFile: "/proc/self/task/\(tid)/stat", encoding: .utf8),
          let close = s.lastIndex(of: ")") else { return Int.min }
    let fields = s[s.index(after: close)...].split(separator: " ")
    let i = n - 3
    return i >= 0 && i < fields.count ? Int(fields[i]) ?? Int.min : Int.min
}
