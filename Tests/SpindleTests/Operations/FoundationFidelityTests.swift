import Foundation
import Synchronization
import XCTest

@testable import Spindle

/// Waiting with a deadline, for tests of behaviour that would otherwise hang the suite.
extension XCTestCase {
    /// Waits for `op` on another thread, so that an operation that never finishes fails
    /// the test instead of hanging the suite.
    func finishes(_ op: Operation, within seconds: Double = 10) -> Bool {
        let box = UncheckedBox(op)
        return completes(within: seconds) { box.value.waitUntilFinished() }
    }

    /// The same for a whole queue.
    func drains(_ q: OperationQueue, within seconds: Double = 10) -> Bool {
        let box = UncheckedBox(q)
        return completes(within: seconds) { box.value.waitUntilAllOperationsAreFinished() }
    }

    func logging(_ log: Log, _ name: String) -> BlockOperation {
        let op = BlockOperation { log.add(name) }
        op.name = name
        return op
    }
}

/// Behaviours where Spindle must do what Foundation's `OperationQueue` does (Apple's
/// documentation deciding, and where it is silent, swift-corelibs-foundation), written
/// as programs a user of Foundation would write.
final class FoundationFidelityTests: XCTestCase {

    // MARK: dependencies

    func testADependencyCycleIsLegalAndCancellingOneOfItsOperationsBreaksIt() {
        let q = OperationQueue()
        let log = Log()
        let a = logging(log, "a"), b = logging(log, "b")
        a.addDependency(b)
        b.addDependency(a) // legal, as with Foundation
        q.addOperations([a, b], waitUntilFinished: false)
        XCTAssertTrue(settle())
        XCTAssertFalse(a.isFinished || b.isFinished, "neither is ready while the cycle stands")
        a.cancel()
        XCTAssertTrue(drains(q))
        XCTAssertEqual(log.all, ["b"], "the cancelled one finishes without main, and releases the other")
        XCTAssertTrue(a.isFinished && b.isFinished)
    }

    func testAnOperationMayDependOnItselfAndCancellingItFinishesIt() {
        let q = OperationQueue()
        let log = Log()
        let a = logging(log, "a")
        a.addDependency(a)
        XCTAssertEqual(a.dependencies, [a])
        XCTAssertFalse(a.isReady)
        q.addOperation(a)
        a.cancel()
        XCTAssertTrue(finishes(a))
        XCTAssertEqual(log.all, [])
    }

    func testADependencyAddedToAQueuedReadyOperationMakesItWait() {
        let q = OperationQueue()
        q.isSuspended = true
        let log = Log()
        let op = logging(log, "op")
        q.addOperation(op) // ready, waiting for the queue to resume
        let d = logging(log, "d")
        op.addDependency(d)
        XCTAssertFalse(op.isReady)
        q.isSuspended = false
        XCTAssertTrue(settle())
        XCTAssertFalse(op.isFinished, "it ran before its new dependency")
        OperationQueue().addOperation(d)
        XCTAssertTrue(finishes(op))
        XCTAssertEqual(log.all, ["d", "op"])
        XCTAssertTrue(op.isReady)
    }

    func testADependencyAddedToAnOperationWaitingForAWidthSlotMakesItWait() {
        let q = OperationQueue()
        q.maxConcurrentOperationCount = 1
        let log = Log()
        let gate = DispatchSemaphore(value: 0)
        q.addOperation { gate.wait() }
        let op = logging(log, "op")
        q.addOperation(op) // ready, waiting for the slot
        let d = logging(log, "d")
        op.addDependency(d)
        gate.signal()
        XCTAssertTrue(settle())
        XCTAssertFalse(op.isFinished, "it ran before its new dependency")
        OperationQueue().addOperation(d)
        XCTAssertTrue(finishes(op))
        XCTAssertEqual(log.all, ["d", "op"])
    }

    /// An operation with a readiness condition of its own, announced as Apple documents.
    final class Gated: Operation, @unchecked Sendable {
        let open: Atomic<Bool>
        let ran = Atomic<Bool>(false)
        init(open: Bool) { self.open = Atomic(open) }
        override var isReady: Bool { super.isReady && open.load(ordering: .acquiring) }
        func set(_ value: Bool) {
            willChangeValue(forKey: "isReady")
            open.store(value, ordering: .releasing)
            didChangeValue(forKey: "isReady")
        }
        override func main() { ran.store(true, ordering: .relaxed) }
    }

    func testACustomReadinessThatTurnsFalseBeforeTheStartHoldsTheOperation() {
        let q = OperationQueue()
        q.isSuspended = true
        let op = Gated(open: true)
        q.addOperation(op)
        op.set(false)
        q.isSuspended = false
        XCTAssertTrue(settle())
        XCTAssertFalse(op.isFinished, "it started while isReady was false")
        op.set(true)
        XCTAssertTrue(finishes(op))
        XCTAssertTrue(op.ran.load(ordering: .relaxed))
    }

    func testCancellationOverridesDependenciesButNotACustomReadinessCondition() {
        let q = OperationQueue()
        let op = Gated(open: false)
        op.addDependency(BlockOperation {}) // never run
        q.addOperation(op)
        op.cancel()
        XCTAssertTrue(settle())
        XCTAssertFalse(op.isFinished, "it finished while its own isReady was false")
        op.set(true)
        XCTAssertTrue(finishes(op))
        XCTAssertFalse(op.ran.load(ordering: .relaxed), "a cancelled operation finishes without main")
    }

    /// A readiness of its own that leaves out `super.isReady`, and so its dependencies.
    final class ReadyRegardless: Operation, @unchecked Sendable {
        let ran = Atomic<Bool>(false)
        override var isReady: Bool { true }
        override func main() { ran.store(true, ordering: .relaxed) }
    }

    /// Foundation's queue asks `isReady` and nothing else: an override that ignores the
    /// dependencies starts the operation while they are unfinished, whether it is added
    /// alone, in a batch, or is waiting for a serial queue's slot when it gets one.
    func testAnIsReadyOverrideThatIgnoresDependenciesStartsWithThemUnfinished() {
        let held = OperationQueue()
        held.isSuspended = true
        let never = BlockOperation {}
        held.addOperation(never)
        let alone = ReadyRegardless(), inBatch = ReadyRegardless(), behind = ReadyRegardless()
        for op in [alone, inBatch, behind] { op.addDependency(never) }
        OperationQueue().addOperation(alone)
        OperationQueue().addOperations([inBatch], waitUntilFinished: false)
        let serial = OperationQueue()
        serial.maxConcurrentOperationCount = 1
        let gate = DispatchSemaphore(value: 0)
        serial.addOperations([BlockOperation { gate.wait() }, behind], waitUntilFinished: false)
        gate.signal()
        for op in [alone, inBatch, behind] {
            XCTAssertTrue(finishes(op), "it waited for a dependency its isReady ignores")
            XCTAssertTrue(op.ran.load(ordering: .relaxed))
        }
        XCTAssertFalse(never.isFinished)
        held.isSuspended = false
        XCTAssertTrue(finishes(never))
    }

    // MARK: lifecycle

    func testCancellingAFinishedOperationHasNoEffect() {
        let op = BlockOperation {}
        op.start()
        op.cancel()
        XCTAssertFalse(op.isCancelled)
        let queued = BlockOperation {}
        OperationQueue().addOperation(queued)
        queued.waitUntilFinished()
        queued.cancel()
        XCTAssertFalse(queued.isCancelled)
    }

    func testStartingAFinishedOperationReturnsWithoutRunningMainAgain() {
        let runs = Counter()
        let op = BlockOperation { runs.increment() }
        op.start()
        op.start()
        XCTAssertEqual(runs.value, 1)
        XCTAssertTrue(op.isFinished)
        let queued = BlockOperation { runs.increment() }
        OperationQueue().addOperation(queued)
        queued.waitUntilFinished()
        queued.start()
        XCTAssertEqual(runs.value, 2)
    }

    // MARK: ordering

    func testABatchIsEnqueuedWholeBeforeAnyOfItStarts() {
        let q = OperationQueue()
        q.maxConcurrentOperationCount = 1
        let log = Log()
        let normal = logging(log, "normal"), low = logging(log, "low")
        let veryHigh = logging(log, "veryHigh"), veryLow = logging(log, "veryLow")
        low.queuePriority = .low
        veryHigh.queuePriority = .veryHigh
        veryLow.queuePriority = .veryLow
        q.addOperations([normal, low, veryHigh, veryLow], waitUntilFinished: true)
        XCTAssertEqual(log.all, ["veryHigh", "normal", "low", "veryLow"])
    }

    func testABatchWiderThanTheQueueStartsItsHighestPrioritiesFirst() {
        let q = OperationQueue()
        q.maxConcurrentOperationCount = 2
        let log = Log()
        let names = ["normal", "low", "veryHigh", "veryLow", "high"]
        let priorities: [Operation.QueuePriority] = [.normal, .low, .veryHigh, .veryLow, .high]
        // The queue starts two at a time. Each operation holds its place until the
        // other one started with it has begun, so that the log's order is the order in
        // which the queue started them, not the order in which threads got to run them
        // (on a pool of one worker, a started operation waits for a spare).
        let started = Atomic<Int>(0)
        let ops = zip(names, priorities).map { name, p in
            let op = BlockOperation {
                log.add(name)
                let n = started.add(1, ordering: .acquiringAndReleasing).newValue
                let partner = min((n + 1) / 2 * 2, names.count)
                XCTAssertTrue(eventually { started.load(ordering: .acquiring) >= partner })
            }
            op.name = name
            op.queuePriority = p
            return op
        }
        q.addOperations(ops, waitUntilFinished: true)
        XCTAssertEqual(Set(log.all.prefix(2)), ["veryHigh", "high"])
        XCTAssertEqual(log.all.last, "veryLow")
    }

    func testResumingASuspendedSerialQueueStartsByPriority() {
        let q = OperationQueue()
        q.maxConcurrentOperationCount = 1
        q.isSuspended = true
        let log = Log()
        for (name, p) in [("normal", Operation.QueuePriority.normal), ("low", .low), ("veryHigh", .veryHigh), ("veryLow", .veryLow)] {
            let op = logging(log, name)
            op.queuePriority = p
            q.addOperation(op)
        }
        q.isSuspended = false
        XCTAssertTrue(drains(q))
        XCTAssertEqual(log.all, ["veryHigh", "normal", "low", "veryLow"])
    }

    func testChangingThePriorityOfAWaitingOperationReordersTheQueue() {
        let q = OperationQueue()
        q.maxConcurrentOperationCount = 1
        q.isSuspended = true
        let log = Log()
        let a = logging(log, "a"), b = logging(log, "b"), c = logging(log, "c")
        q.addOperations([a, b, c], waitUntilFinished: false)
        c.queuePriority = .veryHigh
        a.queuePriority = .veryLow
        q.isSuspended = false
        XCTAssertTrue(drains(q))
        XCTAssertEqual(log.all, ["c", "b", "a"])
    }

    func testQualityOfServiceOrdersOperationsOfEqualPriorityAsFoundationDoes() {
        let q = OperationQueue()
        q.maxConcurrentOperationCount = 2
        q.isSuspended = true
        let log = Log()
        // B and A start first. A's slot frees first, once both have begun; B's only once
        // a third operation has begun in A's. So the queue chooses between C and D with
        // one slot free, and the order of the last two shows which it took first,
        // however long any thread takes to get a CPU.
        let started = Atomic<Int>(0)
        func op(_ name: String, holdUntilStarted count: Int) -> BlockOperation {
            let op = BlockOperation {
                log.add(name)
                started.add(1, ordering: .acquiringAndReleasing)
                XCTAssertTrue(eventually { started.load(ordering: .acquiring) >= count })
            }
            op.name = name
            return op
        }
        let a = op("A", holdUntilStarted: 2), b = op("B", holdUntilStarted: 3)
        let c = op("C", holdUntilStarted: 0), d = op("D", holdUntilStarted: 0)
        b.qualityOfService = .userInteractive
        c.qualityOfService = .background
        for op in [a, b, c, d] { q.addOperation(op) }
        XCTAssertEqual(c.queuePriority, .normal, "the priority it reads is still the default")
        q.isSuspended = false
        XCTAssertTrue(drains(q))
        XCTAssertEqual(Set(log.all.prefix(2)), ["A", "B"])
        XCTAssertEqual(Array(log.all.suffix(2)), ["D", "C"])
    }

    func testOnASerialQueueQualityOfServiceDoesNotReorder() {
        let q = OperationQueue()
        q.maxConcurrentOperationCount = 1
        q.isSuspended = true
        let log = Log()
        let a = logging(log, "A"), b = logging(log, "B")
        b.qualityOfService = .userInteractive
        q.addOperations([a, b], waitUntilFinished: false)
        q.isSuspended = false
        XCTAssertTrue(drains(q))
        XCTAssertEqual(log.all, ["A", "B"])
    }

    // MARK: the queue

    func testAQueueDefaultNameCarriesItsAddress() {
        let q = OperationQueue()
        XCTAssertEqual(q.name, "NSOperationQueue \(Unmanaged.passUnretained(q).toOpaque())")
        q.name = "parser"
        XCTAssertEqual(q.name, "parser")
        q.name = nil
        XCTAssertEqual(q.name, "")
    }

    func testTheBlockFormTakesOnTheQueuesQualityOfService() {
        let q = OperationQueue()
        q.qualityOfService = .utility
        q.isSuspended = true
        q.addOperation {}
        XCTAssertEqual(q.operations.first?.qualityOfService, .utility)
        let plain = OperationQueue()
        plain.isSuspended = true
        plain.addOperation {}
        XCTAssertEqual(plain.operations.first?.qualityOfService, .default)
        q.isSuspended = false
        plain.isSuspended = false
    }

    func testTheMainQueueKeepsItsConfiguration() {
        let main = OperationQueue.main
        let name = main.name
        main.name = "renamed"
        main.maxConcurrentOperationCount = 4
        main.isSuspended = true
        main.qualityOfService = .background
        main.underlyingQueue = DispatchQueue(label: "elsewhere")
        XCTAssertEqual(main.name, name)
        XCTAssertEqual(main.maxConcurrentOperationCount, 1)
        XCTAssertFalse(main.isSuspended)
        XCTAssertEqual(main.qualityOfService, .userInteractive)
        XCTAssertEqual(main.underlyingQueue?.label, DispatchQueue.main.label)
    }

    func testBarriersAreNotListedCountedOrShownAsDependencies() {
        let q = OperationQueue()
        q.isSuspended = true
        let log = Log()
        let a = logging(log, "a"), b = logging(log, "b")
        q.addOperation(a)
        q.addBarrierBlock { log.add("barrier") }
        q.addOperation(b)
        XCTAssertEqual(q.operations, [a, b])
        XCTAssertEqual(q.operationCount, 2)
        XCTAssertEqual(b.dependencies, [])
        q.isSuspended = false
        XCTAssertTrue(drains(q))
        XCTAssertEqual(log.all, ["a", "barrier", "b"], "the ordering is kept")
        XCTAssertEqual(q.operationCount, 0)
    }

    /// An operation that counts the calls to its `addDependency`.
    final class CountsDependencyCalls: Operation, @unchecked Sendable {
        let calls = Atomic<Int>(0)
        override func addDependency(_ op: Operation) {
            calls.add(1, ordering: .relaxed)
            super.addDependency(op)
        }
    }

    /// The wait for a barrier is the queue's own: an `addDependency` override does not
    /// see it, as with Foundation, and the ordering holds all the same.
    func testABarriersEdgeBypassesAnAddDependencyOverride() {
        let q = OperationQueue()
        q.isSuspended = true
        let log = Log()
        q.addBarrierBlock { log.add("barrier") }
        let op = CountsDependencyCalls()
        op.completionBlock = { log.add("op") }
        q.addOperation(op)
        XCTAssertEqual(op.calls.load(ordering: .relaxed), 0)
        q.isSuspended = false
        XCTAssertTrue(drains(q))
        XCTAssertTrue(finishes(op))
        XCTAssertTrue(settle()) // the completion blocks run as tasks of their own
        XCTAssertEqual(log.all.first, "barrier")
    }

    func testAnOperationCountObserverDoesNotSeeBarriers() {
        let q = OperationQueue()
        let seen = Mutex<[Int]>([])
        q.onOperationCountChange { n in seen.locked { $0.append(n) } }
        q.addBarrierBlock {}
        XCTAssertTrue(drains(q))
        XCTAssertTrue(seen.locked { $0 }.allSatisfy { $0 == 0 }, "\(seen.locked { $0 })")
    }

    func testAQueueIsFreedWhenTheProgramDropsItButKeepsItsFinishedOperations() {
        let weakQueue = Weak<OperationQueue>()
        var kept: [Operation] = []
        do {
            let q = OperationQueue()
            weakQueue.value = q
            let ops = (0..<10).map { _ in BlockOperation {} }
            q.addOperations(ops, waitUntilFinished: true)
            let serial = OperationQueue()
            serial.maxConcurrentOperationCount = 1
            let more = (0..<10).map { _ in BlockOperation {} }
            serial.addOperations(more, waitUntilFinished: true)
            kept = ops + more
        }
        XCTAssertTrue(eventually(within: 60) { weakQueue.value == nil }, "the queue lives on while its finished operations do")
        for op in kept {
            op.cancel()
            op.queuePriority = .high
        }
        XCTAssertTrue(kept.allSatisfy { $0.isFinished && !$0.isCancelled })
    }

    /// Priority changes and cancellations racing with the finish that drops the queue:
    /// every queue is freed, and nothing touches a freed one (AddressSanitizer and
    /// ThreadSanitizer runs check the latter).
    func testQueuesAreFreedWhileOtherThreadsTouchTheirFinishingOperations() {
        let rounds = Stress.count(300)
        let freed = Counter()
        for _ in 0..<rounds {
            let weakQueue = Weak<OperationQueue>()
            let op = BlockOperation {}
            do {
                let q = OperationQueue()
                q.maxConcurrentOperationCount = 2
                weakQueue.value = q
                q.addOperation(op)
            }
            let box = UncheckedBox(op)
            onThreads(2) { i in
                for _ in 0..<20 {
                    if i == 0 { box.value.queuePriority = .high } else { box.value.cancel() }
                }
            }
            op.waitUntilFinished()
            if eventually(within: 5, { weakQueue.value == nil }) { freed.increment() }
        }
        XCTAssertEqual(freed.value, rounds)
    }
}
