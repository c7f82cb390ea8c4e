import CSpindle
import Synchronization
import XCTest

@testable import Spindle

/// Records the order things happened in, from any thread.
final class Log: Sendable {
    let entries = Mutex<[String]>([])
    func add(_ s: String) { entries.locked { $0.append(s) } }
    /// What has been recorded so far, in storage of its own. A copy sharing the
    /// recorded array's storage would be read outside the lock while a later `add`,
    /// finding the storage unshared once the copy is gone, appends to it in place: the
    /// only order between the two is the copy's release and the append's uniqueness
    /// check, reference counting that ThreadSanitizer does not see.
    var all: [String] { entries.locked { $0.map { $0 } } }
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
        XCTAssertTrue(settle())
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
        XCTAssertTrue(settle())
        XCTAssertFalse(op.ran.load(ordering: .relaxed))
        op.openGate()
        op.waitUntilFinished()
        XCTAssertTrue(op.ran.load(ordering: .relaxed))
    }

    // MARK: order and width
    // MARK: suspension and cancellation

    func testSuspendedQueueStartsNothingUntilResumed() {
        let q = OperationQueue()
        q.isSuspended = true
        let ran = Atomic<Int>(0)
        let ops = (0..<10).map { _ in BlockOperation { ran.add(1, ordering: .relaxed) } }
        for op in ops { q.addOperation(op) }
        ops[3].cancel()
        XCTAssertTrue(settle())
        XCTAssertEqual(ran.load(ordering: .relaxed), 0)
        XCTAssertEqual(q.operationCount, 10, "added and cancelled operations stay queued while suspended")
        q.isSuspended = false
        q.waitUntilAllOperationsAreFinished()
        XCTAssertEqual(ran.load(ordering: .relaxed), 9)
    }

    /// A dependent made ready while its queue is suspended waits for the resumption:
    /// its dependency's finish does not start it. The finish runs on this thread, so the
    /// queue has decided by the time `start()` returns, and a start would count the
    /// dependent running at once (its block holds it there until released).
    func testADependentMadeReadyInASuspendedQueueWaitsForTheResumption() {
        let q = OperationQueue()
        q.isSuspended = true
        let gate = BlockOperation {}
        let release = DispatchSemaphore(value: 0)
        let dependent = BlockOperation { release.wait() }
        dependent.addDependency(gate)
        q.addOperation(dependent)
        gate.start()
        XCTAssertTrue(dependent.isReady)
        XCTAssertEqual(q.counts.load(ordering: .acquiring) & OperationQueue.runningMask, 0,
                       "the suspended queue started the dependent its dependency made ready")
        XCTAssertEqual(q.operationCount, 1)
        q.isSuspended = false
        XCTAssertTrue(eventually { dependent.isExecuting }, "the resumed queue did not start it")
        release.signal()
        q.waitUntilAllOperationsAreFinished()
        XCTAssertTrue(dependent.isFinished)
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
        // What it saw first, then the count, released: a test that sees the count sees
        // what it saw.
        op.completionBlock = {
            sawFinished.store(ref.value.isFinished, ordering: .relaxed)
            count.add(1, ordering: .releasing)
        }
        q.addOperation(op)
        op.waitUntilFinished()
        XCTAssertTrue(eventually { count.load(ordering: .acquiring) == 1 })
        XCTAssertTrue(sawFinished.load(ordering: .relaxed))
        XCTAssertNil(op.completionBlock)
        XCTAssertTrue(settle())
        XCTAssertEqual(count.load(ordering: .acquiring), 1, "it runs once")
    }

    // MARK: block operations, barriers, progress

    func testBlockOperationRunsItsBlocksConcurrently() {
        // Two blocks that can only both return if they run at the same time.
        let a = DispatchSemaphore(value: 0), b = DispatchSemaphore(value: 0)
        let met = Atomic<Int>(0)
        let op = BlockOperation {
            a.signal()
            if b.wait(timeout: .now() + 60) == .success { met.add(1, ordering: .relaxed) }
        }
        op.addExecutionBlock {
            b.signal()
            if a.wait(timeout: .now() + 60) == .success { met.add(1, ordering: .relaxed) }
        }
        XCTAssertEqual(op.executionBlocks.count, 2)
        let q = OperationQueue()
        q.addOperation(op)
        op.waitUntilFinished()
        XCTAssertEqual(met.load(ordering: .relaxed), 2)
    }

    func testBlockOperationRunsMoreWaitingBlocksThanItsPoolHasWorkers() {
        // More blocks than the queue's pool has workers, each returning only once all
        // have started: each block beyond the first is a task of its own, and spares run
        // them while the workers wait. (A container of one CPU has one worker: there,
        // two such blocks are already more.)
        let blocks = ThreadPool.shared.workerCount + 2
        let arrived = Atomic<Int>(0)
        let allArrived = DispatchSemaphore(value: 0)
        let met = Atomic<Int>(0)
        let op = BlockOperation()
        for _ in 0..<blocks {
            op.addExecutionBlock {
                if arrived.add(1, ordering: .acquiringAndReleasing).newValue == blocks {
                    for _ in 1..<blocks { allArrived.signal() }
                    met.add(1, ordering: .relaxed)
                } else if allArrived.wait(timeout: .now() + 60) == .success {
                    met.add(1, ordering: .relaxed)
                }
            }
        }
        let q = OperationQueue()
        q.addOperation(op)
        op.waitUntilFinished()
        XCTAssertEqual(met.load(ordering: .relaxed), blocks, "every block started while the others waited")
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

    /// Operations cancelled before they are added, added behind a barrier that waits: the
    /// add returns (Foundation on Linux deadlocks here), and they finish without running,
    /// while the work ahead of the barrier, the barrier and the work behind it run in turn.
    func testCancelledOperationsAddedBehindAWaitingBarrierFinishWithoutRunning() {
        let q = OperationQueue()
        let log = Log()
        q.isSuspended = true
        q.addOperation { log.add("ahead") }
        q.addBarrierBlock { log.add("barrier") }
        let cancelled = (0..<3).map { i in BlockOperation { log.add("cancelled \(i)") } }
        for op in cancelled { op.cancel() }
        q.addOperations(cancelled, waitUntilFinished: false)
        q.addOperation { log.add("behind") }
        q.isSuspended = false
        q.waitUntilAllOperationsAreFinished()
        XCTAssertEqual(log.all, ["ahead", "barrier", "behind"])
        XCTAssertTrue(cancelled.allSatisfy { $0.isCancelled && $0.isFinished })
        XCTAssertEqual(q.operationCount, 0)
    }

    func testProgressCountsFinishedOperations() {
        let q = OperationQueue()
        q.progress.totalUnitCount = 10
        for _ in 0..<10 { q.addOperation {} }
        q.waitUntilAllOperationsAreFinished()
        XCTAssertEqual(q.progress.completedUnitCount, 10)
        XCTAssertEqual(q.progress.fractionCompleted, 1.0, accuracy: 1e-9)
    }

    /// Operations of a progress-reporting queue released together run at once and add
    /// and remove their children of the queue's progress from several threads. Foundation
    /// on Linux's `Progress` has no lock of its own, so unserialised updates corrupt its
    /// set of children (a crash) or lose updates; every round must count each operation.
    func testProgressOfOperationsThatRunAtOnceCountsEachOfThem() {
        for round in 0..<Stress.count(500) {
            let q = OperationQueue()
            q.isSuspended = true
            q.progress.totalUnitCount = 5
            for _ in 0..<4 { q.addOperation {} }
            q.isSuspended = false
            q.waitUntilAllOperationsAreFinished()
            XCTAssertEqual(q.progress.completedUnitCount, 4, "round \(round)")
            if q.progress.completedUnitCount != 4 { return }
        }
    }

    /// The same, with each operation reporting its own steps through an implicit child
    /// progress, as Apple's guide to `Progress` advises: the operations' updates of their
    /// own trees must not race on the queue's.
    func testOperationsReportingTheirOwnProgressAtOnceAreEachCounted() {
        for round in 0..<Stress.count(300) {
            let q = OperationQueue()
            q.isSuspended = true
            q.progress.totalUnitCount = 4
            for _ in 0..<4 {
                q.addOperation {
                    let steps = Progress(totalUnitCount: 8)
                    for _ in 0..<8 { steps.completedUnitCount += 1 }
                }
            }
            q.isSuspended = false
            q.waitUntilAllOperationsAreFinished()
            XCTAssertEqual(q.progress.completedUnitCount, 4, "round \(round)")
            XCTAssertEqual(q.progress.fractionCompleted, 1.0, accuracy: 1e-9, "round \(round)")
            if q.progress.completedUnitCount != 4 || abs(q.progress.fractionCompleted - 1) > 1e-9 { return }
        }
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
}
