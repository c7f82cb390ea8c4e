import Synchronization
import XCTest

@testable import Spindle

/// What a scheduling step carries out of the queue's lock, each a word the add's path
/// destroys for nothing: a pending barrier to wait for, retained once and given to the
/// dependency; operations to start, several in a batch retained once and released by
/// `dispatch`.
final class QueueOutcomeTests: XCTestCase {
    /// An operation added behind a pending barrier waits for it through a reference the
    /// add takes under the queue's lock and gives to the dependency: the barrier is freed,
    /// with its block, once the queue is done with it.
    func testABarrierThatOperationsWaitedForIsFreedWithItsBlock() {
        final class Tracked: Sendable {}
        weak var tracked: Tracked?
        let order = Mutex<[String]>([])
        do {
            let q = OperationQueue()
            q.isSuspended = true
            let t = Tracked()
            tracked = t
            q.addBarrierBlock { withExtendedLifetime(t) { order.locked { $0.append("barrier") } } }
            for i in 0..<3 { q.addOperation { order.locked { $0.append("after \(i)") } } }
            q.isSuspended = false
            q.waitUntilAllOperationsAreFinished()
        }
        XCTAssertEqual(order.locked { $0.first }, "barrier")
        XCTAssertEqual(order.locked { $0.count }, 4)
        XCTAssertTrue(eventually { tracked == nil }, "the barrier's block was released with the barrier")
    }

    /// Several operations started at once travel in a batch that is retained once, so
    /// that the one release `dispatch` gives it frees it.
    func testAStartableBatchIsRetainedOnce() {
        let ops = [BlockOperation {}, BlockOperation {}, BlockOperation {}]
        var start = Startable.none
        for op in ops { start.append(Unmanaged.passUnretained(op)) }
        guard case .many(let batch) = start else { return XCTFail("three operations make a batch") }
        XCTAssertEqual(batch.takeUnretainedValue().operations.map { $0.toOpaque() },
                       ops.map { Unmanaged.passUnretained($0).toOpaque() }, "in the order appended")
        weak let watched = batch.takeUnretainedValue()
        batch.release()
        XCTAssertNil(watched, "one release freed it")
    }

    /// A queue of width 2, resumed with four operations ready, starts two at once (a
    /// batch) and then the rest: all run, once.
    func testOperationsStartedTogetherAllRun() {
        let q = OperationQueue()
        q.maxConcurrentOperationCount = 2
        q.isSuspended = true
        let ran = Atomic<Int>(0)
        for _ in 0..<4 { q.addOperation { ran.add(1, ordering: .relaxed) } }
        q.isSuspended = false
        q.waitUntilAllOperationsAreFinished()
        XCTAssertEqual(ran.load(ordering: .relaxed), 4)
    }
}
