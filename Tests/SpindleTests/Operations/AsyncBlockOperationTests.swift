import Dispatch
import Foundation
import Spindle
import Synchronization
import XCTest

/// A Boolean that the operations' closures set and the tests read.
private final class Flag: Sendable { let value = Atomic<Bool>(false) }

/// `AsyncBlockOperation`: an operation whose work is an async closure.
final class AsyncBlockOperationTests: XCTestCase {
    func testItFinishesWhenItsClosureReturnsAndRunsOnItsClassWorkers() {
        // A class above the waiting thread's and the dependent's, so that neither
        // promotes it.
        let initiated = ThreadPool.forQualityOfService(.userInitiated)
        let log = Log()
        let op = AsyncBlockOperation {
            log.add("begin on userInitiated: \(initiated.isCurrentThreadWorker)")
            try? await Task.sleep(for: .milliseconds(30))
            log.add("end on userInitiated: \(initiated.isCurrentThreadWorker)")
        }
        op.qualityOfService = .userInitiated
        op.completionBlock = { log.add("completion") }
        let dependent = BlockOperation { log.add("dependent") }
        dependent.addDependency(op)
        XCTAssertTrue(op.isAsynchronous)
        let q = OperationQueue()
        q.addOperations([dependent, op], waitUntilFinished: false)
        op.waitUntilFinished()
        XCTAssertTrue(op.isFinished)
        XCTAssertFalse(op.isExecuting)
        q.waitUntilAllOperationsAreFinished()
        // The completion block runs as a task of its own, after the operation retired.
        XCTAssertTrue(eventually { log.all.count == 4 })
        let all = log.all
        XCTAssertEqual(Array(all.prefix(2)), ["begin on userInitiated: true", "end on userInitiated: true"])
        // The completion block and the dependent both follow the closure's end.
        XCTAssertEqual(Set(all.dropFirst(2)), ["completion", "dependent"])
        XCTAssertNil(op.completionBlock)
    }

    /// The queue counts the operation as running until its closure returns, so its
    /// width bounds how many closures are in flight, suspended or not.
    func testTheQueuesWidthBoundsClosuresInFlight() {
        let gauge = Concurrency()
        let q = OperationQueue()
        q.maxConcurrentOperationCount = 2
        for _ in 0..<12 {
            q.addOperation(AsyncBlockOperation {
                gauge.enter()
                try? await Task.sleep(for: .milliseconds(5))
                gauge.leave()
            })
        }
        q.waitUntilAllOperationsAreFinished()
        XCTAssertEqual(gauge.peak.load(ordering: .relaxed), 2, "width 2: two closures at a time, and no more")
    }

    func testCancellingItCancelsTheRunningClosure() {
        let started = DispatchSemaphore(value: 0)
        let saw = Flag()
        let op = AsyncBlockOperation {
            started.signal()
            let deadline = ContinuousClock.now + .seconds(20)
            while !Task.isCancelled && ContinuousClock.now < deadline {
                try? await Task.sleep(for: .milliseconds(1))
            }
            saw.value.store(Task.isCancelled, ordering: .relaxed)
        }
        let q = OperationQueue()
        q.addOperation(op)
        started.wait()
        op.cancel()
        op.waitUntilFinished()
        XCTAssertTrue(op.isCancelled)
        XCTAssertTrue(saw.value.load(ordering: .relaxed), "the closure never saw the cancellation")
    }

    func testCancelledBeforeItStartsTheClosureNeverRuns() {
        let ran = Flag(), completed = Flag()
        let op = AsyncBlockOperation { ran.value.store(true, ordering: .relaxed) }
        op.completionBlock = { completed.value.store(true, ordering: .relaxed) }
        let q = OperationQueue()
        q.isSuspended = true
        q.addOperation(op)
        op.cancel()
        q.isSuspended = false
        q.waitUntilAllOperationsAreFinished()
        XCTAssertTrue(op.isFinished)
        XCTAssertFalse(ran.value.load(ordering: .relaxed))
        XCTAssertTrue(eventually { completed.value.load(ordering: .acquiring) })
    }

    /// Started by hand from a thread outside the pools, it runs on the pool of its own
    /// quality of service, and an async caller can await it.
    func testStartedByHandItRunsOnItsOwnClassPool() async {
        let background = ThreadPool.forQualityOfService(.background)
        let onBackground = Flag()
        let op = AsyncBlockOperation {
            await Task.yield()
            onBackground.value.store(background.isCurrentThreadWorker, ordering: .relaxed)
        }
        op.qualityOfService = .background
        await Task.detached { op.start() }.value
        await op.finished()
        XCTAssertTrue(op.isFinished)
        XCTAssertTrue(onBackground.value.load(ordering: .relaxed))
    }
}
