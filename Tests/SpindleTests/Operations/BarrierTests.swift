import Foundation
import Synchronization
import XCTest

@testable import Spindle

/// A barrier keeps what is added after it from running beside what was added before it,
/// whatever happens meanwhile. Its add is one step for every other add to its queue
/// (Readiness.swift, R10): whatever another thread adds while a barrier is being added is
/// either ahead of it or behind it, never beside it; the tests of that stop the barrier's
/// add at the seam after its locked section, where its edges to the operations ahead are
/// counted but not yet registered, and act on the queue there. And a cancelled barrier,
/// which does not run its block, still waits for what is ahead of it.
final class BarrierTests: XCTestCase {
    /// Adds a barrier running `block` to `q` on a thread of its own, and returns once
    /// that add has stopped at the seam; other barrier adds pass it. `finish` lets the
    /// add go on, waits for it to return and takes the seam's hook out.
    private func addBarrierStopped(to q: OperationQueue, _ block: @escaping @Sendable () -> Void,
                                   file: StaticString = #filePath, line: UInt = #line) -> () -> Void {
        let stopped = DispatchSemaphore(value: 0), resume = DispatchSemaphore(value: 0)
        let added = DispatchSemaphore(value: 0)
        let stops = Atomic<Int>(0)
        OperationSeams.install { point, _ in
            guard point == .barrierEdges, stops.add(1, ordering: .relaxed).newValue == 1 else { return }
            stopped.signal()
            resume.wait()
        }
        Thread {
            q.addBarrierBlock(block)
            added.signal()
        }.start()
        XCTAssertEqual(stopped.wait(timeout: .now() + 60), .success, "the barrier's add never reached the seam",
                       file: file, line: line)
        return {
            resume.signal()
            XCTAssertEqual(added.wait(timeout: .now() + 60), .success, "the barrier's add never returned",
                           file: file, line: line)
            OperationSeams.remove()
        }
    }

    /// The queue's barriers, in the order its list holds them.
    private func barriers(of q: OperationQueue) -> [Operation] {
        q.state.locked { $0.unfinished }.filter { $0 is BarrierOperation }
    }

    /// Two barriers added at once, the second while the first's add is past its locked
    /// section: the second waits for the first, and they run one after the other.
    func testTwoBarriersAddedAtOnceRunOneAfterTheOther() {
        let q = OperationQueue()
        q.isSuspended = true
        let log = Log()
        q.addOperation { log.add("ahead") }
        let finishFirst = addBarrierStopped(to: q) { log.add("first") }
        q.addBarrierBlock { log.add("second") }
        finishFirst()
        let both = barriers(of: q)
        XCTAssertEqual(both.count, 2)
        if both.count == 2 {
            let waitsFor = both[1].guarded.locked { $0.dependencies.snapshot() }
            XCTAssertTrue(waitsFor.contains { $0 === both[0] }, "the second barrier does not wait for the first")
        }
        q.isSuspended = false
        q.waitUntilAllOperationsAreFinished()
        XCTAssertEqual(log.all, ["ahead", "first", "second"])
    }

    /// The last operation ahead of a barrier finishes while the barrier is being added:
    /// the queue does not drain and forget the barrier, and an operation added then
    /// waits for it.
    func testAnOperationAddedWhileABarrierIsAddedAndTheQueueEmptiesWaitsForTheBarrier() {
        let q = OperationQueue()
        let log = Log()
        let hold = DispatchSemaphore(value: 0)
        let ahead = BlockOperation { hold.wait(); log.add("ahead") }
        q.addOperation(ahead)
        let finishBarrier = addBarrierStopped(to: q) { log.add("barrier") }
        hold.signal()
        ahead.waitUntilFinished()
        let behind = BlockOperation { log.add("behind") }
        q.addOperation(behind)
        XCTAssertFalse(behind.isReady, "an operation added while the barrier was added does not wait for it")
        finishBarrier()
        q.waitUntilAllOperationsAreFinished()
        XCTAssertEqual(log.all, ["ahead", "barrier", "behind"])
    }

    /// A barrier added while nothing else is in its queue is ready at once, and one
    /// whose operations ahead all finished before its edges were registered becomes
    /// ready when the last edge is satisfied.
    func testABarrierWhoseOperationsAheadFinishDuringItsAddRuns() {
        for empty in [true, false] {
            let q = OperationQueue()
            let log = Log()
            let ahead = BlockOperation { log.add("ahead") }
            if !empty {
                q.isSuspended = true
                q.addOperation(ahead)
            }
            let finishBarrier = addBarrierStopped(to: q) { log.add("barrier") }
            if !empty {
                q.isSuspended = false
                ahead.waitUntilFinished()
            }
            finishBarrier()
            q.waitUntilAllOperationsAreFinished()
            XCTAssertEqual(log.all, empty ? ["barrier"] : ["ahead", "barrier"], empty ? "empty queue" : "with one ahead")
        }
    }

    /// `cancelAllOperations()` while an operation ahead of a barrier runs: the barrier's
    /// block does not run, and an operation added afterwards still waits until the one
    /// ahead has finished.
    func testACancelledBarrierStillKeepsWhatIsAddedLaterWaitingForWhatIsAheadOfIt() {
        let q = OperationQueue()
        let log = Log()
        let started = DispatchSemaphore(value: 0), hold = DispatchSemaphore(value: 0)
        let ahead = BlockOperation { started.signal(); hold.wait(); log.add("ahead") }
        q.addOperation(ahead)
        started.wait()
        q.addBarrierBlock { log.add("barrier") }
        q.cancelAllOperations()
        let barrier = barriers(of: q).first
        XCTAssertNotNil(barrier)
        XCTAssertEqual(barrier?.isCancelled, true)
        XCTAssertEqual(barrier?.isReady, false, "a cancelled barrier is ready while the operation ahead of it runs")
        let later = BlockOperation { log.add("later after \(ahead.isFinished ? "ahead" : "nothing")") }
        q.addOperation(later)
        XCTAssertFalse(later.isReady, "an operation added after a cancelled barrier does not wait for it")
        hold.signal()
        q.waitUntilAllOperationsAreFinished()
        XCTAssertEqual(log.all, ["ahead", "later after ahead"])
        XCTAssertTrue(ahead.isCancelled && ahead.isFinished)
        XCTAssertTrue(later.isFinished && !later.isCancelled)
    }
}
