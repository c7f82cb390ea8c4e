import Foundation
import Synchronization
import XCTest

@testable import Spindle

/// Foundation's behaviour for progress, completion blocks, block operations and custom
/// operations that change state without announcing it.
final class FoundationFidelityCompletionTests: XCTestCase {
    // MARK: progress

    /// An asynchronous operation that overrides `start()` without calling `super`.
    final class OwnStart: Operation, @unchecked Sendable {
        let done = Atomic<Bool>(false)
        override var isAsynchronous: Bool { true }
        override var isExecuting: Bool { false }
        override var isFinished: Bool { done.load(ordering: .acquiring) }
        override func start() {
            willChangeValue(forKey: "isFinished")
            done.store(true, ordering: .releasing)
            didChangeValue(forKey: "isFinished")
        }
    }

    func testProgressCountsOnlyOperationsWhoseMainRanToTheEnd() {
        let q = OperationQueue()
        q.progress.totalUnitCount = 3
        q.isSuspended = true
        let sawCurrent = Atomic<Bool>(false)
        q.addOperation(BlockOperation {
            sawCurrent.store(Progress.current() != nil, ordering: .relaxed)
        })
        // Implicit child progress: made while the operation's progress is current.
        q.addOperation(BlockOperation {
            let child = Progress(totalUnitCount: 10)
            child.completedUnitCount = 10
        })
        let cancelled = BlockOperation {}
        cancelled.cancel()
        q.addOperation(cancelled)
        q.addOperation(OwnStart())
        q.addBarrierBlock {}
        q.isSuspended = false
        XCTAssertTrue(drains(q))
        XCTAssertTrue(sawCurrent.load(ordering: .relaxed), "Progress.current() was nil inside main")
        XCTAssertEqual(q.progress.completedUnitCount, 2)
    }

    // MARK: completion blocks

    func testACompletionBlockRunsAfterTheOperationRetiredAndMayWaitForTheQueue() {
        let q = OperationQueue()
        let op = BlockOperation {}
        let ref = UncheckedBox(op)
        let done = DispatchSemaphore(value: 0)
        let sawCurrent = Mutex<OperationQueue?>(nil)
        let listed = Atomic<Bool>(true)
        op.completionBlock = {
            sawCurrent.locked { $0 = OperationQueue.current }
            listed.store(q.operations.contains(ref.value), ordering: .relaxed)
            q.waitUntilAllOperationsAreFinished()
            ref.value.waitUntilFinished()
            done.signal()
        }
        q.addOperation(op)
        XCTAssertEqual(done.wait(timeout: .now() + 10), .success, "the completion block deadlocked")
        XCTAssertNil(sawCurrent.locked { $0 })
        XCTAssertFalse(listed.load(ordering: .relaxed))
    }

    func testACompletionBlockMayWaitForADependentAndForWorkItAddsToItsSerialQueue() {
        let q = OperationQueue()
        q.maxConcurrentOperationCount = 1
        let op = BlockOperation {}
        let dependent = BlockOperation {}
        dependent.addDependency(op)
        let dep = UncheckedBox(dependent)
        let done = DispatchSemaphore(value: 0)
        op.completionBlock = {
            dep.value.waitUntilFinished()
            let more = BlockOperation {}
            q.addOperation(more)
            more.waitUntilFinished()
            done.signal()
        }
        q.addOperations([op, dependent], waitUntilFinished: false)
        XCTAssertEqual(done.wait(timeout: .now() + 10), .success, "the completion block deadlocked")
    }

    func testACompletionBlockFindsItsOperationAliveThroughAnUnownedCapture() {
        let done = DispatchSemaphore(value: 0)
        let cancelled = Atomic<Bool>(true)
        do {
            let op = BlockOperation {}
            op.completionBlock = { [unowned op] in
                cancelled.store(op.isCancelled, ordering: .relaxed)
                done.signal()
            }
            OperationQueue().addOperation(op)
        }
        XCTAssertEqual(done.wait(timeout: .now() + 10), .success)
        XCTAssertFalse(cancelled.load(ordering: .relaxed))
    }

    // MARK: block operations

    func testEveryBlockOfABlockOperationSeesItsQueueAsCurrent() {
        let q = OperationQueue()
        let op = BlockOperation {}
        let misses = Atomic<Int>(0)
        let ran = Counter()
        let check: @Sendable () -> Void = {
            if OperationQueue.current !== q { misses.add(1, ordering: .relaxed) }
            ran.increment()
            usleep(2_000) // long enough that the pool spreads them
        }
        op.addExecutionBlock(check)
        for _ in 0..<7 { op.addExecutionBlock(check) }
        q.addOperation(op)
        XCTAssertTrue(finishes(op))
        XCTAssertEqual(ran.value, 8)
        XCTAssertEqual(misses.load(ordering: .relaxed), 0)
    }

    // MARK: custom operations that do not announce a change

    /// Becomes finished inside `start()` without announcing it.
    final class SilentFinish: Operation, @unchecked Sendable {
        let done = Atomic<Bool>(false)
        override var isAsynchronous: Bool { true }
        override var isFinished: Bool { done.load(ordering: .acquiring) }
        override func start() { done.store(true, ordering: .releasing) }
    }

    func testAnUnannouncedReadinessChangeIsNoticedAtTheQueuesNextPass() {
        let q = OperationQueue()
        let op = FoundationFidelityTests.Gated(open: false)
        q.addOperation(op)
        usleep(20_000)
        XCTAssertFalse(op.isFinished)
        op.open.store(true, ordering: .releasing) // no didChangeValue(forKey: "isReady")
        // The queue's next scheduling pass: another operation finishing.
        q.addOperation(BlockOperation {})
        XCTAssertTrue(finishes(op), "the queue never noticed the operation became ready")
        XCTAssertTrue(op.ran.load(ordering: .relaxed))
        // With nothing unannounced left, the queue is back in direct mode.
        XCTAssertEqual(q.counts.load(ordering: .acquiring) & OperationQueue.scheduledBit, 0)
    }

    func testAnUnannouncedFinishInsideStartIsNoticedWhenStartReturns() {
        let q = OperationQueue()
        let op = SilentFinish()
        q.addOperation(op)
        XCTAssertTrue(drains(q), "the queue never noticed the operation finished")
        XCTAssertTrue(finishes(op))
    }
}
